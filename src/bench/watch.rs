//! `rudder bench watch`: many watchers of one resource, as a cluster's kubelets and
//! controllers watch pods. Per subject a `rudder server` runs as a child process (so its
//! memory is measured apart from the clients'), on a store of its own:
//!
//! 1. `--pods` pods are created (untimed) and listed once; the server's RSS is read
//!    ("holding N pods");
//! 2. `--watchers` watches of those pods are opened (each its own connection, from the
//!    LIST's resourceVersion) and the RSS is read again: what the watchers cost;
//! 3. `--events` pods are patched one at a time, `--event-interval` apart, each patch
//!    carrying its send time; every watcher timestamps what it receives, so each
//!    delivery's write → event latency is known (p50/p99/max over all of them).
//!
//! A `-nocache` subject (`sqlite-nocache`) is the same driver with `--watch-cache=false`, so
//! one run shows the watch cache beside the store-served path.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use comfy_table::{presets, Table};
use hdrhistogram::Histogram;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::task::JoinSet;

use super::api::{cleanup, concise, concurrently, pod, storage_url, BackendArgs};
use super::kubelet::usage;

/// Where the pods go.
const NAMESPACE: &str = "default";
/// The annotation carrying a patch's send time (nanoseconds since the epoch).
const SENT: &str = "bench-sent";
/// How long the RSS is left to settle before it is read.
const SETTLE: Duration = Duration::from_secs(3);

#[derive(clap::Args)]
pub struct WatchBenchArgs {
    /// Subjects: sqlite, postgres, mysql, etcd, each with a `-nocache` twin
    /// (--watch-cache=false).
    #[arg(
        long,
        default_value = "sqlite,sqlite-nocache,postgres,postgres-nocache,etcd,etcd-nocache",
        value_delimiter = ','
    )]
    subjects: Vec<String>,
    #[command(flatten)]
    backends: BackendArgs,
    /// Pods in the namespace the watchers watch.
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// Concurrent watchers (each its own connection).
    #[arg(long, default_value_t = 1000)]
    watchers: usize,
    /// Patches whose delivery to every watcher is timed.
    #[arg(long, default_value_t = 50)]
    events: usize,
    /// Time between two patches, in milliseconds.
    #[arg(long, default_value_t = 100)]
    event_interval_ms: u64,
    /// Concurrent clients creating the pods.
    #[arg(long, default_value_t = 16)]
    clients: usize,
}

/// One subject's figures.
struct Outcome {
    subject: String,
    rss_pods_mb: f64,
    rss_watchers_mb: f64,
    delivered: usize,
    expected: usize,
    latencies: Histogram<u64>,
}

pub async fn run(args: WatchBenchArgs) -> Result<()> {
    if args.pods == 0 || args.watchers == 0 || args.events == 0 {
        bail!("--pods, --watchers and --events must be at least 1");
    }
    // Every watcher is a socket of this process.
    let wanted = (args.watchers as u64 + 1024).max(4096);
    if let Err(error) = rlimit::increase_nofile_limit(wanted) {
        eprintln!("raising the open-file limit failed: {error}");
    }
    let tag = format!("{:08x}", rand::random::<u32>());
    let mut outcomes = Vec::new();
    for subject in &args.subjects {
        match measure(&args, subject, &tag).await {
            Ok(outcome) => outcomes.push(outcome),
            Err(error) => eprintln!("{subject} failed: {error:#}"),
        }
    }
    let machine = super::report::Machine::here();
    println!(
        "rudder bench watch: {} pods, {} watchers, {} patches {} ms apart; machine: {} cores",
        args.pods, args.watchers, args.events, args.event_interval_ms, machine.cores
    );
    println!("{}", table(&outcomes));
    println!(
        "RSS: the server process's resident memory holding the pods (after one LIST), and \
         with the watchers open (+ what they added). write → event: from just before each \
         PATCH was sent to each watcher reading the event, over every delivery."
    );
    if outcomes.len() < args.subjects.len() {
        bail!(
            "{} subject(s) failed (see above)",
            args.subjects.len() - outcomes.len()
        );
    }
    Ok(())
}

