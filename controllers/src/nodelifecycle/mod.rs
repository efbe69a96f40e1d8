//! The node lifecycle controller (`node-lifecycle`, as upstream's node-lifecycle-controller)
//! and taint-based eviction (`taint-eviction-controller`).
//!
//! Node health comes from the kubelet's heartbeats: its Lease in `kube-node-lease` being
//! renewed, or its Ready condition's `lastHeartbeatTime` moving. A node heard from neither
//! for `--node-monitor-grace-period` (40 s; 60 s for a node that never posted Ready) gets its
//! posted conditions `Unknown` (`NodeStatusUnknown`, "Kubelet stopped posting node status.")
//! and its pods Ready=False. Every node carries the `NoSchedule` taints its conditions call for
//! (not-ready, unreachable, memory/disk/pid pressure, network-unavailable, unschedulable), and
//! a node that is not Ready the `NoExecute` taint `node.kubernetes.io/not-ready` (False) or
//! `node.kubernetes.io/unreachable` (Unknown) — new `NoExecute` taints at most
//! `--node-eviction-rate` nodes a second per zone (0.1, upstream's default), slower or not at
//! all in a zone mostly down, and none while no node anywhere is Ready (see [`zones`]); all
//! are lifted when the node is Ready again.
//!
//! Taint-based eviction deletes the pods of `NoExecute`-tainted nodes (see
//! [`taint_eviction`]), each first marked with the `DisruptionTarget` condition (reason
//! `DeletionByTaintManager`) and announced by a `TaintManagerEviction` event ("Marking for
//! deletion Pod …"); a pod whose timed eviction is called off (the taint is lifted first) gets
//! one saying "Cancelling deletion of Pod …", as upstream's. Both work in passes over the shared informers' stores, once a
//! second; writes are pinned to the resourceVersion read, so a kubelet that posts meanwhile
//! wins and the next pass looks again.

mod evictor;
pub mod health;
pub mod taint_eviction;
pub mod zones;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::informers::Informers;
pub use evictor::taint_eviction_controller;
use zones::ZoneSettings;

/// How the node lifecycle controller judges nodes.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Without a heartbeat this long a node is `Unknown` (`--node-monitor-grace-period`).
    pub grace_period: Duration,
    /// The same for a node that never posted a Ready condition (`--node-startup-grace-period`).
    pub startup_grace_period: Duration,
    /// How many nodes a second may get a new `NoExecute` taint, per zone and zone state.
    pub zones: ZoneSettings,
    /// Between two passes.
    pub period: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            grace_period: Duration::from_secs(40),
            startup_grace_period: Duration::from_secs(60),
            zones: ZoneSettings::default(),
            period: Duration::from_secs(1),
        }
    }
}

/// The last heartbeat seen of a node, and when it was seen (on our clock).
struct Heard {
    heartbeat: Option<Time>,
    renewed: Option<String>,
    at: Instant,
    ready: Option<String>,
}

pub(crate) fn now_time() -> Time {
    Time(jiff::Timestamp::now())
}

pub(crate) fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref())
}

struct Lifecycle {
    client: Client,
    nodes: Store<Node>,
    leases: Store<Lease>,
    pods: Store<Pod>,
    settings: Settings,
    heard: HashMap<String, Heard>,
    /// When the next new `NoExecute` taint may be set, per zone.
    next_eviction: HashMap<String, Instant>,
    /// Whether every zone was fully disrupted at the last pass.
    all_disrupted: bool,
}

impl Lifecycle {
    /// Whether a new `NoExecute` taint may be set in `zone` now at `rate` nodes a second (and
    /// if so, spends the zone's turn).
    fn may_evict(&mut self, zone: &str, rate: f64) -> bool {
        if rate <= 0.0 {
            return false;
        }
        let now = Instant::now();
        if self.next_eviction.get(zone).is_some_and(|next| now < *next) {
            return false;
        }
        let next = now + Duration::from_secs_f64(1.0 / rate);
        self.next_eviction.insert(zone.to_string(), next);
        true
    }

    /// Each node's health first, then, from the zones' states that result, its taints.
    async fn pass(&mut self) {
        let nodes = self.nodes.state();
        self.heard
            .retain(|name, _| nodes.iter().any(|node| node.name_any() == *name));
        let mut observed = Vec::with_capacity(nodes.len());
        for node in nodes {
            match self.observe(&node).await {
                Ok(node) => observed.push(node),
                Err(error) => {
                    tracing::debug!(node = %node.name_any(), %error, "node lifecycle; next pass retries");
                }
            }
        }
        let census = zones::Census::take(&observed, self.settings.zones.unhealthy_zone_threshold);
        let all_disrupted = census.all_disrupted();
        if all_disrupted != self.all_disrupted {
            if all_disrupted {
                tracing::warn!("no node is Ready in any zone: entering master disruption mode (no taints, no evictions)");
            } else {
                tracing::info!("some nodes are Ready: leaving master disruption mode");
                // Every node gets a fresh grace period, as upstream resets its probe times.
                let now = Instant::now();
                for heard in self.heard.values_mut() {
                    heard.at = now;
                }
                self.next_eviction.clear();
            }
            self.all_disrupted = all_disrupted;
        }
        for node in observed {
            if let Err(error) = self.taint(&node, &census).await {
                tracing::debug!(node = %node.name_any(), %error, "node lifecycle; next pass retries");
            }
        }
    }

