//! OpenTelemetry tracing end to end: a small OTLP/gRPC collector in the test's process, a
//! `rudder server` with `--tracing-config-file` aimed at it, and real kubectl. One
//! `kubectl apply` of a new ConfigMap must arrive as a span tree from the HTTP request through
//! authentication, authorization, admission and the registry down to the storage call and the
//! SQL statements; a client's W3C `traceparent` must be followed (sampled: the request joins
//! the client's trace; not sampled: nothing is exported).

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use rudder_tests::{Kubectl, RudderServer};

/// Every span exported to it, with its service name.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<(String, Span)>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for resource_spans in request.into_inner().resource_spans {
            let service = resource_spans
                .resource
                .iter()
                .flat_map(|resource| &resource.attributes)
                .find(|attribute| attribute.key == "service.name")
                .and_then(|attribute| text(attribute.value.as_ref()?.value.as_ref()?))
                .unwrap_or_default();
            for scope in resource_spans.scope_spans {
                spans.extend(scope.spans.into_iter().map(|span| (service.clone(), span)));
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

fn text(value: &AnyValue) -> Option<String> {
    match value {
        AnyValue::StringValue(text) => Some(text.clone()),
        AnyValue::IntValue(number) => Some(number.to_string()),
        AnyValue::BoolValue(flag) => Some(flag.to_string()),
        _ => None,
    }
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|attribute| attribute.key == key)
        .and_then(|attribute| text(attribute.value.as_ref()?.value.as_ref()?))
}

/// Starts the collector on a free port, on a runtime of its own.
fn start_collector() -> (Collector, SocketAddr) {
    let collector = Collector::default();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let service = TraceServiceServer::new(collector.clone());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
    });
    (collector, address)
}

