//! `rudder agent`: a node agent joining a cluster — with a bootstrap token (a CSR for its
//! client certificate, another for its serving certificate) or with a kubeconfig — running
//! pods through containerd's CRI; or `--hollow N` fake nodes in one process for scale runs.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rudder_kubelet::runtime::cri::CriRuntime;
use rudder_kubelet::runtime::fake::FakeRuntime;
use rudder_kubelet::runtime::Runtime;
use tokio_util::sync::CancellationToken;

/// Where containerd's CRI socket usually is.
pub const DEFAULT_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
/// The container runtime an agent uses: `given`; else the system containerd when its socket
/// exists; else a containerd of its own under `dir` when containerd is installed (returned so
/// the caller stops it), its pod network `pod_cidr` or else the Node's `spec.podCIDRs`; else
/// none.
pub async fn container_runtime(
    given: Option<&str>,
    dir: &std::path::Path,
    pod_cidr: Option<&str>,
) -> Result<Option<(String, Option<rudder_kubelet::containerd::Managed>)>> {
    if let Some(endpoint) = given {
        return Ok(Some((endpoint.to_owned(), None)));
    }
    let system = DEFAULT_RUNTIME_ENDPOINT.trim_start_matches("unix://");
    if std::path::Path::new(system).exists() {
        return Ok(Some((DEFAULT_RUNTIME_ENDPOINT.to_owned(), None)));
    }
    let installed = |path: &str| std::path::Path::new(path).exists();
    let containerd = ["/usr/bin/containerd", "/usr/local/bin/containerd"]
        .into_iter()
        .any(installed);
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .find(|p| installed(p));
    match (containerd, busybox, installed("/usr/lib/cni/bridge")) {
        (true, Some(busybox), true) => {
            let managed = rudder_kubelet::containerd::Managed::start(
                dir,
                pod_cidr,
                std::path::Path::new(busybox),
            )
            .await
            .context("starting a containerd of the agent's own")?;
            Ok(Some((managed.endpoint(), Some(managed))))
        }
        _ => {
            tracing::info!(
                "no container runtime: give --container-runtime-endpoint, or install containerd, runc, \
                 containernetworking-plugins and busybox-static for a containerd of Rudder's own"
            );
            Ok(None)
        }
    }
}

/// The kubelet's eviction and image garbage collection flags (upstream's names and defaults).
#[derive(clap::Args, Clone, Debug)]
pub struct EvictionArgs {
    /// Hard eviction thresholds, `signal<amount` comma-separated (memory.available,
    /// nodefs.available, nodefs.inodesFree, imagefs.available, imagefs.inodesFree,
    /// pid.available; a quantity or a percentage); empty turns hard eviction off.
    #[arg(long, default_value = rudder_kubelet::eviction::thresholds::DEFAULT_HARD)]
    pub eviction_hard: String,
    /// Soft eviction thresholds, in --eviction-hard's syntax; each needs a grace period.
    #[arg(long, default_value = "")]
    pub eviction_soft: String,
    /// How long each soft threshold's signal must stay over it before a pod is evicted,
    /// `signal=duration` comma-separated (`memory.available=1m30s`).
    #[arg(long, default_value = "")]
    pub eviction_soft_grace_period: String,
    /// The most seconds a pod evicted for a soft threshold gets to stop.
    #[arg(long, default_value_t = 0)]
    pub eviction_max_pod_grace_period: i64,
    /// How much past its threshold a signal must come back before the threshold no longer
    /// counts as met, `signal=amount` comma-separated (`memory.available=0.5Gi`).
    #[arg(long, default_value = "")]
    pub eviction_minimum_reclaim: String,
    /// How long a pressure condition stays after its signal clears.
    #[arg(long, default_value = "5m", value_parser = crate::serve::parse_interval)]
    pub eviction_pressure_transition_period: Duration,
    /// Image filesystem usage (percent) at which unused images are removed (100: never).
    #[arg(long, default_value_t = 85)]
    pub image_gc_high_threshold: u8,
    /// Image filesystem usage (percent) image garbage collection brings it down to.
    #[arg(long, default_value_t = 80)]
    pub image_gc_low_threshold: u8,
}

