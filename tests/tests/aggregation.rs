//! API aggregation with real kubectl: an extension apiserver (a small "wardle" server this
//! test runs, in the shape of upstream's sample-apiserver: Flunders in
//! `wardle.example.com/v1alpha1`) behind a selector-less Service and its EndpointSlice,
//! registered with an APIService. It trusts only the front-proxy CA the cluster publishes in
//! `kube-system/extension-apiserver-authentication` and reads the caller from the
//! `X-Remote-*` headers, as real extension apiservers do. Checked: the APIService becomes
//! Available, discovery lists the group, kubectl creates, gets and lists Flunders through the
//! apiserver with the caller's identity, a caller RBAC refuses never reaches the extension,
//! and a server that goes away turns the APIService unavailable and its requests into 503s.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use rudder_tests::https::{self, json_answer, Answer, ClientAuth, HttpsServer};
use rudder_tests::{Kubectl, RudderServer};
use serde_json::{json, Value};

const RUDDER: &str = env!("CARGO_BIN_EXE_rudder");
const GROUP_VERSION: &str = "wardle.example.com/v1alpha1";

/// What the wardle server holds and who called it.
#[derive(Default)]
struct Wardle {
    flunders: BTreeMap<(String, String), Value>,
    /// `X-Remote-User` and `X-Remote-Group`s of each request.
    callers: Vec<(String, Vec<String>)>,
}

type Shared = Arc<Mutex<Wardle>>;

fn not_found(what: &str) -> Answer {
    json_answer(
        404,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": format!("{what} not found"), "reason": "NotFound", "code": 404}),
    )
}

async fn serve(request: hyper::Request<Incoming>, state: Shared) -> Answer {
    let headers = request.headers();
    let user = headers
        .get("x-remote-user")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let groups: Vec<String> = headers
        .get_all("x-remote-group")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    state.lock().unwrap().callers.push((user.clone(), groups));
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    if path == format!("/openapi/v3/apis/{GROUP_VERSION}") {
        return json_answer(200, &openapi_document());
    }
    let prefix = format!("/apis/{GROUP_VERSION}");
    let Some(rest) = path.strip_prefix(&prefix) else {
        return not_found(&path);
    };
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    match (method.as_str(), parts.as_slice()) {
        ("GET", []) => json_answer(
            200,
            &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
                "resources": [{"name": "flunders", "singularName": "flunder", "namespaced": true,
                    "kind": "Flunder", "verbs": ["create", "delete", "get", "list"],
                    "shortNames": ["fl"]}]}),
        ),
        ("GET", ["namespaces", namespace, "flunders"]) => {
            let items: Vec<Value> = state
                .lock()
                .unwrap()
                .flunders
                .iter()
                .filter(|((ns, _), _)| ns == namespace)
                .map(|(_, flunder)| flunder.clone())
                .collect();
            json_answer(
                200,
                &json!({"kind": "FlunderList", "apiVersion": GROUP_VERSION,
                    "metadata": {"resourceVersion": "1"}, "items": items}),
            )
        }
        ("GET", ["namespaces", namespace, "flunders", name]) => {
            let key = (namespace.to_string(), name.to_string());
            match state.lock().unwrap().flunders.get(&key) {
                Some(flunder) => json_answer(200, flunder),
                None => not_found(&format!("flunders.wardle.example.com \"{name}\"")),
            }
        }
        ("POST", ["namespaces", namespace, "flunders"]) => {
            let namespace = namespace.to_string();
            let body = request.into_body().collect().await.unwrap().to_bytes();
            let mut flunder: Value = serde_json::from_slice(&body).unwrap();
            let name = flunder["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string();
            flunder["metadata"]["namespace"] = json!(namespace);
            flunder["metadata"]["creationTimestamp"] = json!("2026-12-07T00:00:00Z");
            flunder["metadata"]["resourceVersion"] = json!("1");
            flunder["metadata"]["annotations"] = json!({"wardle.example.com/created-by": user});
            state
                .lock()
                .unwrap()
                .flunders
                .insert((namespace, name), flunder.clone());
            json_answer(201, &flunder)
        }
        _ => not_found(&path),
    }
}

