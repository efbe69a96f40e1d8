//! VolumeBinding case by case: which nodes a pod's claims allow, and what Reserve plans.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use super::*;
use crate::cache::Snapshot;
use crate::framework::Code;
use crate::node_info::PodInfo;
use crate::volumes::{ListedVolumes, Volumes};

fn node(name: &str) -> NodeInfo {
    NodeInfo::new(Arc::new(
        serde_json::from_value(json!({"metadata": {"name": name,
            "labels": {"kubernetes.io/hostname": name}}}))
        .expect("node"),
    ))
}

fn pinned(name: &str, to: &str, extra: Value) -> Value {
    let mut volume = json!({"metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local", "hostPath": {"path": "/x"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [to]}]}]}}},
        "status": {"phase": "Available"}});
    if let (Some(target), Value::Object(extra)) = (volume["spec"].as_object_mut(), extra) {
        target.extend(extra);
    }
    volume
}

fn claim(name: &str, class: &str, extra: Value) -> Value {
    let mut claim = json!({"metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
            "resources": {"requests": {"storage": "1Gi"}}}});
    if let Value::Object(extra) = extra {
        for (key, value) in extra {
            if let (Some(target), Value::Object(more)) = (claim[&key].as_object_mut(), value) {
                target.extend(more);
            }
        }
    }
    claim
}

fn class(name: &str, mode: &str, provisioner: &str) -> Value {
    json!({"metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": mode})
}

struct World {
    volumes: Volumes,
}

impl World {
    fn new(claims: Vec<Value>, volumes: Vec<Value>, classes: Vec<Value>) -> Self {
        let listed = ListedVolumes::default();
        *listed.claims.lock().expect("claims") = claims
            .into_iter()
            .map(|c| Arc::new(serde_json::from_value(c).expect("claim")))
            .collect();
        *listed.volumes.lock().expect("volumes") = volumes
            .into_iter()
            .map(|v| Arc::new(serde_json::from_value(v).expect("volume")))
            .collect();
        *listed.classes.lock().expect("classes") = classes
            .into_iter()
            .map(|c| Arc::new(serde_json::from_value(c).expect("class")))
            .collect();
        Self {
            volumes: Volumes::new(Arc::new(listed)),
        }
    }

    /// Runs `check` with a cycle's context for `pod` and its PreFilter answer.
    fn cycle<R>(&self, pod: &PodInfo, check: impl FnOnce(&Ctx, CycleState, Status) -> R) -> R {
        let snapshot = Snapshot::default();
        let labels = |_: &str| BTreeMap::new();
        let ctx = Ctx {
            pod,
            snapshot: &snapshot,
            namespace_labels: &labels,
            volumes: &self.volumes,
            workloads: &crate::workloads::ListedWorkloads::default(),
        };
        let mut state = CycleState::default();
        let pre = VolumeBinding.pre_filter(&mut state, &ctx);
        check(&ctx, state, pre)
    }

    /// PreFilter's code and reasons, then each node's filter answer.
    fn run(&self, pod: &PodInfo, nodes: &[&str]) -> (Code, Vec<String>, Vec<(String, Code)>) {
        self.cycle(pod, |ctx, state, pre| {
            let filtered = nodes
                .iter()
                .map(|n| {
                    (
                        n.to_string(),
                        VolumeBinding.filter(&state, ctx, &node(n)).code,
                    )
                })
                .collect();
            (pre.code, pre.reasons, filtered)
        })
    }

    fn reserve(&self, pod: &PodInfo, on: &str) -> Vec<PreBindAction> {
        self.cycle(pod, |ctx, state, pre| {
            assert!(pre.is_success());
            VolumeBinding
                .reserve(&state, ctx, &node(on))
                .expect("reserved")
        })
    }
}

fn pod(name: &str, claims: &[&str]) -> PodInfo {
    let volumes: Vec<Value> = claims
        .iter()
        .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    PodInfo::new(Arc::new(
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {"containers": [{"name": "c", "image": "i"}], "volumes": volumes}}),
        )
        .expect("pod"),
    ))
}

