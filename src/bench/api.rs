//! `rudder bench api`: the Kubernetes API over real HTTPS, on each storage driver. Per subject
//! (sqlite, postgres, etcd) an in-process apiserver runs on a store of its own, and kube-rs
//! clients talk to it through its admin kubeconfig:
//!
//! - `create`: `--creates` ConfigMap creates by `--clients` concurrent clients, each a
//!   `kube::Client` of its own (kube-rs speaks HTTP/1.1, so one keep-alive TLS connection each);
//! - `list`: a full JSON LIST of the `--pods` pods written (untimed) into one namespace;
//! - `list-paged`: the same pods in pages of `--page-size`, following `continue`.
//!
//! Subjects run round-robin, in an order that rotates from round to round, and every figure is
//! also given as a ratio to the etcd subject measured in the same run. This file has the flags,
//! the servers and the traffic; `api_report` the figures, the table and results.json.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use hdrhistogram::Histogram;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use rudder_apiserver::server::{self, Config, Running};
use rudder_storage::Storage;
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::api_report::{self, Sample, Tally, Workload};
use super::report;
use super::subjects::REFERENCE;

/// Where every object of the bench goes.
const NAMESPACE: &str = "default";

#[derive(clap::Args)]
pub struct ApiBenchArgs {
    /// Subjects to measure, comma-separated: sqlite, postgres, mysql, etcd (the reference); a
    /// `-nocache` suffix (`sqlite-nocache`) runs that driver with --watch-cache=false.
    #[arg(long, default_value = "sqlite,postgres,etcd", value_delimiter = ',')]
    subjects: Vec<String>,
    #[command(flatten)]
    backends: BackendArgs,
    /// Write results.json into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Rounds; each round runs every subject once per workload, in rotating order.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// ConfigMap creates per subject in each round.
    #[arg(long, default_value_t = 10_000)]
    creates: usize,
    /// Concurrent clients (one kube::Client and connection each) for the creates.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Pods written (untimed) into one namespace before the lists.
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// Full lists (and paged lists) per subject in each round.
    #[arg(long, default_value_t = 5)]
    list_repeats: usize,
    /// Pods per page of the paged list.
    #[arg(long, default_value_t = 500)]
    page_size: u32,
}

/// The sizes of a run, as results.json records them.
#[derive(Clone, Debug, Serialize)]
pub struct Params {
    pub creates: usize,
    pub clients: usize,
    pub pods: usize,
    pub list_repeats: usize,
    pub page_size: u32,
}

impl ApiBenchArgs {
    fn params(&self) -> Result<Params> {
        let counts = [
            ("--rounds", self.rounds),
            ("--creates", self.creates),
            ("--clients", self.clients),
            ("--pods", self.pods),
            ("--list-repeats", self.list_repeats),
            ("--page-size", self.page_size as usize),
        ];
        if let Some((flag, _)) = counts.iter().find(|(_, value)| *value == 0) {
            bail!("{flag} must be at least 1");
        }
        Ok(Params {
            creates: self.creates,
            clients: self.clients,
            pods: self.pods,
            list_repeats: self.list_repeats,
            page_size: self.page_size,
        })
    }
}

pub async fn run(args: ApiBenchArgs) -> Result<()> {
    let params = args.params()?;
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let tag = format!("{:08x}", rand::random::<u32>());
    let servers = open_all(&args, &tag, params.clients).await?;
    let outcome = tokio::select! {
        outcome = measure(&servers, &params, args.rounds) => outcome,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };
    let names: Vec<String> = servers.iter().map(|s| s.name.clone()).collect();
    close_all(servers).await;
    let tallies = outcome?;

    let rows = api_report::rows(&names, &tallies, REFERENCE, &params);
    let machine = report::Machine::here();
    println!(
        "rudder bench api: {} round(s) on {}; {} creates by {} clients, lists of {} pods \
         ({} per page paged); machine: {} cores, {} GiB",
        args.rounds,
        names.join(", "),
        params.creates,
        params.clients,
        params.pods,
        params.page_size,
        machine.cores,
        machine
            .memory_gib
            .map_or("?".to_string(), |m| format!("{m}")),
    );
    println!("{}", api_report::table(&rows, REFERENCE));
    let failures = api_report::failures(&rows);
    for failure in &failures {
        println!("{failure}");
    }
    println!(
        "objects/s: creates ÷ wall time of the creates; for lists, pods ÷ the p50 list time. \
         p50/p99/min over every create or every list (with a few lists p99 is the slowest). \
         response: bytes of one full list (all pages for list-paged). vs {REFERENCE}: \
         objects/s ÷ {REFERENCE}'s in this run (above 1 is faster)."
    );
    if let Some(dir) = &args.out {
        let summary = api_report::Summary {
            command: report::command_line(std::env::args()),
            machine,
            reference: REFERENCE,
            subjects: &names,
            rounds: args.rounds,
            params: &params,
            results: &rows,
        };
        let path = api_report::write_json(dir, &summary)?;
        eprintln!("wrote {}", path.display());
    }
    if !failures.is_empty() {
        bail!("{} measurement(s) failed (see above)", failures.len());
    }
    Ok(())
}

