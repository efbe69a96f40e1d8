//! `rudder controller-manager`: the controllers alone, against any cluster's API through a
//! kubeconfig (`rudder server` runs the same controllers in-process).

use std::path::PathBuf;

use anyhow::{Context, Result};
use rudder_controllers::{Concurrency, Config, Manager, Selection};
use tokio_util::sync::CancellationToken;

#[derive(clap::Args)]
pub struct ControllerManagerArgs {
    /// The kubeconfig of the cluster to manage (its current context).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// Run each controller as its own ServiceAccount in kube-system (a token requested and
    /// renewed by the manager), held to its `system:controller:<name>` role; the kubeconfig's
    /// user needs only the `system:kube-controller-manager` role. With false every controller
    /// uses the kubeconfig's credentials, whose user must then hold every controller's role.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    use_service_account_credentials: bool,
    /// Controllers to run: `*` for all, `name` to add one, `-name` to leave one out.
    #[arg(long, default_value = "*")]
    controllers: String,
    /// Hold the Lease kube-system/kube-controller-manager, so that of several managers one works.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// ReplicaSets reconciled at once.
    #[arg(long, default_value_t = 5)]
    concurrent_replicaset_syncs: u16,
    /// Deployments reconciled at once.
    #[arg(long, default_value_t = 5)]
    concurrent_deployment_syncs: u16,
    /// Garbage-collection items worked on at once.
    #[arg(long, default_value_t = 20)]
    concurrent_gc_syncs: u16,
    /// Terminating namespaces emptied at once.
    #[arg(long, default_value_t = 10)]
    concurrent_namespace_syncs: u16,
    /// Jobs reconciled at once.
    #[arg(long, default_value_t = 5)]
    concurrent_job_syncs: u16,
    /// StatefulSets reconciled at once.
    #[arg(long, default_value_t = 5)]
    concurrent_statefulset_syncs: u16,
    /// Terminated pods kept before the oldest are deleted (0: no limit).
    #[arg(long, default_value_t = 12_500)]
    terminated_pod_gc_threshold: usize,
    /// The cluster's ServiceAccount private key (PEM, the server's `pki/sa.key`), to fill
    /// `kubernetes.io/service-account-token` Secrets; without it they stay empty.
    #[arg(long)]
    service_account_private_key_file: Option<std::path::PathBuf>,
    /// The CA certificate (PEM, the server's `pki/ca.crt`) that signs approved
    /// CertificateSigningRequests; with --cluster-signing-key-file.
    #[arg(long, requires = "cluster_signing_key_file")]
    cluster_signing_cert_file: Option<std::path::PathBuf>,
    /// The CA's private key (PEM, the server's `pki/ca.key`).
    #[arg(long, requires = "cluster_signing_cert_file")]
    cluster_signing_key_file: Option<std::path::PathBuf>,
    /// The longest lifetime of a signed certificate (`8760h`, `30d`, `3600s`).
    #[arg(long, default_value = "8760h")]
    cluster_signing_duration: String,
    /// The pod network(s) node IPAM hands node ranges out of: one network, or an IPv4 and an
    /// IPv6 one (dual-stack), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = crate::network::DEFAULT_CLUSTER_CIDR)]
    cluster_cidr: Vec<String>,
    #[command(flatten)]
    nodes: NodeControllerArgs,
    /// Where `/metrics` (the work queues' and controllers' metrics) and `/healthz` are served,
    /// over plain HTTP (upstream's former insecure port); empty serves none.
    #[arg(long, default_value = "127.0.0.1:10252", value_parser = crate::network::optional_address)]
    // Spelt out so that clap takes the parser's `Option` as the value (empty: none).
    metrics_bind_address: std::option::Option<std::net::SocketAddr>,
}

