//! DefaultPreemption (PostFilter): when a pod fits nowhere, find a node where evicting
//! lower-priority pods would make room, evicting as few and as unimportant pods as possible.
//!
//! On each node whose rejection preemption could fix (`Unschedulable`, not
//! `UnschedulableAndUnresolvable`): remove every lower-priority pod; if the pod still does
//! not fit, the node is no candidate. Otherwise give pods back, most important first —
//! those whose eviction would violate a PodDisruptionBudget before the others — keeping
//! each that still leaves room. The remaining ones are the victims. Among candidates the
//! node wins with, in order: fewest PDB violations, the lowest highest-victim priority, the
//! lowest sum of victim priorities, the fewest victims, the latest start among its most
//! important victims. The scheduler then nominates the node for the pod and evicts the
//! victims; the pod is retried when they are gone.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::core::{Selector, SelectorExt};

use crate::framework::{Code, Ctx, CycleState, Profile};
use crate::node_info::{NodeInfo, PodInfo};
use crate::schedule::{histogram_message, Diagnosis};

/// Nodes examined: at least this share of the cluster …
const MIN_CANDIDATE_NODES_PERCENTAGE: usize = 10;
/// … and at least this many.
const MIN_CANDIDATE_NODES_ABSOLUTE: usize = 100;

/// A node where preemption would make room, and at what cost.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub node: String,
    pub victims: Vec<Arc<PodInfo>>,
    pub pdb_violations: usize,
}

/// What preemption decided.
#[derive(Debug)]
pub enum Outcome {
    /// Nominate `node` for the pod and evict the victims.
    Preempt(Candidate),
    /// Nothing to do; the message says why (it ends the FailedScheduling message).
    Nothing(String),
}

fn start_time(pod: &PodInfo) -> Timestamp {
    pod.pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .or(pod.pod.metadata.creation_timestamp.as_ref())
        .map(|t| t.0)
        .unwrap_or(Timestamp::MAX)
}

/// Budgets with their selectors compiled and the disruptions they still allow.
struct Budgets {
    entries: Vec<(String, Selector, i64)>,
}

impl Budgets {
    fn new(pdbs: &[Arc<PodDisruptionBudget>]) -> Self {
        let entries = pdbs
            .iter()
            .filter_map(|pdb| {
                let selector = pdb.spec.as_ref()?.selector.clone()?;
                let allowed = pdb
                    .status
                    .as_ref()
                    .map(|s| i64::from(s.disruptions_allowed))
                    .unwrap_or(0);
                Some((
                    pdb.metadata.namespace.clone().unwrap_or_default(),
                    Selector::try_from(selector).ok()?,
                    allowed,
                ))
            })
            .collect();
        Self { entries }
    }

    /// Splits `pods` into those whose eviction would violate a budget and the rest.
    fn split(&self, pods: Vec<Arc<PodInfo>>) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
        let mut allowed: Vec<i64> = self.entries.iter().map(|e| e.2).collect();
        let (mut violating, mut fine) = (Vec::new(), Vec::new());
        for pod in pods {
            let mut violates = false;
            for (i, (namespace, selector, _)) in self.entries.iter().enumerate() {
                if *namespace == pod.namespace
                    && !pod.labels.is_empty()
                    && selector.matches(&pod.labels)
                {
                    allowed[i] -= 1;
                    if allowed[i] < 0 {
                        violates = true;
                    }
                }
            }
            if violates {
                violating.push(pod);
            } else {
                fine.push(pod);
            }
        }
        (violating, fine)
    }
}

/// The victims on `node`, if evicting lower-priority pods there makes room.
fn select_victims(
    profile: &Profile,
    state: &CycleState,
    ctx: &Ctx,
    node: &Arc<NodeInfo>,
    budgets: &Budgets,
) -> Option<Candidate> {
    let mut info = NodeInfo::clone(node);
    let mut state = state.clone();
    // Room already promised to other pods of at least this priority is not there to take.
    let promised = ctx.snapshot.nominated.get(&node.name).into_iter().flatten();
    for pod in promised.filter(|p| p.uid != ctx.pod.uid && p.priority >= ctx.pod.priority) {
        info.add_pod(pod.clone());
        profile.add_pod(&mut state, ctx, pod, &info);
    }
    let mut lower: Vec<Arc<PodInfo>> = node
        .pods
        .iter()
        .filter(|p| p.priority < ctx.pod.priority)
        .cloned()
        .collect();
    for pod in &lower {
        info.remove_pod(&pod.uid);
        profile.remove_pod(&mut state, ctx, pod, &info);
    }
    if !profile.filter(&state, ctx, &info).is_success() {
        return None;
    }
    // Most important first: higher priority, then running longer.
    lower.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(start_time(a).cmp(&start_time(b)))
    });
    let (violating, fine) = budgets.split(lower);
    let mut victims = Vec::new();
    let mut pdb_violations = 0;
    for (pods, violates) in [(violating, true), (fine, false)] {
        for pod in pods {
            info.add_pod(pod.clone());
            profile.add_pod(&mut state, ctx, &pod, &info);
            if !profile.filter(&state, ctx, &info).is_success() {
                info.remove_pod(&pod.uid);
                profile.remove_pod(&mut state, ctx, &pod, &info);
                if violates {
                    pdb_violations += 1;
                }
                victims.push(pod);
            }
        }
    }
    Some(Candidate {
        node: node.name.clone(),
        victims,
        pdb_violations,
    })
}