/// Writes the pods of every subject (untimed), then runs each workload round by round with the
/// subjects in rotating order; returns `tallies[workload][subject]` in [`Workload::ALL`] order.
async fn measure(servers: &[Server], params: &Params, rounds: usize) -> Result<Vec<Vec<Tally>>> {
    for server in servers {
        let started = Instant::now();
        match create_pods(server, params).await {
            Ok(()) => {
                let elapsed = started.elapsed();
                eprintln!(
                    "setup {}: {} pods in {:.1} s ({}/s, untimed)",
                    server.name,
                    params.pods,
                    elapsed.as_secs_f64(),
                    report::format_rate(report::throughput(params.pods as u64, elapsed)),
                );
            }
            // Its lists will fail and say so; the other workloads and subjects go on.
            Err(error) => eprintln!("setup {} failed: {error:#}", server.name),
        }
    }
    let mut tallies = Vec::new();
    for workload in Workload::ALL {
        let mut row = Vec::new();
        for _ in servers {
            row.push(Tally::new()?);
        }
        for round in 0..rounds {
            for offset in 0..servers.len() {
                let index = (round + offset) % servers.len();
                let server = &servers[index];
                let what = format!(
                    "{} {} round {}/{rounds}",
                    workload.name(),
                    server.name,
                    round + 1
                );
                let sample = match workload {
                    Workload::Create => creates(server, params, round).await,
                    Workload::List => lists(server, params).await,
                    Workload::ListPaged => paged_lists(server, params).await,
                };
                // A failure is a result too: it is reported in the table and the run goes on.
                match sample {
                    Ok(sample) => {
                        eprintln!(
                            "{what}: {}",
                            api_report::describe(workload, &sample, params)
                        );
                        row[index].add(workload, &sample)?;
                    }
                    Err(error) => {
                        eprintln!("{what} failed: {error:#}");
                        row[index].fail(format!("{error:#}"));
                    }
                }
            }
        }
        tallies.push(row);
    }
    Ok(tallies)
}

/// One subject: an apiserver on a store of its own, and its clients.
struct Server {
    name: String,
    url: String,
    /// The apiserver's data dir (PKI, kubeconfig) and, for sqlite, the database.
    dir: PathBuf,
    running: Running,
    store: Arc<dyn Storage>,
    /// One per concurrent client, each with a connection pool of its own.
    clients: Vec<Client>,
}

impl Server {
    /// Stops the apiserver, then wipes the store and removes the directory.
    async fn close(self) -> Result<()> {
        drop(self.clients);
        let stopped = self.running.stop().await.context("stopping the apiserver");
        self.store.close().await;
        let cleaned = cleanup(&self.url, &self.dir).await;
        stopped.and(cleaned)
    }
}

/// Starts every subject's apiserver; if one fails, the ones already started are closed again.
async fn open_all(args: &ApiBenchArgs, tag: &str, clients: usize) -> Result<Vec<Server>> {
    let mut servers: Vec<Server> = Vec::new();
    for name in &args.subjects {
        if servers.iter().any(|s| &s.name == name) {
            close_all(servers).await;
            bail!("subject {name:?} is named twice");
        }
        match open(name, args, tag, clients).await {
            Ok(server) => servers.push(server),
            Err(error) => {
                close_all(servers).await;
                return Err(error).with_context(|| format!("starting the {name} subject"));
            }
        }
    }
    Ok(servers)
}

