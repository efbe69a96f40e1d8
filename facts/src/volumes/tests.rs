//! Which volume a claim gets, case by case.

use super::*;
use serde_json::{json, Value};

fn volume(name: &str, size: &str, extra: Value) -> PersistentVolume {
    let mut object = json!({
        "metadata": {"name": name, "labels": {"tier": "fast"}},
        "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": "manual", "hostPath": {"path": "/x"}},
        "status": {"phase": "Available"},
    });
    merge(&mut object, extra);
    serde_json::from_value(object).expect("volume")
}

fn claim(extra: Value) -> PersistentVolumeClaim {
    let mut object = json!({
        "metadata": {"name": "data", "namespace": "default", "uid": "u1"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "manual",
            "resources": {"requests": {"storage": "1Gi"}}},
    });
    merge(&mut object, extra);
    serde_json::from_value(object).expect("claim")
}

fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(target.entry(key).or_insert(Value::Null), value);
            }
        }
        (target, patch) => *target = patch,
    }
}

fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
}

fn node(name: &str) -> Node {
    serde_json::from_value(json!({"metadata": {"name": name,
        "labels": {"kubernetes.io/hostname": name}}}))
    .expect("node")
}

fn pinned(to: &str) -> Value {
    json!({"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [to]}]}]}}}})
}

#[test]
fn the_smallest_volume_that_satisfies_the_claim_is_chosen() {
    let n1 = node("n1");
    let none = |_: &str| false;
    #[allow(clippy::type_complexity)]
    let cases: Vec<(
        &str,
        Vec<PersistentVolume>,
        PersistentVolumeClaim,
        Option<&Node>,
        Option<&str>,
    )> = vec![
        (
            "smallest of those large enough",
            vec![
                volume("big", "10Gi", json!({})),
                volume("small", "512Mi", json!({})),
                volume("right", "2Gi", json!({})),
            ],
            claim(json!({})),
            None,
            Some("right"),
        ),
        (
            "another class does not match",
            vec![volume(
                "other",
                "5Gi",
                json!({"spec": {"storageClassName": "slow"}}),
            )],
            claim(json!({})),
            None,
            None,
        ),
        (
            "access modes must all be offered",
            vec![volume("rwo", "5Gi", json!({}))],
            claim(json!({"spec": {"accessModes": ["ReadWriteMany"]}})),
            None,
            None,
        ),
        (
            "a block claim does not take a filesystem volume",
            vec![volume("fs", "5Gi", json!({}))],
            claim(json!({"spec": {"volumeMode": "Block"}})),
            None,
            None,
        ),
        (
            "the selector picks by label",
            vec![volume("fast", "5Gi", json!({}))],
            claim(json!({"spec": {"selector": {"matchLabels": {"tier": "slow"}}}})),
            None,
            None,
        ),
        (
            "bound or released volumes are not available",
            vec![
                volume(
                    "bound",
                    "5Gi",
                    json!({"spec": {"claimRef": {"name": "x", "namespace": "default"}}}),
                ),
                volume("released", "5Gi", json!({"status": {"phase": "Released"}})),
            ],
            claim(json!({})),
            None,
            None,
        ),
        (
            "a volume pre-bound to the claim wins even if larger",
            vec![
                volume("small", "1Gi", json!({})),
                volume(
                    "mine",
                    "9Gi",
                    json!({"spec": {"claimRef": {"name": "data", "namespace": "default"}}}),
                ),
            ],
            claim(json!({})),
            None,
            Some("mine"),
        ),
        (
            "a pre-bound volume for a recreated claim (other uid) is not ours",
            vec![volume(
                "old",
                "9Gi",
                json!({"spec": {"claimRef": {"name": "data", "namespace": "default", "uid": "u0"}}}),
            )],
            claim(json!({})),
            None,
            None,
        ),
        (
            "on a node: only volumes whose affinity allows it",
            vec![
                volume("elsewhere", "1Gi", pinned("n2")),
                volume("here", "5Gi", pinned("n1")),
            ],
            claim(json!({})),
            Some(&n1),
            Some("here"),
        ),
    ];
    for (what, volumes, claim, node, wanted) in cases {
        let search = Search {
            node,
            pre_bound_only: false,
            taken: &none,
            selects: &selects,
        };
        let found = find_match(&volumes, &claim, &search).and_then(|v| v.metadata.name.as_deref());
        assert_eq!(found, wanted, "{what}");
    }
}

#[test]
fn taken_and_not_pre_bound_volumes_are_skipped_when_asked() {
    let volumes = vec![volume("a", "1Gi", json!({})), volume("b", "2Gi", json!({}))];
    let taken = |name: &str| name == "a";
    let search = Search {
        node: None,
        pre_bound_only: false,
        taken: &taken,
        selects: &selects,
    };
    let found = find_match(&volumes, &claim(json!({})), &search);
    assert_eq!(found.and_then(|v| v.metadata.name.as_deref()), Some("b"));
    let only_pre_bound = Search {
        pre_bound_only: true,
        ..search
    };
    assert!(find_match(&volumes, &claim(json!({})), &only_pre_bound).is_none());
}

#[test]
fn mismatches_say_why() {
    let claim = claim(json!({"spec": {"resources": {"requests": {"storage": "3Gi"}}}}));
    assert_eq!(
        satisfies(&volume("v", "1Gi", json!({})), &claim, &selects),
        Err(Mismatch::Capacity)
    );
    assert_eq!(
        satisfies(&volume("v", "5Gi", json!({})), &claim, &selects),
        Ok(())
    );
    assert_eq!(claim_class(&claim), "manual");
    assert!(node_allows(&volume("v", "1Gi", pinned("n1")), &node("n1")));
    assert!(!node_allows(&volume("v", "1Gi", pinned("n1")), &node("n2")));
    assert!(node_allows(&volume("v", "1Gi", json!({})), &node("n2")));
}
