//! Unit tests of the pieces: the kubelet's endpoint, the container, the options and the
//! kubelet's paths. The whole proxy, over real TLS, is tested in `tests/kubelet_proxy.rs`.

use serde_json::json;

use super::connect::proxied_path;
use super::endpoint::{container, Endpoint};
use super::log::{kubelet_failure, LogOptions};
use super::options::{connect_options, stream_target};
use super::upgrade::{proxied_headers, upgrade_headers};
use crate::catalog::Subresource;
use crate::request::Query;

fn pod(init: &[&str], containers: &[&str]) -> serde_json::Value {
    let list = |names: &[&str]| names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>();
    json!({"metadata": {"name": "web"},
           "spec": {"initContainers": list(init), "containers": list(containers)}})
}

#[test]
fn the_only_container_is_the_default_and_others_must_be_named() {
    assert_eq!(container(&pod(&["setup"], &["app"]), None).unwrap(), "app");
    assert_eq!(
        container(&pod(&["setup"], &["app"]), Some("setup")).unwrap(),
        "setup"
    );
    let error = container(&pod(&["setup"], &["a", "b"]), None).unwrap_err();
    assert_eq!(error.code, 400);
    assert_eq!(
        error.message,
        "a container name must be specified for pod web, choose one of: [setup a b]"
    );
    let error = container(&pod(&[], &["a"]), Some("c")).unwrap_err();
    assert_eq!(error.message, "container c is not valid for pod web");
    let error = container(&pod(&[], &[]), None).unwrap_err();
    assert_eq!(
        error.message,
        "a container name must be specified for pod web"
    );
}

#[test]
fn the_kubelet_is_at_the_preferred_address_and_its_reported_port() {
    let node = json!({"status": {
        "addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.5"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 11250}}}});
    assert_eq!(
        Endpoint::of_node(&node).unwrap(),
        Endpoint {
            host: "10.0.0.5".into(),
            port: 11250
        }
    );
    let node = json!({"status": {"addresses": [{"type": "Hostname", "address": "n1"}]}});
    let endpoint = Endpoint::of_node(&node).unwrap();
    assert_eq!(endpoint.authority(), "n1:10250");
    let v6 = Endpoint {
        host: "::1".into(),
        port: 1,
    };
    assert_eq!(v6.authority(), "[::1]:1");
    let error = Endpoint::of_node(&json!({"status": {}})).unwrap_err();
    assert_eq!(error.code, 500);
    assert_eq!(
        error.message,
        "no preferred addresses found; known addresses: []"
    );
}

#[test]
fn log_options_parse_validate_and_travel_in_the_kubelets_order() {
    let options = |query: &str| LogOptions::from_query(&Query::parse(Some(query)));
    let parsed =
        options("container=c&follow=true&tailLines=10&timestamps=1&limitBytes=5&previous=false")
            .unwrap();
    assert_eq!(parsed.container.as_deref(), Some("c"));
    assert!(parsed.follow && parsed.timestamps && !parsed.previous);
    assert_eq!(
        parsed.kubelet_query(),
        "follow=true&limitBytes=5&tailLines=10&timestamps=true"
    );
    let since = options("sinceTime=2024-05-01T12:00:00.5%2B02:00").unwrap();
    assert_eq!(since.kubelet_query(), "sinceTime=2024-05-01T10%3A00%3A00Z");
    assert_eq!(options("tailLines=x").unwrap_err().code, 400);
    assert_eq!(options("sinceTime=yesterday").unwrap_err().code, 400);

    let error = options("tailLines=-1")
        .unwrap()
        .validate("web")
        .unwrap_err();
    assert_eq!(error.code, 422);
    assert_eq!(
        error.message,
        "PodLogOptions \"web\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0"
    );
    let error = options("limitBytes=0&sinceSeconds=0")
        .unwrap()
        .validate("web")
        .unwrap_err();
    let causes = &error.details.as_ref().unwrap().causes;
    assert_eq!(causes.len(), 2);
    assert_eq!(causes[1].field, "sinceSeconds");
    let error = options("sinceSeconds=5&sinceTime=2024-05-01T12:00:00Z")
        .unwrap()
        .validate("web")
        .unwrap_err();
    assert!(
        error
            .message
            .contains("at most one of `sinceTime` or `sinceSeconds`"),
        "{}",
        error.message
    );
    options("sinceSeconds=5").unwrap().validate("web").unwrap();
}

