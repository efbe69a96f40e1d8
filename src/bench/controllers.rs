//! `rudder bench controllers`: the controller-manager's throughput, per driver.
//!
//! An in-process apiserver on a fresh store, the scheduler against it (as `rudder server` runs
//! it), and `rudder controller-manager` as a child process — its own process, so that its CPU
//! time and resident memory can be read from /proc. The nodes are plain Node objects whose
//! Leases the bench renews; the bench's hollow nodes (one pod watch) mark each scheduled pod
//! Running and Ready, as a kubelet would. Then `--deployments` Deployments of `--replicas`
//! replicas each are created at once, and the run lasts until every Deployment reports all its
//! replicas updated and available.
//!
//! Reported per driver: the time from the first create until every Deployment is available;
//! pods created per second (the controller-manager's ReplicaSet creates, from the first
//! Deployment create to the last pod seen); the same beside upstream's default client limit of
//! 20 QPS; the controller-manager's CPU and peak RSS; and the CPU the rest (apiserver,
//! scheduler, hollow nodes, store client) took in this process.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use comfy_table::{presets, Table};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Binding, Namespace, Node, Pod, ServiceAccount};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::api::{concise, concurrently, storage_url, Backends};
use super::cluster::{self, Cluster};
use super::kubelet::usage;

/// kube-controller-manager's default client limit (`--kube-api-qps`).
const UPSTREAM_QPS: f64 = 20.0;
/// The namespace the bench's workloads live in.
const NAMESPACE: &str = "bench-controllers";
/// The label on every Deployment and pod of the bench.
const LABEL: &str = "rudder-bench=controllers";

#[derive(clap::Args)]
pub struct ControllersBenchArgs {
    /// Drivers to measure, comma-separated: sqlite, postgres, etcd.
    #[arg(long, default_value = "sqlite,postgres,etcd", value_delimiter = ',')]
    subjects: Vec<String>,
    #[arg(long, default_value_t = 1000)]
    deployments: usize,
    /// Replicas of each Deployment.
    #[arg(long, default_value_t = 10)]
    replicas: usize,
    /// Plain Node objects (110 pods each) the pods are scheduled to.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// The hollow nodes bind the pods themselves (round-robin) instead of the scheduler:
    /// the controller-manager's pace without the scheduler's CPU.
    #[arg(long)]
    bind_directly: bool,
    /// Concurrent clients creating the Deployments and the nodes.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Concurrent status writers of the hollow nodes.
    #[arg(long, default_value_t = 16)]
    status_writers: usize,
    /// Give up on a driver after this many seconds.
    #[arg(long, default_value_t = 900)]
    timeout_seconds: u64,
    /// An extra flag for `rudder controller-manager` (repeatable), e.g.
    /// `--controller-manager-arg=--concurrent-replicaset-syncs=20`.
    #[arg(long = "controller-manager-arg", allow_hyphen_values = true)]
    controller_manager_args: Vec<String>,
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

/// One driver's run.
#[derive(Debug, Default)]
struct Outcome {
    subject: String,
    deployments: usize,
    pods: usize,
    /// Deployments that reported every replica available.
    available: usize,
    /// Distinct bench pods seen.
    pods_seen: usize,
    /// First Deployment create → every Deployment available (or the time-out).
    seconds: f64,
    /// First Deployment create → the last pod seen.
    pods_seconds: f64,
    /// The Deployments' creates alone.
    create_seconds: f64,
    manager_cpu_seconds: f64,
    manager_peak_rss_mb: f64,
    /// This process (apiserver, scheduler, hollow nodes, store client): CPU seconds.
    server_cpu_seconds: f64,
}

impl Outcome {
    fn complete(&self) -> bool {
        self.available >= self.deployments
    }

    fn pods_per_second(&self) -> f64 {
        self.pods_seen as f64 / self.pods_seconds.max(1e-9)
    }

