//! The ClusterRole aggregation controller, as upstream's: a ClusterRole with an
//! `aggregationRule` holds, as its `rules`, the rules of every other ClusterRole its selectors
//! pick (in the order of those roles' names, each rule once) — so `kubectl get clusterrole
//! admin -o yaml` shows what `admin` grants, and a CRD's `aggregate-to-edit` role joins `edit`.
//! Any ClusterRole change wakes every aggregating role.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::api::{Api, Patch, PatchParams};
use kube::core::{Selector, SelectorExt};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::informers::Informers;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;

pub struct Context {
    pub client: Client,
    pub roles: Store<ClusterRole>,
}

pub fn controller(
    informers: &Informers,
    client: Client,
    queue: Arc<Queue>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let roles = informers.get::<ClusterRole>();
    // A second subscription to the same informer: its changes wake the aggregating roles.
    let wakes = informers.get::<ClusterRole>().changes;
    let store = roles.store.clone();
    let context = Arc::new(Context {
        client,
        roles: roles.store.clone(),
    });
    let controller = Controller::for_shared_stream(
        counted(roles.changes, queue.clone(), |role: &ClusterRole| {
            Some(key_of(role))
        }),
        roles.store,
    )
    // A role that changes may change what every aggregating role holds.
    .watches_shared_stream(wakes, move |_: Arc<ClusterRole>| {
        store
            .state()
            .iter()
            .filter(|role| role.aggregation_rule.is_some())
            .map(|role| ObjectRef::from_obj(role.as_ref()))
            .collect::<Vec<_>>()
    });
    runner::run(
        "clusterrole-aggregation",
        controller,
        context,
        queue,
        1,
        shutdown,
        reconcile,
    )
    .boxed()
}

/// What `role` aggregates from `all`: the rules of the roles its selectors pick, by role name,
/// each rule once. `None` for a role without an aggregationRule.
pub fn aggregated(role: &ClusterRole, all: &[Arc<ClusterRole>]) -> Option<Vec<PolicyRule>> {
    let selectors: Vec<Selector> = role
        .aggregation_rule
        .as_ref()?
        .cluster_role_selectors
        .iter()
        .flatten()
        .filter_map(|selector| Selector::try_from(selector.clone()).ok())
        // An empty selector selects nothing here, as upstream's.
        .filter(|selector| !selector.selects_all())
        .collect();
    let name = role.name_any();
    let mut sources: BTreeMap<String, &ClusterRole> = BTreeMap::new();
    for other in all {
        let labels = other.metadata.labels.clone().unwrap_or_default();
        if other.name_any() != name && selectors.iter().any(|selector| selector.matches(&labels)) {
            sources.insert(other.name_any(), other.as_ref());
        }
    }
    let mut rules: Vec<PolicyRule> = Vec::new();
    for source in sources.values() {
        for rule in source.rules.iter().flatten() {
            if !rules.contains(rule) {
                rules.push(rule.clone());
            }
        }
    }
    Some(rules)
}

pub async fn reconcile(role: Arc<ClusterRole>, context: Arc<Context>) -> Result<Action> {
    let all = context.roles.state();
    let Some(rules) = aggregated(&role, &all) else {
        return Ok(Action::await_change());
    };
    if role.rules.clone().unwrap_or_default() == rules {
        return Ok(Action::await_change());
    }
    Api::<ClusterRole>::all(context.client.clone())
        .patch(
            &role.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"rules": rules})),
        )
        .await?;
    tracing::debug!(role = %role.name_any(), rules = rules.len(), "aggregated a ClusterRole");
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::rbac::v1::AggregationRule;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

    fn role(name: &str, labels: &[(&str, &str)], verbs: &[&str]) -> Arc<ClusterRole> {
        Arc::new(ClusterRole {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            rules: Some(vec![PolicyRule {
                verbs: verbs.iter().map(|v| v.to_string()).collect(),
                api_groups: Some(vec![String::new()]),
                resources: Some(vec!["pods".into()]),
                ..PolicyRule::default()
            }]),
            aggregation_rule: None,
        })
    }

    #[test]
    fn an_aggregating_role_holds_its_sources_rules_once_in_name_order() {
        let mut view = (*role("view", &[], &[])).clone();
        view.rules = None;
        view.aggregation_rule = Some(AggregationRule {
            cluster_role_selectors: Some(vec![LabelSelector {
                match_labels: Some([("to-view".to_string(), "true".to_string())].into()),
                ..LabelSelector::default()
            }]),
        });
        let all = vec![
            Arc::new(view.clone()),
            role("z-crd-viewer", &[("to-view", "true")], &["watch"]),
            role("a-pods", &[("to-view", "true")], &["get"]),
            role("a-twin", &[("to-view", "true")], &["get"]),
            role("unrelated", &[("to-edit", "true")], &["delete"]),
        ];
        let rules = aggregated(&view, &all).expect("aggregates");
        let verbs: Vec<&str> = rules.iter().map(|rule| rule.verbs[0].as_str()).collect();
        assert_eq!(verbs, vec!["get", "watch"]);
        assert!(aggregated(&all[1], &all).is_none());
    }
}
