//! Bad input gets the right 4xx `Status`, never a 500: malformed JSON, YAML and protobuf,
//! unknown kinds and versions, a namespace in the body that differs from the URL, invalid
//! names, bodies over 3 MiB, bad selectors, forged continue tokens, unknown fields under
//! `fieldValidation=Strict`, and requests without credentials.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use http::{Method, Request};
use kube::Client;
use rudder_apiserver::server::{Config, Running};
use serde_json::Value;

#[path = "bad_input/connections.rs"]
mod connections;
#[path = "bad_input/limits.rs"]
mod limits;
#[path = "bad_input/verbs.rs"]
mod verbs;

async fn start() -> (
    Running,
    tempfile::TempDir,
    Box<dyn rudder_storage::testing::Harness>,
) {
    start_with(|_| {}).await
}

/// As `start`, with the configuration adjusted first (limits, a token file…).
async fn start_with(
    adjust: impl FnOnce(&mut Config),
) -> (
    Running,
    tempfile::TempDir,
    Box<dyn rudder_storage::testing::Harness>,
) {
    let harness = rudder_storage::testing::sqlite().await.unwrap();
    let (running, dir) = rudder_tests::start_apiserver(harness.as_ref(), adjust).await;
    (running, dir, harness)
}

/// A client of `running` with no credentials, or with a bearer token.
fn client_with_token(running: &Running, token: Option<&str>) -> Client {
    let mut config = kube::Config::new(format!("https://{}", running.addr).parse().unwrap());
    config.root_cert = Some(vec![pem_to_der(&running.pki.ca_cert_pem)]);
    config.auth_info.token = token.map(|token| token.to_string().into());
    Client::try_from(config).unwrap()
}

/// Sends a request with extra headers; returns (HTTP status, headers, body as JSON).
async fn send_with_headers(
    client: &Client,
    method: Method,
    uri: &str,
    content_type: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, http::HeaderMap, Value) {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .send(request.body(body).unwrap().map(kube::client::Body::from))
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, headers, body)
}

async fn client(running: &Running) -> Client {
    rudder_tests::admin_client(&running.kubeconfig).await
}

/// Sends a request and returns (HTTP status, body as JSON).
async fn send(
    client: &Client,
    method: Method,
    uri: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, Value) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(body)
        .unwrap();
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .unwrap();
    let status = response.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Sends a bodiless request and checks its status code; returns the body.
async fn expect(client: &Client, method: Method, uri: &str, code: u16) -> Value {
    let (got, body) = send(client, method.clone(), uri, "application/json", Vec::new()).await;
    assert_eq!(got, code, "{method} {uri}: {body}");
    body
}

