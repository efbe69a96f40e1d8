//! rudder-kubelet: the node agent (`rudder agent`).
//!
//! It registers its Node and renews its Lease ([`node`]), runs the pods bound to it through a
//! container [`runtime`] — containerd's CRI, or a fake for hollow nodes — with one worker per
//! pod ([`pods`]), and serves logs, exec, attach and port-forward for the apiserver to proxy
//! ([`server`]). It is a client of the apiserver and never touches storage.

pub mod bootstrap;
pub mod cgroups;
pub mod containerd;
pub mod eviction;
pub mod image_gc;
pub mod images;
pub mod node;
pub mod pods;
pub mod runtime;
pub mod server;
pub mod stats;
pub mod storage;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use pods::spec::NodeSettings;
use pods::worker::Context;
use runtime::Runtime;

/// How the kubelet API proves who it is, and whom it trusts.
#[derive(Debug, Clone)]
pub struct Serving {
    pub cert_pem: String,
    pub key_pem: String,
    /// The CA client certificates must chain to (the cluster CA).
    pub client_ca_pem: String,
}

/// One node agent.
#[derive(Debug, Clone)]
pub struct Config {
    pub node_name: String,
    pub node_ip: IpAddr,
    /// Where pods' volumes and logs go.
    pub data_dir: PathBuf,
    /// The kubelet API's address; `None` serves none (hollow nodes).
    pub listen: Option<SocketAddr>,
    pub serving: Option<Serving>,
    pub labels: BTreeMap<String, String>,
    pub max_pods: u32,
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    /// The cgroupfs parent of pod cgroups; empty lets the runtime choose.
    pub cgroup_root: String,
    /// A hollow node: fake capacity, no files, no events.
    pub hollow: bool,
    /// How often a quiet pod is looked at again.
    pub resync: Duration,
    /// Hard eviction thresholds, pressure conditions and image garbage collection.
    pub eviction: eviction::Settings,
}

impl Config {
    /// A node named `name` at `ip` keeping its files in `data_dir`, with upstream's defaults.
    pub fn new(name: &str, ip: IpAddr, data_dir: PathBuf) -> Self {
        Self {
            node_name: name.to_owned(),
            node_ip: ip,
            data_dir,
            listen: Some(SocketAddr::new(IpAddr::from([0, 0, 0, 0]), 10250)),
            serving: None,
            labels: BTreeMap::new(),
            max_pods: 110,
            cluster_dns: Vec::new(),
            cluster_domain: "cluster.local".into(),
            cgroup_root: "/rudder-kubepods".into(),
            hollow: false,
            resync: Duration::from_secs(1),
            eviction: eviction::Settings::default(),
        }
    }

    /// A hollow node for scale runs.
    pub fn hollow(name: &str, ip: IpAddr) -> Self {
        Self {
            listen: None,
            hollow: true,
            cgroup_root: String::new(),
            resync: Duration::from_secs(10),
            ..Self::new(name, ip, PathBuf::from("/nonexistent"))
        }
    }
}

fn host_resolvers() -> Vec<String> {
    std::fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

fn tls_config(serving: &Serving) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(serving.client_ca_pem.as_bytes()) {
        roots.add(cert.context("reading the client CA")?)?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()?;
    let chain = CertificateDer::pem_slice_iter(serving.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .context("reading the serving certificate")?;
    let key = PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes())
        .context("reading the serving key")?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Runs one agent until `shutdown`: registers the Node, keeps its Lease and status, serves
/// the kubelet API and runs the node's pods.
pub async fn run(
    config: Config,
    client: kube::Client,
    runtime: Arc<dyn Runtime>,
    recorder: Option<kube::runtime::events::Recorder>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let version = loop {
        match runtime.version().await {
            Ok(version) => break version,
            Err(error) => {
                tracing::warn!(%error, "waiting for the container runtime");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(2)) => {}
                    () = shutdown.cancelled() => return Ok(()),
                }
            }
        }
    };
    let capacity = if config.hollow {
        node::hollow_capacity(config.max_pods)
    } else {
        node::machine_capacity(&config.data_dir, config.max_pods)
    };
    let mut tasks = tokio::task::JoinSet::new();
    let settings = NodeSettings {
        log_root: config.data_dir.join("logs"),
        cgroup_root: config.cgroup_root.clone(),
        cluster_dns: config.cluster_dns.clone(),
        cluster_domain: config.cluster_domain.clone(),
        host_dns: host_resolvers(),
    };
    let pods = pods::Handle::default();
    let collector = Arc::new(stats::Collector::new(
        runtime.clone(),
        &config.node_name,
        config.data_dir.clone(),
        settings.clone(),
        pods.clone(),
    ));
    let (pressure_sender, pressure) = tokio::sync::watch::channel(eviction::Pressure::default());
    let mut kubelet_port = 10250;
    if let (Some(listen), Some(serving)) = (config.listen, &config.serving) {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding the kubelet API to {listen}"))?;
        kubelet_port = listener.local_addr()?.port();
        let server = Arc::new(server::Server {
            runtime: runtime.clone(),
            auth: server::auth::Authenticator::new(client.clone()),
            node_name: config.node_name.clone(),
            stats: Some(collector.clone()),
        });
        tasks.spawn(server::serve(
            listener,
            tls_config(serving)?,
            server,
            shutdown.clone(),
        ));
    }
    let identity = Arc::new(node::Identity {
        name: config.node_name.clone(),
        ip: config.node_ip,
        hostname: config.node_name.clone(),
        kubelet_port,
        labels: config.labels.clone(),
        annotations: if config.hollow {
            BTreeMap::new()
        } else {
            BTreeMap::from([(
                rudder_facts::volumes::STORAGE_BASE_ANNOTATION.to_string(),
                storage::base(&config.data_dir).display().to_string(),
            )])
        },
        capacity: capacity.clone(),
        system: node::system_info(&format!("{}://{}", version.name, version.version)),
    });
    loop {
        match node::register(&client, &identity, runtime.as_ref()).await {
            Ok(()) => break,
            Err(error) => {
                tracing::warn!(node = %config.node_name, %error, "registering the node");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(2)) => {}
                    () = shutdown.cancelled() => return Ok(()),
                }
            }
        }
    }
    tracing::info!(node = %config.node_name, runtime = %version.name, port = kubelet_port, "node registered");
    if !config.hollow {
        tasks.spawn(node::follow_pod_cidrs(
            client.clone(),
            config.node_name.clone(),
            runtime.clone(),
            shutdown.clone(),
        ));
        tasks.spawn(storage::sweep_until(
            client.clone(),
            storage::base(&config.data_dir),
            shutdown.clone(),
        ));
        let evictions = eviction::Manager::new(
            config.eviction.clone(),
            collector,
            runtime.clone(),
            pods.clone(),
            pressure_sender,
        );
        tasks.spawn(evictions.run(shutdown.clone()));
    }
    tasks.spawn(node::heartbeat(
        client.clone(),
        identity.clone(),
        runtime.clone(),
        pressure.clone(),
        shutdown.clone(),
    ));
    let ctx = Arc::new(Context {
        runtime,
        client,
        node_name: config.node_name.clone(),
        host_ip: config.node_ip.to_string(),
        root: config.data_dir.clone(),
        settings,
        runtime_name: version.name,
        hollow: config.hollow,
        allocatable: capacity.into_iter().map(|(k, v)| (k, v.0)).collect(),
        resync: config.resync,
        recorder,
        pods,
        pressure,
    });
    pods::Manager::new(ctx).run(shutdown.clone()).await;
    tasks.shutdown().await;
    Ok(())
}