    /// The least time upstream's 20 QPS client needs for the same pod creates alone (the
    /// ReplicaSets' and Deployments' status writes and the Events come on top).
    fn upstream_seconds(&self) -> f64 {
        self.pods as f64 / UPSTREAM_QPS
    }
}

/// An in-process apiserver on a fresh store of `subject`, with the scheduler unless the
/// hollow nodes bind.
async fn start(subject: &str, args: &ControllersBenchArgs) -> Result<Cluster> {
    let dir = std::env::temp_dir().join(format!("rudder-bench-controllers-{subject}"));
    let backends = Backends {
        postgres_url: &args.postgres_url,
        etcd_endpoint: &args.etcd_endpoint,
        // These benches name no MySQL server or Spanner emulator of their own: the machine's.
        mysql_url: super::api::DEFAULT_MYSQL_URL,
        spanner_emulator: super::api::DEFAULT_SPANNER_EMULATOR,
    };
    let url = storage_url(subject, &backends, "bench_controllers", &dir)?;
    let cluster = cluster::start(url, dir).await?;
    if !args.bind_directly {
        cluster.start_scheduler().await?;
    }
    Ok(cluster)
}

/// `rudder controller-manager` against `cluster`, as `system:kube-controller-manager`.
fn spawn_manager(cluster: &Cluster, extra: &[String]) -> Result<tokio::process::Child> {
    tokio::process::Command::new(std::env::current_exe()?)
        .arg("controller-manager")
        .arg("--kubeconfig")
        .arg(&cluster.running.controller_manager_kubeconfig)
        .arg("--leader-elect=false")
        .arg("--metrics-bind-address=")
        .args(extra)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .context("starting `rudder controller-manager`")
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

fn node_name(i: usize) -> String {
    format!("bench-node-{i}")
}

fn node(i: usize) -> Result<Node> {
    let name = node_name(i);
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
            "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastHeartbeatTime": now(), "lastTransitionTime": now()}],
            "addresses": [{"type": "InternalIP", "address": node_ip(i)}],
        },
    }))?)
}

fn node_ip(i: usize) -> String {
    format!("10.200.{}.{}", i / 250 % 250, i % 250 + 1)
}

fn deployment(i: usize, replicas: usize) -> Result<Deployment> {
    let app = format!("web-{i}");
    let (key, value) = LABEL.split_once('=').unwrap_or((LABEL, ""));
    Ok(serde_json::from_value(json!({
        "metadata": {"name": app, "labels": {key: value}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app, key: value}},
                "spec": {"containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}]},
            },
        },
    }))?)
}

/// Creates the nodes and their Leases, and renews the Leases every 10 s (as kubelets do) so
/// that the node lifecycle controller keeps them Ready.
async fn start_nodes(clients: &[Client], count: usize, stop: CancellationToken) -> Result<()> {
    concurrently(clients, count, |client, i| async move {
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node(i)?)
            .await
            .map_err(concise)?;
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": node_name(i), "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": node_name(i), "leaseDurationSeconds": 40,
                "renewTime": now()},
        }))?;
        Api::<Lease>::namespaced(client, "kube-node-lease")
            .create(&PostParams::default(), &lease)
            .await
            .map_err(concise)?;
        Ok(())
    })
    .await
    .context("creating the nodes")?;
    let clients = clients.to_vec();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(10));
        tick.tick().await;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let renewed = concurrently(&clients, count, |client, i| async move {
                let patch = json!({"spec": {"renewTime": now()}});
                Api::<Lease>::namespaced(client, "kube-node-lease")
                    .patch(
                        &node_name(i),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(concise)?;
                Ok(())
            })
            .await;
            if let Err(error) = renewed {
                tracing::warn!(%error, "renewing the bench's node Leases");
            }
        }
    });
    Ok(())
}

/// What the hollow nodes' pod watch has seen.
#[derive(Default)]
struct PodTally {
    /// Distinct bench pods seen, and when the last new one was (ms since the start).
    seen: AtomicU64,
    last_seen_ms: AtomicU64,
}