/// Closes every subject, reporting (not failing on) cleanup errors.
async fn close_all(servers: Vec<Server>) {
    for server in servers {
        let name = server.name.clone();
        if let Err(error) = server.close().await {
            eprintln!("warning: could not clean up the {name} subject: {error:#}");
        }
    }
}

/// The MySQL server a mysql subject uses unless told otherwise.
pub(super) const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";
/// The PostgreSQL server a postgres subject uses unless told otherwise.
const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
/// The etcd an etcd subject uses unless told otherwise.
const DEFAULT_ETCD_ENDPOINT: &str = "127.0.0.1:2379";
/// The Cloud Spanner emulator a spanner subject uses unless told otherwise.
pub(super) const DEFAULT_SPANNER_EMULATOR: &str = "127.0.0.1:9010";

/// The servers the postgres, mysql and etcd subjects use, as flags (shared by the benches).
#[derive(clap::Args)]
pub struct BackendArgs {
    /// etcd client endpoint (HOST:PORT) for the etcd subject.
    #[arg(
        long,
        env = "RUDDER_BENCH_ETCD_ENDPOINT",
        default_value = DEFAULT_ETCD_ENDPOINT
    )]
    pub etcd_endpoint: String,
    /// PostgreSQL URL for the postgres subject; the bench works in a schema of its own.
    #[arg(
        long,
        env = "RUDDER_BENCH_POSTGRES_URL",
        default_value = DEFAULT_POSTGRES_URL
    )]
    pub postgres_url: String,
    /// MySQL/MariaDB URL for the mysql subject; the bench works in a database of its own
    /// on that server.
    #[arg(
        long,
        env = "RUDDER_BENCH_MYSQL_URL",
        default_value = DEFAULT_MYSQL_URL
    )]
    pub mysql_url: String,
    /// Cloud Spanner emulator (HOST:PORT) for the spanner subject; the bench works in a
    /// database of its own (the emulator's figures say nothing of Cloud Spanner's speed).
    #[arg(
        long,
        env = "RUDDER_BENCH_SPANNER_EMULATOR",
        default_value = DEFAULT_SPANNER_EMULATOR
    )]
    pub spanner_emulator: String,
}

impl BackendArgs {
    pub(super) fn backends(&self) -> Backends<'_> {
        Backends {
            postgres_url: &self.postgres_url,
            etcd_endpoint: &self.etcd_endpoint,
            mysql_url: &self.mysql_url,
            spanner_emulator: &self.spanner_emulator,
        }
    }
}

/// Where the subjects' servers keep their data.
pub(super) struct Backends<'a> {
    pub postgres_url: &'a str,
    pub etcd_endpoint: &'a str,
    pub mysql_url: &'a str,
    pub spanner_emulator: &'a str,
}