#[test]
fn streaming_options_become_the_kubelets_names() {
    let query = Query::parse(Some(
        "command=sh&command=-c&command=echo%20hi&stdin=true&stdout=true&stderr=false&tty=1&container=app",
    ));
    assert_eq!(
        stream_target(Subresource::Exec, "default", "web", "app", &query).unwrap(),
        "/exec/default/web/app?command=sh&command=-c&command=echo+hi&input=1&output=1&tty=1"
    );
    assert_eq!(
        stream_target(Subresource::Attach, "default", "web", "app", &query).unwrap(),
        "/attach/default/web/app?input=1&output=1&tty=1"
    );
    let ports = Query::parse(Some("ports=80&ports=443,8080"));
    assert_eq!(
        stream_target(Subresource::PortForward, "ns", "web", "", &ports).unwrap(),
        "/portForward/ns/web?port=80%2C443%2C8080"
    );
    let bad = Query::parse(Some("ports=http"));
    assert_eq!(
        stream_target(Subresource::PortForward, "ns", "web", "", &bad)
            .unwrap_err()
            .code,
        400
    );
}

#[test]
fn a_node_proxy_path_is_what_follows_proxy() {
    assert_eq!(
        proxied_path("/api/v1/nodes/n1/proxy/metrics/cadvisor"),
        "/metrics/cadvisor"
    );
    assert_eq!(proxied_path("/api/v1/nodes/n1/proxy/"), "/");
    assert_eq!(proxied_path("/api/v1/nodes/n1/proxy"), "/");
    assert_eq!(proxied_path("/api/v1/nodes/n1/proxy/a%2Fb"), "/a%2Fb");
}

#[test]
fn a_kubelet_failure_keeps_its_code_and_names_the_object() {
    let error = kubelet_failure(404, "pods/log", "web", "no such container");
    assert_eq!((error.code, error.reason.as_str()), (404, "NotFound"));
    assert_eq!(
        error.message,
        "the server could not find the requested resource ( pods/log web)"
    );
    let error = kubelet_failure(
        400,
        "pods/log",
        "web",
        "container \"app\" is waiting to start",
    );
    assert_eq!(error.message, "container \"app\" is waiting to start");
    assert_eq!(kubelet_failure(500, "pods/log", "web", "boom").code, 500);
}

#[test]
fn upgrades_forward_their_headers_and_never_the_clients_credentials() {
    let mut client = http::HeaderMap::new();
    client.insert("connection", "Upgrade".parse().unwrap());
    client.insert("upgrade", "SPDY/3.1".parse().unwrap());
    client.append(
        "x-stream-protocol-version",
        "v4.channel.k8s.io".parse().unwrap(),
    );
    client.append(
        "x-stream-protocol-version",
        "v3.channel.k8s.io".parse().unwrap(),
    );
    client.insert("authorization", "Bearer secret".parse().unwrap());
    client.insert("impersonate-user", "root".parse().unwrap());
    client.insert("accept", "*/*".parse().unwrap());
    let forwarded = upgrade_headers(&client);
    assert_eq!(
        forwarded
            .get_all("x-stream-protocol-version")
            .iter()
            .count(),
        2
    );
    assert!(forwarded.get("authorization").is_none() && forwarded.get("accept").is_none());
    let proxied = proxied_headers(&client);
    assert_eq!(proxied.get("upgrade").unwrap(), "SPDY/3.1");
    assert_eq!(proxied.get("accept").unwrap(), "*/*");
    assert!(proxied.get("authorization").is_none());
    assert!(proxied.get("impersonate-user").is_none());
}

#[test]
fn a_connect_is_admitted_with_the_options_upstream_decodes_from_its_query() {
    let exec = Query::parse(Some(
        "command=sh&command=-c&command=ls&container=app&stdin=true&stdout=1&stderr=false&tty",
    ));
    assert_eq!(
        connect_options(Subresource::Exec, &exec, "").unwrap(),
        json!({"kind": "PodExecOptions", "apiVersion": "v1", "stdin": true, "stdout": true,
               "tty": true, "container": "app", "command": ["sh", "-c", "ls"]})
    );
    assert_eq!(
        connect_options(Subresource::Attach, &Query::parse(Some("stdout=1")), "").unwrap(),
        json!({"kind": "PodAttachOptions", "apiVersion": "v1", "stdout": true})
    );
    assert_eq!(
        connect_options(
            Subresource::PortForward,
            &Query::parse(Some("ports=80,443")),
            ""
        )
        .unwrap(),
        json!({"kind": "PodPortForwardOptions", "apiVersion": "v1", "ports": [80, 443]})
    );
    assert_eq!(
        connect_options(Subresource::Proxy, &Query::default(), "/metrics/cadvisor").unwrap(),
        json!({"kind": "NodeProxyOptions", "apiVersion": "v1", "path": "metrics/cadvisor"})
    );
    assert_eq!(
        connect_options(Subresource::PortForward, &Query::parse(Some("ports=x")), "")
            .unwrap_err()
            .code,
        400
    );
}
