//! `rudder bench admission`: what extending the API costs a write, per driver. Against one
//! in-process apiserver per subject (sqlite, postgres, etcd), each round runs, in rotating
//! order:
//!
//! - `configmap`: ConfigMap creates (the reference);
//! - `custom-resource`: creates of a custom resource whose CRD has a generated 500-line
//!   structural schema and 10 CEL rules (pruning, defaulting, validation and the rules all
//!   run);
//! - `webhook`: ConfigMap creates that one validating webhook (an HTTPS server in this
//!   process that allows everything) is called for;
//! - `policy`: ConfigMap creates that one ValidatingAdmissionPolicy (two CEL validations)
//!   judges.
//!
//! Each figure is also a ratio to `configmap` on the same subject in the same run, and the
//! added p50 latency of a webhook or a policy is printed beside it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::Engine;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{ApiResource, DynamicObject, ObjectMeta, PostParams};
use kube::{Api, Client};
use rudder_apiserver::server::{self, Config, Running};
use rudder_storage::Storage;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::api::{admin_config, cleanup, concise, concurrently, configmap, storage_url, Backends};

const WORKLOADS: &[&str] = &["configmap", "custom-resource", "webhook", "policy"];

#[derive(clap::Args)]
pub struct AdmissionBenchArgs {
    /// Subjects, comma-separated: sqlite, postgres, etcd.
    #[arg(long, default_value = "sqlite,postgres,etcd", value_delimiter = ',')]
    subjects: Vec<String>,
    /// etcd client endpoint (HOST:PORT) for the etcd subject.
    #[arg(
        long,
        env = "RUDDER_BENCH_ETCD_ENDPOINT",
        default_value = "127.0.0.1:2379"
    )]
    etcd_endpoint: String,
    /// PostgreSQL URL for the postgres subject; the bench works in a schema of its own.
    #[arg(
        long,
        env = "RUDDER_BENCH_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    postgres_url: String,
    /// Creates per workload per subject in each round.
    #[arg(long, default_value_t = 2_000)]
    creates: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Rounds; each runs every workload once, in rotating order.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
}

/// The generated schema of the bench's custom resource: `fields` typed properties (strings
/// with patterns and enums, bounded integers, nested objects, lists) — about 10 YAML lines
/// each — and 10 CEL rules over them.
fn schema(fields: usize) -> Value {
    let mut properties = serde_json::Map::new();
    for i in 0..fields {
        let property = match i % 5 {
            0 => {
                json!({"type": "string", "description": format!("Field {i}: a name."), "pattern": "^[a-z][-a-z0-9]*$", "maxLength": 63})
            }
            1 => {
                json!({"type": "integer", "description": format!("Field {i}: a count."), "minimum": 0, "maximum": 1000, "default": 1})
            }
            2 => {
                json!({"type": "string", "description": format!("Field {i}: a mode."), "enum": ["fast", "safe", "balanced"], "default": "safe"})
            }
            3 => {
                json!({"type": "object", "description": format!("Field {i}: a reference."), "properties": {
                "name": {"type": "string", "maxLength": 253}, "namespace": {"type": "string"}, "port": {"x-kubernetes-int-or-string": true}}})
            }
            _ => {
                json!({"type": "array", "description": format!("Field {i}: a set."), "x-kubernetes-list-type": "set", "maxItems": 16,
                "items": {"type": "string", "maxLength": 64}})
            }
        };
        properties.insert(format!("field{i}"), property);
    }
    let rules: Vec<Value> = (0..10)
        .map(|i| {
            let count = 5 * i + 1;
            json!({"rule": format!("!has(self.field{count}) || self.field{count} <= 1000 - {i}"),
                   "message": format!("field{count} is too large")})
        })
        .collect();
    json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": properties, "x-kubernetes-validations": rules},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
        }
    })
}

fn crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.bench.rudder.test"},
        "spec": {
            "group": "bench.rudder.test", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": schema(62)}, "subresources": {"status": {}}}]
        }
    })
}

fn widget(name: String) -> DynamicObject {
    let mut object = DynamicObject::new(&name, &widgets_resource());
    object.data = json!({"spec": {
        "field0": "primary", "field1": 3, "field2": "fast",
        "field3": {"name": "backend", "port": 8080}, "field4": ["a", "b"],
        "field5": "secondary", "field6": 7, "field10": "third", "field11": 9
    }});
    object
}

