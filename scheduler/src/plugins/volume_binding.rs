//! VolumeBinding, as upstream's: a pod's PersistentVolumeClaims decide where it may go.
//!
//! - PreFilter: every claim must exist and not be going away; a bound claim's volume must
//!   exist; an unbound claim of an `Immediate` class is the PV binder's to bind first
//!   ("pod has unbound immediate PersistentVolumeClaims"); unbound claims of a
//!   `WaitForFirstConsumer` class are the scheduler's to place.
//! - Filter: bound claims' volumes must allow the node (their node affinity); each delayed
//!   claim needs a free volume usable there (the smallest that fits, each volume for one
//!   claim) or a class whose provisioner can create one there (`allowedTopologies`), and a
//!   claim already sent to another node for provisioning keeps to it.
//! - Reserve: the chosen free volumes are promised to their claims (so the next pods do not
//!   pick them); PreBind then binds them (`claimRef`) and annotates the claims to provision
//!   with `volume.kubernetes.io/selected-node`, and the pod is bound once every claim is.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::core::{Selector, SelectorExt};
use rudder_facts::volumes::{
    claim_class, claim_volume, find_match, node_allows, selected_node, Search, NO_PROVISIONER,
};

use crate::framework::{ClusterEvent, Ctx, CycleState, Plugin, Point, PreBindAction, Status};
use crate::node_info::NodeInfo;

const NAME: &str = "VolumeBinding";

/// Upstream's reasons.
pub const UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
pub const NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
pub const BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";

pub struct VolumeBinding;

/// A claim the scheduler places, with its class.
#[derive(Clone)]
struct Delayed {
    claim: Arc<PersistentVolumeClaim>,
    key: String,
    class: Option<Arc<StorageClass>>,
}

#[derive(Clone)]
struct State {
    /// Volumes of the pod's bound claims.
    bound: Vec<Arc<PersistentVolume>>,
    delayed: Vec<Delayed>,
    /// Every volume, read once per cycle when some claim is delayed.
    volumes: Vec<Arc<PersistentVolume>>,
}

/// What a delayed claim gets on a node.
enum Choice {
    Volume(Arc<PersistentVolume>),
    Provision,
}

fn selects(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    Selector::try_from(selector.clone()).is_ok_and(|s| s.matches(labels))
}

/// The claims a pod's volumes name (`ephemeral` ones are `<pod>-<volume>`).
fn claim_names(ctx: &Ctx) -> Vec<String> {
    let pod = &ctx.pod.pod;
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| {
            v.persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.clone())
                .or_else(|| v.ephemeral.as_ref().map(|_| format!("{name}-{}", v.name)))
        })
        .collect()
}

fn provisionable_on(class: &StorageClass, node: &NodeInfo) -> bool {
    if class.provisioner == NO_PROVISIONER {
        return false;
    }
    let Some(terms) = class.allowed_topologies.as_ref().filter(|t| !t.is_empty()) else {
        return true;
    };
    let empty = Default::default();
    let labels = node.node.metadata.labels.as_ref().unwrap_or(&empty);
    terms.iter().any(|term| {
        term.match_label_expressions.iter().flatten().all(|r| {
            labels
                .get(&r.key)
                .is_some_and(|value| r.values.contains(value))
        })
    })
}

