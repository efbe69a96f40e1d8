//! Tests for the served kinds' selectable fields and supported-field checks.

use serde_json::json;

use super::*;

fn set_of(group: &str, kind: &str) -> &'static FieldSet {
    crate::catalog::by_kind(group, kind)
        .expect("a served kind")
        .strategy
        .fields()
}

fn fields_of(group: &str, kind: &str, obj: Value) -> BTreeMap<String, String> {
    selectable_fields(set_of(group, kind), &obj)
}

fn supported(group: &str, kind: &str, selector: &FieldSelector) -> Result<(), SelectorError> {
    check_supported(set_of(group, kind), selector)
}

fn pairs(m: &BTreeMap<String, String>) -> Vec<(&str, &str)> {
    m.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

#[test]
fn pods_expose_upstream_fields_with_defaults() {
    let pod = json!({
        "metadata": {"name": "web-1", "namespace": "default"},
        "spec": {"nodeName": "node1", "restartPolicy": "Always", "schedulerName": "default-scheduler",
                 "serviceAccountName": "sa", "hostNetwork": true},
        "status": {"phase": "Running", "podIP": "10.0.0.9",
                   "podIPs": [{"ip": "10.0.0.9"}, {"ip": "fd00::9"}], "nominatedNodeName": "n2"}
    });
    let got = fields_of("", "Pod", pod);
    assert_eq!(
        pairs(&got),
        vec![
            ("metadata.name", "web-1"),
            ("metadata.namespace", "default"),
            ("spec.host", "node1"),
            ("spec.hostNetwork", "true"),
            ("spec.nodeName", "node1"),
            ("spec.restartPolicy", "Always"),
            ("spec.schedulerName", "default-scheduler"),
            ("spec.serviceAccountName", "sa"),
            ("status.nominatedNodeName", "n2"),
            ("status.phase", "Running"),
            ("status.podIP", "10.0.0.9"),
        ]
    );

    let bare = fields_of(
        "",
        "Pod",
        json!({"metadata": {"name": "p", "namespace": "ns"}}),
    );
    assert_eq!(bare["spec.hostNetwork"], "false");
    assert_eq!(bare["spec.nodeName"], "");
    assert_eq!(bare["status.podIP"], "");
    assert!(!bare.contains_key("status.podIPs"));
}

#[test]
fn kinds_render_their_specific_fields_as_strings() {
    let cases = [
        (
            "",
            "Node",
            json!({"metadata": {"name": "n"}, "spec": {"unschedulable": true}}),
            "spec.unschedulable",
            "true",
        ),
        (
            "",
            "Node",
            json!({"metadata": {"name": "n"}}),
            "spec.unschedulable",
            "false",
        ),
        (
            "",
            "Namespace",
            json!({"metadata": {"name": "ns"}, "status": {"phase": "Active"}}),
            "status.phase",
            "Active",
        ),
        (
            "",
            "Namespace",
            json!({"metadata": {"name": "ns"}}),
            "name",
            "ns",
        ),
        (
            "",
            "Secret",
            json!({"metadata": {"name": "s"}, "type": "kubernetes.io/tls"}),
            "type",
            "kubernetes.io/tls",
        ),
        (
            "",
            "Service",
            json!({"spec": {"clusterIP": "None", "type": "ClusterIP"}}),
            "spec.clusterIP",
            "None",
        ),
        (
            "",
            "Service",
            json!({"spec": {"clusterIP": "None", "type": "ClusterIP"}}),
            "spec.type",
            "ClusterIP",
        ),
        (
            "",
            "ReplicationController",
            json!({"status": {"replicas": 3}}),
            "status.replicas",
            "3",
        ),
        (
            "apps",
            "ReplicaSet",
            json!({"status": {}}),
            "status.replicas",
            "0",
        ),
        (
            "batch",
            "Job",
            json!({"status": {"succeeded": 2}}),
            "status.successful",
            "2",
        ),
        ("batch", "Job", json!({}), "status.successful", "0"),
        (
            "apps",
            "Deployment",
            json!({"metadata": {"name": "d", "namespace": "ns"}}),
            "metadata.namespace",
            "ns",
        ),
    ];
    for (group, kind, obj, field, want) in cases {
        let got = fields_of(group, kind, obj);
        assert_eq!(
            got.get(field).map(String::as_str),
            Some(want),
            "{group}/{kind} {field}"
        );
        assert!(
            got.contains_key("metadata.name"),
            "{group}/{kind} always has metadata.name"
        );
    }
    let node = fields_of("", "Node", json!({"metadata": {"name": "n"}}));
    assert!(!node.contains_key("metadata.namespace"));
    let deploy = fields_of(
        "apps",
        "Deployment",
        json!({"metadata": {"name": "d", "namespace": "ns"}}),
    );
    assert_eq!(deploy.len(), 2);
}

#[test]
fn events_are_selectable_under_each_api_s_names() {
    let core_event = json!({
        "metadata": {"name": "e1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "x", "uid": "u-1",
                           "apiVersion": "v1", "resourceVersion": "7", "fieldPath": "spec.containers{c}"},
        "reason": "Scheduled", "type": "Normal", "source": {"component": "default-scheduler"},
        "reportingComponent": "default-scheduler"
    });
    let core = fields_of("", "Event", core_event.clone());
    assert_eq!(core["involvedObject.name"], "x");
    assert_eq!(core["involvedObject.uid"], "u-1");
    assert_eq!(core["involvedObject.fieldPath"], "spec.containers{c}");
    assert_eq!(core["reason"], "Scheduled");
    assert_eq!(core["source"], "default-scheduler");
    assert_eq!(core["reportingComponent"], "default-scheduler");
    assert_eq!(core.len(), 2 + 7 + 4);

    let v1 = fields_of("events.k8s.io", "Event", core_event);
    assert_eq!(v1["regarding.name"], "x");
    assert_eq!(v1["reportingController"], "default-scheduler");
    assert!(!v1.contains_key("involvedObject.name"));

    let new_style = json!({"metadata": {"name": "e2", "namespace": "ns"}, "regarding": {"name": "y"},
                           "reportingController": "kubelet", "type": "Warning"});
    let from_core = fields_of("", "Event", new_style.clone());
    assert_eq!(from_core["involvedObject.name"], "y");
    assert_eq!(from_core["source"], "kubelet");
    assert_eq!(
        fields_of("events.k8s.io", "Event", new_style)["source"],
        "kubelet"
    );

    // kubectl describe's query must select exactly this event.
    let sel = FieldSelector::parse(
        "involvedObject.name=x,involvedObject.namespace=default,involvedObject.uid=u-1",
    )
    .expect("parses");
    assert!(supported("", "Event", &sel).is_ok());
    assert!(sel.matches(&core));
}

#[test]
fn unsupported_fields_are_refused_with_each_kind_s_wording() {
    let cases = [
        ("", "Pod", "spec.nodeName=a,status.phase=Running,spec.host=a,status.podIPs=", None),
        ("", "Pod", "spec.containers=x", Some("field label not supported: spec.containers")),
        ("", "Node", "metadata.namespace=", Some("field label not supported: metadata.namespace")),
        ("", "Node", "spec.unschedulable=false", None),
        ("", "Namespace", "status.phase=Active,metadata.name=x", None),
        ("", "Namespace", "name=x", Some("field label not supported: name")),
        ("", "Secret", "type=Opaque", None),
        ("", "Service", "spec.clusterIP!=None", None),
        ("", "Event", "message=x", Some("field label not supported: message")),
        ("", "Event", "regarding.name=x", Some("field label not supported: regarding.name")),
        ("events.k8s.io", "Event", "regarding.name=x,reportingController=k", None),
        ("events.k8s.io", "Event", "involvedObject.name=x", Some("field label not supported: involvedObject.name")),
        ("batch", "Job", "status.successful=1", None),
        ("batch", "Job", "status.failed=1", Some("field label \"status.failed\" not supported for batchv1.Job")),
        ("apps", "ReplicaSet", "status.replicas=0", Some("\"status.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")),
        ("", "ConfigMap", "metadata.name=a,metadata.namespace=b", None),
        ("networking.k8s.io", "Ingress", "foo.bar=baz", Some("\"foo.bar\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")),
        ("", "ConfigMap", "=x", Some("\"\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")),
        ("", "Pod", "", None),
        ("", "Pod", "zzz=1,aaa=1", Some("field label not supported: aaa")),
    ];
    for (group, kind, selector, want) in cases {
        let sel = FieldSelector::parse(selector).expect("parses");
        let got = supported(group, kind, &sel).map_err(|e| e.to_string());
        assert_eq!(got.err().as_deref(), want, "{group}/{kind} {selector:?}");
    }
    let sel = FieldSelector::parse("spec.foo=1").expect("parses");
    match supported("", "Pod", &sel) {
        Err(SelectorError::UnsupportedField { field, .. }) => assert_eq!(field, "spec.foo"),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn odd_objects_yield_empty_fields_without_panicking() {
    for obj in [
        json!(null),
        json!([]),
        json!("x"),
        json!({"metadata": 5, "spec": []}),
    ] {
        for (group, kind) in [("", "Pod"), ("", "Event"), ("events.k8s.io", "Event")] {
            let got = fields_of(group, kind, obj.clone());
            assert_eq!(got["metadata.name"], "");
        }
        assert_eq!(selectable_fields(&METADATA_ONLY, &obj)["metadata.name"], "");
    }
}

#[test]
fn paths_expose_scalars_as_text_and_nothing_else() {
    static SET: FieldSet = FieldSet {
        accepted: &["metadata.name", "metadata.namespace", "spec.color"],
        refusal: Refusal::Plain,
        paths: &[
            "spec.color",
            "spec.size",
            "spec.enabled",
            "spec.nested.level",
            "spec.list",
        ],
        extract: nothing,
    };
    let fields = selectable_fields(
        &SET,
        &json!({"metadata": {"name": "s"},
                "spec": {"color": "blue", "size": 3, "enabled": false,
                         "nested": {"level": "deep"}, "list": ["a"]}}),
    );
    assert_eq!(
        pairs(&fields),
        [
            ("metadata.name", "s"),
            ("spec.color", "blue"),
            ("spec.enabled", "false"),
            ("spec.nested.level", "deep"),
            ("spec.size", "3"),
        ]
    );
    // Absent: not exposed, which a selector reads as "".
    let bare = selectable_fields(&SET, &json!({"metadata": {"name": "t"}}));
    assert_eq!(pairs(&bare), [("metadata.name", "t")]);
    let selector = FieldSelector::parse("spec.color=").expect("parses");
    assert!(selector.matches(&bare));
}