/// The node controllers' flags, shared by `rudder server` and `rudder controller-manager`.
#[derive(clap::Args, Clone, Debug)]
pub struct NodeControllerArgs {
    /// Without a heartbeat (its Lease renewed, or its status posted) this long a node's
    /// conditions become Unknown and it is tainted unreachable (e.g. 40s).
    #[arg(long, default_value = "40s", value_parser = crate::serve::parse_interval)]
    node_monitor_grace_period: std::time::Duration,
    /// Nodes a second, per zone, that may be given a NoExecute taint (0: none).
    #[arg(long, default_value_t = 0.1)]
    node_eviction_rate: f64,
    /// The same in a zone whose nodes are mostly not Ready (--unhealthy-zone-threshold) and
    /// that has more than --large-cluster-size-threshold nodes; a smaller such zone gets none.
    #[arg(long, default_value_t = 0.01)]
    secondary_node_eviction_rate: f64,
    /// The share of not-Ready nodes (more than two of them) that makes a zone unhealthy.
    #[arg(long, default_value_t = 0.55)]
    unhealthy_zone_threshold: f64,
    /// Zones of more nodes than this keep evicting, at the secondary rate, when unhealthy.
    #[arg(long, default_value_t = 50)]
    large_cluster_size_threshold: usize,
    /// The prefix length of the pod range each node gets from a single-stack cluster CIDR
    /// (default: 24 for IPv4, 64 for IPv6); not for dual-stack, which takes the two below.
    #[arg(long)]
    node_cidr_mask_size: Option<u8>,
    /// The prefix length of each node's IPv4 pod range.
    #[arg(long, default_value_t = 24)]
    node_cidr_mask_size_ipv4: u8,
    /// The prefix length of each node's IPv6 pod range.
    #[arg(long, default_value_t = 64)]
    node_cidr_mask_size_ipv6: u8,
}

impl NodeControllerArgs {
    pub fn lifecycle(&self) -> rudder_controllers::nodelifecycle::Settings {
        let defaults = rudder_controllers::nodelifecycle::Settings::default();
        rudder_controllers::nodelifecycle::Settings {
            grace_period: self.node_monitor_grace_period,
            // Upstream's startup grace (60 s), never shorter than the grace period.
            startup_grace_period: defaults
                .startup_grace_period
                .max(self.node_monitor_grace_period),
            zones: rudder_controllers::nodelifecycle::zones::ZoneSettings {
                eviction_rate: self.node_eviction_rate,
                secondary_eviction_rate: self.secondary_node_eviction_rate,
                unhealthy_zone_threshold: self.unhealthy_zone_threshold,
                large_cluster_size_threshold: self.large_cluster_size_threshold,
            },
            ..defaults
        }
    }

    /// The ranges to hand out of `cluster_cidrs` (one network, or one of each family), checked
    /// as upstream checks them.
    pub fn ipam(&self, cluster_cidrs: &[String]) -> Result<rudder_controllers::nodeipam::Settings> {
        let mut settings = rudder_controllers::nodeipam::Settings {
            cluster_cidrs: cluster_cidrs.to_vec(),
            node_mask_size_ipv4: self.node_cidr_mask_size_ipv4,
            node_mask_size_ipv6: self.node_cidr_mask_size_ipv6,
        };
        if let Some(size) = self.node_cidr_mask_size {
            match cluster_cidrs {
                [single] if single.contains(':') => settings.node_mask_size_ipv6 = size,
                [_] => settings.node_mask_size_ipv4 = size,
                _ => anyhow::bail!(
                    "--node-cidr-mask-size is for a single-stack cluster; a dual-stack one takes \
                     --node-cidr-mask-size-ipv4 and --node-cidr-mask-size-ipv6"
                ),
            }
        }
        settings
            .ranges()
            .map_err(|error| anyhow::anyhow!("node IPAM: {error}"))?;
        Ok(settings)
    }
}

/// Mints legacy ServiceAccount tokens with the private key `pem`.
pub fn legacy_minter(pem: &str) -> Result<rudder_controllers::tokens::Minter> {
    use rudder_apiserver::authn::service_account::{legacy_token, TokenSigner};
    let signer = TokenSigner::from_pem(pem).map_err(|error| anyhow::anyhow!(error))?;
    Ok(std::sync::Arc::new(
        move |token: &rudder_controllers::tokens::LegacyToken| {
            legacy_token(
                &signer,
                &token.namespace,
                &token.secret,
                &token.account,
                &token.account_uid,
            )
        },
    ))
}