/// The hollow nodes: one watch of the bench's pods. A pod seen for the first time is counted;
/// an unbound one is bound round-robin when `bind` (else the scheduler binds it); a bound one
/// without a Ready condition is marked Running and Ready by one of the status writers.
fn start_hollow_nodes(
    clients: Vec<Client>,
    nodes: usize,
    bind: bool,
    started: Instant,
    stop: CancellationToken,
) -> Arc<PodTally> {
    let tally = Arc::new(PodTally::default());
    let (work, queue) = mpsc::unbounded_channel::<Pod>();
    let queue = Arc::new(tokio::sync::Mutex::new(queue));
    let next_node = Arc::new(AtomicU64::new(0));
    for client in &clients {
        let (client, queue, stop) = (client.clone(), queue.clone(), stop.clone());
        let next_node = next_node.clone();
        tokio::spawn(async move {
            let api: Api<Pod> = Api::namespaced(client, NAMESPACE);
            loop {
                let pod = tokio::select! {
                    _ = stop.cancelled() => return,
                    pod = async { queue.lock().await.recv().await } => match pod {
                        Some(pod) => pod,
                        None => return,
                    },
                };
                let unbound = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_none();
                let node = next_node.fetch_add(1, Ordering::Relaxed) as usize % nodes.max(1);
                // An overloaded apiserver answers 429 or 5xx for a while: retry as a kubelet
                // would, or the Deployment never becomes available.
                for attempt in 1..=10u64 {
                    let result = if unbound {
                        bind_pod(&api, &pod, &node_name(node)).await
                    } else {
                        mark_running(&api, &pod).await
                    };
                    match result {
                        Err(kube::Error::Api(status))
                            if status.code == 429 || status.code >= 500 =>
                        {
                            tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
                        }
                        Err(error) => {
                            tracing::debug!(pod = %pod.name_any(), %error, "a hollow node's write");
                            break;
                        }
                        Ok(()) => break,
                    }
                }
            }
        });
    }
    let watched = tally.clone();
    tokio::spawn(async move {
        let Some(client) = clients.first().cloned() else {
            return;
        };
        let api: Api<Pod> = Api::namespaced(client, NAMESPACE);
        let mut events = watcher(api, watcher::Config::default().labels(LABEL))
            .default_backoff()
            .applied_objects()
            .boxed();
        let (mut seen, mut bound, mut marked) =
            (HashSet::new(), HashSet::new(), HashSet::<String>::new());
        loop {
            let pod = tokio::select! {
                _ = stop.cancelled() => return,
                next = events.next() => match next {
                    Some(Ok(pod)) => pod,
                    Some(Err(_)) => continue,
                    None => return,
                },
            };
            let name = pod.name_any();
            if seen.insert(name.clone()) {
                watched.seen.store(seen.len() as u64, Ordering::Relaxed);
                let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                watched.last_seen_ms.store(ms, Ordering::Relaxed);
            }
            let scheduled = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some();
            let wanted = if scheduled {
                !is_ready(&pod) && marked.insert(name)
            } else {
                bind && bound.insert(name)
            };
            if wanted && work.send(pod).is_err() {
                return;
            }
        }
    });
    tally
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

async fn bind_pod(api: &Api<Pod>, pod: &Pod, node: &str) -> kube::Result<()> {
    let binding = Binding {
        metadata: kube::api::ObjectMeta {
            name: Some(pod.name_any()),
            ..Default::default()
        },
        target: k8s_openapi::api::core::v1::ObjectReference {
            kind: Some("Node".into()),
            api_version: Some("v1".into()),
            name: Some(node.into()),
            ..Default::default()
        },
    };
    api.create_subresource::<Binding, Binding>(
        "binding",
        &pod.name_any(),
        &PostParams::default(),
        &binding,
    )
    .await?;
    Ok(())
}

/// What a kubelet reports for a started pod whose one container is running and ready.
fn running_status(pod: &Pod, index: u64) -> serde_json::Value {
    let started = now();
    let containers: Vec<serde_json::Value> = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|c| {
            json!({"name": c.name, "image": c.image, "imageID": "", "ready": true,
                "started": true, "restartCount": 0,
                "containerID": format!("hollow://{}-{}", pod.name_any(), c.name),
                "state": {"running": {"startedAt": started}}})
        })
        .collect();
    let condition =
        |kind: &str| json!({"type": kind, "status": "True", "lastTransitionTime": started});
    json!({"status": {
        "phase": "Running",
        "podIP": format!("10.{}.{}.{}", 64 + index / 65536 % 64, index / 256 % 256, index % 256),
        "startTime": started,
        "conditions": [condition("PodScheduled"), condition("Initialized"),
            condition("ContainersReady"), condition("Ready")],
        "containerStatuses": containers,
    }})
}

