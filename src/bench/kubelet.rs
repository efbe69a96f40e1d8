//! `rudder bench kubelet`: the node agent, measured.
//!
//! - `startup` (real containerd, `--container-runtime-endpoint`): an in-process apiserver and
//!   scheduler, and `rudder agent` as a child process. Batches of 1, 10 and 50 pods (a busybox
//!   httpd with a TCP readiness probe) are created at once; each pod's creation → Running and
//!   creation → Ready is taken from the watch, p50/p99 per batch beside upstream's SLO (p99 ≤
//!   5 s). The agent's RSS and CPU are sampled idle and with 50 pods, beside k3s' agent
//!   (~275 MB).
//! - `density` (hollow nodes, per driver): N hollow nodes in-process, the write load their
//!   heartbeats add while idle (store revisions per second), then P pods created as fast as the
//!   apiserver takes them, reported as pods/s from the first creation to the last Running.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use comfy_table::{presets, Table};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::api::{concise, concurrently, storage_url, Backends};
use super::cluster::{self, Cluster};

/// Upstream's pod startup SLO: p99 of creation → Running for stateless pods, image pulled.
const UPSTREAM_SLO: Duration = Duration::from_secs(5);
/// k3s' agent's resident memory, as its documentation gives it.
const K3S_AGENT_MB: f64 = 275.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    Startup,
    Density,
}

#[derive(clap::Args)]
pub struct KubeletBenchArgs {
    #[arg(
        long,
        value_enum,
        default_value = "startup,density",
        value_delimiter = ','
    )]
    workloads: Vec<Workload>,
    /// containerd's CRI socket for `startup` (scripts/bench-kubelet.sh starts one).
    #[arg(long, default_value = crate::agent::DEFAULT_RUNTIME_ENDPOINT)]
    container_runtime_endpoint: String,
    /// The image `startup` runs (it must be imported already).
    #[arg(long, default_value = "localhost/busybox:1.36")]
    image: String,
    /// Batch sizes for `startup`.
    #[arg(long, default_value = "1,10,50", value_delimiter = ',')]
    batches: Vec<usize>,
    /// Drivers for `density`: sqlite, postgres, etcd.
    #[arg(long, default_value = "sqlite,postgres,etcd", value_delimiter = ',')]
    subjects: Vec<String>,
    #[arg(long, default_value_t = 1000)]
    hollow_nodes: usize,
    #[arg(long, default_value_t = 30_000)]
    pods: usize,
    /// Concurrent clients creating pods.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    #[arg(
        long,
        env = "RUDDER_BENCH_ETCD_ENDPOINT",
        default_value = "127.0.0.1:2379"
    )]
    etcd_endpoint: String,
    #[arg(
        long,
        env = "RUDDER_BENCH_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    postgres_url: String,
}

/// An in-process apiserver on one store with the scheduler against it.
async fn start(url: String, dir: PathBuf) -> Result<Cluster> {
    let cluster = cluster::start(url, dir).await?;
    cluster.start_scheduler().await?;
    Ok(cluster)
}

/// The store's current revision.
async fn revision(cluster: &Cluster) -> Result<i64> {
    let reply = cluster
        .store
        .range(
            rudder_storage::RangeRequest::new(rudder_storage::KeyRange::key(b"/".to_vec()))
                .count_only(),
        )
        .await?;
    Ok(reply.revision)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// Resident memory (MB) and CPU time (s) of a process, from /proc.
pub(super) fn usage(pid: u32) -> Result<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let rss_kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    Ok((rss_kb / 1024.0, ticks / 100.0))
}

/// CPU use (% of one core) and RSS over `window`.
async fn sample(pid: u32, window: Duration) -> Result<(f64, f64)> {
    let (_, before) = usage(pid)?;
    tokio::time::sleep(window).await;
    let (rss, after) = usage(pid)?;
    Ok((rss, (after - before) / window.as_secs_f64() * 100.0))
}

fn web_pod(name: &str, image: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"bench": "startup"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "web", "image": image, "imagePullPolicy": "IfNotPresent",
                "command": ["httpd", "-f", "-p", "8080", "-h", "/www"],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]},
    }))?)
}

