//! One Deployment's sync, as upstream's: claim its ReplicaSets; a paused Deployment or a
//! change of size only scales; otherwise roll out by its strategy (RollingUpdate within
//! `maxSurge`/`maxUnavailable`, or Recreate), clean up history beyond
//! `revisionHistoryLimit` once complete, and report status.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::core::{Selector, SelectorExt};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::ResourceExt;
use serde::Serialize;

use super::replicasets::{
    find_new, new_set, revision, scale, set_annotations, template_hash, DESIRED_REPLICAS, REVISION,
};
use super::rolling::{
    new_set_replicas, proportional, scale_down_old, surge_and_unavailable, SetView,
};
use super::status::{calculate, complete, until_deadline, Progress};
use super::Context;
use crate::error::{Error, Result};
use crate::podtemplate::controller_reference;
use crate::runner::key_of;
use rudder_facts::owners::controller_of;

/// upstream's default `revisionHistoryLimit`.
const HISTORY_LIMIT: i32 = 10;

/// What one sync works on.
struct Sync<'a> {
    context: &'a Context,
    deployment: &'a Deployment,
    sets: Api<ReplicaSet>,
    replicas: i32,
    min_ready_seconds: i32,
}

pub async fn reconcile(deployment: Arc<Deployment>, context: Arc<Context>) -> Result<Action> {
    let key = key_of(deployment.as_ref());
    let (Some(uid), Some(spec)) = (deployment.uid(), deployment.spec.as_ref()) else {
        return Ok(Action::await_change());
    };
    if deployment.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let selector = Selector::try_from(spec.selector.clone())
        .map_err(|error| Error::Invalid(format!("Deployment {key}: invalid selector: {error}")))?;
    if selector.selects_all() {
        publish(
            &context,
            &deployment,
            "SelectingAll",
            "Sync",
            "This deployment is selecting all pods. A non-empty selector is required.".into(),
            EventType::Warning,
        )
        .await;
        return Ok(Action::await_change());
    }
    let namespace = deployment.namespace().unwrap_or_default();
    let sync = Sync {
        context: &context,
        deployment: &deployment,
        sets: Api::namespaced(context.client.clone(), &namespace),
        replicas: spec.replicas.unwrap_or(1),
        min_ready_seconds: spec.min_ready_seconds.unwrap_or(0),
    };
    let owned = sync.claim(&uid, &selector, &namespace).await?;
    let recreate = spec
        .strategy
        .as_ref()
        .and_then(|strategy| strategy.type_.as_deref())
        == Some("Recreate");
    let paused = spec.paused.unwrap_or(false);
    let new = find_new(&deployment, &owned);
    let (_, unavailable) = sync.surge_and_unavailable();
    let unavailable = if recreate { 0 } else { unavailable };

    let outcome = if paused || (!recreate && sync.is_scaling_event(&owned, new.as_deref())) {
        sync.scale_only(&owned, new.clone(), paused).await?
    } else if recreate {
        sync.recreate(owned, new).await?
    } else {
        sync.rolling(owned, new).await?
    };

    let Outcome {
        sets,
        new,
        progress,
    } = outcome;
    let status = calculate(
        &deployment,
        &sets,
        new.as_deref(),
        unavailable,
        progress,
        Timestamp::now(),
    );
    if deployment.status.as_ref() != Some(&status) {
        let mut updated = deployment.as_ref().clone();
        updated.status = Some(status.clone());
        Api::<Deployment>::namespaced(context.client.clone(), &namespace)
            .replace_status(&deployment.name_any(), &PostParams::default(), &updated)
            .await?;
    }
    let mut with_status = deployment.as_ref().clone();
    with_status.status = Some(status);
    Ok(match until_deadline(&with_status, Timestamp::now()) {
        Some(left) => Action::requeue(left),
        None => Action::await_change(),
    })
}

/// What a sync leaves: every ReplicaSet as it now is, the new one, why it progressed.
struct Outcome {
    sets: Vec<Arc<ReplicaSet>>,
    new: Option<Arc<ReplicaSet>>,
    progress: Progress,
}

