//! The scheduler proper: informer events feed the cache and the queue; one loop (its own
//! thread — a cycle is CPU work) pops a pod, schedules it against a fresh snapshot, assumes
//! it on the chosen node and hands the binding to the async runtime, so the next cycle
//! starts while the write is in flight.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::cache::{Cache, Snapshot};
use crate::cluster::{Cluster, PodEvent};
use crate::framework::{ClusterEvent, Ctx, CycleState, NamespaceLabels, PreBindAction, Profile};
use crate::metrics::Metrics;
use crate::node_info::PodInfo;
use crate::preemption::{self, Outcome};
use crate::queue::{Queued, SchedulingQueue, Timings};
use crate::schedule::Algorithm;
use crate::volumes::Volumes;
use crate::workloads::{ListedWorkloads, Workloads};

/// Lists the PodDisruptionBudgets (preemption spares pods they protect).
pub type BudgetLister = dyn Fn() -> Vec<Arc<PodDisruptionBudget>> + Send + Sync;

/// What the plugins read of the cluster besides pods and nodes.
pub struct Listers {
    pub namespace_labels: Arc<NamespaceLabels>,
    pub budgets: Arc<BudgetLister>,
    /// Claims, volumes and classes, with VolumeBinding's promises.
    pub volumes: Arc<Volumes>,
    /// Services and controllers, for PodTopologySpread's default constraints.
    pub workloads: Arc<dyn Workloads>,
}

impl Default for Listers {
    /// Nothing listed: namespaces without labels, no budgets, volumes or workloads.
    fn default() -> Self {
        Self {
            namespace_labels: Arc::new(|_: &str| std::collections::BTreeMap::new()),
            budgets: Arc::new(Vec::new),
            volumes: Arc::default(),
            workloads: Arc::new(ListedWorkloads::default()),
        }
    }
}

/// The scheduler's state, shared by the informer handlers, the loop and binding tasks.
pub struct Scheduler {
    profiles: HashMap<String, Arc<Profile>>,
    cache: Mutex<Cache>,
    queue: SchedulingQueue,
    cluster: Arc<dyn Cluster>,
    listers: Listers,
    pub metrics: Arc<Metrics>,
    runtime: tokio::runtime::Handle,
    /// Bounds the API writes in flight (bindings, conditions, evictions): the scheduler may
    /// run ahead of the apiserver, but never with thousands of connections at once.
    writes: Arc<tokio::sync::Semaphore>,
}

/// How long a binding cycle waits for its pod's claims to be bound (upstream's
/// `bindTimeoutSeconds`).
pub const VOLUME_BIND_TIMEOUT: Duration = Duration::from_secs(600);

/// API writes the scheduler has in flight at most (each may hold a connection).
pub const MAX_WRITES_IN_FLIGHT: usize = 64;

/// What the scheduling loop carries from one cycle to the next.
#[derive(Default)]
pub struct Turn {
    snapshot: Snapshot,
    algorithm: Algorithm,
}

/// How long an assumed pod whose binding finished waits for the informer to confirm it.
pub const ASSUMED_POD_TTL: Duration = Duration::from_secs(30);

impl Scheduler {
    pub fn new(
        profiles: Vec<Profile>,
        cluster: Arc<dyn Cluster>,
        listers: Listers,
        timings: Timings,
        metrics: Arc<Metrics>,
        runtime: tokio::runtime::Handle,
    ) -> Arc<Self> {
        Arc::new(Self {
            profiles: profiles
                .into_iter()
                .map(|p| (p.scheduler_name.clone(), Arc::new(p)))
                .collect(),
            cache: Mutex::new(Cache::new(ASSUMED_POD_TTL)),
            queue: SchedulingQueue::new(timings),
            cluster,
            listers,
            metrics,
            runtime,
            writes: Arc::new(tokio::sync::Semaphore::new(MAX_WRITES_IN_FLIGHT)),
        })
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn profile_of(&self, pod: &Pod) -> Option<&Arc<Profile>> {
        let name = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or(crate::DEFAULT_SCHEDULER_NAME);
        self.profiles.get(name)
    }

    /// Every profile's plugins interested in `event`.
    fn interested(&self, event: ClusterEvent) -> HashSet<&'static str> {
        self.profiles
            .values()
            .flat_map(|p| p.plugins_for(event))
            .collect()
    }