impl EvictionArgs {
    /// The kubelet's settings, or what is wrong with the flags.
    pub fn settings(&self) -> Result<rudder_kubelet::eviction::Settings> {
        use rudder_kubelet::eviction::thresholds;
        let mut hard = thresholds::parse(&self.eviction_hard)
            .map_err(|error| anyhow::anyhow!("--eviction-hard: {error}"))?;
        let mut soft =
            thresholds::parse_soft(&self.eviction_soft, &self.eviction_soft_grace_period)
                .map_err(|error| anyhow::anyhow!("{error}"))?;
        for list in [&mut hard, &mut soft] {
            thresholds::apply_minimum_reclaim(list, &self.eviction_minimum_reclaim)
                .map_err(|error| anyhow::anyhow!("{error}"))?;
        }
        if self.eviction_max_pod_grace_period < 0 {
            anyhow::bail!("--eviction-max-pod-grace-period: must not be negative");
        }
        let image_gc = rudder_kubelet::image_gc::Policy::new(
            self.image_gc_high_threshold,
            self.image_gc_low_threshold,
        )
        .map_err(|error| anyhow::anyhow!("{error}"))?;
        Ok(rudder_kubelet::eviction::Settings {
            hard,
            soft,
            max_pod_grace_seconds: self.eviction_max_pod_grace_period,
            transition_period: self.eviction_pressure_transition_period,
            image_gc,
        })
    }
}

#[derive(clap::Args)]
pub struct AgentArgs {
    /// The apiserver to join (`https://HOST:6443`), with --token.
    #[arg(long)]
    server: Option<String>,
    /// A bootstrap token (`<id>.<secret>`, from `rudder token create`).
    #[arg(long)]
    token: Option<String>,
    /// The SHA-256 of the cluster CA's public key (`sha256:<hex>`), checked against the CA
    /// the server publishes in kube-public/cluster-info.
    #[arg(long)]
    ca_cert_hash: Option<String>,
    /// Instead of joining: a kubeconfig with the node's credentials.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// containerd's CRI socket (`unix:///…`); by default the system's when it runs, else a
    /// containerd of the agent's own under --data-dir.
    #[arg(long)]
    container_runtime_endpoint: Option<String>,
    /// The pod address range of the agent's own containerd (its CNI bridge network); by
    /// default the Node's `spec.podCIDRs`, which node IPAM assigns.
    #[arg(long)]
    pod_cidr: Option<String>,
    /// The Node's name (default: the host name).
    #[arg(long)]
    node_name: Option<String>,
    /// The Node's InternalIP (default: the first non-loopback local address).
    #[arg(long)]
    node_ip: Option<IpAddr>,
    #[arg(long, default_value = "rudder-agent")]
    data_dir: PathBuf,
    #[arg(long, default_value_t = 10250)]
    kubelet_port: u16,
    /// Labels for the Node, `k=v,k2=v2`.
    #[arg(long, value_delimiter = ',')]
    node_labels: Vec<String>,
    #[arg(long, default_value_t = 110)]
    max_pods: u32,
    /// The cluster DNS server(s) pods resolve through.
    #[arg(long, value_delimiter = ',')]
    cluster_dns: Vec<String>,
    /// The kubelet API's serving certificate (PEM); without it one is requested through a
    /// `kubernetes.io/kubelet-serving` CSR.
    #[arg(long, requires = "tls_private_key_file")]
    tls_cert_file: Option<PathBuf>,
    #[arg(long)]
    tls_private_key_file: Option<PathBuf>,
    /// Run N hollow nodes (fake runtime, no containers) named <node-name>-0 … instead of one
    /// real node; they use the --kubeconfig credentials.
    #[arg(long)]
    hollow: Option<usize>,
    #[command(flatten)]
    network: crate::network::NetworkArgs,
    #[command(flatten)]
    eviction: EvictionArgs,
    /// Delete the Service routing rules (the nftables table `ip rudder`) and exit.
    #[arg(long)]
    cleanup: bool,
}

