//! `rudder bench scheduler`: scheduling throughput shaped like upstream's scheduler_perf, on an
//! in-process apiserver per driver with the scheduler running against it over HTTPS, as
//! `rudder server` runs it.
//!
//! Each workload creates its nodes as plain Node objects through the API, lets the scheduler
//! place the initial pods, then creates the measured pods (concurrent clients, as fast as the
//! apiserver takes them) while sampling the scheduler's bound count every second. It reports
//! pods/s (the average over the run, and p50/p90/p99 of the 1 s windows, as scheduler_perf
//! does), how fast the pods were created, the scheduling cycle's cost per pod (the algorithm
//! alone) and the binding writes' latency, per driver, with the ratio to upstream's CI floor.
//!
//! - `basic` (SchedulingBasic): plain pods on plain nodes;
//! - `anti-affinity` (SchedulingPodAntiAffinity): every pod keeps away from the others;
//! - `spreading` (TopologySpreading): pods spread over three zones with `maxSkew: 5`;
//! - `preemption` (PreemptionBasic): nodes full of low-priority pods, high-priority pods
//!   that each evict three (a stand-in kubelet finishes the victims' deletion).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use comfy_table::{presets, Table};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use rudder_scheduler::{Metrics, Runner, SchedulerConfiguration};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::api::{concise, concurrently, storage_url, Backends};
use super::cluster;

/// upstream's scheduler_perf CI floor for SchedulingBasic at 5,000 nodes (pods/s).
const UPSTREAM_FLOOR: f64 = 680.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    Basic,
    AntiAffinity,
    Spreading,
    Preemption,
}

impl Shape {
    /// scheduler_perf's sizes at its 5,000-node scale (500 for preemption): nodes, initial
    /// pods, measured pods.
    fn sizes(self) -> (usize, usize, usize) {
        match self {
            Shape::Basic => (5000, 1000, 10_000),
            Shape::AntiAffinity => (5000, 1000, 1000),
            Shape::Spreading => (5000, 1000, 2000),
            Shape::Preemption => (500, 2000, 500),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Shape::Basic => "basic",
            Shape::AntiAffinity => "anti-affinity",
            Shape::Spreading => "spreading",
            Shape::Preemption => "preemption",
        }
    }
}

#[derive(clap::Args)]
pub struct SchedulerBenchArgs {
    /// Drivers to measure, comma-separated: sqlite, postgres, etcd.
    #[arg(long, default_value = "sqlite,postgres,etcd", value_delimiter = ',')]
    subjects: Vec<String>,
    /// Workloads, comma-separated, in this order.
    #[arg(long, value_enum, default_value = "basic", value_delimiter = ',')]
    workloads: Vec<Shape>,
    /// Node counts, comma-separated (each workload runs at each); default: the workload's
    /// scheduler_perf size (5,000; 500 for preemption).
    #[arg(long, value_delimiter = ',')]
    nodes: Vec<usize>,
    /// Initial pods (default: the workload's).
    #[arg(long)]
    init_pods: Option<usize>,
    /// Measured pods (default: the workload's).
    #[arg(long)]
    pods: Option<usize>,
    /// Create the measured pods before the scheduler starts (it then works through a backlog:
    /// the scheduler's own pace, not the apiserver's create rate).
    #[arg(long)]
    backlog: bool,
    /// Concurrent clients creating nodes and pods.
    #[arg(long, default_value_t = 32)]
    clients: usize,
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
}

/// One measured run.
struct Outcome {
    subject: String,
    shape: Shape,
    nodes: usize,
    pods: usize,
    seconds: f64,
    windows: Vec<f64>,
    created_per_second: f64,
    cycle_micros: f64,
    binding_millis: f64,
    complete: bool,
}