/// The wardle server's OpenAPI v3 document of its group-version.
fn openapi_document() -> Value {
    let get = json!({"get": {
        "x-kubernetes-action": "get",
        "x-kubernetes-group-version-kind":
            {"group": "wardle.example.com", "version": "v1alpha1", "kind": "Flunder"},
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema":
            {"$ref": "#/components/schemas/com.example.wardle.v1alpha1.Flunder"}}}}}}});
    json!({"openapi": "3.0.0", "info": {"title": "Wardle", "version": "v1alpha1"},
        "paths": {"/apis/wardle.example.com/v1alpha1/namespaces/{namespace}/flunders/{name}": get},
        "components": {"schemas": {"com.example.wardle.v1alpha1.Flunder": {
            "type": "object",
            "description": "A Flunder is what the wardle server keeps.",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {"type": "object", "description": "What a flunder is made of.",
                    "properties": {"reference": {"type": "string",
                        "description": "The name of another flunder this one points at."}}}},
            "x-kubernetes-group-version-kind": [
                {"group": "wardle.example.com", "version": "v1alpha1", "kind": "Flunder"}]}}}})
}

/// The wardle server: a certificate for `api.wardle.svc`, and only the proxy's client
/// certificate (`front-proxy-client` from `front_proxy_ca`) accepted.
async fn wardle_server(front_proxy_ca: &str, state: Shared) -> HttpsServer {
    let client = ClientAuth {
        ca_pem: front_proxy_ca.to_string(),
        common_name: "front-proxy-client".to_string(),
    };
    https::serve("api.wardle.svc", Some(client), move |request| {
        serve(request, state.clone())
    })
    .await
}