    /// The node's health: its conditions Unknown once it has gone quiet for the grace period,
    /// its pods not Ready when it stops being Ready. The node as it now is.
    async fn observe(&mut self, node: &Node) -> kube::Result<Node> {
        let name = node.name_any();
        let heartbeat =
            health::condition(node, "Ready").and_then(|c| c.last_heartbeat_time.clone());
        let renewed = self
            .leases
            .get(&ObjectRef::new(&name).within("kube-node-lease"))
            .and_then(|lease| {
                lease
                    .spec
                    .as_ref()?
                    .renew_time
                    .as_ref()
                    .map(|t| t.0.to_string())
            });
        let now = Instant::now();
        let heard = self.heard.entry(name.clone()).or_insert_with(|| Heard {
            heartbeat: heartbeat.clone(),
            renewed: renewed.clone(),
            at: now,
            ready: None,
        });
        if heard.heartbeat != heartbeat || heard.renewed != renewed {
            (heard.heartbeat, heard.renewed, heard.at) = (heartbeat, renewed, now);
        }
        let grace = match health::ready_status(node) {
            None => self.settings.startup_grace_period,
            Some(_) => self.settings.grace_period,
        };
        let api: Api<Node> = Api::all(self.client.clone());
        let mut node = node.clone();
        if now.duration_since(heard.at) > grace {
            if let Some(conditions) = health::gone_quiet(&node, &now_time()) {
                tracing::info!(node = %name, "kubelet stopped posting node status; conditions Unknown");
                let patch = json!({"metadata": {"resourceVersion": node.resource_version()},
                    "status": {"conditions": conditions}});
                node = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            }
        }
        let ready = health::ready_status(&node).map(str::to_string);
        let was_ready = self.heard.get(&name).and_then(|heard| heard.ready.clone());
        if ready.as_deref() != Some("True") && was_ready.as_deref() != ready.as_deref() {
            self.mark_pods_not_ready(&name).await;
        }
        if let Some(heard) = self.heard.get_mut(&name) {
            heard.ready = ready;
        }
        Ok(node)
    }

    /// Sets the taints the node's conditions call for; a new `NoExecute` one only at its
    /// zone's rate, and none (the present ones lifted) while every zone is fully disrupted.
    async fn taint(&mut self, node: &Node, census: &zones::Census) -> kube::Result<()> {
        let name = node.name_any();
        let current = node
            .spec
            .as_ref()
            .and_then(|spec| spec.taints.clone())
            .unwrap_or_default();
        let adds_no_execute = |taints: &[k8s_openapi::api::core::v1::Taint]| {
            taints.iter().any(|t| t.effect == "NoExecute")
        };
        let mut wanted = health::wanted_taints(node, false, &now_time());
        if census.all_disrupted() {
            health::lift_no_execute(&mut wanted);
        } else {
            let needs_turn = !adds_no_execute(&current)
                && adds_no_execute(&health::wanted_taints(node, true, &now_time()));
            let zone = zones::zone_of(node);
            if needs_turn && self.may_evict(&zone, census.rate(&self.settings.zones, &zone)) {
                wanted = health::wanted_taints(node, true, &now_time());
            }
        }
        if !health::same_taints(&current, &wanted) {
            let api: Api<Node> = Api::all(self.client.clone());
            tracing::info!(node = %name, taints = ?wanted.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect::<Vec<_>>(), "node taints");
            let patch = json!({"metadata": {"resourceVersion": node.resource_version()},
                "spec": {"taints": wanted}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        Ok(())
    }

    /// The Ready condition of every pod on the node False (their kubelet cannot say).
    async fn mark_pods_not_ready(&self, node: &str) {
        for pod in self.pods.state() {
            if node_of(&pod) != Some(node) || !rudder_facts::pods::is_ready(&pod) {
                continue;
            }
            let Some(namespace) = pod.namespace() else {
                continue;
            };
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
            let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "False",
                "lastTransitionTime": now_time()}]}});
            if let Err(error) = api
                .patch_status(
                    &pod.name_any(),
                    &PatchParams::default(),
                    &Patch::Strategic(&patch),
                )
                .await
            {
                tracing::debug!(pod = %pod.name_any(), %error, "marking a pod not ready");
            }
        }
    }
}

/// Runs `pass` every `period` once the stores have filled, until `shutdown`.
pub(crate) async fn every<F>(
    period: Duration,
    shutdown: CancellationToken,
    ready: impl std::future::Future<Output = ()>,
    mut pass: F,
) where
    F: FnMut() -> BoxFuture<'static, ()>,
{
    tokio::select! {
        () = shutdown.cancelled() => return,
        () = ready => {}
    }
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticker.tick() => pass().await,
        }
    }
}

/// The node lifecycle controller.
pub fn controller(
    informers: &Informers,
    client: Client,
    settings: Settings,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let lifecycle = Lifecycle {
        client,
        nodes: informers.get::<Node>().store,
        leases: informers.get::<Lease>().store,
        pods: informers.get::<Pod>().store,
        settings,
        heard: HashMap::new(),
        next_eviction: HashMap::new(),
        all_disrupted: false,
    };
    let (nodes, leases, pods) = (
        lifecycle.nodes.clone(),
        lifecycle.leases.clone(),
        lifecycle.pods.clone(),
    );
    let ready = async move {
        let _ = nodes.wait_until_ready().await;
        let _ = leases.wait_until_ready().await;
        let _ = pods.wait_until_ready().await;
    };
    let lifecycle = std::sync::Arc::new(tokio::sync::Mutex::new(lifecycle));
    every(settings.period, shutdown, ready, move || {
        let lifecycle = lifecycle.clone();
        async move { lifecycle.lock().await.pass().await }.boxed()
    })
    .boxed()
}