/// This process's identity in events and in the leader Lease: the host name and a unique
/// suffix, as upstream's.
pub fn identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .unwrap_or_else(|_| "rudder".into());
    format!("{host}_{}", uuid_suffix())
}

fn uuid_suffix() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// `rudder controller-manager`.
pub async fn run(args: ControllerManagerArgs, shutdown: CancellationToken) -> Result<()> {
    let node_ipam = args.nodes.ipam(&args.cluster_cidr)?;
    let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)
        .with_context(|| format!("reading {}", args.kubeconfig.display()))?;
    let root_ca = cluster_ca(&kubeconfig);
    let legacy_tokens = match &args.service_account_private_key_file {
        Some(path) => {
            let pem = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Some(legacy_minter(&pem).with_context(|| format!("{}", path.display()))?)
        }
        None => None,
    };
    let cluster_signing = match (
        &args.cluster_signing_cert_file,
        &args.cluster_signing_key_file,
    ) {
        (Some(cert), Some(key)) => {
            let read = |path: &PathBuf| {
                std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
            };
            let signer =
                rudder_controllers::csrsigning::Signer::from_pem(&read(cert)?, &read(key)?)
                    .with_context(|| format!("{} and {}", cert.display(), key.display()))?
                    .with_max_duration(signing_duration(&args.cluster_signing_duration)?);
            Some(std::sync::Arc::new(signer))
        }
        _ => None,
    };
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .context("building a client from the kubeconfig")?;
    let client = kube::Client::try_from(config.clone()).context("creating the API client")?;
    let manager = Manager::new(Config {
        client,
        service_account_credentials: args.use_service_account_credentials.then_some(config),
        identity: identity(),
        controllers: Selection::parse(&args.controllers)?,
        concurrency: Concurrency {
            replicaset: args.concurrent_replicaset_syncs,
            deployment: args.concurrent_deployment_syncs,
            garbage_collector: args.concurrent_gc_syncs,
            namespace: args.concurrent_namespace_syncs,
            job: args.concurrent_job_syncs,
            statefulset: args.concurrent_statefulset_syncs,
        },
        leader_election: args.leader_elect,
        root_ca,
        pod_gc: rudder_controllers::podgc::Settings {
            terminated_threshold: args.terminated_pod_gc_threshold,
            ..rudder_controllers::podgc::Settings::default()
        },
        legacy_tokens,
        cluster_signing,
        node_lifecycle: args.nodes.lifecycle(),
        node_ipam,
    });
    crate::network::serve_metrics(
        args.metrics_bind_address,
        "controller-manager",
        |registry| manager.metrics().register(registry),
        shutdown.clone(),
    )
    .await?;
    manager.run(shutdown).await;
    Ok(())
}

/// `--cluster-signing-duration`: a number of hours, days or seconds (`8760h`, `365d`, `3600s`).
fn signing_duration(text: &str) -> Result<std::time::Duration> {
    let text = text.trim();
    let (number, unit) = text.split_at(text.len().saturating_sub(1));
    let number: u64 = number
        .parse()
        .with_context(|| format!("--cluster-signing-duration {text:?}: e.g. 8760h"))?;
    let seconds = match unit {
        "s" => number,
        "m" => number * 60,
        "h" => number * 3600,
        "d" => number * 86_400,
        _ => anyhow::bail!("--cluster-signing-duration {text:?}: the unit must be s, m, h or d"),
    };
    Ok(std::time::Duration::from_secs(seconds))
}

/// The CA bundle of the kubeconfig's current cluster, to publish as `kube-root-ca.crt`.
pub(crate) fn cluster_ca(kubeconfig: &kube::config::Kubeconfig) -> Option<String> {
    use base64::Engine;
    let context_name = kubeconfig.current_context.as_deref()?;
    let context = kubeconfig
        .contexts
        .iter()
        .find(|context| context.name == context_name)?
        .context
        .as_ref()?;
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|cluster| cluster.name == context.cluster)?
        .cluster
        .as_ref()?;
    if let Some(data) = &cluster.certificate_authority_data {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .ok()?;
        return String::from_utf8(bytes).ok();
    }
    std::fs::read_to_string(cluster.certificate_authority.as_ref()?).ok()
}
