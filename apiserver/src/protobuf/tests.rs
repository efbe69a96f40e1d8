//! Tests against the bodies real kubectl 1.33 sends, plus round trips and malformed input.

use serde_json::{json, Value as Json};

use super::*;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kubectl-protobuf");

const VECTORS: &[&str] = &[
    "clusterrole",
    "configmap",
    "cronjob",
    "deployment",
    "ingress",
    "job",
    "namespace",
    "pdb",
    "priorityclass",
    "quota",
    "role",
    "rolebinding",
    "secret",
    "selfsubjectaccessreview",
    "service",
    "serviceaccount",
];

fn vector(name: &str) -> (Vec<u8>, Json) {
    let pb = std::fs::read(format!("{DATA}/{name}.pb")).unwrap();
    let text = std::fs::read_to_string(format!("{DATA}/{name}.json")).unwrap();
    let mut expected: Json = serde_json::from_str(&text).unwrap();
    // Known testdata quirk: the captured job/cronjob bodies came from a command line whose
    // `-- echo hi` swallowed the `--dry-run=client -o json` flags, so kubectl sent them as
    // container arguments; the JSON twins were printed without them.
    let pod_spec = match name {
        "job" => expected.pointer_mut("/spec/template/spec"),
        "cronjob" => expected.pointer_mut("/spec/jobTemplate/spec/template/spec"),
        _ => None,
    };
    if let Some(command) = pod_spec.and_then(|s| s.pointer_mut("/containers/0/command")) {
        let extra = ["--dry-run=client", "-o", "json"].map(|a| json!(a));
        command.as_array_mut().unwrap().extend(extra);
    }
    if name == "selfsubjectaccessreview" {
        // The hand-written twin leaves out what Go always prints: the zero creationTimestamp and
        // `status.allowed` (no omitempty) of the empty status kubectl sends.
        expected["status"] = json!({"allowed": false});
        expected["metadata"] = json!({"creationTimestamp": null});
    }
    (pb, expected)
}

/// The testdata README's equivalence: empty strings, empty lists and null count as absent.
fn normalize(value: &Json) -> Json {
    match value {
        Json::Object(map) => Json::Object(
            map.iter()
                .filter(|(_, v)| !matches!(v, Json::Null) && *v != "" && *v != &json!([]))
                .map(|(k, v)| (k.clone(), normalize(v)))
                .collect(),
        ),
        Json::Array(items) => Json::Array(items.iter().map(normalize).collect()),
        other => other.clone(),
    }
}

#[test]
fn kubectl_bodies_decode_to_their_json_twins() {
    let dir: Vec<_> = std::fs::read_dir(DATA)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let pbs = dir
        .iter()
        .filter(|n| n.to_string_lossy().ends_with(".pb"))
        .count();
    assert_eq!(pbs, VECTORS.len(), "every .pb in {DATA} is listed");
    for name in VECTORS {
        let (pb, expected) = vector(name);
        let got = decode(&pb).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Exact, not just modulo the README's empty-means-absent rule.
        assert_eq!(got, expected, "{name}");
    }
}

#[test]
fn kubectl_bodies_round_trip() {
    for name in VECTORS {
        let (pb, expected) = vector(name);
        let decoded = decode(&pb).unwrap();
        let again = decode(&encode(&decoded).unwrap()).unwrap();
        assert_eq!(again, decoded, "{name}");
        let from_twin = decode(&encode(&expected).unwrap()).unwrap();
        assert_eq!(
            normalize(&from_twin),
            normalize(&expected),
            "{name} from JSON"
        );
    }
}