/// The best candidate by upstream's criteria, in order.
fn pick(candidates: Vec<Candidate>) -> Option<Candidate> {
    let key = |c: &Candidate| {
        let highest = c
            .victims
            .iter()
            .map(|v| v.priority)
            .max()
            .unwrap_or(i32::MIN);
        // Offset so negative priorities still sum as "less important".
        let sum: i64 = c
            .victims
            .iter()
            .map(|v| i64::from(v.priority) + i64::from(i32::MAX) + 1)
            .sum();
        let earliest_of_highest = c
            .victims
            .iter()
            .filter(|v| v.priority == highest)
            .map(|v| start_time(v))
            .min()
            .unwrap_or(Timestamp::MAX);
        (
            c.pdb_violations,
            highest,
            sum,
            c.victims.len(),
            std::cmp::Reverse(earliest_of_highest),
        )
    };
    candidates.into_iter().min_by_key(key)
}

/// Whether the pod may preempt at all; the reason if not.
fn ineligible(ctx: &Ctx) -> Option<String> {
    let spec = ctx.pod.pod.spec.as_ref();
    if spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never") {
        return Some("not eligible due to preemptionPolicy=Never.".into());
    }
    let nominated = ctx
        .pod
        .pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref());
    if let Some(node) = nominated.and_then(|n| ctx.snapshot.get(n)) {
        let waiting = node
            .pods
            .iter()
            .any(|p| p.terminating() && p.priority < ctx.pod.priority);
        if waiting {
            return Some("not eligible due to a terminating pod on the nominated node.".into());
        }
    }
    None
}

/// Runs preemption for a pod that fit nowhere.
pub fn preempt(
    profile: &Profile,
    state: &CycleState,
    ctx: &Ctx,
    diagnosis: &Diagnosis,
    pdbs: &[Arc<PodDisruptionBudget>],
    offset: usize,
) -> Outcome {
    if let Some(reason) = ineligible(ctx) {
        return Outcome::Nothing(format!("preemption: {reason}"));
    }
    let total = diagnosis.total_nodes;
    if diagnosis.pre_filter.is_some() {
        let reasons = (0..total).map(|_| "Preemption is not helpful for scheduling".to_string());
        return Outcome::Nothing(format!("preemption: {}", histogram_message(total, reasons)));
    }
    let mut reasons: HashMap<String, &'static str> = HashMap::new();
    let mut potential = Vec::new();
    for (node, status) in &diagnosis.nodes {
        if status.code == Code::Unschedulable {
            potential.push(node.clone());
        } else {
            reasons.insert(
                node.name.clone(),
                "Preemption is not helpful for scheduling",
            );
        }
    }
    let budgets = Budgets::new(pdbs);
    let wanted = (potential.len() * MIN_CANDIDATE_NODES_PERCENTAGE / 100)
        .max(MIN_CANDIDATE_NODES_ABSOLUTE)
        .min(potential.len());
    let mut candidates = Vec::new();
    for i in 0..potential.len() {
        if candidates.len() >= wanted {
            break;
        }
        let node = &potential[(offset + i) % potential.len()];
        match select_victims(profile, state, ctx, node, &budgets) {
            Some(candidate) => candidates.push(candidate),
            None => {
                reasons.insert(
                    node.name.clone(),
                    "No preemption victims found for incoming pod",
                );
            }
        }
    }
    match pick(candidates) {
        Some(best) => Outcome::Preempt(best),
        None => {
            let listed = reasons.into_values().map(String::from);
            Outcome::Nothing(format!("preemption: {}", histogram_message(total, listed)))
        }
    }
}
