//! CRD conversion by webhook with real kubectl: a CRD whose `v1` (storage: `spec.size`, a
//! string) and `v2` (`spec.replicas`, an integer) differ in shape, converted by a webhook
//! this test serves over HTTPS (trusted through the CRD's `caBundle`). Objects written in
//! either version are read in both — one at a time, as pages, and as watch events — a patch
//! through `v2` lands in the stored `v1`, and with the webhook gone `v2` reads fail with
//! upstream's message while `v1` (the storage version) still works.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use rudder_tests::https::{self, json_answer, Answer};
use rudder_tests::{Kubectl, RudderServer};
use serde_json::{json, Value};

const RUDDER: &str = env!("CARGO_BIN_EXE_rudder");

/// One object to `desired`: `size` ("3") in v1, `replicas` (3) in v2.
fn convert(mut object: Value, desired: &str) -> Value {
    let spec = object["spec"].as_object_mut().unwrap();
    if desired.ends_with("/v2") {
        if let Some(size) = spec.remove("size") {
            spec.insert(
                "replicas".into(),
                json!(size.as_str().unwrap().parse::<i64>().unwrap()),
            );
        }
    } else if let Some(replicas) = spec.remove("replicas") {
        spec.insert("size".into(), json!(replicas.as_i64().unwrap().to_string()));
    }
    object["apiVersion"] = json!(desired);
    object
}

async fn review(request: hyper::Request<Incoming>, calls: Arc<AtomicUsize>) -> Answer {
    calls.fetch_add(1, Ordering::SeqCst);
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let review: Value = serde_json::from_slice(&body).unwrap();
    let request = &review["request"];
    let desired = request["desiredAPIVersion"].as_str().unwrap();
    let converted: Vec<Value> = request["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|object| convert(object.clone(), desired))
        .collect();
    json_answer(
        200,
        &json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "response": {"uid": request["uid"], "result": {"status": "Success"},
                "convertedObjects": converted}}),
    )
}

fn crd(addr: std::net::SocketAddr, ca_pem: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: widgets.stable.example.com}}
spec:
  group: stable.example.com
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget}}
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1]
      clientConfig: {{url: \"https://{addr}/convert\", caBundle: {ca}}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {{type: object, properties: {{size: {{type: string}}}}}}
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {{type: object, properties: {{replicas: {{type: integer}}, color: {{type: string, default: blue}}}}}}
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversion_webhook_converts_between_versions_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("state.db").display());
    let server = RudderServer::start_apiserver_only(RUDDER, &url);
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "default".into(),
    };
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let webhook = https::serve("127.0.0.1", None, move |request| {
        review(request, counted.clone())
    })
    .await;
    let definition = k.file("crd.yaml", &crd(webhook.addr, &webhook.ca_pem));
    k.ok(&["apply", "-f", &definition]);
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.stable.example.com",
        "--timeout=30s",
    ]);
    let v1 = "widgets.v1.stable.example.com";
    let v2 = "widgets.v2.stable.example.com";

    // Written as v2, stored (and read) as v1, read back as v2 with v2's defaults.
    let in_v2 = k.file(
        "in-v2.yaml",
        "apiVersion: stable.example.com/v2\nkind: Widget\nmetadata: {name: a}\nspec: {replicas: 3}\n",
    );
    let created = k.ok_ns(&["create", "-f", &in_v2, "-o", "json"]);
    let created: Value = serde_json::from_str(&created).unwrap();
    assert_eq!(created["apiVersion"], "stable.example.com/v2");
    assert_eq!(created["spec"]["replicas"], 3);
    assert_eq!(
        k.ok_ns(&["get", v1, "a", "-o", "jsonpath={.spec.size}"]),
        "3"
    );
    assert_eq!(
        k.ok_ns(&[
            "get",
            v2,
            "a",
            "-o",
            "jsonpath={.spec.replicas} {.spec.color}"
        ]),
        "3 blue"
    );

    // Written as v1; a list in v2 converts the page.
    let in_v1 = k.file(
        "in-v1.yaml",
        "apiVersion: stable.example.com/v1\nkind: Widget\nmetadata: {name: b}\nspec: {size: \"5\"}\n",
    );
    k.ok_ns(&["create", "-f", &in_v1]);
    assert_eq!(
        k.ok_ns(&["get", v2, "-o", "jsonpath={.items[*].spec.replicas}"]),
        "3 5"
    );
    let paged = k.ok_ns(&[
        "get",
        v2,
        "--chunk-size=1",
        "-o",
        "jsonpath={.items[*].apiVersion}",
    ]);
    assert_eq!(paged, "stable.example.com/v2 stable.example.com/v2");

    // A patch through v2 reads the stored v1 as v2, and stores the result as v1.
    k.ok_ns(&[
        "patch",
        v2,
        "a",
        "--type=merge",
        "-p",
        "{\"spec\":{\"replicas\":4}}",
    ]);
    assert_eq!(
        k.ok_ns(&["get", v1, "a", "-o", "jsonpath={.spec.size}"]),
        "4"
    );

    // A watch in v2 sees a change made through v1 converted.
    let mut watch = server
        .kubectl_command("1.33")
        .args([
            "get",
            "--raw",
            "/apis/stable.example.com/v2/namespaces/default/widgets?watch=true&timeoutSeconds=4",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    k.ok_ns(&[
        "patch",
        v1,
        "b",
        "--type=merge",
        "-p",
        "{\"spec\":{\"size\":\"7\"}}",
    ]);
    let watched = tokio::task::spawn_blocking(move || {
        let _ = watch.wait();
        let mut out = String::new();
        std::io::Read::read_to_string(&mut watch.stdout.take().unwrap(), &mut out).unwrap();
        out
    })
    .await
    .unwrap();
    let modified: Vec<Value> = watched
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["type"] == "MODIFIED")
        .collect();
    assert_eq!(modified.len(), 1, "{watched}");
    assert_eq!(modified[0]["object"]["apiVersion"], "stable.example.com/v2");
    assert_eq!(modified[0]["object"]["spec"]["replicas"], 7, "{watched}");
    assert!(calls.load(Ordering::SeqCst) > 0);

    // Without the webhook, v2 cannot be read; the storage version still can.
    webhook.stop().await;
    let failed = k.fails_ns(&["get", v2, "a"]);
    assert!(
        failed.contains("conversion webhook for stable.example.com/v2, Kind=Widget failed"),
        "{failed}"
    );
    assert_eq!(
        k.ok_ns(&["get", v1, "a", "-o", "jsonpath={.spec.size}"]),
        "4"
    );
}