static NEXT_POD_IP: AtomicU64 = AtomicU64::new(1);

async fn mark_running(api: &Api<Pod>, pod: &Pod) -> kube::Result<()> {
    let index = NEXT_POD_IP.fetch_add(1, Ordering::Relaxed);
    api.patch_status(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(running_status(pod, index)),
    )
    .await?;
    Ok(())
}

/// Whether a Deployment reports every replica of its current template available.
fn available(deployment: &Deployment) -> bool {
    let wanted = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let Some(status) = deployment.status.as_ref() else {
        return false;
    };
    status.observed_generation.unwrap_or(0) >= deployment.metadata.generation.unwrap_or(0)
        && status.updated_replicas.unwrap_or(0) == wanted
        && status.available_replicas.unwrap_or(0) == wanted
        && status.replicas.unwrap_or(0) == wanted
}

/// Counts the bench's Deployments that are available.
fn watch_deployments(client: Client, stop: CancellationToken) -> Arc<AtomicU64> {
    let count = Arc::new(AtomicU64::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        let api: Api<Deployment> = Api::namespaced(client, NAMESPACE);
        let mut events = watcher(api, watcher::Config::default().labels(LABEL))
            .default_backoff()
            .applied_objects()
            .boxed();
        let mut done = HashSet::new();
        loop {
            let deployment = tokio::select! {
                _ = stop.cancelled() => return,
                next = events.next() => match next {
                    Some(Ok(deployment)) => deployment,
                    Some(Err(_)) => continue,
                    None => return,
                },
            };
            if available(&deployment) {
                done.insert(deployment.name_any());
            } else {
                done.remove(&deployment.name_any());
            }
            counted.store(done.len() as u64, Ordering::Relaxed);
        }
    });
    count
}

