//! rudder-controllers: the controller-manager — the loops that make declared state happen.
//!
//! Every controller is a kube-runtime `Controller` against Rudder's own API (it never touches
//! storage), fed by shared informers ([`informers`]: one watch per resource type for all
//! controllers), measured by its work queue ([`workqueue`]) and run by [`runner`]. With leader
//! election ([`leader`]) several controller-managers on one cluster keep exactly one active.
//! Start at [`Manager::run`]; each controller is a module of its own (`replicaset`, …). With
//! [`Config::service_account_credentials`] each controller talks to the API as its own
//! ServiceAccount ([`credentials`]), the manager as itself.
//!
//! It depends on the Kubernetes API only (kube-rs and k8s-openapi types) and on
//! `rudder-facts`; nothing of the apiserver or the storage.

pub mod clusterdns;
pub mod clusterrole_aggregation;
pub mod credentials;
pub mod cronjob;
pub mod csrapproving;
pub mod csrsigning;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod endpointslicemirroring;
pub mod error;
pub mod expectations;
pub mod gc;
pub mod job;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod persistentvolume;
pub mod podgc;
pub mod podtemplate;
pub mod replicaset;
pub mod resourcequota;
pub mod revisions;
pub mod rootca;
pub mod runner;
pub mod selection;
pub mod serviceaccount;
pub mod statefulset;
pub mod tokens;
pub mod volumeprotection;
pub mod workqueue;

// Shared with the scheduler; re-exported so controllers name them as before.
pub use rudder_runtime::{events, informers, leader};

use std::sync::Arc;

use futures::future::BoxFuture;
use kube::Client;
use tokio_util::sync::CancellationToken;

pub use error::{Error, Result};
pub use selection::Selection;

use informers::Informers;
use workqueue::{Queue, QueueMetrics};

/// How many objects of a kind each controller reconciles at once (upstream's
/// `--concurrent-<name>-syncs`).
#[derive(Clone, Debug)]
pub struct Concurrency {
    pub replicaset: u16,
    pub deployment: u16,
    pub garbage_collector: u16,
    pub namespace: u16,
    pub job: u16,
    pub statefulset: u16,
}

impl Default for Concurrency {
    fn default() -> Self {
        Self {
            replicaset: 5,
            deployment: 5,
            garbage_collector: 20,
            namespace: 10,
            job: 5,
            statefulset: 5,
        }
    }
}

/// A controller-manager's settings.
#[derive(Clone)]
pub struct Config {
    /// A client of the cluster's API, as the controller-manager's identity: the shared
    /// informers, leader election, and every controller unless
    /// [`Config::service_account_credentials`] gives them their own.
    pub client: Client,
    /// The connection settings behind `client` (upstream's `--use-service-account-credentials`
    /// when given): each controller listed in [`credentials::SERVICE_ACCOUNTS`] then gets a
    /// client of its own that authenticates as that ServiceAccount (a token the manager
    /// requests and renews), so it holds only its own role.
    pub service_account_credentials: Option<kube::Config>,
    /// Names this manager in events and in the leader-election Lease.
    pub identity: String,
    pub controllers: Selection,
    pub concurrency: Concurrency,
    /// Hold the Lease `kube-system/kube-controller-manager` and work only while leading.
    pub leader_election: bool,
    /// The cluster's CA bundle (PEM), published in every namespace as `kube-root-ca.crt`;
    /// without it that controller does not run.
    pub root_ca: Option<String>,
    /// How the pod garbage collector runs (`--terminated-pod-gc-threshold`).
    pub pod_gc: podgc::Settings,
    /// Mints legacy ServiceAccount tokens with the cluster's key; without it the tokens
    /// controller does not run.
    pub legacy_tokens: Option<tokens::Minter>,
    /// Signs approved CertificateSigningRequests with the cluster CA
    /// (`--cluster-signing-cert-file`/`--cluster-signing-key-file`); without it the
    /// `csrsigning` controller does not run.
    pub cluster_signing: Option<Arc<csrsigning::Signer>>,
    /// How node health is judged (`--node-monitor-grace-period`, `--node-eviction-rate`).
    pub node_lifecycle: nodelifecycle::Settings,
    /// The pod ranges node IPAM hands out (`--cluster-cidr`, `--node-cidr-mask-size`).
    pub node_ipam: nodeipam::Settings,
}

/// The controller-manager.
pub struct Manager {
    config: Config,
    metrics: Arc<QueueMetrics>,
}

impl Manager {
    pub fn new(config: Config) -> Self {
        Self {
            config,
            metrics: Arc::new(QueueMetrics::new()),
        }
    }

    /// The workqueue metrics, to register with a Prometheus registry.
    pub fn metrics(&self) -> Arc<QueueMetrics> {
        self.metrics.clone()
    }

    /// Runs the selected controllers until `shutdown` (while leading, with leader election).
    pub async fn run(self, shutdown: CancellationToken) {
        if !self.config.leader_election {
            run_controllers(self.config, self.metrics, shutdown).await;
            return;
        }
        let election = leader::Election {
            namespace: "kube-system".into(),
            name: "kube-controller-manager".into(),
            identity: self.config.identity.clone(),
            timings: leader::Timings::default(),
        };
        let elector = leader::Elector::new(self.config.client.clone(), election);
        let (config, metrics) = (self.config, self.metrics);
        elector
            .run(shutdown, move |leading| {
                run_controllers(config.clone(), metrics.clone(), leading)
            })
            .await;
    }
}