/// A Spanner subject's database on the emulator: its name from `tag` within Spanner's 30
/// characters (dropped by the cleanup).
fn spanner_database_url(emulator: &str, tag: &str) -> String {
    let mut database: String = format!("b{tag}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(30)
        .collect();
    while database.ends_with('_') {
        database.pop();
    }
    format!(
        "spanner://projects/rudder-bench/instances/rudder/databases/{database}?emulator_host={emulator}&compact_interval=0&poll_interval=20ms"
    )
}

/// A MySQL subject's database on the server `base` names: one per bench and variant, not
/// per run (`tag`'s random part is left out: the cleanup drops Rudder's tables, not the
/// database, so runs leave no databases behind).
fn mysql_database_url(base: &str, tag: &str) -> String {
    let (without_query, query) = base.split_once('?').unwrap_or((base, ""));
    let authority = without_query
        .strip_prefix("mysql://")
        .unwrap_or(without_query);
    let server = authority.split('/').next().unwrap_or(authority);
    let kind: Vec<&str> = tag
        .split('_')
        .filter(|part| !(part.len() == 8 && part.chars().all(|c| c.is_ascii_hexdigit())))
        .collect();
    let separator = if query.is_empty() { "" } else { "&" };
    format!(
        "mysql://{server}/rudder_bench_{}?{query}{separator}compact_interval=0",
        kind.join("_")
    )
}

/// The storage URL of a subject: a fresh SQLite file, PostgreSQL schema or etcd key prefix,
/// named by `tag`.
pub(super) fn storage_url(
    name: &str,
    backends: &Backends,
    tag: &str,
    dir: &std::path::Path,
) -> Result<String> {
    Ok(match name {
        "sqlite" => format!(
            "sqlite://{}?compact_interval=0",
            dir.join("state.db").display()
        ),
        "postgres" => {
            let base = backends.postgres_url;
            let separator = if base.contains('?') { '&' } else { '?' };
            format!("{base}{separator}schema=rudder_bench_{tag}&compact_interval=0")
        }
        "etcd" => format!(
            "etcd://{}/rudder-bench-{tag}?compact_interval=0",
            backends.etcd_endpoint
        ),
        "mysql" => mysql_database_url(backends.mysql_url, tag),
        "spanner" => spanner_database_url(backends.spanner_emulator, tag),
        other => bail!("unknown subject {other:?}: use sqlite, postgres, mysql, spanner or etcd"),
    })
}

async fn open(name: &str, args: &ApiBenchArgs, tag: &str, clients: usize) -> Result<Server> {
    let dir = std::env::temp_dir().join(format!("rudder-bench-api-{tag}-{name}"));
    let backends = args.backends.backends();
    // `<driver>-nocache`: the same driver with --watch-cache=false.
    let (driver, watch_cache, store_tag) = match name.strip_suffix("-nocache") {
        Some(driver) => (driver, false, format!("api_{tag}_nocache")),
        None => (name, true, format!("api_{tag}")),
    };
    let url = storage_url(driver, &backends, &store_tag, &dir)?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut config = Config::new(dir.join("apiserver"));
    config.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    config.watch_cache = watch_cache;
    let store = match rudder_storage::open(&url).await {
        Ok(store) => store,
        Err(error) => {
            let _ = cleanup(&url, &dir).await;
            return Err(error).context("opening the store");
        }
    };
    let running = match server::start(config, store.clone(), CancellationToken::new()).await {
        Ok(running) => running,
        Err(error) => {
            store.close().await;
            let _ = cleanup(&url, &dir).await;
            return Err(error).context("starting the apiserver");
        }
    };
    match connect(&running, clients).await {
        Ok(clients) => Ok(Server {
            name: name.to_string(),
            url,
            dir,
            running,
            store,
            clients,
        }),
        Err(error) => {
            let _ = running.stop().await;
            store.close().await;
            let _ = cleanup(&url, &dir).await;
            Err(error)
        }
    }
}

/// Wipes what a subject's store holds and removes its directory.
pub(super) async fn cleanup(url: &str, dir: &std::path::Path) -> Result<()> {
    let wiped = rudder_storage::wipe(url)
        .await
        .context("wiping what the subject wrote");
    let removed =
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()));
    wiped.and(removed)
}

/// A kube config from the server's admin kubeconfig.
pub(super) async fn admin_config(running: &Running) -> Result<kube::Config> {
    let kubeconfig = kube::config::Kubeconfig::read_from(&running.kubeconfig)
        .with_context(|| format!("reading {}", running.kubeconfig.display()))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .context("a kube config from the admin kubeconfig")
}

/// `count` kube clients from the server's admin kubeconfig, each with its own connection
/// pool, warmed up (TLS handshake done) with a GET /version.
async fn connect(running: &Running, count: usize) -> Result<Vec<Client>> {
    let config = admin_config(running).await?;
    let clients = (0..count)
        .map(|_| Client::try_from(config.clone()).context("building a kube client"))
        .collect::<Result<Vec<_>>>()?;
    warm(&clients).await?;
    Ok(clients)
}

/// Opens (or refreshes) every client's connection before something is timed.
async fn warm(clients: &[Client]) -> Result<()> {
    let versions = clients.iter().map(|client| client.apiserver_version());
    for version in futures::future::join_all(versions).await {
        version.context("GET /version")?;
    }
    Ok(())
}