fn table(outcomes: &[Outcome]) -> Table {
    let mut table = Table::new();
    table.load_preset(presets::UTF8_FULL_CONDENSED).set_header([
        "subject",
        "RSS with pods",
        "RSS with watchers",
        "delivered",
        "write → event p50",
        "p99",
        "max",
    ]);
    let ms = |micros: u64| format!("{:.1} ms", micros as f64 / 1000.0);
    for outcome in outcomes {
        let h = &outcome.latencies;
        table.add_row([
            outcome.subject.clone(),
            format!("{:.0} MB", outcome.rss_pods_mb),
            format!(
                "{:.0} MB ({:+.0})",
                outcome.rss_watchers_mb,
                outcome.rss_watchers_mb - outcome.rss_pods_mb
            ),
            format!("{}/{}", outcome.delivered, outcome.expected),
            ms(h.value_at_quantile(0.5)),
            ms(h.value_at_quantile(0.99)),
            ms(h.max()),
        ]);
    }
    table
}

/// A `rudder server` child process on one subject's store.
struct Server {
    child: tokio::process::Child,
    pid: u32,
    client: Client,
    url: String,
    dir: PathBuf,
}

impl Server {
    async fn start(args: &WatchBenchArgs, subject: &str, tag: &str) -> Result<Self> {
        let (driver, watch_cache) = match subject.strip_suffix("-nocache") {
            Some(driver) => (driver, false),
            None => (subject, true),
        };
        let dir = std::env::temp_dir().join(format!("rudder-bench-watch-{tag}-{subject}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let backends = args.backends.backends();
        let store_tag = format!("watch_{tag}_{}", subject.replace('-', "_"));
        let url = storage_url(driver, &backends, &store_tag, &dir)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let data = dir.join("data");
        let child = tokio::process::Command::new(std::env::current_exe()?)
            .arg("server")
            .args(["--storage", &url])
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--disable-controller-manager", "--disable-scheduler"])
            .arg("--disable-agent")
            .arg(format!("--watch-cache={watch_cache}"))
            .env("RUST_LOG", "warn")
            .kill_on_drop(true)
            .spawn()
            .context("starting `rudder server`")?;
        let pid = child.id().context("the server's pid")?;
        let client = connect(&data.join("kubeconfig.yaml")).await?;
        Ok(Self {
            child,
            pid,
            client,
            url,
            dir,
        })
    }

    async fn stop(mut self) -> Result<()> {
        let _ = self.child.kill().await;
        cleanup(&self.url, &self.dir).await
    }
}

/// A client of the server once its kubeconfig exists and it answers.
async fn connect(kubeconfig: &Path) -> Result<Client> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if kubeconfig.exists() {
            let config = kube::config::Kubeconfig::read_from(kubeconfig)
                .context("reading the server's kubeconfig")?;
            let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
                .await
                .context("a kube config from the server's kubeconfig")?;
            let client = Client::try_from(config).context("building a kube client")?;
            if client.apiserver_version().await.is_ok() {
                return Ok(client);
            }
        }
        if Instant::now() > deadline {
            bail!("the server did not answer within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn measure(args: &WatchBenchArgs, subject: &str, tag: &str) -> Result<Outcome> {
    let server = Server::start(args, subject, tag).await?;
    let outcome = measure_on(args, subject, &server).await;
    let stopped = server.stop().await;
    let outcome = outcome?;
    stopped?;
    Ok(outcome)
}

async fn measure_on(args: &WatchBenchArgs, subject: &str, server: &Server) -> Result<Outcome> {
    let clients = vec![server.client.clone(); args.clients];
    let started = Instant::now();
    concurrently(&clients, args.pods, |client, index| async move {
        let api: Api<Pod> = Api::namespaced(client, NAMESPACE);
        let name = format!("bench-pod-{index}");
        api.create(&PostParams::default(), &pod(name.clone()))
            .await
            .map_err(concise)
            .with_context(|| format!("creating pod {name}"))?;
        Ok(())
    })
    .await?;
    eprintln!(
        "{subject}: {} pods in {:.1} s (untimed)",
        args.pods,
        started.elapsed().as_secs_f64()
    );
    let pods: Api<Pod> = Api::namespaced(server.client.clone(), NAMESPACE);
    let listed = pods
        .list_metadata(&ListParams::default())
        .await
        .map_err(concise)?;
    let revision = listed.metadata.resource_version.unwrap_or_default();
    tokio::time::sleep(SETTLE).await;
    let (rss_pods_mb, _) = usage(server.pid)?;

    let latencies = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let delivered = Arc::new(AtomicUsize::new(0));
    let opened = Arc::new(AtomicUsize::new(0));
    let mut watchers = JoinSet::new();
    for _ in 0..args.watchers {
        let request = http::Request::get(format!(
            "/api/v1/namespaces/{NAMESPACE}/pods?watch=true&resourceVersion={revision}"
        ))
        .body(Vec::new())?;
        let (client, latencies, delivered, opened) = (
            server.client.clone(),
            latencies.clone(),
            delivered.clone(),
            opened.clone(),
        );
        watchers.spawn(async move {
            let response = client.send(request.map(Into::into)).await?;
            opened.fetch_add(1, Ordering::Relaxed);
            read_events(response.into_body(), &latencies, &delivered).await
        });
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while opened.load(Ordering::Relaxed) < args.watchers {
        if Instant::now() > deadline {
            bail!(
                "only {} of {} watches opened in 120 s",
                opened.load(Ordering::Relaxed),
                args.watchers
            );
        }
        if let Some(Ok(Err(error))) = watchers.try_join_next() {
            bail!("a watch failed: {error:#}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(SETTLE).await;
    let (rss_watchers_mb, _) = usage(server.pid)?;

    for index in 0..args.events {
        let sent = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
        let patch = json!({"metadata": {"annotations": {SENT: sent.to_string()}}});
        let name = format!("bench-pod-{}", index % args.pods);
        pods.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(concise)
            .with_context(|| format!("patching {name}"))?;
        tokio::time::sleep(Duration::from_millis(args.event_interval_ms)).await;
    }
    let expected = args.events * args.watchers;
    let deadline = Instant::now() + Duration::from_secs(30);
    while delivered.load(Ordering::Relaxed) < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    watchers.abort_all();
    let latencies = latencies
        .lock()
        .map_err(|_| anyhow::anyhow!("a watcher panicked"))?
        .clone();
    let outcome = Outcome {
        subject: subject.to_string(),
        rss_pods_mb,
        rss_watchers_mb,
        delivered: delivered.load(Ordering::Relaxed),
        expected,
        latencies,
    };
    eprintln!(
        "{subject}: RSS {:.0} MB with pods, {:.0} MB with watchers; {}/{} delivered, p99 {:.1} ms",
        outcome.rss_pods_mb,
        outcome.rss_watchers_mb,
        outcome.delivered,
        outcome.expected,
        outcome.latencies.value_at_quantile(0.99) as f64 / 1000.0
    );
    Ok(outcome)
}

/// Reads a watch stream, timing every event that carries a send time.
async fn read_events(
    mut body: kube::client::Body,
    latencies: &Mutex<Histogram<u64>>,
    delivered: &AtomicUsize,
) -> Result<()> {
    let mut pending: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.context("reading the watch")?;
        let Some(data) = frame.data_ref() else {
            continue;
        };
        let received = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
        pending.extend_from_slice(data);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            if let Some(sent) = sent_time(&line) {
                let micros = u64::try_from(received.saturating_sub(sent) / 1000).unwrap_or(0);
                if let Ok(mut histogram) = latencies.lock() {
                    // `record`, not `saturating_record`: the histogram grows to the value
                    // (saturating would clamp it to the histogram's current top).
                    let _ = histogram.record(micros);
                }
                delivered.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

/// The send time a watch event's object carries, found without parsing the whole line.
fn sent_time(line: &[u8]) -> Option<u128> {
    let marker = format!("\"{SENT}\":\"");
    let at = line
        .windows(marker.len())
        .position(|window| window == marker.as_bytes())?;
    let digits: String = line[at + marker.len()..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .map(|b| char::from(*b))
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_send_time_is_read_from_the_event_line() {
        let line =
            br#"{"type":"MODIFIED","object":{"metadata":{"annotations":{"bench-sent":"1234"}}}}"#;
        assert_eq!(super::sent_time(line), Some(1234));
        assert_eq!(super::sent_time(br#"{"type":"ADDED"}"#), None);
    }
}