/// Builds every selected controller over one set of informers and runs them all.
async fn run_controllers(config: Config, metrics: Arc<QueueMetrics>, shutdown: CancellationToken) {
    let informers = Informers::new(config.client.clone());
    let clients = credentials::Clients::new(
        config.client.clone(),
        config.service_account_credentials.clone(),
    );
    let mut controllers: Vec<BoxFuture<'static, ()>> = Vec::new();
    for name in config.controllers.names() {
        let queue = Queue::new(name, metrics.clone());
        let Some(client) = clients.for_controller(name, &shutdown).await else {
            return;
        };
        let identity = config.identity.as_str();
        let token = shutdown.clone();
        let controller = match name {
            "replicaset" => replicaset::controller(
                &informers,
                client,
                identity,
                queue,
                config.concurrency.replicaset,
                token,
            ),
            "serviceaccount" => serviceaccount::controller(&informers, client, queue, token),
            "resourcequota" => resourcequota::controller(&informers, client, queue, token),
            "clusterrole-aggregation" => {
                clusterrole_aggregation::controller(&informers, client, queue, token)
            }
            "pod-garbage-collector" => podgc::controller(&informers, client, config.pod_gc, token),
            "disruption" => disruption::controller(&informers, client, queue, token),
            "node-lifecycle" => {
                nodelifecycle::controller(&informers, client, config.node_lifecycle, token)
            }
            "taint-eviction-controller" => {
                nodelifecycle::taint_eviction_controller(&informers, client, identity, token)
            }
            "nodeipam" => nodeipam::controller(
                &informers,
                client,
                identity,
                config.node_ipam.clone(),
                token,
            ),
            "serviceaccount-token" => match &config.legacy_tokens {
                Some(mint) => tokens::controller(
                    &informers,
                    client,
                    mint.clone(),
                    config.root_ca.clone(),
                    queue,
                    token,
                ),
                None => {
                    tracing::info!("no ServiceAccount key given: token Secrets are not filled");
                    continue;
                }
            },
            "root-ca-cert-publisher" => match &config.root_ca {
                Some(bundle) => {
                    rootca::controller(&informers, client, bundle.clone(), queue, token)
                }
                None => {
                    tracing::warn!("no cluster CA bundle given: kube-root-ca.crt is not published");
                    continue;
                }
            },
            "csrapproving" => csrapproving::controller(&informers, client, queue, token),
            "csrsigning" => match &config.cluster_signing {
                Some(signer) => {
                    csrsigning::controller(&informers, client, signer.clone(), queue, token)
                }
                None => {
                    tracing::warn!("no cluster signing CA given: CSRs are not signed");
                    continue;
                }
            },
            "daemonset" => daemonset::controller(&informers, client, identity, queue, 5, token),
            "statefulset" => statefulset::controller(
                &informers,
                client,
                identity,
                queue,
                config.concurrency.statefulset,
                token,
            ),
            "endpoints" => endpoints::controller(&informers, client, false, queue, 5, token),
            "endpointslice" => endpoints::controller(&informers, client, true, queue, 5, token),
            endpointslicemirroring::NAME => {
                endpointslicemirroring::controller(&informers, client, identity, queue, token)
            }
            clusterdns::NAME => clusterdns::controller(&informers, client, queue, token),
            "job" => job::controller(
                &informers,
                client,
                identity,
                queue,
                config.concurrency.job,
                token,
            ),
            "cronjob" => cronjob::controller(&informers, client, identity, queue, token),
            "ttl-after-finished" => job::ttl::controller(&informers, client, queue, token),
            "namespace" => namespace::controller(
                &informers,
                client,
                queue,
                config.concurrency.namespace,
                token,
            ),
            "garbage-collector" => {
                gc::controller(client, queue, config.concurrency.garbage_collector, token)
            }
            persistentvolume::BINDER => {
                persistentvolume::binder_controller(&informers, client, identity, queue, token)
            }
            persistentvolume::PROVISIONER => persistentvolume::provisioner::controller(
                &informers, client, identity, queue, token,
            ),
            "deployment" => deployment::controller(
                &informers,
                client,
                identity,
                queue,
                config.concurrency.deployment,
                token,
            ),
            volumeprotection::PVC_PROTECTION => {
                volumeprotection::pvc_controller(&informers, client, queue, token)
            }
            volumeprotection::PV_PROTECTION => {
                volumeprotection::pv_controller(&informers, client, queue, token)
            }
            other => {
                tracing::warn!(controller = other, "not implemented yet; skipped");
                continue;
            }
        };
        controllers.push(controller);
    }
    tracing::info!(controllers = ?config.controllers.names(), "controller-manager started");
    // Changes queue up meanwhile; no controller acts on a partial view.
    let work = async {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = informers.synced() => {}
        }
        tracing::info!("informers synced; controllers at work");
        futures::future::join_all(controllers).await;
    };
    tokio::join!(informers.run(shutdown.clone()), work);
}
