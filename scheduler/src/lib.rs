//! rudder-scheduler: assigns pods to nodes.
//!
//! A client of the apiserver through kube-rs, never of storage: shared informers on pods,
//! nodes, namespaces, PodDisruptionBudgets, claims, volumes and StorageClasses
//! ([`volumes`]) and Services and controllers ([`workloads`]) feed a [`cache`] (with assumed pods) and a
//! [`queue`] (active, backoff, unschedulable); one loop runs upstream's [`framework`] of
//! filter and score [`plugins`] per pod ([`schedule`]), preempts lower-priority pods when
//! nothing fits ([`preemption`]), and binds through `pods/binding` ([`cluster`]). Profiles,
//! plugins, weights and arguments come from a `KubeSchedulerConfiguration` ([`config`]).
//! With leader election on the Lease `kube-system/kube-scheduler`, of several schedulers
//! exactly one works. Start at [`Runner::run`]; the flow is described in docs/scheduler.md.

pub mod cache;
pub mod cluster;
pub mod config;
pub mod framework;
pub mod metrics;
pub mod node_info;
pub mod plugins;
pub mod preemption;
pub mod queue;
pub mod resources;
pub mod schedule;
pub mod scheduler;
#[cfg(test)]
mod tests;
pub mod volumes;
pub mod workloads;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::ObjectRef;
use kube::Client;
use rudder_runtime::informers::Informers;
use rudder_runtime::leader;
use tokio_util::sync::CancellationToken;

pub use config::{ConfigError, SchedulerConfiguration};
pub use metrics::Metrics;
pub use scheduler::Scheduler;

/// The name pods get when they name no scheduler, and the default profile's.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// A scheduler's settings.
#[derive(Clone)]
pub struct Config {
    /// A client of the cluster's API, as the scheduler's identity.
    pub client: Client,
    /// Names this scheduler in events and in the leader-election Lease.
    pub identity: String,
    pub configuration: SchedulerConfiguration,
    /// Hold the Lease `kube-system/kube-scheduler` and work only while leading.
    pub leader_election: bool,
}

/// Builds every profile of `configuration`, or says what is wrong with it.
pub fn profiles(
    configuration: &SchedulerConfiguration,
) -> Result<Vec<framework::Profile>, ConfigError> {
    let default_percentage = configuration.percentage_of_nodes_to_score.unwrap_or(0);
    let mut seen = std::collections::HashSet::new();
    configuration
        .profiles()
        .iter()
        .map(|profile| {
            if !seen.insert(profile.scheduler_name.clone()) {
                return Err(ConfigError::DuplicateProfile(
                    profile.scheduler_name.clone(),
                ));
            }
            plugins::profile(profile, default_percentage)
        })
        .collect()
}

/// Runs a scheduler.
pub struct Runner {
    config: Config,
    metrics: Arc<Metrics>,
}

impl Runner {
    /// Checks the configuration's profiles first.
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        profiles(&config.configuration)?;
        Ok(Self {
            config,
            metrics: Arc::new(Metrics::default()),
        })
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Schedules until `shutdown` (while leading, with leader election).
    pub async fn run(self, shutdown: CancellationToken) {
        let (config, metrics) = (self.config, self.metrics);
        if !config.leader_election {
            schedule(config, metrics, shutdown).await;
            return;
        }
        let election = leader::Election {
            namespace: "kube-system".into(),
            name: "kube-scheduler".into(),
            identity: config.identity.clone(),
            timings: leader::Timings::default(),
        };
        leader::Elector::new(config.client.clone(), election)
            .run(shutdown, move |leading| {
                schedule(config.clone(), metrics.clone(), leading)
            })
            .await;
    }
}