    /// A pod changed (`deleted`: it is gone).
    pub fn on_pod(&self, pod: Arc<Pod>, deleted: bool) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let bound = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        let finished = rudder_facts::pods::is_terminal(&pod);
        if deleted || (bound && finished) {
            self.queue.remove(&uid);
            let was_counted = bound || self.cache().is_assumed(&uid);
            self.cache().remove_pod(&uid);
            if was_counted {
                self.queue
                    .on_event(&self.interested(ClusterEvent::AssignedPodDeleted));
            }
            return;
        }
        if bound {
            self.queue.remove(&uid);
            let was_assumed = self.cache().is_assumed(&uid);
            self.cache().upsert_bound_pod(pod);
            let event = if was_assumed {
                ClusterEvent::AssignedPodAdded
            } else {
                ClusterEvent::AssignedPodChanged
            };
            self.queue.on_event(&self.interested(event));
            return;
        }
        // Unbound: ours to schedule, unless another profile's or already placed by us.
        let Some(profile) = self.profile_of(&pod) else {
            return;
        };
        if pod.metadata.deletion_timestamp.is_some() || finished || self.cache().is_assumed(&uid) {
            return;
        }
        let info = Arc::new(PodInfo::new(pod));
        let nominated = info
            .pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.clone());
        self.cache().set_nominated(info.clone(), nominated);
        let gated = !profile.pre_enqueue(&info).is_success();
        tracing::trace!(pod = %info.key, gated, "queued");
        self.queue.upsert(info, gated);
    }

    /// A node changed.
    pub fn on_node(&self, node: Arc<Node>, deleted: bool) {
        if deleted {
            let name = node.metadata.name.clone().unwrap_or_default();
            self.cache().remove_node(&name);
            return;
        }
        let added = {
            let mut cache = self.cache();
            let before = cache.node_count();
            cache.upsert_node(node);
            cache.node_count() > before
        };
        let event = if added {
            ClusterEvent::NodeAdded
        } else {
            ClusterEvent::NodeChanged
        };
        self.queue.on_event(&self.interested(event));
    }

    /// A claim, volume or class changed: pods VolumeBinding turned away may fit now.
    pub fn on_storage(&self, event: ClusterEvent) {
        self.queue.on_event(&self.interested(event));
    }

    /// The scheduling loop; returns when `stop` is set (and the queue closed).
    pub fn run_loop(self: &Arc<Self>, stop: &std::sync::atomic::AtomicBool) {
        let mut turn = Turn::default();
        let mut last_housekeeping = Instant::now();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if last_housekeeping.elapsed() >= Duration::from_secs(1) {
                last_housekeeping = Instant::now();
                let expired = self.cache().expire_assumed(Instant::now());
                for _ in expired {
                    self.queue
                        .on_event(&self.interested(ClusterEvent::AssignedPodDeleted));
                }
                self.metrics.set_pending(self.queue.pending());
            }
            self.schedule_next(Duration::from_millis(500), &mut turn);
        }
    }

    /// Schedules the next pod if one is ready within `wait`; whether one was.
    pub fn schedule_next(self: &Arc<Self>, wait: Duration, turn: &mut Turn) -> bool {
        match self.queue.pop(wait) {
            Some(queued) => {
                self.schedule_one(queued, &mut turn.snapshot, &mut turn.algorithm);
                true
            }
            None => false,
        }
    }

    /// Stops `run_loop`'s waiting at once.
    pub fn close(&self) {
        self.queue.close();
    }

    /// One cycle for one pod.
    fn schedule_one(
        self: &Arc<Self>,
        queued: Queued,
        snapshot: &mut Snapshot,
        algorithm: &mut Algorithm,
    ) {
        let started = Instant::now();
        let pod = queued.info.clone();
        let Some(profile) = self.profile_of(&pod.pod).cloned() else {
            self.queue.done(&pod.uid);
            return;
        };
        self.cache().update_snapshot(snapshot);
        let labels = self.listers.namespace_labels.clone();
        let volumes = self.listers.volumes.clone();
        let workloads = self.listers.workloads.clone();
        let ctx = Ctx {
            pod: &pod,
            snapshot,
            namespace_labels: labels.as_ref(),
            volumes: volumes.as_ref(),
            workloads: workloads.as_ref(),
        };
        let mut state = CycleState::default();
        match algorithm.schedule(&profile, &mut state, &ctx) {
            Ok(placement) => {
                let reserved = match ctx.snapshot.get(&placement.node) {
                    Some(node) => profile.reserve(&state, &ctx, node),
                    None => Ok(Vec::new()),
                };
                let actions = match reserved {
                    Ok(actions) => actions,
                    Err(status) => {
                        let note = format!(
                            "running Reserve plugin \"{}\": {}",
                            status.plugin,
                            status.reasons.join(", ")
                        );
                        self.cluster.record(
                            &pod.pod,
                            PodEvent {
                                warning: true,
                                reason: "FailedScheduling",
                                action: "Scheduling",
                                note,
                            },
                        );
                        self.queue.requeue(queued, HashSet::new(), true);
                        return;
                    }
                };
                self.cache().assume(pod.clone(), &placement.node);
                self.metrics.scheduling_micros.fetch_add(
                    started.elapsed().as_micros() as u64,
                    std::sync::atomic::Ordering::Relaxed,
                );
                self.bind(queued, placement.node, profile, started, actions);
            }
            Err(mut diagnosis) => {
                let mut nominated = None;
                if profile.has_post_filter() && diagnosis.total_nodes > 0 {
                    let budgets = (self.listers.budgets)();
                    let offset = rand::random_range(0..snapshot.nodes.len().max(1));
                    match preemption::preempt(&profile, &state, &ctx, &diagnosis, &budgets, offset)
                    {
                        Outcome::Preempt(candidate) => {
                            self.metrics.preempted(candidate.victims.len());
                            for victim in &candidate.victims {
                                self.evict(victim, &pod, &candidate.node);
                            }
                            self.cache()
                                .set_nominated(pod.clone(), Some(candidate.node.clone()));
                            nominated = Some(candidate.node);
                        }
                        Outcome::Nothing(message) => diagnosis.post_filter_message = Some(message),
                    }
                }
                let message = diagnosis.message();
                tracing::debug!(pod = %pod.key, %message, "unschedulable");
                self.metrics.attempt(
                    "unschedulable",
                    &profile.scheduler_name,
                    started.elapsed().as_secs_f64(),
                );
                self.cluster.record(
                    &pod.pod,
                    PodEvent {
                        warning: true,
                        reason: "FailedScheduling",
                        action: "Scheduling",
                        note: message.clone(),
                    },
                );
                let write =
                    self.cluster
                        .mark_unschedulable(&pod.pod, &message, nominated.as_deref());
                self.spawn_write(async move {
                    if let Err(error) = write.await {
                        tracing::debug!(%error, "updating the PodScheduled condition failed");
                    }
                });
                self.queue.requeue(queued, diagnosis.plugins, false);
            }
        }
    }

    /// Runs an API write on the runtime, at most [`MAX_WRITES_IN_FLIGHT`] at a time.
    fn spawn_write<F>(&self, write: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let writes = self.writes.clone();
        self.runtime.spawn(async move {
            let Ok(_permit) = writes.acquire_owned().await else {
                return;
            };
            write.await;
        });
    }

    fn evict(&self, victim: &PodInfo, preemptor: &PodInfo, node: &str) {
        self.cluster.record(
            &victim.pod,
            PodEvent {
                warning: false,
                reason: "Preempted",
                action: "Preempting",
                note: format!("Preempted by pod {} on node {node}", preemptor.uid),
            },
        );
        let eviction = self.cluster.evict(&victim.pod);
        let key = victim.key.clone();
        self.spawn_write(async move {
            if let Err(error) = eviction.await {
                tracing::warn!(%error, victim = %key, "evicting a preemption victim failed");
            }
        });
    }

    /// PreBind: the volume writes, then waiting (bounded) until every claim is bound.
    async fn pre_bind(&self, actions: &[PreBindAction]) -> Result<(), crate::cluster::WriteError> {
        let mut waits = Vec::new();
        for action in actions {
            match action {
                PreBindAction::WaitBound { namespace, claim } => waits.push((namespace, claim)),
                other => self.cluster.pre_bind(other).await?,
            }
        }
        let deadline = Instant::now() + VOLUME_BIND_TIMEOUT;
        loop {
            let bound = waits.iter().all(|(namespace, claim)| {
                self.listers
                    .volumes
                    .lister
                    .claim(namespace, claim)
                    .is_some_and(|c| rudder_facts::volumes::claim_volume(&c).is_some())
            });
            if bound {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(crate::cluster::WriteError {
                    message: "binding volumes: timed out waiting for the condition".into(),
                    gone: false,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The binding cycle, asynchronously: PreBind's volume writes, then the binding.
    fn bind(
        self: &Arc<Self>,
        queued: Queued,
        node: String,
        profile: Arc<Profile>,
        started: Instant,
        actions: Vec<PreBindAction>,
    ) {
        let this = self.clone();
        let claims: Vec<String> = actions
            .iter()
            .filter_map(|action| match action {
                PreBindAction::WaitBound { namespace, claim } => {
                    Some(format!("{namespace}/{claim}"))
                }
                _ => None,
            })
            .collect();
        self.spawn_write(async move {
            let writing = Instant::now();
            let result = match this.pre_bind(&actions).await {
                Ok(()) => this.cluster.bind(&queued.info.pod, &node).await,
                Err(error) => Err(crate::cluster::WriteError {
                    message: format!(
                        "running PreBind plugin \"VolumeBinding\": {}",
                        error.message
                    ),
                    gone: error.gone,
                }),
            };
            this.listers.volumes.forget(&claims);
            let binding_micros = writing.elapsed().as_micros() as u64;
            let pod = queued.info.clone();
            match result {
                Ok(()) => {
                    this.cache().finish_binding(&pod.uid);
                    this.queue.done(&pod.uid);
                    this.metrics.attempt(
                        "scheduled",
                        &profile.scheduler_name,
                        started.elapsed().as_secs_f64(),
                    );
                    this.metrics
                        .scheduled(queued.first_queued.elapsed().as_secs_f64(), binding_micros);
                    this.cluster.record(
                        &pod.pod,
                        PodEvent {
                            warning: false,
                            reason: "Scheduled",
                            action: "Binding",
                            note: format!("Successfully assigned {} to {node}", pod.key),
                        },
                    );
                }
                Err(error) => {
                    tracing::debug!(pod = %pod.key, %error, "binding failed");
                    this.cache().forget(&pod.uid);
                    this.metrics.attempt(
                        "error",
                        &profile.scheduler_name,
                        started.elapsed().as_secs_f64(),
                    );
                    if error.gone {
                        this.queue.done(&pod.uid);
                    } else {
                        this.cluster.record(
                            &pod.pod,
                            PodEvent {
                                warning: true,
                                reason: "FailedScheduling",
                                action: "Scheduling",
                                note: format!("Binding rejected: {error}"),
                            },
                        );
                        this.queue.requeue(queued, HashSet::new(), true);
                    }
                    this.queue
                        .on_event(&this.interested(ClusterEvent::AssignedPodDeleted));
                }
            }
        });
    }

    /// The queue's sizes (for tests and the benchmark).
    pub fn pending(&self) -> crate::queue::Pending {
        self.queue.pending()
    }
}