fn assert_status(case: &str, (code, body): &(u16, Value), expected_code: u16, reason: &str) {
    assert_eq!(*code, expected_code, "{case}: {body}");
    assert_eq!(body["kind"], "Status", "{case}: {body}");
    assert_eq!(body["code"], expected_code, "{case}: {body}");
    assert_eq!(body["reason"], reason, "{case}: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_the_right_status() {
    let (running, _dir, _harness) = start().await;
    let client = client(&running).await;
    let cms = "/api/v1/namespaces/default/configmaps";
    let json = "application/json";

    assert_status(
        "truncated JSON",
        &send(&client, Method::POST, cms, json, b"{\"metadata\":".to_vec()).await,
        400,
        "BadRequest",
    );
    assert_status(
        "malformed YAML",
        &send(
            &client,
            Method::POST,
            cms,
            "application/yaml",
            b"metadata: [x".to_vec(),
        )
        .await,
        400,
        "BadRequest",
    );
    assert_status(
        "protobuf without its magic",
        &send(
            &client,
            Method::POST,
            cms,
            "application/vnd.kubernetes.protobuf",
            b"garbage".to_vec(),
        )
        .await,
        400,
        "BadRequest",
    );
    assert_status(
        "an unknown content type",
        &send(&client, Method::POST, cms, "text/plain", b"x".to_vec()).await,
        415,
        "UnsupportedMediaType",
    );
    assert_status(
        "a wrong field type",
        &send(
            &client,
            Method::POST,
            cms,
            json,
            br#"{"metadata":{"name":"a"},"data":{"k":1}}"#.to_vec(),
        )
        .await,
        400,
        "BadRequest",
    );
    assert_status(
        "another kind in the body",
        &send(
            &client,
            Method::POST,
            cms,
            json,
            br#"{"kind":"Secret","apiVersion":"v1","metadata":{"name":"a"}}"#.to_vec(),
        )
        .await,
        400,
        "BadRequest",
    );
    assert_status(
        "another version in the body",
        &send(
            &client,
            Method::POST,
            cms,
            json,
            br#"{"kind":"ConfigMap","apiVersion":"v2","metadata":{"name":"a"}}"#.to_vec(),
        )
        .await,
        400,
        "BadRequest",
    );
    assert_status(
        "another namespace in the body",
        &send(
            &client,
            Method::POST,
            cms,
            json,
            br#"{"metadata":{"name":"a","namespace":"kube-system"}}"#.to_vec(),
        )
        .await,
        400,
        "BadRequest",
    );
    let invalid = send(
        &client,
        Method::POST,
        cms,
        json,
        br#"{"metadata":{"name":"Bad_Name"}}"#.to_vec(),
    )
    .await;
    assert_status("an invalid name", &invalid, 422, "Invalid");
    assert_eq!(invalid.1["details"]["causes"][0]["field"], "metadata.name");
    let missing_name = send(
        &client,
        Method::POST,
        cms,
        json,
        br#"{"metadata":{}}"#.to_vec(),
    )
    .await;
    assert_status("no name at all", &missing_name, 422, "Invalid");
    let big = format!(
        r#"{{"metadata":{{"name":"big"}},"data":{{"k":"{}"}}}}"#,
        "x".repeat(3 * 1024 * 1024 + 10)
    );
    assert_status(
        "a body over 3 MiB",
        &send(&client, Method::POST, cms, json, big.into_bytes()).await,
        413,
        "RequestEntityTooLarge",
    );
    assert_status(
        "a strict unknown field",
        &send(
            &client,
            Method::POST,
            &format!("{cms}?fieldValidation=Strict"),
            json,
            br#"{"metadata":{"name":"s"},"spec":{}}"#.to_vec(),
        )
        .await,
        400,
        "BadRequest",
    );
    assert_status(
        "a strict duplicate field",
        &send(
            &client,
            Method::POST,
            &format!("{cms}?fieldValidation=Strict"),
            json,
            br#"{"metadata":{"name":"d","name":"e"}}"#.to_vec(),
        )
        .await,
        400,
        "BadRequest",
    );
    assert_status(
        "a missing namespace",
        &send(
            &client,
            Method::POST,
            "/api/v1/namespaces/nope/configmaps",
            json,
            br#"{"metadata":{"name":"a"}}"#.to_vec(),
        )
        .await,
        404,
        "NotFound",
    );
    assert_status(
        "an unknown resource",
        &send(
            &client,
            Method::GET,
            "/api/v1/namespaces/default/widgets",
            json,
            Vec::new(),
        )
        .await,
        404,
        "NotFound",
    );
    assert_status(
        "an unknown group version",
        &send(
            &client,
            Method::GET,
            "/apis/apps/v9/deployments",
            json,
            Vec::new(),
        )
        .await,
        404,
        "NotFound",
    );
    assert_status(
        "a bad label selector",
        &send(
            &client,
            Method::GET,
            &format!("{cms}?labelSelector=a%20in%20(b"),
            json,
            Vec::new(),
        )
        .await,
        400,
        "BadRequest",
    );
    assert_status(
        "an unsupported field selector",
        &send(
            &client,
            Method::GET,
            &format!("{cms}?fieldSelector=spec.foo%3Dbar"),
            json,
            Vec::new(),
        )
        .await,
        400,
        "BadRequest",
    );
    assert_status(
        "a forged continue token",
        &send(
            &client,
            Method::GET,
            &format!("{cms}?limit=1&continue=Zm9yZ2Vk"),
            json,
            Vec::new(),
        )
        .await,
        400,
        "BadRequest",
    );
    assert_status(
        "a bad limit",
        &send(
            &client,
            Method::GET,
            &format!("{cms}?limit=ten"),
            json,
            Vec::new(),
        )
        .await,
        400,
        "BadRequest",
    );
    assert_status(
        "an invalid JSON patch",
        &send(
            &client,
            Method::PATCH,
            &format!("{cms}/kube-root"),
            "application/json-patch+json",
            b"{".to_vec(),
        )
        .await,
        400,
        "BadRequest",
    );
    assert_status(
        "a patch of a missing object",
        &send(
            &client,
            Method::PATCH,
            &format!("{cms}/absent"),
            "application/merge-patch+json",
            b"{}".to_vec(),
        )
        .await,
        404,
        "NotFound",
    );
    assert_status(
        "deleting a system namespace",
        &send(
            &client,
            Method::DELETE,
            "/api/v1/namespaces/kube-system",
            json,
            Vec::new(),
        )
        .await,
        403,
        "Forbidden",
    );

    // A patch that renames the object is refused, not applied.
    let (code, _) = send(
        &client,
        Method::POST,
        cms,
        json,
        br#"{"metadata":{"name":"keep"}}"#.to_vec(),
    )
    .await;
    assert_eq!(code, 201);
    assert_status(
        "a patch that renames",
        &send(
            &client,
            Method::PATCH,
            &format!("{cms}/keep"),
            "application/merge-patch+json",
            br#"{"metadata":{"name":"other"}}"#.to_vec(),
        )
        .await,
        400,
        "BadRequest",
    );
    assert_status(
        "a failing JSON patch test",
        &send(
            &client,
            Method::PATCH,
            &format!("{cms}/keep"),
            "application/json-patch+json",
            br#"[{"op":"test","path":"/metadata/name","value":"x"}]"#.to_vec(),
        )
        .await,
        422,
        "Invalid",
    );
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_credentials_are_anonymous_and_may_read_only_health() {
    let (running, _dir, _harness) = start().await;
    let anonymous = client_with_token(&running, None);
    let (code, body) = send(
        &anonymous,
        Method::GET,
        "/api/v1/namespaces",
        "application/json",
        Vec::new(),
    )
    .await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["reason"], "Forbidden");
    assert_eq!(
        body["message"],
        "namespaces is forbidden: User \"system:anonymous\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope"
    );
    for path in ["/metrics", "/api", "/apis", "/openapi/v2"] {
        let (code, body) = send(
            &anonymous,
            Method::GET,
            path,
            "application/json",
            Vec::new(),
        )
        .await;
        assert_eq!(code, 403, "{path}: {body}");
        assert_eq!(
            body["message"],
            format!("forbidden: User \"system:anonymous\" cannot get path \"{path}\""),
        );
    }
    for path in ["/readyz", "/livez", "/healthz", "/version"] {
        let request = Request::builder().uri(path).body(Vec::new()).unwrap();
        anonymous.request_text(request).await.unwrap();
    }
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_anonymous_auth_requests_without_credentials_are_unauthorized() {
    let (running, _dir, _harness) = start_with(|config| config.anonymous_auth = false).await;
    let anonymous = client_with_token(&running, None);
    for path in ["/api/v1/namespaces", "/readyz", "/version"] {
        let (code, body) = send(
            &anonymous,
            Method::GET,
            path,
            "application/json",
            Vec::new(),
        )
        .await;
        assert_eq!(code, 401, "{path}: {body}");
        assert_eq!(body["reason"], "Unauthorized");
    }
    running.stop().await.unwrap();
}

fn pem_to_der(pem: &str) -> Vec<u8> {
    use base64::Engine;
    let body: String = pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap()
}