fn widgets_resource() -> ApiResource {
    ApiResource {
        group: "bench.rudder.test".into(),
        version: "v1".into(),
        api_version: "bench.rudder.test/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}

/// An HTTPS webhook that allows every request, on 127.0.0.1; returns its URL and CA (PEM).
async fn allow_all_webhook(shutdown: CancellationToken) -> Result<(String, String)> {
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])?.self_signed(&key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der())
                .map_err(|error| anyhow::anyhow!("the webhook's key: {error}"))?,
        )?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let Ok((tcp, _)) = accepted else { return };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 16384];
                loop {
                    let Ok(n) = tls.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buffer.extend_from_slice(&chunk[..n]);
                    let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buffer[..end]).to_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    if buffer.len() < end + 4 + length {
                        continue;
                    }
                    let review: Value = serde_json::from_slice(&buffer[end + 4..end + 4 + length])
                        .unwrap_or_default();
                    let body =
                        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                        "response": {"uid": review["request"]["uid"], "allowed": true}})
                        .to_string();
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    // Keep-alive: the next request may come on this connection.
                    if tls.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                    buffer.drain(..end + 4 + length);
                }
            });
        }
    });
    Ok((format!("https://{addr}/validate"), cert.pem()))
}

struct Subject {
    name: String,
    url: String,
    dir: std::path::PathBuf,
    running: Running,
    store: Arc<dyn Storage>,
    clients: Vec<Client>,
}

async fn create_value(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    value: Value,
) -> Result<()> {
    let api: Api<DynamicObject> = match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, resource),
        None => Api::all_with(client.clone(), resource),
    };
    let object: DynamicObject = serde_json::from_value(value)?;
    api.create(&PostParams::default(), &object)
        .await
        .map_err(concise)?;
    Ok(())
}

fn registration(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// One apiserver on the subject's store, with the CRD, the webhook and the policy in place
/// (each applies to a namespace of its own).
async fn open(
    name: &str,
    args: &AdmissionBenchArgs,
    tag: &str,
    shutdown: &CancellationToken,
) -> Result<Subject> {
    let dir = std::env::temp_dir().join(format!("rudder-bench-admission-{tag}-{name}"));
    std::fs::create_dir_all(&dir)?;
    let backends = Backends {
        postgres_url: &args.postgres_url,
        etcd_endpoint: &args.etcd_endpoint,
        // These benches name no MySQL server or Spanner emulator of their own: the machine's.
        mysql_url: super::api::DEFAULT_MYSQL_URL,
        spanner_emulator: super::api::DEFAULT_SPANNER_EMULATOR,
    };
    let url = storage_url(name, &backends, &format!("admission_{tag}"), &dir)?;
    let mut config = Config::new(dir.join("apiserver"));
    config.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let store = rudder_storage::open(&url)
        .await
        .context("opening the store")?;
    let running = server::start(config, store.clone(), CancellationToken::new()).await?;
    let admin = Client::try_from(admin_config(&running).await?)?;
    for namespace in ["plain", "custom", "hooked", "policed"] {
        let object = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.into()),
                labels: Some([("bench".to_string(), namespace.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(admin.clone())
            .create(&PostParams::default(), &object)
            .await
            .map_err(concise)?;
    }
    let crds = ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    };
    create_value(&admin, &crds, None, crd()).await?;
    let (webhook_url, ca) = allow_all_webhook(shutdown.clone()).await?;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca);
    create_value(&admin, &registration("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"), None, json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "bench"},
        "webhooks": [{"name": "allow.bench.rudder.test", "clientConfig": {"url": webhook_url, "caBundle": ca},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "namespaceSelector": {"matchLabels": {"bench": "hooked"}},
            "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 10}]
    })).await?;
    create_value(&admin, &registration("ValidatingAdmissionPolicy", "validatingadmissionpolicies"), None, json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "bench"},
        "spec": {"matchConstraints": {"resourceRules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]},
            "validations": [
                {"expression": "!has(object.data) || object.data.size() < 100", "message": "too many keys"},
                {"expression": "object.metadata.name.startsWith('c-')", "message": "bad name"}]}
    })).await?;
    create_value(&admin, &registration("ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings"), None, json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "bench"},
        "spec": {"policyName": "bench", "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"bench": "policed"}}}}
    })).await?;
    // The CRD is served once Established.
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), "custom", &widgets_resource());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match widgets
            .create(&PostParams::default(), &widget("probe".into()))
            .await
        {
            Ok(_) => break,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(error) => return Err(concise(error)).context("the bench CRD was never served"),
        }
    }
    let config = admin_config(&running).await?;
    let clients = (0..args.clients)
        .map(|_| Client::try_from(config.clone()).context("a kube client"))
        .collect::<Result<Vec<_>>>()?;
    Ok(Subject {
        name: name.to_string(),
        url,
        dir,
        running,
        store,
        clients,
    })
}