/// Creation → Running and → Ready of each pod of a batch.
async fn batch(
    client: &Client,
    image: &str,
    size: usize,
    round: usize,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let names: Vec<String> = (0..size).map(|i| format!("start-{round}-{i}")).collect();
    let mut events = watcher(
        pods.clone(),
        watcher::Config::default().labels("bench=startup"),
    )
    .boxed();
    // The watch is established before the first creation.
    let _ = tokio::time::timeout(Duration::from_secs(5), events.next()).await;
    let mut created = HashMap::new();
    for name in &names {
        created.insert(name.clone(), Instant::now());
        let pods = pods.clone();
        let pod = web_pod(name, image)?;
        tokio::spawn(async move { pods.create(&PostParams::default(), &pod).await });
    }
    let mut running: HashMap<String, Duration> = HashMap::new();
    let mut ready: HashMap<String, Duration> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while ready.len() < size {
        let Ok(Some(event)) = tokio::time::timeout_at(deadline.into(), events.next()).await else {
            bail!(
                "only {} of {size} pods were Ready within 120 s",
                ready.len()
            );
        };
        let pod = match event {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => pod,
            _ => continue,
        };
        let name = pod.name_any();
        let Some(start) = created.get(&name) else {
            continue;
        };
        let status = pod.status.as_ref();
        if status.and_then(|s| s.phase.as_deref()) == Some("Running") {
            running
                .entry(name.clone())
                .or_insert_with(|| start.elapsed());
        }
        if rudder_facts::pods::is_ready(&pod) {
            ready.entry(name).or_insert_with(|| start.elapsed());
        }
    }
    let mut running: Vec<Duration> = running.into_values().collect();
    let mut ready: Vec<Duration> = ready.into_values().collect();
    running.sort();
    ready.sort();
    Ok((running, ready))
}