/// One term of scheduling: informers, handlers and the loop, until `shutdown`.
async fn schedule(config: Config, metrics: Arc<Metrics>, shutdown: CancellationToken) {
    let profiles = match profiles(&config.configuration) {
        Ok(profiles) => profiles,
        Err(error) => {
            tracing::error!(%error, "the scheduler configuration is invalid");
            return;
        }
    };
    let informers = Informers::new(config.client.clone());
    let pods = informers.watch::<Pod>();
    let nodes = informers.watch::<Node>();
    let namespaces = informers.get::<Namespace>().store;
    let budgets = informers.get::<PodDisruptionBudget>().store;
    let namespace_labels = Arc::new(move |name: &str| -> BTreeMap<String, String> {
        namespaces
            .get(&ObjectRef::new(name))
            .and_then(|ns| ns.metadata.labels.clone())
            .unwrap_or_default()
    });
    let list_budgets = Arc::new(move || budgets.state());
    let claims = informers.get::<PersistentVolumeClaim>();
    let persistent_volumes = informers.get::<PersistentVolume>();
    let classes = informers.get::<StorageClass>();
    let volumes = Arc::new(volumes::Volumes::new(Arc::new(volumes::StoreVolumes {
        claims: claims.store.clone(),
        volumes: persistent_volumes.store.clone(),
        classes: classes.store.clone(),
    })));
    let cluster = Arc::new(cluster::KubeCluster::new(
        config.client.clone(),
        &config.identity,
    ));
    let workloads = Arc::new(workloads::StoreWorkloads {
        services: informers.get::<Service>().store,
        replication_controllers: informers.get::<ReplicationController>().store,
        replica_sets: informers.get::<ReplicaSet>().store,
        stateful_sets: informers.get::<StatefulSet>().store,
    });
    let listers = scheduler::Listers {
        namespace_labels,
        budgets: list_budgets,
        volumes,
        workloads,
    };
    let scheduler = Scheduler::new(
        profiles,
        cluster,
        listers,
        queue::Timings::default(),
        metrics,
        tokio::runtime::Handle::current(),
    );
    let (pod_store, node_store) = (pods.store.clone(), nodes.store.clone());
    // How many changes each handler has taken in: scheduling starts once they have taken in
    // at least the initial lists (the stores being ready is not enough — the cache is fed
    // from the change streams, which may lag behind).
    let (pods_seen, nodes_seen) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let pod_handler = {
        let (scheduler, seen) = (scheduler.clone(), pods_seen.clone());
        pods.changes.for_each(move |change| {
            scheduler.on_pod(change.object, change.deleted);
            seen.fetch_add(1, Ordering::Relaxed);
            futures::future::ready(())
        })
    };
    let node_handler = {
        let (scheduler, seen) = (scheduler.clone(), nodes_seen.clone());
        nodes.changes.for_each(move |change| {
            scheduler.on_node(change.object, change.deleted);
            seen.fetch_add(1, Ordering::Relaxed);
            futures::future::ready(())
        })
    };
    // Claims, volumes and classes wake the pods VolumeBinding turned away.
    let storage_handler = {
        use framework::ClusterEvent;
        fn on<T>(
            scheduler: Arc<Scheduler>,
            event: ClusterEvent,
        ) -> impl FnMut(T) -> futures::future::Ready<()> {
            move |_| {
                scheduler.on_storage(event);
                futures::future::ready(())
            }
        }
        futures::future::join3(
            claims
                .changes
                .for_each(on(scheduler.clone(), ClusterEvent::ClaimChanged)),
            persistent_volumes
                .changes
                .for_each(on(scheduler.clone(), ClusterEvent::VolumeChanged)),
            classes
                .changes
                .for_each(on(scheduler.clone(), ClusterEvent::StorageClassAdded)),
        )
    };
    let stop = Arc::new(AtomicBool::new(false));
    let looping = {
        let (scheduler, stop, token) = (scheduler.clone(), stop.clone(), shutdown.clone());
        let informers = &informers;
        // A pop that waits is woken by close(), so the thread notices `stop` at once.
        async move {
            // Every informer's first list first (upstream's WaitForCacheSync): a pod placed
            // before the Services were listed would miss its default spreading.
            tokio::select! {
                _ = token.cancelled() => return,
                _ = informers.synced() => {}
            }
            let (initial_pods, initial_nodes) = (pod_store.state().len(), node_store.state().len());
            while pods_seen.load(Ordering::Relaxed) < initial_pods
                || nodes_seen.load(Ordering::Relaxed) < initial_nodes
            {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            tracing::info!(identity = %config.identity, "scheduler started");
            let thread = std::thread::Builder::new()
                .name("scheduler".into())
                .spawn(move || scheduler.run_loop(&stop));
            match thread {
                Ok(thread) => {
                    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
                }
                Err(error) => tracing::error!(%error, "starting the scheduling thread failed"),
            }
        }
    };
    tokio::select! {
        _ = informers.run(shutdown.clone()) => {}
        _ = async { tokio::join!(pod_handler, node_handler, storage_handler, looping) } => {}
    }
    // Whichever ended first, the scheduling thread ends too (it holds the API client).
    stop.store(true, Ordering::Relaxed);
    scheduler.close();
}