#[test]
fn special_types_round_trip() {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "default",
            "uid": "1234",
            "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2024-05-06T07:08:09Z",
            "deletionTimestamp": "2024-05-06T08:00:00Z",
            "deletionGracePeriodSeconds": 0,
            "labels": {"a": "b"},
            "managedFields": [{
                "manager": "kubectl",
                "operation": "Apply",
                "apiVersion": "v1",
                "time": "2024-05-06T07:08:09Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:a": {}}}}
            }]
        },
        "spec": {
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "c",
                "image": "busybox",
                "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}},
                "livenessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 5},
                "securityContext": {"privileged": false, "runAsUser": 0}
            }],
            "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Mi"}}]
        },
        "status": {"phase": "Running", "startTime": "2024-05-06T07:08:10Z"}
    });
    let bytes = encode(&pod).unwrap();
    assert!(bytes.starts_with(b"k8s\0"));
    assert_eq!(decode(&bytes).unwrap(), pod);
}

#[test]
fn micro_time_bytes_and_raw_extension() {
    let event = json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "e", "creationTimestamp": null},
        "eventTime": "2024-05-06T07:08:09.123456Z",
        "reportingController": "x",
        "reportingInstance": "y",
        "action": "A",
        "reason": "R",
        "regarding": {"kind": "Pod", "name": "p"}
    });
    assert_eq!(decode(&encode(&event).unwrap()).unwrap(), event);
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"creationTimestamp": null},
        "data": {"k": "AAEC/w=="}, "type": "Opaque"
    });
    assert_eq!(decode(&encode(&secret).unwrap()).unwrap(), secret);
    let revision = json!({
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": "r", "creationTimestamp": null},
        "data": {"spec": {"replicas": 1}}, "revision": 2
    });
    assert_eq!(decode(&encode(&revision).unwrap()).unwrap(), revision);
    let list = json!({
        "apiVersion": "v1", "kind": "List", "metadata": {},
        "items": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}]
    });
    let bytes = encode(&list).unwrap();
    assert_eq!(decode(&bytes).unwrap(), list);
    // The item travels as a nested protobuf body, not as JSON text.
    assert_eq!(bytes.windows(4).filter(|w| w == b"k8s\0").count(), 2);
    let watch = json!({
        "apiVersion": "meta.k8s.io/v1", "kind": "WatchEvent", "type": "ADDED",
        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    });
    assert_eq!(decode(&encode(&watch).unwrap()).unwrap(), watch);
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "metadata": {"creationTimestamp": null},
        "spec": {
            "user": "u",
            "extra": {"scopes": ["a", "b"]},
            "nonResourceAttributes": {"path": "/x", "verb": "get"}
        },
        "status": {"allowed": true, "reason": "ok"}
    });
    assert_eq!(decode(&encode(&review).unwrap()).unwrap(), review);
}

#[test]
fn delete_options_status_scale_and_lists() {
    for api_version in ["meta.k8s.io/v1", "v1", "apps/v1"] {
        let opts = json!({
            "apiVersion": api_version, "kind": "DeleteOptions",
            "gracePeriodSeconds": 0, "propagationPolicy": "Background", "dryRun": ["All"]
        });
        assert!(knows(api_version, "DeleteOptions"));
        assert_eq!(decode(&encode(&opts).unwrap()).unwrap(), opts);
    }
    let status = json!({
        "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
        "message": "pods \"x\" not found", "reason": "NotFound",
        "details": {"name": "x", "kind": "pods"}, "code": 404
    });
    assert_eq!(decode(&encode(&status).unwrap()).unwrap(), status);
    let scale = json!({
        "apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": "web", "namespace": "default", "creationTimestamp": null},
        "spec": {}, "status": {"replicas": 2, "selector": "app=web"}
    });
    assert_eq!(decode(&encode(&scale).unwrap()).unwrap(), scale);
    let pods = json!({
        "apiVersion": "v1", "kind": "PodList",
        "metadata": {"resourceVersion": "7", "continue": "abc"},
        "items": [{"metadata": {"name": "a", "creationTimestamp": null}, "spec": {}, "status": {}}]
    });
    assert_eq!(decode(&encode(&pods).unwrap()).unwrap(), pods);
}