/// Waits until the controller-manager has given the bench's namespace its `default`
/// ServiceAccount (pods need it to be admitted): its controllers are then running.
async fn manager_ready(client: &Client, limit: Duration) -> Result<()> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let deadline = Instant::now() + limit;
    while accounts
        .get_opt("default")
        .await
        .map_err(concise)?
        .is_none()
    {
        if Instant::now() > deadline {
            bail!(
                "the controller-manager did not create the default ServiceAccount within {limit:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Peak RSS (MB) of a process, sampled every 250 ms until `stop`.
fn sample_peak_rss(pid: u32, stop: CancellationToken) -> tokio::task::JoinHandle<f64> {
    tokio::spawn(async move {
        let mut peak: f64 = 0.0;
        loop {
            if let Ok((rss, _)) = usage(pid) {
                peak = peak.max(rss);
            }
            tokio::select! {
                _ = stop.cancelled() => return peak,
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        }
    })
}

async fn measure(subject: &str, args: &ControllersBenchArgs) -> Result<Outcome> {
    let cluster = start(subject, args).await?;
    let result = run_workload(&cluster, subject, args).await;
    cluster.stop.cancel();
    let closed = cluster.close().await;
    let outcome = result?;
    closed?;
    Ok(outcome)
}

async fn run_workload(
    cluster: &Cluster,
    subject: &str,
    args: &ControllersBenchArgs,
) -> Result<Outcome> {
    let clients = (0..args.clients.max(1))
        .map(|_| cluster.client())
        .collect::<Result<Vec<_>>>()?;
    let stop = cluster.stop.child_token();
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    Api::<Namespace>::all(clients[0].clone())
        .create(&PostParams::default(), &namespace)
        .await
        .map_err(concise)?;
    start_nodes(&clients, args.nodes, stop.clone()).await?;
    let mut manager = spawn_manager(cluster, &args.controller_manager_args)?;
    let pid = manager
        .id()
        .context("the controller-manager exited at once")?;
    manager_ready(&clients[0], Duration::from_secs(60)).await?;
    let writers = (0..args.status_writers.max(1))
        .map(|_| cluster.client())
        .collect::<Result<Vec<_>>>()?;
    let started = Instant::now();
    let tally = start_hollow_nodes(
        writers,
        args.nodes,
        args.bind_directly,
        started,
        stop.clone(),
    );
    let done = watch_deployments(clients[0].clone(), stop.clone());
    let sampling = stop.child_token();
    let peak_rss = sample_peak_rss(pid, sampling.clone());
    let (_, manager_cpu_before) = usage(pid)?;
    let (_, server_cpu_before) = usage(std::process::id())?;
    let replicas = args.replicas;
    concurrently(&clients, args.deployments, move |client, i| async move {
        Api::<Deployment>::namespaced(client, NAMESPACE)
            .create(&PostParams::default(), &deployment(i, replicas)?)
            .await
            .map_err(concise)?;
        Ok(())
    })
    .await
    .context("creating the Deployments")?;
    let create_seconds = started.elapsed().as_secs_f64();
    let deadline = started + Duration::from_secs(args.timeout_seconds);
    let total = args.deployments as u64;
    while done.load(Ordering::Relaxed) < total && Instant::now() < deadline {
        if let Ok(Some(status)) = manager.try_wait() {
            bail!("the controller-manager exited: {status}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let (_, manager_cpu_after) = usage(pid)?;
    let (_, server_cpu_after) = usage(std::process::id())?;
    sampling.cancel();
    let manager_peak_rss_mb = peak_rss.await.unwrap_or(0.0);
    stop.cancel();
    let _ = manager.kill().await;
    Ok(Outcome {
        subject: subject.to_string(),
        deployments: args.deployments,
        pods: args.deployments * args.replicas,
        available: done.load(Ordering::Relaxed) as usize,
        pods_seen: tally.seen.load(Ordering::Relaxed) as usize,
        seconds,
        pods_seconds: tally.last_seen_ms.load(Ordering::Relaxed) as f64 / 1000.0,
        create_seconds,
        manager_cpu_seconds: manager_cpu_after - manager_cpu_before,
        manager_peak_rss_mb,
        server_cpu_seconds: server_cpu_after - server_cpu_before,
    })
}

/// `rudder bench controllers`.
pub async fn run(args: ControllersBenchArgs) -> Result<()> {
    let mut outcomes = Vec::new();
    for subject in &args.subjects {
        eprintln!(
            "==> {} Deployments × {} replicas on {subject} ({} nodes{})",
            args.deployments,
            args.replicas,
            args.nodes,
            if args.bind_directly {
                ", bound by the hollow nodes"
            } else {
                ", scheduler"
            }
        );
        let outcome = measure(subject, &args)
            .await
            .with_context(|| format!("on {subject}"))?;
        eprintln!(
            "    {:.1} s, {:.0} pods/s created",
            outcome.seconds,
            outcome.pods_per_second()
        );
        outcomes.push(outcome);
    }
    print(&outcomes);
    Ok(())
}

fn print(outcomes: &[Outcome]) {
    let mut table = Table::new();
    table.load_preset(presets::UTF8_FULL_CONDENSED);
    table.set_header([
        "driver",
        "Deployments available",
        "pods seen",
        "all available (s)",
        "pods created/s",
        "× 20 QPS",
        "20 QPS would need (s)",
        "Deployment creates (s)",
        "manager CPU s (% core)",
        "manager peak RSS MB",
        "rest CPU s (% core)",
    ]);
    for o in outcomes {
        let core = |cpu: f64| format!("{cpu:.1} ({:.0}%)", cpu / o.seconds.max(1e-9) * 100.0);
        table.add_row([
            o.subject.clone(),
            if o.complete() {
                format!("{}/{}", o.available, o.deployments)
            } else {
                format!("{}/{} (timed out)", o.available, o.deployments)
            },
            format!("{}/{}", o.pods_seen, o.pods),
            format!("{:.1}", o.seconds),
            format!("{:.0}", o.pods_per_second()),
            format!("{:.1}", o.pods_per_second() / UPSTREAM_QPS),
            format!("{:.0}", o.upstream_seconds()),
            format!("{:.1}", o.create_seconds),
            core(o.manager_cpu_seconds),
            format!("{:.0}", o.manager_peak_rss_mb),
            core(o.server_cpu_seconds),
        ]);
    }
    println!("{table}");
    println!(
        "all available: first Deployment create → every Deployment reports all replicas updated and \
         available. pods created/s: pods seen ÷ first Deployment create → last new pod seen. \
         × 20 QPS: against kube-controller-manager's default client limit (--kube-api-qps 20), \
         whose pod creates alone would need the time in the next column. manager: the \
         `rudder controller-manager` child; rest: this process (apiserver, scheduler, hollow \
         nodes, store client)."
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
    use super::*;

    fn deployment_with(replicas: i32, status: serde_json::Value) -> Deployment {
        let mut d = deployment(0, replicas as usize).unwrap();
        d.metadata.generation = Some(2);
        d.status = serde_json::from_value(status).unwrap();
        d
    }

    #[test]
    fn a_deployment_is_available_once_every_replica_of_its_generation_is() {
        let all = json!({"observedGeneration": 2, "replicas": 10, "updatedReplicas": 10,
            "availableReplicas": 10});
        assert!(available(&deployment_with(10, all)));
        let stale = json!({"observedGeneration": 1, "replicas": 10, "updatedReplicas": 10,
            "availableReplicas": 10});
        assert!(!available(&deployment_with(10, stale)));
        let rolling = json!({"observedGeneration": 2, "replicas": 11, "updatedReplicas": 10,
            "availableReplicas": 10});
        assert!(!available(&deployment_with(10, rolling)));
        let starting = json!({"observedGeneration": 2, "replicas": 10, "updatedReplicas": 10,
            "availableReplicas": 7});
        assert!(!available(&deployment_with(10, starting)));
        assert!(!available(&deployment(0, 10).unwrap()));
    }

    #[test]
    fn the_running_status_is_ready_with_every_container_running() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]},
        }))
        .unwrap();
        let mut marked = pod.clone();
        marked.status =
            serde_json::from_value(running_status(&pod, 258)["status"].clone()).unwrap();
        assert!(is_ready(&marked));
        let status = marked.status.unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.pod_ip.as_deref(), Some("10.64.1.2"));
        let containers = status.container_statuses.unwrap();
        assert_eq!(containers.len(), 2);
        assert!(containers
            .iter()
            .all(|c| c.ready && c.state.as_ref().unwrap().running.is_some()));
        assert!(!is_ready(&pod));
    }

    #[test]
    fn upstream_needs_pods_over_twenty_seconds() {
        let outcome = Outcome {
            pods: 10_000,
            pods_seen: 10_000,
            pods_seconds: 20.0,
            ..Outcome::default()
        };
        assert_eq!(outcome.upstream_seconds(), 500.0);
        assert_eq!(outcome.pods_per_second(), 500.0);
    }
}
