//! Verbs and subresources mean what upstream means: a subresource serves only its own verbs,
//! a named watch watches one object, collections are deleted only where upstream allows it,
//! bindings are Binding objects, namespace finalizers change only through `finalize`, and
//! percent-encoded names in paths are decoded.

use http::Method;
use serde_json::{json, Value};

use super::{assert_status, client, expect, send, start};

const JSON: &str = "application/json";

async fn create(client: &kube::Client, uri: &str, body: Value) {
    let (code, answer) = send(
        client,
        Method::POST,
        uri,
        JSON,
        body.to_string().into_bytes(),
    )
    .await;
    assert_eq!(code, 201, "creating at {uri}: {answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subresources_serve_only_their_own_verbs() {
    let (running, _dir, _harness) = start().await;
    let client = client(&running).await;
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    create(&client, deployments, json!({"metadata": {"name": "d"}, "spec": {
        "selector": {"matchLabels": {"app": "d"}},
        "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}})).await;
    let pods = "/api/v1/namespaces/default/pods";
    create(
        &client,
        pods,
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}),
    )
    .await;

    for (method, uri) in [
        (Method::DELETE, format!("{deployments}/d/scale")),
        (Method::DELETE, format!("{pods}/p/status")),
        (Method::GET, format!("{pods}/p/binding")),
        (Method::POST, format!("{deployments}/d/status")),
        (Method::GET, format!("{pods}/p/status?watch=1")),
    ] {
        let answer = send(&client, method.clone(), &uri, JSON, b"{}".to_vec()).await;
        assert_status(&format!("{method} {uri}"), &answer, 405, "MethodNotAllowed");
    }
    // The parents are still there, and their own verbs still work.
    expect(&client, Method::GET, &format!("{deployments}/d/scale"), 200).await;
    expect(&client, Method::GET, &format!("{pods}/p/status"), 200).await;
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_watch_sees_only_that_object() {
    let (running, _dir, _harness) = start().await;
    let client = client(&running).await;
    let secrets = "/api/v1/namespaces/default/secrets";
    for name in ["one", "two"] {
        create(
            &client,
            secrets,
            json!({"metadata": {"name": name}, "stringData": {"k": name}}),
        )
        .await;
    }
    let request = http::Request::builder()
        .uri(format!("{secrets}/one?watch=1&timeoutSeconds=2"))
        .body(Vec::new())
        .unwrap();
    let text = client.request_text(request).await.unwrap();
    let names: Vec<String> = text
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .map(|event| {
            event["object"]["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_eq!(names, vec!["one"], "{text}");
    let mismatch = send(
        &client,
        Method::GET,
        &format!("{secrets}/one?watch=1&fieldSelector=metadata.name%3Dtwo"),
        JSON,
        Vec::new(),
    )
    .await;
    assert_status(
        "a name selector naming another object",
        &mismatch,
        400,
        "BadRequest",
    );
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collections_are_deleted_only_where_upstream_allows() {
    let (running, _dir, _harness) = start().await;
    let client = client(&running).await;
    create(
        &client,
        "/api/v1/namespaces/default/secrets",
        json!({"metadata": {"name": "keep"}}),
    )
    .await;
    for uri in ["/api/v1/secrets", "/api/v1/namespaces"] {
        let answer = send(&client, Method::DELETE, uri, JSON, Vec::new()).await;
        assert_status(&format!("DELETE {uri}"), &answer, 405, "MethodNotAllowed");
    }
    expect(
        &client,
        Method::GET,
        "/api/v1/namespaces/default/secrets/keep",
        200,
    )
    .await;
    expect(&client, Method::GET, "/api/v1/namespaces/default", 200).await;
    // Within one namespace, deletecollection works as before.
    expect(
        &client,
        Method::DELETE,
        "/api/v1/namespaces/default/secrets",
        200,
    )
    .await;
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_is_a_created_binding_object_only() {
    let (running, _dir, _harness) = start().await;
    let client = client(&running).await;
    let pods = "/api/v1/namespaces/default/pods";
    create(
        &client,
        pods,
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}),
    )
    .await;
    let patch = send(
        &client,
        Method::PATCH,
        &format!("{pods}/p/binding"),
        "application/merge-patch+json",
        br#"{"metadata":{"labels":{"bad label!":"x"}},"spec":{"nodeName":"elsewhere"}}"#.to_vec(),
    )
    .await;
    assert_status(
        "a merge patch of a binding",
        &patch,
        405,
        "MethodNotAllowed",
    );
    let other_name = send(
        &client,
        Method::POST,
        &format!("{pods}/p/binding"),
        JSON,
        br#"{"kind":"Binding","apiVersion":"v1","metadata":{"name":"q"},"target":{"name":"n1"}}"#
            .to_vec(),
    )
    .await;
    assert_status("a binding of another pod", &other_name, 400, "BadRequest");
    let pod = expect(&client, Method::GET, &format!("{pods}/p"), 200).await;
    assert!(pod["spec"].get("nodeName").is_none(), "{pod}");
    assert!(pod["metadata"].get("labels").is_none(), "{pod}");
    let bound = send(
        &client,
        Method::POST,
        &format!("{pods}/p/binding"),
        JSON,
        br#"{"kind":"Binding","apiVersion":"v1","metadata":{"name":"p"},"target":{"name":"n1"}}"#
            .to_vec(),
    )
    .await;
    assert_eq!(bound.0, 201, "{}", bound.1);
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_finalizers_change_only_through_finalize() {
    let (running, _dir, _harness) = start().await;
    let client = client(&running).await;
    create(
        &client,
        "/api/v1/namespaces",
        json!({"metadata": {"name": "held"}}),
    )
    .await;
    let (code, patched) = send(
        &client,
        Method::PATCH,
        "/api/v1/namespaces/held",
        "application/merge-patch+json",
        br#"{"spec":{"finalizers":[]}}"#.to_vec(),
    )
    .await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(
        patched["spec"]["finalizers"],
        json!(["kubernetes"]),
        "{patched}"
    );
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn percent_encoded_names_in_paths_are_decoded() {
    let (running, _dir, _harness) = start().await;
    let client = client(&running).await;
    let bindings = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
    create(&client, bindings, json!({"metadata": {"name": "ops admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [{"kind": "Group", "name": "ops", "apiGroup": "rbac.authorization.k8s.io"}]})).await;
    let found = expect(
        &client,
        Method::GET,
        &format!("{bindings}/ops%20admin"),
        200,
    )
    .await;
    assert_eq!(found["metadata"]["name"], "ops admin");
    expect(
        &client,
        Method::DELETE,
        &format!("{bindings}/ops%20admin"),
        200,
    )
    .await;
    running.stop().await.unwrap();
}