/// Runs `op(client, index)` for every index below `count`, each client doing one at a time;
/// returns every operation's latency in microseconds.
pub(super) async fn concurrently<F, Fut>(
    clients: &[Client],
    count: usize,
    op: F,
) -> Result<Histogram<u64>>
where
    F: Fn(Client, usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<()>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    for client in clients {
        let (client, next, op) = (client.clone(), next.clone(), op.clone());
        tasks.spawn(async move {
            let mut latencies = Histogram::<u64>::new(3)?;
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= count {
                    break;
                }
                let started = Instant::now();
                op(client.clone(), index).await?;
                latencies.record(micros(started.elapsed()))?;
            }
            Ok::<_, anyhow::Error>(latencies)
        });
    }
    let mut all = Histogram::new(3)?;
    while let Some(joined) = tasks.join_next().await {
        all.add(joined.context("a client task failed")??)?;
    }
    Ok(all)
}

/// A kube error in one line: an API error as its HTTP code, reason and message.
pub(super) fn concise(error: kube::Error) -> anyhow::Error {
    match error {
        kube::Error::Api(status) => {
            anyhow!("HTTP {} {}: {}", status.code, status.reason, status.message)
        }
        other => anyhow::Error::new(other),
    }
}

fn micros(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}

fn labels() -> Option<BTreeMap<String, String>> {
    Some(BTreeMap::from([(
        "app".to_string(),
        "rudder-bench".to_string(),
    )]))
}

/// A small ConfigMap: a label and three short keys.
pub(super) fn configmap(name: String) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name),
            labels: labels(),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            ("mode".to_string(), "benchmark".to_string()),
            ("replicas".to_string(), "3".to_string()),
            (
                "endpoint".to_string(),
                "https://example.internal:8443/api".to_string(),
            ),
        ])),
        ..Default::default()
    }
}

/// A minimal valid pod: one container with a name and an image.
pub(super) fn pod(name: String) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            labels: labels(),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".to_string(),
                image: Some("registry.k8s.io/pause:3.10".to_string()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The timed creates of one round: `--creates` ConfigMaps by `--clients` clients.
async fn creates(server: &Server, params: &Params, round: usize) -> Result<Sample> {
    warm(&server.clients).await?;
    let started = Instant::now();
    let latencies = concurrently(
        &server.clients,
        params.creates,
        move |client, index| async move {
            let api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
            let name = format!("bench-r{round}-{index}");
            api.create(&PostParams::default(), &configmap(name.clone()))
                .await
                .map_err(concise)
                .with_context(|| format!("creating configmap {name}"))?;
            Ok(())
        },
    )
    .await?;
    Ok(Sample {
        ops: params.creates as u64,
        elapsed: started.elapsed(),
        latencies,
        bytes: 0,
        pages: 0,
    })
}

/// The untimed setup of the lists: `--pods` pods in one namespace, by the same clients.
async fn create_pods(server: &Server, params: &Params) -> Result<()> {
    concurrently(&server.clients, params.pods, |client, index| async move {
        let api: Api<Pod> = Api::namespaced(client, NAMESPACE);
        let name = format!("bench-pod-{index}");
        api.create(&PostParams::default(), &pod(name.clone()))
            .await
            .map_err(concise)
            .with_context(|| format!("creating pod {name}"))?;
        Ok(())
    })
    .await?;
    Ok(())
}

/// What the bench reads of a list response: the number of items and the continue token.
#[derive(Deserialize)]
struct ListShape {
    #[serde(default)]
    items: Vec<serde::de::IgnoredAny>,
    #[serde(default)]
    metadata: ListMetaShape,
}

#[derive(Default, Deserialize)]
struct ListMetaShape {
    #[serde(rename = "continue", default)]
    continue_: Option<String>,
}

/// GET of the namespace's pods as JSON, with a page size and continue token if given.
fn list_request(limit: Option<u32>, token: Option<&str>) -> Result<http::Request<Vec<u8>>> {
    let mut params = ListParams::default();
    if let Some(limit) = limit {
        params = params.limit(limit);
    }
    if let Some(token) = token {
        params = params.continue_token(token);
    }
    let mut request =
        kube::core::Request::new(format!("/api/v1/namespaces/{NAMESPACE}/pods")).list(&params)?;
    request.headers_mut().insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static("application/json"),
    );
    Ok(request)
}