fn registration(addr: std::net::SocketAddr, ca_pem: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1
kind: Namespace
metadata: {{name: wardle}}
---
apiVersion: v1
kind: Service
metadata: {{name: api, namespace: wardle}}
spec:
  ports: [{{name: https, port: 443, targetPort: {port}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: api-1
  namespace: wardle
  labels: {{kubernetes.io/service-name: api}}
addressType: IPv4
ports: [{{name: https, port: {port}, protocol: TCP}}]
endpoints: [{{addresses: [\"{ip}\"], conditions: {{ready: true}}}}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: v1alpha1.wardle.example.com}}
spec:
  group: wardle.example.com
  version: v1alpha1
  groupPriorityMinimum: 2000
  versionPriority: 200
  service: {{namespace: wardle, name: api, port: 443}}
  caBundle: {ca}
",
        port = addr.port(),
        ip = addr.ip(),
    )
}

const FLUNDER: &str = "apiVersion: wardle.example.com/v1alpha1
kind: Flunder
metadata: {name: my-flunder, namespace: wardle}
spec: {reference: nothing}
";

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.stable.example.com}
spec:
  group: stable.example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
";

/// Runs `args` until `done` holds for its output (at most 30 s); returns that output.
async fn wait_for(k: &Kubectl<'_>, args: &[&str], done: impl Fn(&str) -> bool) -> String {
    let mut out = String::new();
    for _ in 0..60 {
        out = k.ok(args);
        if done(&out) {
            return out;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("kubectl {args:?} never showed what was awaited: {out}");
}

/// Polls the APIService's Available condition until it is `status` (as `kubectl get` shows
/// it, the reason after a non-True status).
async fn wait_available(k: &Kubectl<'_>, wanted: &str) -> String {
    let args = ["get", "apiservice", "v1alpha1.wardle.example.com"];
    let table = wait_for(k, &args, |table| {
        table.lines().nth(1).unwrap_or("").contains(wanted)
    })
    .await;
    table.lines().nth(1).unwrap_or("").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_apiserver_serves_its_group_through_the_aggregator() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("state.db").display());
    let server = RudderServer::start_apiserver_only(RUDDER, &url);
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "wardle".into(),
    };
    // Every built-in group-version is a Local APIService.
    let listed = k.ok(&["get", "apiservices"]);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("v1.apps ") && l.contains("Local") && l.contains("True")),
        "{listed}"
    );

    // A CRD's group-version gets one while the CRD serves it.
    let crd = k.file("crd.yaml", CRD);
    k.ok(&["apply", "-f", &crd]);
    let registered = wait_for(&k, &["get", "apiservices"], |out| {
        out.lines()
            .any(|l| l.starts_with("v1.stable.example.com ") && l.contains("Local"))
    })
    .await;
    assert!(registered.contains("True"), "{registered}");
    k.ok(&["delete", "-f", &crd]);
    wait_for(&k, &["get", "apiservices"], |out| {
        !out.contains("v1.stable.example.com")
    })
    .await;

    // The extension apiserver is configured from the ConfigMap, as real ones read it.
    let front_proxy_ca = k.ok(&[
        "get",
        "configmap",
        "-n",
        "kube-system",
        "extension-apiserver-authentication",
        "-o",
        "jsonpath={.data.requestheader-client-ca-file}",
    ]);
    assert!(
        front_proxy_ca.contains("BEGIN CERTIFICATE"),
        "{front_proxy_ca}"
    );
    let state: Shared = Arc::default();
    let wardle = wardle_server(&front_proxy_ca, state.clone()).await;
    let addr = wardle.addr;
    let config = k.file("wardle.yaml", &registration(addr, &wardle.ca_pem));
    k.ok(&["apply", "-f", &config]);
    let row = wait_available(&k, "True").await;
    assert!(row.contains("wardle/api"), "{row}");

    // Discovery lists the group and its resource; kubectl works with it as with any other.
    let resources = k.ok(&["api-resources", "--api-group=wardle.example.com"]);
    assert!(
        resources.contains("flunders") && resources.contains("Flunder"),
        "{resources}"
    );
    let groups = k.ok(&["get", "--raw", "/apis"]);
    assert!(groups.contains("\"wardle.example.com\""), "{groups}");
    // Its OpenAPI is aggregated: kubectl explain reads the extension's schema.
    let index = k.ok(&["get", "--raw", "/openapi/v3"]);
    assert!(
        index.contains("\"apis/wardle.example.com/v1alpha1\""),
        "{index}"
    );
    let explained = k.ok(&["explain", "flunders.spec"]);
    assert!(
        explained.contains("What a flunder is made of.")
            && explained.contains("The name of another flunder this one points at."),
        "{explained}"
    );
    let flunder = k.file("flunder.yaml", FLUNDER);
    k.ok(&["create", "-f", &flunder]);
    let listed = k.ok_ns(&["get", "flunders"]);
    assert!(listed.contains("my-flunder"), "{listed}");
    let created_by = k.ok_ns(&[
        "get",
        "fl",
        "my-flunder",
        "-o",
        "jsonpath={.metadata.annotations.wardle\\.example\\.com/created-by}",
    ]);
    assert_eq!(created_by, "admin");
    // Older kubectls (aggregated discovery v2beta1, legacy discovery) find it too.
    for version in ["1.27", "1.30"] {
        let older = Kubectl {
            server: &server,
            version,
            namespace: "wardle".into(),
        };
        let listed = older.ok_ns(&["get", "flunders"]);
        assert!(listed.contains("my-flunder"), "{version}: {listed}");
    }
    // The proxy keeps its connections to the extension: six more requests, no new handshake
    // each.
    let before = wardle.accepted.load(std::sync::atomic::Ordering::SeqCst);
    for _ in 0..6 {
        k.ok_ns(&["get", "flunder", "my-flunder"]);
    }
    let dialled = wardle.accepted.load(std::sync::atomic::Ordering::SeqCst) - before;
    assert!(dialled <= 2, "{dialled} new connections for 6 requests");
    let callers = state.lock().unwrap().callers.clone();
    assert!(
        callers
            .iter()
            .any(|(user, groups)| user == "admin" && groups.iter().any(|g| g == "system:masters")),
        "{callers:?}"
    );
    assert!(
        callers
            .iter()
            .any(|(user, _)| user == "system:kube-aggregator"),
        "the availability check: {callers:?}"
    );

    // Authorization is the aggregator's: a caller RBAC refuses never reaches the extension.
    let refused = k.fails_ns(&["get", "flunders", "--as=somebody"]);
    assert!(
        refused.contains(
            "flunders.wardle.example.com is forbidden: User \"somebody\" cannot list resource \"flunders\" in API group \"wardle.example.com\" in the namespace \"wardle\""
        ),
        "{refused}"
    );
    let callers = state.lock().unwrap().callers.clone();
    assert!(
        !callers.iter().any(|(user, _)| user == "somebody"),
        "{callers:?}"
    );

    // The extension apiserver goes away: the APIService turns unavailable and its requests
    // are answered 503 by the aggregator.
    wardle.stop().await;
    let row = wait_available(&k, "False (FailedDiscoveryCheck)").await;
    assert!(row.contains("wardle/api"), "{row}");
    let failed = k.fails_ns(&["get", "flunders", "my-flunder"]);
    assert!(
        failed.contains("the server is currently unable to handle the request")
            || failed.contains("service unavailable"),
        "{failed}"
    );
    let message = k.ok(&[
        "get",
        "apiservice",
        "v1alpha1.wardle.example.com",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Available\")].message}",
    ]);
    assert!(
        message.starts_with(&format!(
            "failing or missing response from https://{addr}/apis/wardle.example.com/v1alpha1"
        )),
        "{message}"
    );
}

/// A kube-rs client of `server` presenting the client certificate in `cert`/`key` (files) and
/// sending `headers` with every request.
async fn client_with(
    server: &RudderServer,
    cert: &std::path::Path,
    key: &std::path::Path,
    headers: &[(&'static str, &'static str)],
) -> kube::Client {
    let mut kubeconfig = kube::config::Kubeconfig::read_from(server.kubeconfig()).unwrap();
    for named in &mut kubeconfig.auth_infos {
        let auth = named.auth_info.as_mut().unwrap();
        auth.client_certificate_data = None;
        auth.client_key_data = None;
        auth.client_certificate = Some(cert.display().to_string());
        auth.client_key = Some(key.display().to_string());
    }
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.default_retry = false;
    for (name, value) in headers {
        config.headers.push((
            http::HeaderName::from_static(name),
            http::HeaderValue::from_static(value),
        ));
    }
    kube::Client::try_from(config).unwrap()
}

/// Who the server takes the client for (SelfSubjectReview, as `kubectl auth whoami`).
async fn whoami(client: kube::Client) -> Result<(String, Vec<String>), kube::Error> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let reviews: kube::Api<SelfSubjectReview> = kube::Api::all(client);
    let review = reviews
        .create(&Default::default(), &SelfSubjectReview::default())
        .await?;
    let user = review.status.unwrap().user_info.unwrap();
    Ok((user.username.unwrap(), user.groups.unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authenticating_proxy_names_the_user_in_headers() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("state.db").display());
    let server = RudderServer::start_apiserver_only(RUDDER, &url);
    let pki = server.data_dir().join("pki");
    let (proxy_cert, proxy_key) = (
        pki.join("front-proxy-client.crt"),
        pki.join("front-proxy-client.key"),
    );
    let proxy = |headers| client_with(&server, &proxy_cert, &proxy_key, headers);
    // The front proxy's certificate with X-Remote-*: the user the headers name.
    let named = proxy(&[("x-remote-user", "alice"), ("x-remote-group", "dev")]).await;
    let (user, groups) = whoami(named).await.unwrap();
    assert_eq!(user, "alice");
    assert!(
        groups.contains(&"dev".to_string()) && groups.contains(&"system:authenticated".to_string()),
        "{groups:?}"
    );
    // Its certificate alone is nobody: the front-proxy CA does not issue users.
    match whoami(proxy(&[]).await).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 401, "{status:?}"),
        other => panic!("not a 401: {other:?}"),
    }
    // A user's certificate (the cluster CA's) is that user, whatever headers it sends.
    let admin = client_with(
        &server,
        &pki.join("admin.crt"),
        &pki.join("admin.key"),
        &[("x-remote-user", "mallory")],
    )
    .await;
    assert_eq!(whoami(admin).await.unwrap().0, "admin");
}