#[test]
fn knows_served_groups() {
    for (v, k) in [
        ("v1", "Pod"),
        ("v1", "NamespaceList"),
        ("apps/v1", "Deployment"),
        ("batch/v1", "CronJob"),
        ("coordination.k8s.io/v1", "Lease"),
        ("discovery.k8s.io/v1", "EndpointSlice"),
        ("events.k8s.io/v1", "Event"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        ("policy/v1", "Eviction"),
        ("storage.k8s.io/v1", "StorageClass"),
        ("scheduling.k8s.io/v1", "PriorityClass"),
        ("authorization.k8s.io/v1", "SubjectAccessReview"),
        ("authentication.k8s.io/v1", "TokenReview"),
        ("autoscaling/v1", "Scale"),
        ("meta.k8s.io/v1", "Status"),
        ("meta.k8s.io/v1", "PartialObjectMetadataList"),
    ] {
        assert!(knows(v, k), "{v} {k}");
    }
    for (v, k) in [
        ("v1", "PodSpec"),
        ("v1", "Nope"),
        ("example.com/v1", "Widget"),
        ("meta.k8s.io/v1", "Table"),
        ("apps/v2", "Deployment"),
        ("", "Pod"),
    ] {
        assert!(!knows(v, k), "{v} {k}");
    }
}

#[test]
fn malformed_bodies_are_errors() {
    let (pb, _) = vector("deployment");
    assert!(matches!(
        decode(b"{\"kind\":\"Pod\"}"),
        Err(ProtobufError::MissingMagic)
    ));
    assert!(matches!(decode(b""), Err(ProtobufError::MissingMagic)));
    assert!(matches!(
        decode(b"k8s\0"),
        Err(ProtobufError::MissingTypeMeta)
    ));
    for len in 4..pb.len() {
        // Any prefix is an error or (where a field boundary happens to fit) a value; never a panic.
        let _ = decode(&pb[..len]);
    }
    assert!(decode(&pb[..pb.len() - 3]).is_err());
    let mut garbage = b"k8s\0".to_vec();
    garbage.extend_from_slice(&[0xff; 16]);
    assert!(matches!(decode(&garbage), Err(ProtobufError::Malformed(_))));
    let unknown = encode(&json!({"apiVersion": "v1", "kind": "ConfigMap"})).unwrap();
    let swapped: Vec<u8> = String::from_utf8_lossy(&unknown)
        .replace("ConfigMap", "Frobnicat")
        .into();
    let err = decode(&swapped).unwrap_err();
    assert!(matches!(err, ProtobufError::UnknownKind { .. }), "{err}");
    assert_eq!(err.http_status(), 415);
    assert!(err.to_string().contains("Frobnicat"));
}

#[test]
fn bad_json_is_an_error_with_a_path() {
    assert!(matches!(
        encode(&json!({"kind": "Pod"})),
        Err(ProtobufError::MissingTypeMeta)
    ));
    assert!(matches!(
        encode(&json!({"apiVersion": "x.io/v1", "kind": "Widget"})),
        Err(ProtobufError::UnknownKind { .. })
    ));
    let bad = json!({"apiVersion": "v1", "kind": "Pod",
        "spec": {"containers": [{"name": "c", "ports": [{"containerPort": "eighty"}]}]}});
    let err = encode(&bad).unwrap_err();
    assert_eq!(err.http_status(), 400);
    assert!(
        err.to_string()
            .contains("spec.containers[0].ports[0].containerPort"),
        "{err}"
    );
    let bad_time = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"creationTimestamp": "yesterday"}});
    assert!(encode(&bad_time).is_err());
    let bad_secret = json!({"apiVersion": "v1", "kind": "Secret", "data": {"k": "not base64!"}});
    assert!(encode(&bad_secret).is_err());
}