/// The spans collected so far that satisfy `found`, waiting up to 30 s for one.
fn wait_for(collector: &Collector, what: &str, found: impl Fn(&[Span]) -> bool) -> Vec<Span> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let spans: Vec<Span> = collector
            .spans
            .lock()
            .unwrap()
            .iter()
            .map(|(_, span)| span.clone())
            .collect();
        if found(&spans) {
            return spans;
        }
        assert!(
            Instant::now() < deadline,
            "no {what} among {} spans: {:?}",
            spans.len(),
            spans.iter().map(|span| &span.name).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn is_create_of_configmap(span: &Span) -> bool {
    span.name == "KubernetesAPI"
        && attribute(span, "http.method").as_deref() == Some("POST")
        && attribute(span, "http.target").as_deref() == Some("/api/v1/namespaces/traced/configmaps")
}

#[test]
fn a_kubectl_apply_is_one_span_tree_down_to_the_store() {
    let (collector, address) = start_collector();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tracing.yaml");
    std::fs::write(
        &config,
        format!("apiVersion: apiserver.config.k8s.io/v1beta1\nkind: TracingConfiguration\nendpoint: {address}\nsamplingRatePerMillion: 1000000\n"),
    )
    .unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "tracer-token,tracer,1,system:masters\n").unwrap();
    let storage = format!("sqlite://{}", dir.path().join("state.db").display());
    // Spans leave in batches; a short delay keeps the test quick.
    std::env::set_var("OTEL_BSP_SCHEDULE_DELAY", "200");
    let server = RudderServer::start_with_args(
        env!("CARGO_BIN_EXE_rudder"),
        &storage,
        &[
            "--disable-controller-manager",
            "--disable-scheduler",
            "--tracing-config-file",
            config.to_str().unwrap(),
            "--token-auth-file",
            tokens.to_str().unwrap(),
        ],
    );
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "traced".into(),
    };
    k.ok(&["create", "namespace", "traced"]);
    let manifest = k.file(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: traced\n  namespace: traced\ndata:\n  a: b\n",
    );
    k.ok(&["apply", "-f", &manifest]);

    let spans = wait_for(
        &collector,
        "POST of the ConfigMap with its storage span",
        |spans| {
            spans
                .iter()
                .filter(|span| is_create_of_configmap(span))
                .any(|root| {
                    spans
                        .iter()
                        .any(|span| span.trace_id == root.trace_id && span.name == "sql.commit")
                })
        },
    );
    let root = spans
        .iter()
        .find(|span| is_create_of_configmap(span))
        .unwrap();
    let tree: Vec<&Span> = spans
        .iter()
        .filter(|span| span.trace_id == root.trace_id)
        .collect();
    let by_id: HashMap<&[u8], &Span> = tree
        .iter()
        .map(|span| (span.span_id.as_slice(), *span))
        .collect();
    let parent_name = |name: &str| -> String {
        let span = tree
            .iter()
            .find(|span| span.name == name)
            .unwrap_or_else(|| {
                panic!(
                    "no {name} span in {:?}",
                    tree.iter().map(|span| &span.name).collect::<Vec<_>>()
                )
            });
        by_id
            .get(span.parent_span_id.as_slice())
            .map(|parent| parent.name.clone())
            .unwrap_or_else(|| panic!("{name}'s parent is not in the trace"))
    };
    // The request is the root: the client sent no trace context.
    assert!(root.parent_span_id.is_empty(), "{root:?}");
    assert_eq!(attribute(root, "http.status_code").as_deref(), Some("201"));
    assert_eq!(attribute(root, "user").as_deref(), Some("admin"));
    assert!(attribute(root, "http.user_agent")
        .unwrap()
        .starts_with("kubectl"));
    assert_eq!(parent_name("authentication"), "KubernetesAPI");
    assert_eq!(parent_name("authorization"), "KubernetesAPI");
    assert_eq!(parent_name("registry.create"), "KubernetesAPI");
    assert_eq!(parent_name("admission.mutate"), "registry.create");
    assert_eq!(parent_name("admission.validate"), "registry.create");
    assert_eq!(parent_name("storage.txn"), "registry.create");
    assert_eq!(parent_name("sql.batch"), "storage.txn");
    assert_eq!(parent_name("sql.begin_and_lock"), "sql.batch");
    assert_eq!(parent_name("sql.commit"), "sql.batch");
    // Children start after their parents (their ends are the last time each was left, which
    // for async work need not nest).
    for span in &tree {
        if let Some(parent) = by_id.get(span.parent_span_id.as_slice()) {
            assert!(
                span.start_time_unix_nano >= parent.start_time_unix_nano,
                "{} starts before {}",
                span.name,
                parent.name
            );
        }
    }
    let service = collector
        .spans
        .lock()
        .unwrap()
        .iter()
        .find(|(_, span)| span.span_id == root.span_id)
        .map(|(service, _)| service.clone())
        .unwrap();
    assert_eq!(service, "apiserver");

    // A client's trace context: sampled, the request joins the client's trace as a child of
    // the client's span; not sampled, nothing of it is exported.
    let url = format!(
        "https://{}/api/v1/namespaces/traced/configmaps/traced",
        server_address(&server)
    );
    let sampled_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let unsampled_trace = "5bf92f3577b34da6a3ce929d0e0e4737";
    for (trace, flags) in [(sampled_trace, "01"), (unsampled_trace, "00")] {
        let output = std::process::Command::new("curl")
            .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}"])
            .args(["-H", "Authorization: Bearer tracer-token"])
            .args([
                "-H",
                &format!("traceparent: 00-{trace}-{client_span}-{flags}"),
            ])
            .arg(&url)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&output.stdout), "200");
    }
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let spans = wait_for(&collector, "a request in the client's trace", |spans| {
        spans
            .iter()
            .any(|span| span.name == "KubernetesAPI" && hex(&span.trace_id) == sampled_trace)
    });
    let joined = spans
        .iter()
        .find(|span| span.name == "KubernetesAPI" && hex(&span.trace_id) == sampled_trace)
        .unwrap();
    assert_eq!(hex(&joined.parent_span_id), client_span);
    assert_eq!(attribute(joined, "user").as_deref(), Some("tracer"));
    // Give the unsampled request's spans, had there been any, the time to arrive.
    std::thread::sleep(Duration::from_secs(2));
    let leaked = collector
        .spans
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, span)| hex(&span.trace_id) == unsampled_trace)
        .count();
    assert_eq!(leaked, 0, "an unsampled client's request was exported");
}

/// `host:port` of the server, from its kubeconfig.
fn server_address(server: &RudderServer) -> String {
    let kubeconfig = std::fs::read_to_string(server.kubeconfig()).unwrap();
    let line = kubeconfig
        .lines()
        .find(|line| line.trim_start().starts_with("server:"))
        .unwrap();
    line.trim()
        .trim_start_matches("server:")
        .trim()
        .trim_matches('"')
        .trim_start_matches("https://")
        .to_string()
}

#[test]
fn a_malformed_tracing_configuration_stops_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tracing.yaml");
    std::fs::write(
        &config,
        "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: TracingConfiguration\nsamplingRatePerMillion: 2000000\n",
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_rudder"))
        .args(["server", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--tracing-config-file")
        .arg(&config)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("samplingRatePerMillion: Invalid value: 2000000")
            && stderr.contains("tracing.yaml"),
        "{stderr}"
    );
}