impl Outcome {
    fn average(&self) -> f64 {
        self.pods as f64 / self.seconds.max(1e-9)
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A running apiserver with the scheduler against it.
struct Cluster {
    base: cluster::Cluster,
    clients: Vec<Client>,
    /// The running scheduler's metrics and its stop.
    scheduler: Option<(Arc<Metrics>, CancellationToken)>,
}

async fn start(subject: &str, args: &SchedulerBenchArgs, tag: &str) -> Result<Cluster> {
    let dir = std::env::temp_dir().join(format!("rudder-bench-scheduler-{tag}"));
    let backends = Backends {
        postgres_url: &args.postgres_url,
        etcd_endpoint: &args.etcd_endpoint,
        // These benches name no MySQL server or Spanner emulator of their own: the machine's.
        mysql_url: super::api::DEFAULT_MYSQL_URL,
        spanner_emulator: super::api::DEFAULT_SPANNER_EMULATOR,
    };
    let url = storage_url(subject, &backends, &tag.replace('-', "_"), &dir)?;
    let base = cluster::start(url, dir).await?;
    let clients = (0..args.clients.max(1))
        .map(|_| base.client())
        .collect::<Result<Vec<_>>>()?;
    Ok(Cluster {
        base,
        clients,
        scheduler: None,
    })
}

impl Cluster {
    /// Starts a scheduler (as `system:kube-scheduler`, no leader election); its metrics.
    async fn start_scheduler(&mut self) -> Result<Arc<Metrics>> {
        let runner = Runner::new(rudder_scheduler::Config {
            client: crate::serve::client_for(&self.base.running.scheduler_kubeconfig).await?,
            identity: "bench".into(),
            configuration: SchedulerConfiguration::default(),
            leader_election: false,
        })?;
        let metrics = runner.metrics();
        let stop = CancellationToken::new();
        tokio::spawn(runner.run(stop.clone()));
        self.scheduler = Some((metrics.clone(), stop));
        Ok(metrics)
    }

    async fn stop_scheduler(&mut self) {
        if let Some((_, stop)) = self.scheduler.take() {
            stop.cancel();
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    async fn close(mut self) -> Result<()> {
        self.stop_scheduler().await;
        // The server's graceful stop waits for connections: let the clients' go first.
        drop(self.clients);
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.base.close().await
    }
}

fn node(i: usize) -> Result<Node> {
    let name = format!("node-{i}");
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": format!("zone-{}", i % 3),
        }},
        "status": {
            "capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }))?)
}

/// A pod of the workload; `initial` pods are the ones placed before the measurement.
fn pod(shape: Shape, name: String, initial: bool) -> Result<Pod> {
    let mut spec = json!({"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}]});
    let mut labels = json!({"app": "bench"});
    match shape {
        Shape::Basic => {}
        Shape::AntiAffinity => {
            labels["color"] = json!("green");
            spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"color": "green"}}, "topologyKey": "kubernetes.io/hostname"}]}});
        }
        Shape::Spreading => {
            spec["topologySpreadConstraints"] = json!([{"maxSkew": 5, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "bench"}}}]);
        }
        Shape::Preemption => {
            let cpu = if initial { "900m" } else { "3" };
            spec["containers"][0]["resources"]["requests"]["cpu"] = json!(cpu);
            if !initial {
                spec["priorityClassName"] = json!("bench-high");
            }
        }
    }
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }))?)
}

async fn create_pods(
    cluster: &Cluster,
    shape: Shape,
    prefix: &str,
    count: usize,
    initial: bool,
) -> Result<()> {
    let prefix = prefix.to_string();
    concurrently(&cluster.clients, count, move |client, i| {
        let prefix = prefix.clone();
        async move {
            let pods: Api<Pod> = Api::namespaced(client, "default");
            pods.create(
                &PostParams::default(),
                &pod(shape, format!("{prefix}-{i}"), initial)?,
            )
            .await
            .map_err(concise)?;
            Ok(())
        }
    })
    .await?;
    Ok(())
}

