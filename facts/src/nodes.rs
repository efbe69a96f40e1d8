//! Whether a pod may go to a node, as far as labels, affinity and taints say (what the
//! DaemonSet controller and the scheduler both ask): `nodeSelector`, required node affinity
//! (terms ORed, expressions ANDed, with In/NotIn/Exists/DoesNotExist/Gt/Lt and
//! `metadata.name` fields), and whether the pod tolerates the node's taints.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Taint, Toleration,
};

fn requirement_holds(requirement: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = requirement.values.as_deref().unwrap_or_default();
    match requirement.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|w| w == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|w| w == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(value), Some(bound)) = (
                value.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|v| v.parse::<i64>().ok()),
            ) else {
                return false;
            };
            if requirement.operator == "Gt" {
                value > bound
            } else {
                value < bound
            }
        }
        _ => false,
    }
}

fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        // An empty term matches nothing.
        return false;
    }
    expressions
        .iter()
        .all(|r| requirement_holds(r, labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| {
            let value = (r.key == "metadata.name").then_some(name);
            requirement_holds(r, value)
        })
}

/// Whether `node` satisfies one node-selector term (the scheduler's preferred-affinity terms).
pub fn term_matches_node(term: &NodeSelectorTerm, node: &Node) -> bool {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    term_matches(
        term,
        labels,
        node.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// Whether `node` satisfies the pod's `nodeSelector` and required node affinity.
pub fn node_matches(pod: &PodSpec, node: &Node) -> bool {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let selector_ok = pod
        .node_selector
        .as_ref()
        .is_none_or(|selector| selector.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let required = pod
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    let affinity_ok = required.is_none_or(|selector| {
        selector
            .node_selector_terms
            .iter()
            .any(|term| term_matches(term, labels, name))
    });
    selector_ok && affinity_ok
}

/// Whether `toleration` tolerates `taint`.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect_ok = toleration
        .effect
        .as_deref()
        .is_none_or(|effect| effect.is_empty() || effect == taint.effect);
    let key = toleration.key.as_deref().unwrap_or_default();
    let operator = toleration.operator.as_deref().unwrap_or("Equal");
    if key.is_empty() {
        // An empty key with Exists tolerates everything (of the effect).
        return effect_ok && operator == "Exists";
    }
    let key_ok = key == taint.key;
    let value_ok = match operator {
        "Exists" => true,
        _ => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
    };
    effect_ok && key_ok && value_ok
}

/// The node's taints with `NoSchedule` or `NoExecute` that none of `tolerations` tolerates.
pub fn untolerated<'a>(node: &'a Node, tolerations: &[Toleration]) -> Vec<&'a Taint> {
    node.spec
        .as_ref()
        .and_then(|spec| spec.taints.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|taint| taint.effect == "NoSchedule" || taint.effect == "NoExecute")
        .filter(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
        .collect()
}

/// Whether the node's `Ready` condition is `True`.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Affinity, NodeAffinity, NodeSelector, NodeSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(name: &str, labels: &[(&str, &str)], taints: Vec<Taint>) -> Node {
        Node {
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
            spec: Some(NodeSpec {
                taints: Some(taints),
                ..NodeSpec::default()
            }),
            status: None,
        }
    }

    fn requirement(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn affinity(terms: Vec<NodeSelectorTerm>) -> PodSpec {
        PodSpec {
            affinity: Some(Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                        node_selector_terms: terms,
                    }),
                    ..NodeAffinity::default()
                }),
                ..Affinity::default()
            }),
            ..PodSpec::default()
        }
    }

    #[test]
    fn selectors_and_required_affinity_decide_which_nodes_match() {
        let gpu = node("a", &[("gpu", "yes"), ("cores", "16")], vec![]);
        let plain = node("b", &[("cores", "4")], vec![]);
        let wants_gpu = PodSpec {
            node_selector: Some([("gpu".to_string(), "yes".to_string())].into()),
            ..PodSpec::default()
        };
        assert!(node_matches(&wants_gpu, &gpu) && !node_matches(&wants_gpu, &plain));
        let big = affinity(vec![NodeSelectorTerm {
            match_expressions: Some(vec![requirement("cores", "Gt", &["8"])]),
            match_fields: None,
        }]);
        assert!(node_matches(&big, &gpu) && !node_matches(&big, &plain));
        let by_name = affinity(vec![NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![requirement("metadata.name", "In", &["b"])]),
        }]);
        assert!(!node_matches(&by_name, &gpu) && node_matches(&by_name, &plain));
        let either = affinity(vec![
            NodeSelectorTerm {
                match_expressions: Some(vec![requirement("gpu", "Exists", &[])]),
                match_fields: None,
            },
            NodeSelectorTerm {
                match_expressions: Some(vec![requirement("cores", "In", &["4"])]),
                match_fields: None,
            },
        ]);
        assert!(node_matches(&either, &gpu) && node_matches(&either, &plain));
    }

    #[test]
    fn tolerations_match_taints_by_key_value_and_effect() {
        let taint = Taint {
            key: "dedicated".into(),
            value: Some("db".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        };
        let tainted = node("a", &[], vec![taint.clone()]);
        let equal = Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("db".into()),
            effect: Some("NoSchedule".into()),
            toleration_seconds: None,
        };
        assert!(untolerated(&tainted, &[equal]).is_empty());
        let wrong_value = Toleration {
            key: Some("dedicated".into()),
            value: Some("web".into()),
            ..Toleration::default()
        };
        assert_eq!(untolerated(&tainted, &[wrong_value]).len(), 1);
        let everything = Toleration {
            operator: Some("Exists".into()),
            ..Toleration::default()
        };
        assert!(tolerates(&everything, &taint));
    }
}