impl Sync<'_> {
    fn surge_and_unavailable(&self) -> (i32, i32) {
        let rolling = self
            .deployment
            .spec
            .as_ref()
            .and_then(|spec| spec.strategy.as_ref())
            .and_then(|strategy| strategy.rolling_update.as_ref());
        surge_and_unavailable(
            rolling.and_then(|r| r.max_surge.as_ref()),
            rolling.and_then(|r| r.max_unavailable.as_ref()),
            self.replicas,
        )
    }

    /// The ReplicaSets this Deployment controls, adopting orphans its selector matches and
    /// releasing those that stopped matching; oldest first.
    async fn claim(
        &self,
        uid: &str,
        selector: &Selector,
        namespace: &str,
    ) -> Result<Vec<Arc<ReplicaSet>>> {
        let mut owned = Vec::new();
        for set in self.context.sets.state() {
            if set.metadata.namespace.as_deref() != Some(namespace) {
                continue;
            }
            // Another controller's ReplicaSets are neither claimed nor released: skip them
            // before matching the selector (with many Deployments in a namespace, nearly all).
            let controller = controller_of(&set.metadata);
            if controller.is_some_and(|owner| owner.uid != uid) {
                continue;
            }
            let matches = selector.matches(set.labels());
            match controller {
                Some(_) => {
                    if matches {
                        owned.push(set);
                    } else {
                        let owners = set
                            .owner_references()
                            .iter()
                            .filter(|owner| owner.uid != uid)
                            .cloned()
                            .collect();
                        self.patch_owners(&set, owners).await?;
                    }
                }
                None if matches && set.metadata.deletion_timestamp.is_none() => {
                    let mut owners: Vec<OwnerReference> = set.owner_references().to_vec();
                    owners.push(controller_reference(self.deployment));
                    self.patch_owners(&set, owners).await?;
                    owned.push(set);
                }
                _ => {}
            }
        }
        owned.sort_by(|a, b| {
            a.metadata
                .creation_timestamp
                .cmp(&b.metadata.creation_timestamp)
                .then_with(|| a.name_any().cmp(&b.name_any()))
        });
        Ok(owned)
    }

    async fn patch_owners(&self, set: &ReplicaSet, owners: Vec<OwnerReference>) -> Result<()> {
        let patch = ReplicaSet {
            metadata: ObjectMeta {
                uid: set.uid(),
                owner_references: Some(owners),
                ..ObjectMeta::default()
            },
            spec: None,
            status: None,
        };
        match self
            .sets
            .patch(
                &set.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 422 => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Whether the Deployment's size changed since its active ReplicaSets were last scaled.
    fn is_scaling_event(&self, owned: &[Arc<ReplicaSet>], new: Option<&ReplicaSet>) -> bool {
        let Some(new) = new else {
            return false;
        };
        let desired = self.replicas.to_string();
        owned
            .iter()
            .filter(|set| replicas_of(set) > 0 || set.uid() == new.uid())
            .any(|set| set.annotations().get(DESIRED_REPLICAS) != Some(&desired))
    }

    /// The new revision: one past the highest of the old ReplicaSets.
    fn next_revision(&self, owned: &[Arc<ReplicaSet>], new: Option<&ReplicaSet>) -> i64 {
        owned
            .iter()
            .filter(|set| new.is_none_or(|new| new.uid() != set.uid()))
            .map(|set| revision(set))
            .max()
            .unwrap_or(0)
            + 1
    }

    /// The new ReplicaSet with its revision and annotations up to date, created (with
    /// `initial` replicas) if `create` and missing. Records the revision on the Deployment.
    async fn new_set(
        &self,
        owned: &[Arc<ReplicaSet>],
        new: Option<Arc<ReplicaSet>>,
        create: bool,
        initial: impl Fn(&[Arc<ReplicaSet>]) -> i32,
    ) -> Result<(Option<Arc<ReplicaSet>>, Progress)> {
        let revision_now = self.next_revision(owned, new.as_deref());
        let (surge, _) = self.surge_and_unavailable();
        let max_replicas = self.replicas + surge;
        if let Some(set) = new {
            let revision_then = revision(&set);
            let wanted = if revision_then < revision_now {
                revision_now
            } else {
                revision_then
            };
            let annotations = set_annotations(self.deployment, wanted, max_replicas);
            let current: BTreeMap<String, String> = set.annotations().clone();
            let stale = annotations
                .iter()
                .any(|(key, value)| current.get(key) != Some(value))
                || set
                    .spec
                    .as_ref()
                    .and_then(|s| s.min_ready_seconds)
                    .unwrap_or(0)
                    != self.min_ready_seconds;
            let set = if stale {
                let mut merged = current;
                merged.extend(annotations);
                Arc::new(
                    scale(
                        &self.sets,
                        &set,
                        replicas_of(&set),
                        &merged,
                        self.min_ready_seconds,
                    )
                    .await?,
                )
            } else {
                set
            };
            self.record_revision(wanted).await?;
            let progress = if revision_then < revision_now {
                Progress::Found(set.name_any())
            } else {
                Progress::Counts
            };
            return Ok((Some(set), progress));
        }
        if !create {
            return Ok((None, Progress::Counts));
        }
        let mut collisions = self
            .deployment
            .status
            .as_ref()
            .and_then(|status| status.collision_count);
        let template = self
            .deployment
            .spec
            .as_ref()
            .map(|spec| spec.template.clone())
            .unwrap_or_default();
        let replicas = initial(owned);
        loop {
            let hash = template_hash(&template, collisions);
            let annotations = set_annotations(self.deployment, revision_now, max_replicas);
            let Some(set) = new_set(self.deployment, &hash, replicas, annotations) else {
                return Ok((None, Progress::Counts));
            };
            match self.sets.create(&PostParams::default(), &set).await {
                Ok(created) => {
                    let name = created.name_any();
                    if replicas > 0 {
                        self.scaled_event(&name, 0, replicas).await;
                    }
                    self.record_revision(revision_now).await?;
                    if collisions
                        != self
                            .deployment
                            .status
                            .as_ref()
                            .and_then(|status| status.collision_count)
                    {
                        self.record_collisions(collisions).await?;
                    }
                    return Ok((Some(Arc::new(created)), Progress::Created(name)));
                }
                // Another set already has this name: a different template hashed the same.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    let existing = self.sets.get_opt(&set.name_any()).await?;
                    let ours = existing.as_ref().is_some_and(|existing| {
                        controller_of(&existing.metadata).map(|o| o.uid.as_str())
                            == self.deployment.uid().as_deref()
                            && existing
                                .spec
                                .as_ref()
                                .and_then(|s| s.template.as_ref())
                                .is_some_and(|t| super::replicasets::same_template(t, &template))
                    });
                    if let (true, Some(existing)) = (ours, existing) {
                        return Ok((Some(Arc::new(existing)), Progress::Counts));
                    }
                    collisions = Some(collisions.unwrap_or(0) + 1);
                }
                Err(error) => return Err(error.into()),
            }
        }
    }

    async fn record_revision(&self, revision: i64) -> Result<()> {
        let text = revision.to_string();
        if self.deployment.annotations().get(REVISION) == Some(&text) {
            return Ok(());
        }
        let mut annotations = BTreeMap::new();
        annotations.insert(REVISION.to_string(), text);
        let patch = AnnotationsPatch {
            metadata: AnnotationsMeta {
                annotations: &annotations,
            },
        };
        Api::<Deployment>::namespaced(
            self.context.client.clone(),
            &self.deployment.namespace().unwrap_or_default(),
        )
        .patch(
            &self.deployment.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
        Ok(())
    }

    async fn record_collisions(&self, collisions: Option<i32>) -> Result<()> {
        let mut updated = self.deployment.clone();
        updated
            .status
            .get_or_insert_with(Default::default)
            .collision_count = collisions;
        Api::<Deployment>::namespaced(
            self.context.client.clone(),
            &self.deployment.namespace().unwrap_or_default(),
        )
        .replace_status(
            &self.deployment.name_any(),
            &PostParams::default(),
            &updated,
        )
        .await?;
        Ok(())
    }

    /// Scales `set` to `replicas` (with fresh annotations); returns it as it now is.
    async fn scale_to(&self, set: &Arc<ReplicaSet>, replicas: i32) -> Result<Arc<ReplicaSet>> {
        let (surge, _) = self.surge_and_unavailable();
        let mut annotations = set.annotations().clone();
        annotations.insert(DESIRED_REPLICAS.into(), self.replicas.to_string());
        annotations.insert(
            super::replicasets::MAX_REPLICAS.into(),
            (self.replicas + surge).to_string(),
        );
        let before = replicas_of(set);
        if before == replicas && &annotations == set.annotations() {
            return Ok(set.clone());
        }
        let scaled = scale(
            &self.sets,
            set,
            replicas,
            &annotations,
            self.min_ready_seconds,
        )
        .await?;
        if before != replicas {
            self.scaled_event(&set.name_any(), before, replicas).await;
        }
        Ok(Arc::new(scaled))
    }

    async fn scaled_event(&self, name: &str, from: i32, to: i32) {
        let (direction, reason) = if to > from {
            ("up", "ScalingReplicaSet")
        } else {
            ("down", "ScalingReplicaSet")
        };
        publish(
            self.context,
            self.deployment,
            reason,
            "Scaling",
            format!("Scaled {direction} replica set {name} from {from} to {to}"),
            EventType::Normal,
        )
        .await;
    }

    /// Replaces sets in `all` by their scaled versions.
    fn merge(all: &mut [Arc<ReplicaSet>], scaled: &Arc<ReplicaSet>) {
        for set in all.iter_mut() {
            if set.uid() == scaled.uid() {
                *set = scaled.clone();
            }
        }
    }

    /// RollingUpdate: scale the new set up within the surge, old ones down within the
    /// unavailability budget, one step per sync.
    async fn rolling(
        &self,
        owned: Vec<Arc<ReplicaSet>>,
        new: Option<Arc<ReplicaSet>>,
    ) -> Result<Outcome> {
        let (surge, unavailable) = self.surge_and_unavailable();
        let replicas = self.replicas;
        let (new, progress) = self
            .new_set(&owned, new, true, |all| {
                let views: Vec<SetView> = all.iter().map(|set| view(set)).collect();
                let nothing = SetView {
                    name: String::new(),
                    replicas: 0,
                    available: 0,
                };
                new_set_replicas(replicas, surge, &views, &nothing)
            })
            .await?;
        let mut all = owned;
        if let Some(new) = &new {
            if !all.iter().any(|set| set.uid() == new.uid()) {
                all.push(new.clone());
            }
            Self::merge(&mut all, new);
        }
        let Some(new) = new else {
            return Ok(Outcome {
                sets: all,
                new: None,
                progress,
            });
        };
        // Scale the new set up (or down, if it has more than it should).
        let views: Vec<SetView> = all.iter().map(|set| view(set)).collect();
        let target = if replicas_of(&new) > replicas {
            replicas
        } else {
            new_set_replicas(replicas, surge, &views, &view(&new))
        };
        if target != replicas_of(&new) {
            let scaled = self.scale_to(&new, target).await?;
            Self::merge(&mut all, &scaled);
            return Ok(Outcome {
                sets: all,
                new: Some(scaled),
                progress,
            });
        }
        // Scale old sets down.
        let old: Vec<Arc<ReplicaSet>> = all
            .iter()
            .filter(|set| set.uid() != new.uid())
            .cloned()
            .collect();
        let old_views: Vec<SetView> = old.iter().map(|set| view(set)).collect();
        let plan = scale_down_old(replicas, unavailable, &views, &old_views, Some(&view(&new)));
        let mut scaled_down = false;
        for (name, to) in plan {
            if let Some(set) = old.iter().find(|set| set.name_any() == name) {
                if replicas_of(set) != to {
                    let scaled = self.scale_to(set, to).await?;
                    Self::merge(&mut all, &scaled);
                    scaled_down = true;
                }
            }
        }
        if !scaled_down {
            self.cleanup_if_complete(&all, &new).await?;
        }
        Ok(Outcome {
            sets: all,
            new: Some(new),
            progress,
        })
    }

    /// Recreate: every old pod gone before the new set scales up.
    async fn recreate(
        &self,
        owned: Vec<Arc<ReplicaSet>>,
        new: Option<Arc<ReplicaSet>>,
    ) -> Result<Outcome> {
        let (new, mut progress) = self.new_set(&owned, new, false, |_| 0).await?;
        let mut all = owned;
        let old: Vec<Arc<ReplicaSet>> = all
            .iter()
            .filter(|set| new.as_ref().is_none_or(|new| new.uid() != set.uid()))
            .cloned()
            .collect();
        let mut scaled_down = false;
        for set in old.iter().filter(|set| replicas_of(set) > 0) {
            let scaled = self.scale_to(set, 0).await?;
            Self::merge(&mut all, &scaled);
            scaled_down = true;
        }
        if scaled_down || self.old_pods_running(&old) {
            return Ok(Outcome {
                sets: all,
                new,
                progress,
            });
        }
        let new = match new {
            Some(new) => new,
            None => {
                let (created, created_progress) = self.new_set(&all, None, true, |_| 0).await?;
                progress = created_progress;
                let Some(created) = created else {
                    return Ok(Outcome {
                        sets: all,
                        new: None,
                        progress,
                    });
                };
                all.push(created.clone());
                created
            }
        };
        let scaled = self.scale_to(&new, self.replicas).await?;
        Self::merge(&mut all, &scaled);
        self.cleanup_if_complete(&all, &scaled).await?;
        Ok(Outcome {
            sets: all,
            new: Some(scaled),
            progress,
        })
    }

    /// Whether any pod of the old sets is still there and not finished.
    fn old_pods_running(&self, old: &[Arc<ReplicaSet>]) -> bool {
        let uids: Vec<String> = old.iter().filter_map(|set| set.uid()).collect();
        self.context.pods.state().iter().any(|pod: &Arc<Pod>| {
            controller_of(&pod.metadata).is_some_and(|owner| uids.contains(&owner.uid))
                && !rudder_facts::pods::is_terminal(pod)
        })
    }

    /// A paused Deployment, or one whose size changed: scale without rolling (proportionally
    /// across the active sets in the middle of a rollout).
    async fn scale_only(
        &self,
        owned: &[Arc<ReplicaSet>],
        new: Option<Arc<ReplicaSet>>,
        paused: bool,
    ) -> Result<Outcome> {
        let (new, progress) = self.new_set(owned, new, false, |_| 0).await?;
        let mut all = owned.to_vec();
        if let Some(new) = &new {
            Self::merge(&mut all, new);
        }
        let active: Vec<Arc<ReplicaSet>> = all
            .iter()
            .filter(|set| replicas_of(set) > 0)
            .cloned()
            .collect();
        let targets: Vec<(Arc<ReplicaSet>, i32)> = match (active.len(), &new) {
            // Nothing running yet: the newest set (or the new one) takes everything.
            (0, Some(new)) => vec![(new.clone(), self.replicas)],
            (0, None) => match all.last() {
                Some(latest) => vec![(latest.clone(), self.replicas)],
                None => Vec::new(),
            },
            (1, _) => vec![(active[0].clone(), self.replicas)],
            _ => {
                let (surge, _) = self.surge_and_unavailable();
                let allowed = if self.replicas > 0 {
                    self.replicas + surge
                } else {
                    0
                };
                let views: Vec<SetView> = active.iter().map(|set| view(set)).collect();
                active
                    .iter()
                    .cloned()
                    .zip(proportional(allowed, &views))
                    .collect()
            }
        };
        for (set, to) in targets {
            let scaled = self.scale_to(&set, to).await?;
            Self::merge(&mut all, &scaled);
        }
        let new = new.and_then(|new| all.iter().find(|set| set.uid() == new.uid()).cloned());
        if paused {
            if let Some(new) = &new {
                self.cleanup_if_complete(&all, new).await?;
            }
        }
        Ok(Outcome {
            sets: all,
            new,
            progress,
        })
    }

    /// Once the rollout is complete, deletes old sets with no replicas beyond the history limit.
    async fn cleanup_if_complete(&self, all: &[Arc<ReplicaSet>], new: &ReplicaSet) -> Result<()> {
        let status = calculate(
            self.deployment,
            all,
            Some(new),
            0,
            Progress::Counts,
            Timestamp::now(),
        );
        let paused = self
            .deployment
            .spec
            .as_ref()
            .and_then(|spec| spec.paused)
            .unwrap_or(false);
        if !paused && !complete(self.deployment, &status) {
            return Ok(());
        }
        let limit = self
            .deployment
            .spec
            .as_ref()
            .and_then(|spec| spec.revision_history_limit)
            .unwrap_or(HISTORY_LIMIT)
            .max(0);
        let mut idle: Vec<&Arc<ReplicaSet>> = all
            .iter()
            .filter(|set| set.uid() != new.uid())
            .filter(|set| replicas_of(set) == 0)
            .filter(|set| {
                set.status
                    .as_ref()
                    .is_none_or(|status| status.replicas == 0)
            })
            .filter(|set| set.metadata.deletion_timestamp.is_none())
            .collect();
        let excess = idle
            .len()
            .saturating_sub(usize::try_from(limit).unwrap_or(0));
        idle.sort_by_key(|set| revision(set));
        for set in idle.into_iter().take(excess) {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: set.uid(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match self.sets.delete(&set.name_any(), &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
                Err(error) => return Err(error.into()),
            }
        }
        Ok(())
    }
}

fn replicas_of(set: &ReplicaSet) -> i32 {
    set.spec
        .as_ref()
        .and_then(|spec| spec.replicas)
        .unwrap_or(1)
}

fn view(set: &ReplicaSet) -> SetView {
    SetView {
        name: set.name_any(),
        replicas: replicas_of(set),
        available: set
            .status
            .as_ref()
            .and_then(|status| status.available_replicas)
            .unwrap_or(0),
    }
}

#[derive(Debug, Serialize)]
struct AnnotationsPatch<'a> {
    metadata: AnnotationsMeta<'a>,
}

#[derive(Debug, Serialize)]
struct AnnotationsMeta<'a> {
    annotations: &'a BTreeMap<String, String>,
}

async fn publish(
    context: &Context,
    deployment: &Deployment,
    reason: &str,
    action: &str,
    note: String,
    type_: EventType,
) {
    crate::events::publish(&context.recorder, deployment, type_, reason, action, note).await;
}