async fn run_workload(
    subject: &Subject,
    workload: &str,
    count: usize,
    round: usize,
) -> Result<(f64, u64, u64)> {
    let started = Instant::now();
    let workload = workload.to_string();
    let latencies = concurrently(&subject.clients, count, move |client, index| {
        let workload = workload.clone();
        async move {
            let name = format!("c-r{round}-{index}");
            match workload.as_str() {
                "custom-resource" => {
                    let api: Api<DynamicObject> =
                        Api::namespaced_with(client, "custom", &widgets_resource());
                    api.create(&PostParams::default(), &widget(name))
                        .await
                        .map_err(concise)?;
                }
                other => {
                    let namespace = match other {
                        "webhook" => "hooked",
                        "policy" => "policed",
                        _ => "plain",
                    };
                    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
                    api.create(&PostParams::default(), &configmap(name))
                        .await
                        .map_err(concise)?;
                }
            }
            Ok(())
        }
    })
    .await?;
    Ok((
        count as f64 / started.elapsed().as_secs_f64(),
        latencies.value_at_quantile(0.5),
        latencies.value_at_quantile(0.99),
    ))
}

pub async fn run(args: AdmissionBenchArgs) -> Result<()> {
    if args.creates == 0 || args.clients == 0 || args.rounds == 0 {
        bail!("--creates, --clients and --rounds must be at least 1");
    }
    let lines = yaml_serde::to_string(&schema(62))?.lines().count();
    let tag = format!("{:08x}", rand::random::<u32>());
    let shutdown = CancellationToken::new();
    let mut subjects = Vec::new();
    for name in &args.subjects {
        subjects.push(
            open(name, &args, &tag, &shutdown)
                .await
                .with_context(|| format!("starting {name}"))?,
        );
    }
    // (subject, workload) → per-round (rate, p50, p99).
    let mut results = vec![vec![Vec::new(); WORKLOADS.len()]; subjects.len()];
    for round in 0..args.rounds {
        for (s, subject) in subjects.iter().enumerate() {
            for offset in 0..WORKLOADS.len() {
                let w = (round + offset) % WORKLOADS.len();
                let figures = run_workload(subject, WORKLOADS[w], args.creates, round).await?;
                eprintln!(
                    "{} {} round {}/{}: {:.0} creates/s, p50 {} µs, p99 {} µs",
                    subject.name,
                    WORKLOADS[w],
                    round + 1,
                    args.rounds,
                    figures.0,
                    figures.1,
                    figures.2
                );
                results[s][w].push(figures);
            }
        }
    }
    let machine = super::report::Machine::here();
    println!(
        "rudder bench admission: {} creates by {} clients per workload, {} round(s); the custom resource's schema is {lines} YAML lines with 10 CEL rules; machine: {} cores, {} GiB",
        args.creates, args.clients, args.rounds, machine.cores, machine.memory_gib.map_or_else(|| "?".to_string(), |g| format!("{g:.0}"))
    );
    println!(
        "{:<10} {:<16} {:>10} {:>9} {:>9} {:>14} {:>14}",
        "subject", "workload", "creates/s", "p50 µs", "p99 µs", "vs configmap", "added p50 µs"
    );
    for (s, subject) in subjects.iter().enumerate() {
        let median = |w: usize| {
            let mut rates: Vec<f64> = results[s][w].iter().map(|r| r.0).collect();
            rates.sort_by(f64::total_cmp);
            rates[rates.len() / 2]
        };
        let best = |w: usize, f: fn(&(f64, u64, u64)) -> u64| {
            results[s][w].iter().map(f).min().unwrap_or(0)
        };
        let reference_rate = median(0);
        let reference_p50 = best(0, |r| r.1);
        for (w, workload) in WORKLOADS.iter().enumerate() {
            let p50 = best(w, |r| r.1);
            println!(
                "{:<10} {:<16} {:>10.0} {:>9} {:>9} {:>14.3} {:>14}",
                subject.name,
                workload,
                median(w),
                p50,
                best(w, |r| r.2),
                median(w) / reference_rate,
                p50 as i64 - reference_p50 as i64
            );
        }
    }
    println!(
        "creates/s: the median over rounds; p50/p99: the best round's. vs configmap: creates/s ÷ the same subject's ConfigMap creates; added p50: p50 − ConfigMap p50."
    );
    shutdown.cancel();
    for subject in subjects {
        drop(subject.clients);
        subject.running.stop().await?;
        subject.store.close().await;
        if let Err(error) = cleanup(&subject.url, &subject.dir).await {
            eprintln!(
                "warning: could not clean up the {} subject: {error:#}",
                subject.name
            );
        }
    }
    Ok(())
}