#[test]
fn claims_decide_where_a_pod_may_go() {
    let wffc = class(
        "local",
        "WaitForFirstConsumer",
        "kubernetes.io/no-provisioner",
    );
    let provisioned = class(
        "local-path",
        "WaitForFirstConsumer",
        "rudder.dev/local-path",
    );
    let immediate = class("fast", "Immediate", "example.com/fast");
    let success = Code::Success;
    let unresolvable = Code::UnschedulableAndUnresolvable;
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, World, Vec<&str>, Code, Vec<(&str, Code)>)> = vec![
        (
            "no claims: skipped",
            World::new(vec![], vec![], vec![]),
            vec![],
            Code::Skip,
            vec![("n1", success)],
        ),
        (
            "a missing claim is unresolvable",
            World::new(vec![], vec![], vec![]),
            vec!["data"],
            unresolvable,
            vec![],
        ),
        (
            "an unbound immediate claim waits for the binder",
            World::new(
                vec![claim("data", "fast", json!({}))],
                vec![],
                vec![immediate.clone()],
            ),
            vec!["data"],
            unresolvable,
            vec![],
        ),
        (
            "a bound claim: only where its volume may be used",
            World::new(
                vec![claim(
                    "data",
                    "local",
                    json!({"spec": {"volumeName": "pv1"}}),
                )],
                vec![pinned("pv1", "n2", json!({}))],
                vec![wffc.clone()],
            ),
            vec!["data"],
            success,
            vec![("n1", unresolvable), ("n2", success)],
        ),
        (
            "a delayed claim: where a free volume fits",
            World::new(
                vec![claim("data", "local", json!({}))],
                vec![
                    pinned("pv1", "n1", json!({})),
                    pinned("small", "n2", json!({"capacity": {"storage": "1Mi"}})),
                ],
                vec![wffc.clone()],
            ),
            vec!["data"],
            success,
            vec![("n1", success), ("n2", unresolvable)],
        ),
        (
            "two claims need two volumes on the node",
            World::new(
                vec![
                    claim("a", "local", json!({})),
                    claim("b", "local", json!({})),
                ],
                vec![
                    pinned("pv1", "n1", json!({})),
                    pinned("pv2", "n1", json!({})),
                    pinned("pv3", "n2", json!({})),
                ],
                vec![wffc.clone()],
            ),
            vec!["a", "b"],
            success,
            vec![("n1", success), ("n2", unresolvable)],
        ),
        (
            "a provisioner can create the volume anywhere",
            World::new(
                vec![claim("data", "local-path", json!({}))],
                vec![],
                vec![provisioned.clone()],
            ),
            vec!["data"],
            success,
            vec![("n1", success), ("n2", success)],
        ),
        (
            "a claim sent to a node for provisioning keeps to it",
            World::new(
                vec![claim(
                    "data",
                    "local-path",
                    json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "n2"}}}),
                )],
                vec![],
                vec![provisioned.clone()],
            ),
            vec!["data"],
            success,
            vec![("n1", unresolvable), ("n2", success)],
        ),
    ];
    for (what, world, claims, pre, nodes) in cases {
        let pod = pod("p", &claims);
        let (code, reasons, filtered) = world.run(&pod, &["n1", "n2"]);
        assert_eq!(code, pre, "{what}: {reasons:?}");
        if code != Code::Success && code != Code::Skip {
            continue;
        }
        for (node, wanted) in nodes {
            let got = filtered.iter().find(|(n, _)| n == node).map(|(_, c)| *c);
            assert_eq!(got, Some(wanted), "{what} on {node}");
        }
    }
}

#[test]
fn messages_are_upstreams() {
    let world = World::new(
        vec![claim("data", "fast", json!({}))],
        vec![],
        vec![class("fast", "Immediate", "example.com/fast")],
    );
    let (_, reasons, _) = world.run(&pod("p", &["data"]), &[]);
    assert_eq!(reasons, [UNBOUND_IMMEDIATE]);
    let world = World::new(vec![], vec![], vec![]);
    let (_, reasons, _) = world.run(&pod("p", &["gone"]), &[]);
    assert_eq!(reasons, ["persistentvolumeclaim \"gone\" not found"]);
}

#[test]
fn reserve_binds_free_volumes_and_selects_the_node_for_provisioning() {
    let world = World::new(
        vec![
            claim("static", "local", json!({})),
            claim("dynamic", "local-path", json!({})),
        ],
        vec![pinned("pv1", "n1", json!({}))],
        vec![
            class(
                "local",
                "WaitForFirstConsumer",
                "kubernetes.io/no-provisioner",
            ),
            class(
                "local-path",
                "WaitForFirstConsumer",
                "rudder.dev/local-path",
            ),
        ],
    );
    let first = pod("first", &["static", "dynamic"]);
    let actions = world.reserve(&first, "n1");
    assert_eq!(
        actions,
        vec![
            PreBindAction::BindVolume {
                volume: "pv1".into(),
                namespace: "default".into(),
                claim: "static".into(),
                uid: "uid-static".into(),
            },
            PreBindAction::WaitBound {
                namespace: "default".into(),
                claim: "static".into()
            },
            PreBindAction::SelectNode {
                namespace: "default".into(),
                claim: "dynamic".into(),
                node: "n1".into(),
            },
            PreBindAction::WaitBound {
                namespace: "default".into(),
                claim: "dynamic".into()
            },
        ]
    );
    // pv1 is promised: another claim cannot have it until the promise is dropped.
    assert!(world.volumes.taken("pv1", "default/other"));
    assert!(!world.volumes.taken("pv1", "default/static"));
    world.volumes.forget(&["default/static".to_string()]);
    assert!(!world.volumes.taken("pv1", "default/other"));
}