pub fn default_node_ip() -> IpAddr {
    rudder_apiserver::pki::host::local_addresses()
        .into_iter()
        .find(|ip| ip.is_ipv4() && !ip.is_loopback())
        .unwrap_or(IpAddr::from([127, 0, 0, 1]))
}

pub fn default_node_name() -> String {
    rudder_apiserver::pki::host::hostname()
        .map(|h| h.to_lowercase())
        .unwrap_or_else(|| "rudder-node".into())
}

fn labels(pairs: &[String]) -> Result<BTreeMap<String, String>> {
    pairs
        .iter()
        .filter(|p| !p.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => Ok((k.to_owned(), v.to_owned())),
            None => bail!("--node-labels: {pair:?} is not key=value"),
        })
        .collect()
}

/// `rudder agent`.
pub async fn run(args: AgentArgs, shutdown: CancellationToken) -> Result<()> {
    if args.cleanup {
        return crate::network::cleanup().await;
    }
    let node_name = args.node_name.clone().unwrap_or_else(default_node_name);
    let node_ip = args.node_ip.unwrap_or_else(default_node_ip);
    if let Some(count) = args.hollow {
        let kubeconfig = args.kubeconfig.as_ref().context(
            "--hollow needs --kubeconfig (credentials that may act for every hollow node)",
        )?;
        let client = crate::serve::client_for(kubeconfig).await?;
        return run_hollow(client, node_name, count, args.max_pods, shutdown).await;
    }
    let eviction = args.eviction.settings()?;
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let (client, ca_pem) = match (&args.kubeconfig, &args.server, &args.token) {
        (Some(path), _, _) => {
            let client = crate::serve::client_for(path).await?;
            let config = kube::config::Kubeconfig::read_from(path)?;
            let ca = crate::controller_manager::cluster_ca(&config).unwrap_or_default();
            (client, ca)
        }
        (None, Some(server), Some(token)) => {
            let hash = args
                .ca_cert_hash
                .as_deref()
                .context("joining with a token needs --ca-cert-hash (printed by `rudder token join-command`)")?;
            let ca = rudder_kubelet::bootstrap::discover_ca(server, hash).await?;
            let path =
                rudder_kubelet::bootstrap::join(server, &ca, token, &node_name, &args.data_dir)
                    .await?;
            let credentials = rudder_kubelet::bootstrap::Credentials::read(&path)?;
            tokio::spawn(rudder_kubelet::bootstrap::rotate(
                path,
                node_name.clone(),
                shutdown.child_token(),
            ));
            (credentials.client().await?, ca)
        }
        _ => bail!("give --server and --token (and --ca-cert-hash) to join, or --kubeconfig"),
    };
    let (cert_pem, key_pem) = match (&args.tls_cert_file, &args.tls_private_key_file) {
        (Some(cert), Some(key)) => (
            std::fs::read_to_string(cert).with_context(|| format!("reading {}", cert.display()))?,
            std::fs::read_to_string(key).with_context(|| format!("reading {}", key.display()))?,
        ),
        _ => rudder_kubelet::bootstrap::serving_certificate(
            &client,
            &node_name,
            &[node_ip],
            std::slice::from_ref(&node_name),
        )
        .await
        .context("a serving certificate for the kubelet API")?,
    };
    let mut config = rudder_kubelet::Config::new(&node_name, node_ip, args.data_dir.clone());
    config.listen = Some(std::net::SocketAddr::new(
        IpAddr::from([0, 0, 0, 0]),
        args.kubelet_port,
    ));
    config.serving = Some(rudder_kubelet::Serving {
        cert_pem,
        key_pem,
        client_ca_pem: ca_pem,
    });
    config.labels = labels(&args.node_labels)?;
    config.max_pods = args.max_pods;
    config.eviction = eviction;
    let (_network, network_labels, cluster_dns) = crate::network::start(
        &args.network,
        client.clone(),
        &node_name,
        node_ip,
        &args.cluster_dns,
        crate::network::DEFAULT_CLUSTER_DNS,
        shutdown.child_token(),
    )
    .await?;
    config.labels.extend(network_labels);
    config.cluster_dns = cluster_dns;
    config.cluster_domain = args.network.cluster_domain.clone();
    let Some((endpoint, managed)) = container_runtime(
        args.container_runtime_endpoint.as_deref(),
        &args.data_dir.join("containerd"),
        args.pod_cidr.as_deref(),
    )
    .await?
    else {
        bail!("no container runtime to run pods with");
    };
    let runtime: Arc<dyn Runtime> = Arc::new(CriRuntime::new(&endpoint)?);
    let recorder = rudder_runtime::events::recorder(client.clone(), "kubelet", &node_name);
    let ran = rudder_kubelet::run(config, client, runtime, Some(recorder), shutdown).await;
    if let Some(managed) = managed {
        tracing::info!("the kubelet stopped; stopping its containerd");
        managed.stop().await;
    }
    tracing::info!("agent stopped");
    ran
}