/// `--list-repeats` full lists, one after the other; each timed from the request to the last
/// byte of the body. Every response is checked (untimed) to hold all the pods.
async fn lists(server: &Server, params: &Params) -> Result<Sample> {
    let client = server.clients.first().context("no client")?;
    warm(std::slice::from_ref(client)).await?;
    let mut latencies = Histogram::<u64>::new(3)?;
    let mut elapsed = Duration::ZERO;
    let mut bytes = 0;
    for _ in 0..params.list_repeats {
        let request = list_request(None, None)?;
        let started = Instant::now();
        let body = client
            .request_text(request)
            .await
            .map_err(concise)
            .context("LIST pods")?;
        let took = started.elapsed();
        elapsed += took;
        latencies.record(micros(took))?;
        bytes = body.len() as u64;
        let list: ListShape = serde_json::from_str(&body).context("decoding the pod list")?;
        ensure!(
            list.items.len() == params.pods,
            "the list has {} pods, expected {}",
            list.items.len(),
            params.pods
        );
    }
    Ok(Sample {
        ops: params.list_repeats as u64,
        elapsed,
        latencies,
        bytes,
        pages: 1,
    })
}

/// `--list-repeats` paged lists: pages of `--page-size` following `continue` until the last;
/// each timed from the first request to the last page decoded (the client must decode a page
/// to find the next token).
async fn paged_lists(server: &Server, params: &Params) -> Result<Sample> {
    let client = server.clients.first().context("no client")?;
    warm(std::slice::from_ref(client)).await?;
    let mut latencies = Histogram::<u64>::new(3)?;
    let mut elapsed = Duration::ZERO;
    let (mut bytes, mut pages) = (0u64, 0u64);
    for _ in 0..params.list_repeats {
        let (mut items, mut token) = (0, None::<String>);
        (bytes, pages) = (0, 0);
        let started = Instant::now();
        loop {
            let request = list_request(Some(params.page_size), token.as_deref())?;
            let body = client
                .request_text(request)
                .await
                .map_err(concise)
                .context("LIST pods (a page)")?;
            bytes += body.len() as u64;
            pages += 1;
            let page: ListShape = serde_json::from_str(&body).context("decoding a page")?;
            items += page.items.len();
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                break;
            }
            ensure!(
                pages <= (params.pods / params.page_size as usize + 2) as u64,
                "the paged list does not end ({pages} pages)"
            );
        }
        let took = started.elapsed();
        elapsed += took;
        latencies.record(micros(took))?;
        ensure!(
            items == params.pods,
            "the paged list has {items} pods, expected {}",
            params.pods
        );
    }
    Ok(Sample {
        ops: params.list_repeats as u64,
        elapsed,
        latencies,
        bytes,
        pages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_subject_gets_a_store_of_its_own() {
        let backends = Backends {
            postgres_url: "postgres://pg/db",
            etcd_endpoint: "e:2379",
            mysql_url: "mysql://m:3306/test",
            spanner_emulator: "127.0.0.1:9010",
        };
        let dir = std::path::Path::new("/tmp/x");
        let url = |name: &str, tag: &str| storage_url(name, &backends, tag, dir).expect("known");
        assert_eq!(
            url("postgres", "api_1a2b3c4d"),
            "postgres://pg/db?schema=rudder_bench_api_1a2b3c4d&compact_interval=0"
        );
        assert_eq!(
            url("mysql", "api_1a2b3c4d_nocache"),
            "mysql://m:3306/rudder_bench_api_nocache?compact_interval=0"
        );
        // Spanner database IDs: a letter first, lower case, letters, digits and '_', at most
        // 30 characters, not ending in '_'.
        let spanner = url("spanner", "api_1A2B3C4D_nocache");
        assert_eq!(
            spanner,
            "spanner://projects/rudder-bench/instances/rudder/databases/bapi_1a2b3c4d_nocache?emulator_host=127.0.0.1:9010&compact_interval=0&poll_interval=20ms"
        );
        let long = url("spanner", "spanner-density-pods-5000-nodes-100");
        let database = long
            .split("/databases/")
            .nth(1)
            .and_then(|rest| rest.split('?').next())
            .expect("a database");
        assert!(database.len() <= 30, "{database}");
        assert!(!database.ends_with('_'), "{database}");
        assert!(database
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'));
        assert!(storage_url("oracle", &backends, "t", dir).is_err());
    }
}