#[test]
fn corrupted_bodies_never_panic() {
    for name in VECTORS {
        let (pb, _) = vector(name);
        for i in 0..pb.len() {
            for byte in [0x00, 0x7f, 0x80, 0xff, pb[i] ^ 0x08] {
                let mut bad = pb.clone();
                bad[i] = byte;
                if let Ok(json) = decode(&bad) {
                    // Whatever still parses must survive the trip back (or fail cleanly).
                    let _ = encode(&json).map(|b| decode(&b));
                }
            }
        }
    }
}

#[test]
fn a_list_assembled_from_its_items_messages_is_the_list_encoded_whole() {
    let items = [
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "a", "namespace": "default", "creationTimestamp": null},
               "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}),
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "b", "namespace": "default", "creationTimestamp": null},
               "spec": {}, "status": {}}),
    ];
    let meta = json!({"resourceVersion": "9", "continue": "next", "remainingItemCount": 3});
    let messages: Vec<Bytes> = items
        .iter()
        .map(|item| encode_object(item).unwrap().message())
        .collect();
    let parts = list_parts("v1", "PodList", &meta, messages.clone()).unwrap();
    // Head, then each item's key and its message — the message itself, not a copy — then
    // the tail.
    assert_eq!(parts.len(), 2 + 2 * messages.len());
    assert_eq!(parts[2].as_ptr(), messages[0].as_ptr());
    assert_eq!(parts[4].as_ptr(), messages[1].as_ptr());
    let assembled = encode_list("v1", "PodList", &meta, messages).unwrap();
    assert_eq!(assembled, parts.concat());
    let whole = json!({"apiVersion": "v1", "kind": "PodList", "metadata": meta,
                       "items": items.iter().map(|item| {
                           let mut item = item.clone();
                           let fields = item.as_object_mut().unwrap();
                           fields.remove("apiVersion");
                           fields.remove("kind");
                           item
                       }).collect::<Vec<_>>()});
    assert_eq!(assembled, encode(&whole).unwrap());
    assert_eq!(decode(&assembled).unwrap(), whole);
    // An object's body is its envelope around the message.
    let one = encode_object(&items[0]).unwrap();
    assert_eq!(one.enveloped.to_vec(), encode(&items[0]).unwrap());
    assert!(one.enveloped.ends_with(&[0x1a, 0, 0x22, 0]));
}

#[test]
fn a_watch_frame_is_a_length_and_a_bare_watch_event() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "a", "resourceVersion": "5", "creationTimestamp": null},
                     "spec": {}, "status": {}});
    let body = encode(&pod).unwrap();
    let frame = watch_frame("MODIFIED", &body);
    let length = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    assert_eq!(length, frame.len() - 4);
    let schema = schema::schema().unwrap();
    let event = DynamicMessage::decode(
        schema
            .message(&format!("{}.WatchEvent", schema::META))
            .unwrap(),
        &frame[4..],
    )
    .unwrap();
    let kind = event.get_field_by_name("type").unwrap();
    assert_eq!(kind.as_str(), Some("MODIFIED"));
    let object = event.get_field_by_name("object").unwrap();
    let raw = object
        .as_message()
        .and_then(|raw| raw.get_field_by_name("raw"))
        .and_then(|raw| raw.as_bytes().cloned())
        .unwrap();
    assert_eq!(raw.to_vec(), body);
    assert_eq!(decode(&raw).unwrap(), pod);
    // Read back, and not before the whole frame is there.
    let mut stream = frame.clone();
    stream.extend_from_slice(&watch_frame("DELETED", &body));
    let (kind, object, used) = decode_watch_frame(&stream).unwrap().unwrap();
    assert_eq!(
        (kind.as_str(), &object, used),
        ("MODIFIED", &pod, frame.len())
    );
    assert!(decode_watch_frame(&frame[..frame.len() - 1])
        .unwrap()
        .is_none());
    assert!(decode_watch_frame(&frame[..3]).unwrap().is_none());
    let (kind, _, _) = decode_watch_frame(&stream[used..]).unwrap().unwrap();
    assert_eq!(kind, "DELETED");
}