/// Finishes the deletion of terminating pods, as a kubelet would (preemption's victims).
fn finish_terminating(client: Client, stop: CancellationToken) {
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let mut events = watcher(pods.clone(), watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        loop {
            let pod = tokio::select! {
                _ = stop.cancelled() => return,
                next = events.next() => match next {
                    Some(Ok(pod)) => pod,
                    Some(Err(_)) => continue,
                    None => return,
                },
            };
            if pod.metadata.deletion_timestamp.is_some() {
                let _ = pods
                    .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
                    .await;
            }
        }
    });
}

/// Waits until the scheduler has bound `target` pods; whether it did within `limit`.
async fn bound_at_least(metrics: &Metrics, target: u64, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while metrics.bound() < target {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

async fn measure(
    subject: &str,
    shape: Shape,
    nodes: usize,
    args: &SchedulerBenchArgs,
) -> Result<Outcome> {
    let (_, default_init, default_pods) = shape.sizes();
    let (init, pods) = (
        args.init_pods.unwrap_or(default_init),
        args.pods.unwrap_or(default_pods),
    );
    let tag = format!("{}-{}-{nodes}", subject, shape.name());
    let mut cluster = start(subject, args, &tag).await?;
    let result = run_workload(
        &mut cluster,
        subject,
        shape,
        nodes,
        init,
        pods,
        args.backlog,
    )
    .await;
    let closed = cluster.close().await;
    let outcome = result?;
    closed?;
    Ok(outcome)
}

async fn run_workload(
    cluster: &mut Cluster,
    subject: &str,
    shape: Shape,
    nodes: usize,
    init: usize,
    pods: usize,
    backlog: bool,
) -> Result<Outcome> {
    concurrently(&cluster.clients, nodes, |client, i| async move {
        let api: Api<Node> = Api::all(client);
        api.create(&PostParams::default(), &node(i)?)
            .await
            .map_err(concise)?;
        Ok(())
    })
    .await
    .context("creating the nodes")?;
    if shape == Shape::Preemption {
        let class: PriorityClass = serde_json::from_value(json!({
            "metadata": {"name": "bench-high"}, "value": 1000,
        }))?;
        Api::<PriorityClass>::all(cluster.clients[0].clone())
            .create(&PostParams::default(), &class)
            .await
            .map_err(concise)?;
        finish_terminating(cluster.clients[0].clone(), cluster.base.stop.child_token());
    }
    let metrics = cluster.start_scheduler().await?;
    create_pods(cluster, shape, "init", init, true)
        .await
        .context("creating the initial pods")?;
    let limit = Duration::from_secs(120 + (init / 50) as u64);
    if !bound_at_least(&metrics, init as u64, limit).await {
        bail!("the initial {init} pods were not all bound within {limit:?}");
    }
    let mut created = None;
    let metrics = if backlog {
        // Every measured pod exists before a fresh scheduler starts: scheduling and binding
        // alone, not the apiserver's create rate, set the pace.
        cluster.stop_scheduler().await;
        let started = Instant::now();
        create_pods(cluster, shape, "pod", pods, false)
            .await
            .context("creating the measured pods")?;
        created = Some(started.elapsed());
        cluster.start_scheduler().await?
    } else {
        metrics
    };
    let base = if backlog { 0 } else { metrics.bound() };
    let (cycle_before, binding_before) = (
        metrics.scheduling_micros.load(Ordering::Relaxed),
        metrics.binding_micros.load(Ordering::Relaxed),
    );
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (metrics, sampling) = (metrics.clone(), sampling.clone());
        tokio::spawn(async move {
            let mut windows = Vec::new();
            let mut last = metrics.bound();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            while sampling.load(Ordering::Relaxed) {
                tick.tick().await;
                let now = metrics.bound();
                windows.push((now - last) as f64);
                last = now;
            }
            windows
        })
    };
    let started = Instant::now();
    let created = match created {
        Some(created) => created,
        None => {
            create_pods(cluster, shape, "pod", pods, false)
                .await
                .context("creating the measured pods")?;
            started.elapsed()
        }
    };
    let limit = Duration::from_secs(180 + (pods / 20) as u64);
    let complete = bound_at_least(&metrics, base + pods as u64, limit).await;
    let seconds = started.elapsed().as_secs_f64();
    sampling.store(false, Ordering::Relaxed);
    let mut windows = sampler.await.unwrap_or_default();
    // Only the windows while pods were still being placed.
    while windows.len() > 1 && windows.last().is_some_and(|w| *w == 0.0) {
        windows.pop();
    }
    let placed = (metrics.bound() - base).min(pods as u64) as usize;
    let cycle = metrics.scheduling_micros.load(Ordering::Relaxed) - cycle_before;
    let binding = metrics.binding_micros.load(Ordering::Relaxed) - binding_before;
    Ok(Outcome {
        subject: subject.to_string(),
        shape,
        nodes,
        pods: placed,
        seconds,
        windows,
        created_per_second: pods as f64 / created.as_secs_f64().max(1e-9),
        cycle_micros: cycle as f64 / placed.max(1) as f64,
        binding_millis: binding as f64 / 1000.0 / placed.max(1) as f64,
        complete,
    })
}

/// `rudder bench scheduler`.
pub async fn run(args: SchedulerBenchArgs) -> Result<()> {
    let mut outcomes = Vec::new();
    for shape in &args.workloads {
        let sizes = if args.nodes.is_empty() {
            vec![shape.sizes().0]
        } else {
            args.nodes.clone()
        };
        for nodes in sizes {
            for subject in &args.subjects {
                eprintln!("==> {} at {nodes} nodes on {subject}", shape.name());
                let outcome = measure(subject, *shape, nodes, &args)
                    .await
                    .with_context(|| format!("{} at {nodes} nodes on {subject}", shape.name()))?;
                eprintln!("    {:.0} pods/s", outcome.average());
                outcomes.push(outcome);
            }
        }
    }
    print(&outcomes);
    Ok(())
}

fn print(outcomes: &[Outcome]) {
    let mut table = Table::new();
    table.load_preset(presets::UTF8_FULL_CONDENSED);
    table.set_header([
        "workload",
        "nodes",
        "driver",
        "pods",
        "pods/s avg",
        "p50",
        "p90",
        "p99",
        "÷ upstream floor",
        "created/s",
        "cycle µs/pod",
        "binding ms",
    ]);
    for o in outcomes {
        let mut sorted = o.windows.clone();
        sorted.sort_by(f64::total_cmp);
        table.add_row([
            o.shape.name().to_string(),
            o.nodes.to_string(),
            o.subject.clone(),
            if o.complete {
                o.pods.to_string()
            } else {
                format!("{} (incomplete)", o.pods)
            },
            format!("{:.0}", o.average()),
            format!("{:.0}", percentile(&sorted, 50.0)),
            format!("{:.0}", percentile(&sorted, 90.0)),
            format!("{:.0}", percentile(&sorted, 99.0)),
            format!("{:.2}", o.average() / UPSTREAM_FLOOR),
            format!("{:.0}", o.created_per_second),
            format!("{:.0}", o.cycle_micros),
            format!("{:.1}", o.binding_millis),
        ]);
    }
    println!("{table}");
    println!(
        "pods/s: measured pods ÷ the time from their first create to their last binding; p50/p90/p99 \
         over 1 s windows (scheduler_perf's way). ÷ upstream floor: against scheduler_perf's CI minimum \
         of {UPSTREAM_FLOOR:.0} pods/s for SchedulingBasic at 5,000 nodes. cycle: the scheduling \
         algorithm's time per pod (binding excluded); binding: the mean pods/binding write latency."
    );
    println!(
        "machine: {} cores",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn percentiles_of_windows_are_nearest_rank() {
        let windows = [10.0, 20.0, 30.0, 40.0];
        assert_eq!(percentile(&windows, 50.0), 20.0);
        assert_eq!(percentile(&windows, 90.0), 40.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