async fn delete_batch(client: &Client) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("bench=startup"),
    )
    .await
    .map_err(concise)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !pods
        .list(&ListParams::default().labels("bench=startup"))
        .await?
        .items
        .is_empty()
    {
        if Instant::now() > deadline {
            bail!("the batch's pods were not gone within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

async fn startup(args: &KubeletBenchArgs) -> Result<()> {
    let dir = std::env::temp_dir().join("rudder-bench-kubelet-startup");
    let url = format!("sqlite://{}", dir.join("state.db").display());
    let cluster = start(url, dir.clone()).await?;
    let client = cluster.client()?;
    // The agent is its own process, as on a worker node, with its own certificates.
    let name = "bench-node";
    let ip = crate::agent::default_node_ip();
    let pki = &cluster.running.pki;
    let user = format!("system:node:{name}");
    let (cert, key) = pki.issue_client_cert(&user, &["system:nodes"])?;
    let kubeconfig = rudder_apiserver::pki::kubeconfig::client_kubeconfig(
        "bench",
        &format!("https://{}", cluster.running.addr),
        &pki.ca_cert_pem,
        &user,
        &cert,
        &key,
    );
    let agent_dir = dir.join("agent");
    std::fs::create_dir_all(&agent_dir)?;
    std::fs::write(agent_dir.join("kubeconfig"), kubeconfig)?;
    let (serving_cert, serving_key) =
        pki.issue_serving_cert(&user, &["system:nodes"], &[name.to_owned()], &[ip])?;
    std::fs::write(agent_dir.join("serving.crt"), serving_cert)?;
    std::fs::write(agent_dir.join("serving.key"), serving_key)?;
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .arg("agent")
        .arg("--kubeconfig")
        .arg(agent_dir.join("kubeconfig"))
        .arg("--tls-cert-file")
        .arg(agent_dir.join("serving.crt"))
        .arg("--tls-private-key-file")
        .arg(agent_dir.join("serving.key"))
        .args([
            "--container-runtime-endpoint",
            &args.container_runtime_endpoint,
        ])
        .args(["--node-name", name, "--kubelet-port", "0"])
        .args(["--disable-kube-proxy", "--disable-cluster-dns"])
        .arg("--data-dir")
        .arg(agent_dir.join("data"))
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .context("starting `rudder agent`")?;
    let pid = child.id().context("the agent's pid")?;
    let nodes: Api<Node> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = nodes.get_opt(name).await?.is_some_and(|node| {
            node.status
                .and_then(|s| s.conditions)
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        });
        if ready {
            break;
        }
        if Instant::now() > deadline {
            bail!("the agent's node was not Ready within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Warm up: the first sandbox after containerd starts is slower.
    batch(&client, &args.image, 1, 0).await?;
    delete_batch(&client).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (idle_rss, idle_cpu) = sample(pid, Duration::from_secs(10)).await?;
    let mut table = Table::new();
    table.load_preset(presets::UTF8_FULL_CONDENSED).set_header([
        "pods at once",
        "→ Running p50",
        "→ Running p99",
        "→ Ready p50",
        "→ Ready p99",
        "p99 / SLO (5 s)",
    ]);
    let mut loaded = None;
    for (round, size) in args.batches.iter().copied().enumerate() {
        let (running, ready) = batch(&client, &args.image, size, round + 1).await?;
        let p99 = percentile(&running, 99.0);
        table.add_row([
            size.to_string(),
            ms(percentile(&running, 50.0)),
            ms(p99),
            ms(percentile(&ready, 50.0)),
            ms(percentile(&ready, 99.0)),
            format!("{:.2}", p99.as_secs_f64() / UPSTREAM_SLO.as_secs_f64()),
        ]);
        if size == *args.batches.iter().max().unwrap_or(&size) {
            loaded = Some((size, sample(pid, Duration::from_secs(10)).await?));
        }
        delete_batch(&client).await?;
    }
    println!("pod start latency (creation → Running / Ready, local image, one real node):");
    println!("{table}");
    let mut usage_table = Table::new();
    usage_table
        .load_preset(presets::UTF8_FULL_CONDENSED)
        .set_header([
            "agent",
            "RSS",
            "RSS / k3s agent (275 MB)",
            "CPU (% of a core)",
        ]);
    usage_table.add_row([
        "idle".to_string(),
        format!("{idle_rss:.0} MB"),
        format!("{:.2}", idle_rss / K3S_AGENT_MB),
        format!("{idle_cpu:.1}"),
    ]);
    if let Some((size, (rss, cpu))) = loaded {
        usage_table.add_row([
            format!("{size} pods"),
            format!("{rss:.0} MB"),
            format!("{:.2}", rss / K3S_AGENT_MB),
            format!("{cpu:.1}"),
        ]);
    }
    println!("{usage_table}");
    let _ = child.kill().await;
    nodes.delete(name, &DeleteParams::default()).await.ok();
    cluster.close().await
}

async fn density(args: &KubeletBenchArgs, subject: &str) -> Result<Vec<String>> {
    let dir = std::env::temp_dir().join(format!("rudder-bench-kubelet-{subject}"));
    let backends = Backends {
        postgres_url: &args.postgres_url,
        etcd_endpoint: &args.etcd_endpoint,
        // These benches name no MySQL server or Spanner emulator of their own: the machine's.
        mysql_url: super::api::DEFAULT_MYSQL_URL,
        spanner_emulator: super::api::DEFAULT_SPANNER_EMULATOR,
    };
    let url = storage_url(subject, &backends, "bench_kubelet", &dir)?;
    let cluster = start(url, dir).await?;
    let client = cluster.client()?;
    let stop = CancellationToken::new();
    tokio::spawn(crate::agent::run_hollow(
        client.clone(),
        "hollow".into(),
        args.hollow_nodes,
        110,
        stop.clone(),
    ));
    let nodes: Api<Node> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let listed = nodes.list(&ListParams::default()).await?.items;
        let ready = listed
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .into_iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
            .count();
        if ready >= args.hollow_nodes {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "only {ready} of {} hollow nodes were Ready within 300 s",
                args.hollow_nodes
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // The heartbeats' write load: store revisions per second while nothing else happens.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let window = Duration::from_secs(20);
    let before = revision(&cluster).await?;
    tokio::time::sleep(window).await;
    let idle_writes = (revision(&cluster).await? - before) as f64 / window.as_secs_f64();
    let clients = (0..args.clients.max(1))
        .map(|_| cluster.client())
        .collect::<Result<Vec<_>>>()?;
    let started = Instant::now();
    concurrently(&clients, args.pods, |client, i| async move {
        let pods: Api<Pod> = Api::namespaced(client, "default");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("density-{i}"), "labels": {"bench": "density"}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "10m", "memory": "10Mi"}}}]},
        }))?;
        // An overloaded store answers 5xx or 429 for a while (and a create that timed out may
        // have happened after all): retry as a patient client would.
        let mut attempt = 0;
        loop {
            match pods.create(&PostParams::default(), &pod).await {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(status)) if status.code == 409 => return Ok(()),
                Err(kube::Error::Api(status))
                    if (status.code >= 500 || status.code == 429) && attempt < 10 =>
                {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
                }
                Err(error) => return Err(concise(error)),
            }
        }
    })
    .await?;
    let created = started.elapsed();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(900);
    let running = loop {
        let list = pods
            .list(&ListParams::default().labels("bench=density"))
            .await?;
        let running = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running >= args.pods || Instant::now() > deadline {
            break running;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let elapsed = started.elapsed();
    stop.cancel();
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.close().await?;
    Ok(vec![
        subject.to_string(),
        args.hollow_nodes.to_string(),
        format!("{running}/{}", args.pods),
        format!("{:.0}", args.pods as f64 / created.as_secs_f64()),
        format!("{:.0}", running as f64 / elapsed.as_secs_f64()),
        format!(
            "{idle_writes:.0} (expected {:.0})",
            args.hollow_nodes as f64 / 10.0
        ),
    ])
}

pub async fn run(args: KubeletBenchArgs) -> Result<()> {
    if args.workloads.contains(&Workload::Startup) {
        startup(&args).await?;
    }
    if args.workloads.contains(&Workload::Density) {
        let mut table = Table::new();
        table.load_preset(presets::UTF8_FULL_CONDENSED).set_header([
            "driver",
            "hollow nodes",
            "Running",
            "created/s",
            "pods/s creation → Running",
            "idle writes/s (leases)",
        ]);
        for subject in &args.subjects {
            eprintln!(
                "density on {subject}: {} hollow nodes, {} pods …",
                args.hollow_nodes, args.pods
            );
            table.add_row(density(&args, subject).await?);
        }
        println!("hollow-node density:");
        println!("{table}");
    }
    Ok(())
}