impl VolumeBinding {
    /// Each delayed claim's volume or provisioning on `node`, or why it has none.
    fn choose(&self, state: &State, ctx: &Ctx, node: &NodeInfo) -> Result<Vec<Choice>, Status> {
        let mut chosen: HashSet<String> = HashSet::new();
        let mut choices = Vec::new();
        for delayed in &state.delayed {
            if selected_node(&delayed.claim).is_some_and(|n| n != node.name) {
                return Err(Status::unresolvable(BIND_CONFLICT));
            }
            let taken =
                |volume: &str| chosen.contains(volume) || ctx.volumes.taken(volume, &delayed.key);
            let search = Search {
                node: Some(&node.node),
                pre_bound_only: false,
                taken: &taken,
                selects: &selects,
            };
            if let Some(volume) = find_match(
                state.volumes.iter().map(Arc::as_ref),
                &delayed.claim,
                &search,
            ) {
                let name = volume.metadata.name.clone().unwrap_or_default();
                let found = state
                    .volumes
                    .iter()
                    .find(|v| v.metadata.name.as_deref() == Some(name.as_str()))
                    .cloned();
                chosen.insert(name);
                if let Some(found) = found {
                    choices.push(Choice::Volume(found));
                    continue;
                }
            }
            match &delayed.class {
                Some(class) if provisionable_on(class, node) => choices.push(Choice::Provision),
                _ => return Err(Status::unresolvable(BIND_CONFLICT)),
            }
        }
        Ok(choices)
    }
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }
    fn points(&self) -> &'static [Point] {
        &[
            Point::PreFilter,
            Point::Filter,
            Point::Reserve,
            Point::PreBind,
        ]
    }
    fn events(&self) -> &'static [ClusterEvent] {
        crate::framework::VOLUME_EVENTS
    }

    fn pre_filter(&self, state: &mut CycleState, ctx: &Ctx) -> Status {
        let names = claim_names(ctx);
        if names.is_empty() {
            return Status::skip();
        }
        let namespace = ctx.pod.namespace.as_str();
        let lister = &ctx.volumes.lister;
        let mut found = State {
            bound: Vec::new(),
            delayed: Vec::new(),
            volumes: Vec::new(),
        };
        let mut unbound_immediate = false;
        for name in names {
            let Some(claim) = lister.claim(namespace, &name) else {
                return Status::unresolvable(format!("persistentvolumeclaim \"{name}\" not found"));
            };
            if claim.metadata.deletion_timestamp.is_some() {
                return Status::unresolvable(format!(
                    "persistentvolumeclaim \"{name}\" is being deleted"
                ));
            }
            if let Some(volume) = claim_volume(&claim) {
                match lister.volume(volume) {
                    Some(volume) => found.bound.push(volume),
                    None => {
                        return Status::unresolvable(format!(
                            "persistentvolume \"{volume}\" not found"
                        ))
                    }
                }
                continue;
            }
            let class_name = claim_class(&claim);
            let class = (!class_name.is_empty())
                .then(|| lister.class(class_name))
                .flatten();
            let delayed = class
                .as_ref()
                .and_then(|c| c.volume_binding_mode.as_deref())
                == Some("WaitForFirstConsumer");
            if !delayed {
                unbound_immediate = true;
                continue;
            }
            found.delayed.push(Delayed {
                claim,
                key: format!("{namespace}/{name}"),
                class,
            });
        }
        if unbound_immediate {
            return Status::unresolvable(UNBOUND_IMMEDIATE);
        }
        if !found.delayed.is_empty() {
            found.volumes = lister.volumes();
        }
        state.write(NAME, found);
        Status::success()
    }

    fn filter(&self, state: &CycleState, ctx: &Ctx, node: &NodeInfo) -> Status {
        let Some(state) = state.read::<State>(NAME) else {
            return Status::success();
        };
        if state.bound.iter().any(|v| !node_allows(v, &node.node)) {
            return Status::unresolvable(NODE_CONFLICT);
        }
        match self.choose(state, ctx, node) {
            Ok(_) => Status::success(),
            Err(status) => status,
        }
    }

    fn reserve(
        &self,
        state: &CycleState,
        ctx: &Ctx,
        node: &NodeInfo,
    ) -> Result<Vec<PreBindAction>, Status> {
        let Some(state) = state.read::<State>(NAME) else {
            return Ok(Vec::new());
        };
        let choices = self.choose(state, ctx, node)?;
        let mut actions = Vec::new();
        for (delayed, choice) in state.delayed.iter().zip(choices) {
            let namespace = delayed.claim.metadata.namespace.clone().unwrap_or_default();
            let claim = delayed.claim.metadata.name.clone().unwrap_or_default();
            match choice {
                Choice::Volume(volume) => {
                    let name = volume.metadata.name.clone().unwrap_or_default();
                    ctx.volumes.assume(&name, &delayed.key);
                    actions.push(PreBindAction::BindVolume {
                        volume: name,
                        namespace: namespace.clone(),
                        claim: claim.clone(),
                        uid: delayed.claim.metadata.uid.clone().unwrap_or_default(),
                    });
                }
                Choice::Provision => {
                    if selected_node(&delayed.claim) != Some(node.name.as_str()) {
                        actions.push(PreBindAction::SelectNode {
                            namespace: namespace.clone(),
                            claim: claim.clone(),
                            node: node.name.clone(),
                        });
                    }
                }
            }
            actions.push(PreBindAction::WaitBound { namespace, claim });
        }
        Ok(actions)
    }

    fn unreserve(&self, ctx: &Ctx) {
        let namespace = ctx.pod.namespace.as_str();
        let claims: Vec<String> = claim_names(ctx)
            .into_iter()
            .map(|name| format!("{namespace}/{name}"))
            .collect();
        ctx.volumes.forget(&claims);
    }
}

#[cfg(test)]
mod tests;
