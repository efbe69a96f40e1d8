//! What one request may cost: patches, YAML aliases, object depth and size, in-flight budgets,
//! the request timeout, warning headers, metrics labels; and requests that used to panic a
//! connection. After each, the server still serves.

use std::time::Duration;

use http::Method;
use serde_json::{json, Value};

use super::connections::{raw_get, Credentials};
use super::{
    assert_status, client, client_with_token, expect, send, send_with_headers, start, start_with,
};

const JSON: &str = "application/json";
const CMS: &str = "/api/v1/namespaces/default/configmaps";

async fn still_serves(client: &kube::Client) {
    expect(client, Method::GET, "/api/v1/namespaces/default", 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_patches_and_bodies_get_4xx_and_the_server_stays_up() {
    let (running, _dir, _harness) = start().await;
    let client = client(&running).await;
    let (code, _) = send(
        &client,
        Method::POST,
        CMS,
        JSON,
        br#"{"metadata":{"name":"c"},"data":{"a":"b"}}"#.to_vec(),
    )
    .await;
    assert_eq!(code, 201);
    let json_patch = "application/json-patch+json";

    // A copy bomb: 40 doublings of a small list.
    let mut bomb = vec![json!({"op": "add", "path": "/x", "value": ["0123456789"]})];
    bomb.extend((0..40).map(|_| json!({"op": "copy", "from": "/x", "path": "/x/-"})));
    let answer = send(
        &client,
        Method::PATCH,
        &format!("{CMS}/c"),
        json_patch,
        Value::Array(bomb).to_string().into_bytes(),
    )
    .await;
    assert_status("a JSON patch copy bomb", &answer, 422, "Invalid");
    assert!(
        answer.1["message"]
            .as_str()
            .unwrap_or("")
            .contains("accumulated size increase of copy"),
        "{}",
        answer.1
    );

    // Alternating add/move nests the document one level per pair.
    let mut nest = Vec::new();
    for _ in 0..3000 {
        nest.push(json!({"op": "add", "path": "/t", "value": {}}));
        nest.push(json!({"op": "move", "from": "/data", "path": "/t/data"}));
        nest.push(json!({"op": "move", "from": "/t", "path": "/data"}));
    }
    let answer = send(
        &client,
        Method::PATCH,
        &format!("{CMS}/c"),
        json_patch,
        Value::Array(nest).to_string().into_bytes(),
    )
    .await;
    assert_status("a JSON patch nesting bomb", &answer, 422, "Invalid");

    let many = vec![json!({"op": "test", "path": "/metadata/name", "value": "c"}); 10_001];
    let answer = send(
        &client,
        Method::PATCH,
        &format!("{CMS}/c"),
        json_patch,
        Value::Array(many).to_string().into_bytes(),
    )
    .await;
    assert_status(
        "10,001 JSON patch operations",
        &answer,
        413,
        "RequestEntityTooLarge",
    );

    // json-patch's undo used to reach `unreachable!` on this sequence.
    let undo =
        br#"[{"op":"move","from":"/data","path":""},{"op":"test","path":"/nope","value":1}]"#;
    let answer = send(
        &client,
        Method::PATCH,
        &format!("{CMS}/c"),
        json_patch,
        undo.to_vec(),
    )
    .await;
    assert_status(
        "a failing patch after a move to the root",
        &answer,
        422,
        "Invalid",
    );

    // A YAML alias bomb: 5,000 aliases of a 5,000-item list.
    let mut yaml = String::from("metadata:\n  name: y\nx: &a [");
    yaml.push_str(&vec!["xxxxxxxx"; 5_000].join(","));
    yaml.push_str("]\nz: [");
    yaml.push_str(&vec!["*a"; 5_000].join(","));
    yaml.push_str("]\n");
    let answer = send(
        &client,
        Method::POST,
        CMS,
        "application/yaml",
        yaml.into_bytes(),
    )
    .await;
    assert_status("a YAML alias bomb", &answer, 400, "BadRequest");

    // A limit that overflowed `limit + 1`.
    expect(
        &client,
        Method::GET,
        &format!("{CMS}?limit=9223372036854775807"),
        200,
    )
    .await;

    // A lease time with a multi-byte character where the validator sliced the string.
    let lease =
        "{\"metadata\":{\"name\":\"l\"},\"spec\":{\"renewTime\":\"2024-01-01T00:00:0\u{e9}0000\"}}";
    let answer = send(
        &client,
        Method::POST,
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        JSON,
        lease.as_bytes().to_vec(),
    )
    .await;
    // Decoding its MicroTime refuses it before validation (which no longer slices it).
    assert_status(
        "a lease time with a multi-byte character",
        &answer,
        400,
        "BadRequest",
    );
    still_serves(&client).await;
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_be_read_back_or_stored_is_refused_at_write_time() {
    let (running, _dir, _harness) = start().await;
    let client = client(&running).await;
    let revisions = "/apis/apps/v1/namespaces/default/controllerrevisions";
    let mut data = json!(1);
    for _ in 0..90 {
        data = json!({ "d": data });
    }
    let revision = json!({"metadata": {"name": "r"}, "revision": 1, "data": data});
    let (code, body) = send(
        &client,
        Method::POST,
        revisions,
        JSON,
        revision.to_string().into_bytes(),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    // A patch adding 100 more levels: what serde_json (128) and kube-rs could not read back.
    let mut deeper = json!(1);
    for _ in 0..100 {
        deeper = json!({ "d": deeper });
    }
    let patch = json!({"data": {"d": deeper}});
    let answer = send(
        &client,
        Method::PATCH,
        &format!("{revisions}/r"),
        "application/merge-patch+json",
        patch.to_string().into_bytes(),
    )
    .await;
    assert_status("a patch nesting past the limit", &answer, 422, "Invalid");
    for uri in [format!("{revisions}/r"), revisions.to_string()] {
        expect(&client, Method::GET, &uri, 200).await;
    }
    expect(&client, Method::DELETE, &format!("{revisions}/r"), 200).await;

    // Past etcd's 1.5 MiB, though under the 3 MiB body limit.
    let big = json!({"metadata": {"name": "big"}, "revision": 1, "data": {"k": "x".repeat(2 * 1024 * 1024)}});
    let answer = send(
        &client,
        Method::POST,
        revisions,
        JSON,
        big.to_string().into_bytes(),
    )
    .await;
    assert_status(
        "a value past 1.5 MiB",
        &answer,
        413,
        "RequestEntityTooLarge",
    );
    // A name whose key PostgreSQL could not index.
    let long = json!({"metadata": {"name": "n".repeat(3000)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"}});
    let answer = send(
        &client,
        Method::POST,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        JSON,
        long.to_string().into_bytes(),
    )
    .await;
    assert_status("a 3,000-byte name", &answer, 422, "Invalid");
    still_serves(&client).await;
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_acts_as_the_user_and_warnings_are_capped() {
    let (running, _dir, _harness) = start().await;
    let client = client(&running).await;
    let (code, _, body) = send_with_headers(
        &client,
        Method::GET,
        "/api/v1/namespaces",
        JSON,
        &[("Impersonate-User", "jane")],
        Vec::new(),
    )
    .await;
    // The admin may impersonate; jane has no role, so her request is judged as hers.
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["reason"], "Forbidden");
    assert_eq!(
        body["message"],
        "namespaces is forbidden: User \"jane\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope",
        "{body}"
    );

    let mut fields = serde_json::Map::new();
    for index in 0..20_000 {
        fields.insert(format!("unknown{index:05}"), json!(1));
    }
    let mut body = json!({"metadata": {"name": "warned"}});
    body.as_object_mut().unwrap().extend(fields);
    let (code, headers, answer) = send_with_headers(
        &client,
        Method::POST,
        CMS,
        JSON,
        &[],
        body.to_string().into_bytes(),
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    let warnings: Vec<&http::HeaderValue> = headers.get_all("warning").iter().collect();
    let bytes: usize = warnings.iter().map(|value| value.len()).sum();
    assert!(
        !warnings.is_empty() && bytes < 8 * 1024,
        "{} warnings, {bytes} bytes",
        warnings.len()
    );
    running.stop().await.unwrap();
}

fn token_file(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("tokens.csv");
    std::fs::write(&path, "alice-token,alice,1001,\"dev\"\n").unwrap();
    path
}

/// A LIST that waits ~3 s for a revision the store has not reached, then answers 504.
fn slow_list() -> String {
    format!("{CMS}?resourceVersion=999999999&resourceVersionMatch=NotOlderThan")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_inflight_budget_get_429_unless_system_masters() {
    let tokens = tempfile::tempdir().unwrap();
    let path = token_file(tokens.path());
    let (running, _dir, _harness) = start_with(|config| {
        config.token_auth_file = Some(path);
        config.limits.max_requests_inflight = 1;
        // alice's reads are allowed: this test is about budgets, not RBAC.
        config.authorization_modes = vec![rudder_apiserver::authz::Mode::AlwaysAllow];
    })
    .await;
    let running = std::sync::Arc::new(running);
    let busy = tokio::spawn({
        let running = running.clone();
        async move { raw_get(&running, Credentials::Token("alice-token"), &slow_list()).await }
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (code, head, body) = raw_get(&running, Credentials::Token("alice-token"), CMS).await;
    assert_eq!(code, 429, "{head}{body}");
    assert_eq!(body["reason"], "TooManyRequests");
    assert!(head.contains("retry-after: 1"), "{head}");
    // The admin (system:masters) is never turned away.
    let (code, _, body) = raw_get(&running, Credentials::Admin, CMS).await;
    assert_eq!(code, 200, "{body}");
    let (code, _, _) = busy.await.unwrap();
    assert_eq!(code, 504);
    // The budget is free again.
    let (code, _, body) = raw_get(&running, Credentials::Token("alice-token"), CMS).await;
    assert_eq!(code, 200, "{body}");
    let running = std::sync::Arc::into_inner(running).unwrap();
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_request_timeout_get_504() {
    let (running, _dir, _harness) = start_with(|config| {
        config.limits.request_timeout = Duration::from_millis(500);
    })
    .await;
    let started = std::time::Instant::now();
    let (code, head, body) = raw_get(&running, Credentials::Admin, &slow_list()).await;
    assert_eq!(
        (code, &body["reason"]),
        (504, &json!("Timeout")),
        "{head}{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("request did not complete within requested timeout"),
        "{body}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    // Watches are long-running: not cut at the request timeout.
    let started = std::time::Instant::now();
    let (code, _, _) = raw_get(
        &running,
        Credentials::Admin,
        &format!("{CMS}?watch=1&timeoutSeconds=2"),
    )
    .await;
    assert_eq!(code, 200);
    assert!(
        started.elapsed() >= Duration::from_millis(1900),
        "{:?}",
        started.elapsed()
    );
    let client = client(&running).await;
    still_serves(&client).await;
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_never_label_by_raw_path() {
    let (running, _dir, _harness) = start().await;
    let anonymous = client_with_token(&running, None);
    for index in 0..50 {
        let path = format!("/garbage-{index}-{}", "x".repeat(2000));
        expect(&anonymous, Method::GET, &path, 403).await;
        expect(
            &anonymous,
            Method::GET,
            &format!("/api/v1/namespaces/default/no{index}"),
            404,
        )
        .await;
    }
    let admin = client(&running).await;
    for index in 0..20 {
        expect(
            &admin,
            Method::GET,
            &format!("/apis/nope{index}/v1/things"),
            404,
        )
        .await;
    }
    let request = http::Request::builder()
        .uri("/metrics")
        .body(Vec::new())
        .unwrap();
    let metrics = admin.request_text(request).await.unwrap();
    assert!(
        !metrics.contains("garbage") && !metrics.contains("nope"),
        "raw paths in labels"
    );
    let series = metrics
        .lines()
        .filter(|line| line.starts_with("apiserver_request_total{"))
        .count();
    assert!(series < 12, "{series} series:\n{metrics}");
    assert!(metrics.contains("code=\"403\""), "{metrics}");
    running.stop().await.unwrap();
}