/// `count` hollow nodes named `<prefix>-<i>`, all through `client`.
pub async fn run_hollow(
    client: kube::Client,
    prefix: String,
    count: usize,
    max_pods: u32,
    shutdown: CancellationToken,
) -> Result<()> {
    let mut nodes = tokio::task::JoinSet::new();
    for index in 0..count {
        let name = format!("{prefix}-{index}");
        // Each hollow node gets its own fake address and pod range.
        let octets = [
            10,
            64 + u8::try_from(index / 65536 % 64).unwrap_or(0),
            u8::try_from(index / 256 % 256).unwrap_or(0),
            u8::try_from(index % 256).unwrap_or(0),
        ];
        let ip = IpAddr::from(octets);
        let mut config = rudder_kubelet::Config::hollow(&name, ip);
        config.max_pods = max_pods;
        let runtime: Arc<dyn Runtime> = Arc::new(FakeRuntime::new(
            &format!("10.{}.{}", 128 + index / 256 % 64, index % 256),
            Duration::from_secs(1),
        ));
        let client = client.clone();
        let shutdown = shutdown.child_token();
        nodes.spawn(
            async move { rudder_kubelet::run(config, client, runtime, None, shutdown).await },
        );
    }
    tracing::info!(count, "hollow nodes started");
    while let Some(done) = nodes.join_next().await {
        done.context("a hollow node's task")??;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::EvictionArgs;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        eviction: EvictionArgs,
    }

    fn settings(args: &[&str]) -> anyhow::Result<rudder_kubelet::eviction::Settings> {
        let flags = Flags::try_parse_from(std::iter::once("agent").chain(args.iter().copied()))?;
        flags.eviction.settings()
    }

    #[test]
    fn eviction_flags_become_the_managers_settings_or_a_clear_error() {
        let defaults = settings(&[]).unwrap();
        assert_eq!(defaults.hard.len(), 4);
        assert!(defaults.soft.is_empty());
        assert_eq!(defaults.max_pod_grace_seconds, 0);

        let tuned = settings(&[
            "--eviction-soft=memory.available<1Gi",
            "--eviction-soft-grace-period=memory.available=1m30s",
            "--eviction-max-pod-grace-period=45",
            "--eviction-minimum-reclaim=memory.available=500Mi",
        ])
        .unwrap();
        assert_eq!(
            tuned.soft[0].grace_period,
            Some(std::time::Duration::from_secs(90))
        );
        assert_eq!(tuned.max_pod_grace_seconds, 45);
        assert!(tuned.hard[0].min_reclaim.is_some() && tuned.soft[0].min_reclaim.is_some());

        let missing = settings(&["--eviction-soft=memory.available<1Gi"]).unwrap_err();
        assert!(missing.to_string().contains("no grace period"), "{missing}");
        let negative = settings(&["--eviction-max-pod-grace-period=-1"]).unwrap_err();
        assert!(
            negative.to_string().contains("must not be negative"),
            "{negative}"
        );
        let bad = settings(&["--image-gc-high-threshold=70"]).unwrap_err();
        assert!(bad.to_string().contains("below"), "{bad}");
    }
}
