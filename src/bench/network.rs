//! `rudder bench network`: what the node agent's service networking costs as a cluster grows.
//!
//! - **Rule programming latency**: an in-process apiserver (SQLite), the agent's proxy against
//!   it programming nftables in a network namespace of the bench's own, and Services (each
//!   with an EndpointSlice of two endpoints) grown to each size asked for. At each size one
//!   random Service's EndpointSlice is changed `--changes` times; the time from the API write
//!   to the transaction holding it being in the kernel is reported as p50/p99, with the
//!   proxy's own sync time. The reference, measured in the same run at the same size, is what
//!   a proxy that rewrites its whole rule set per change pays: the whole table written by
//!   `nft -f`. Upstream's nftables mode is built to stay flat as Services grow; the ratios
//!   show whether Rudder's does.
//! - **iptables mode**, beside it at each size (unless `--skip-iptables`): the same proxy in
//!   iptables mode (chains written by `iptables-restore --noflush`, changed chains only) in
//!   the same namespace, programmed from nothing and then timed over the same kind of
//!   changes. Upstream's iptables mode grows linearly with the Services.
//! - **DNS**: queries per second for Service names against the agent's DNS server built from
//!   the same Services, from a UDP load generator in the same process.
//!
//! Needs root (network namespaces, nftables, iptables).

use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use comfy_table::{presets, Table};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PostParams};
use kube::Client;
use rudder_network::proxy::nft::{Cli, Nft};
use rudder_network::proxy::{self, rules, ruleset, Metrics};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::api::admin_config;

#[derive(clap::Args)]
pub struct NetworkBenchArgs {
    /// Service counts to measure at, in increasing order.
    #[arg(long, value_delimiter = ',', default_value = "10,1000,10000")]
    services: Vec<usize>,
    /// EndpointSlice changes timed at each size.
    #[arg(long, default_value_t = 50)]
    changes: usize,
    /// Concurrent API writes while growing the Services.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Leave the iptables mode out.
    #[arg(long)]
    skip_iptables: bool,
    /// How long the DNS load runs, in seconds.
    #[arg(long, default_value_t = 5)]
    dns_seconds: u64,
    /// Concurrent DNS queries in flight.
    #[arg(long, default_value_t = 64)]
    dns_concurrency: usize,
}

const NAMESPACE: &str = "bench";
const NETNS: &str = "rdr-bench-net";

struct Netns;

impl Netns {
    fn create() -> Result<Netns> {
        let _ = Command::new("ip").args(["netns", "del", NETNS]).output();
        let made = Command::new("ip")
            .args(["netns", "add", NETNS])
            .output()
            .context("running ip netns add (install iproute2)")?;
        if !made.status.success() {
            bail!(
                "ip netns add {NETNS}: {} (the bench needs root)",
                String::from_utf8_lossy(&made.stderr).trim()
            );
        }
        Ok(Netns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", NETNS]).output();
    }
}

fn nft() -> Cli {
    Cli {
        command: ["ip", "netns", "exec", NETNS, "nft"]
            .map(String::from)
            .to_vec(),
    }
}

fn iptables() -> proxy::iptables::Cli {
    proxy::iptables::Cli {
        prefix: ["ip", "netns", "exec", NETNS].map(String::from).to_vec(),
    }
}

fn service(index: usize) -> Result<Service> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": format!("svc-{index}"), "namespace": NAMESPACE},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
    }))?)
}

/// Two endpoints in 10.128.0.0/9 derived from `index` and `salt`.
fn slice(index: usize, salt: usize) -> Result<EndpointSlice> {
    let ip = |n: usize| {
        let value =
            0x0a80_0000u32 + u32::try_from((index * 2 + n + salt * 7919) % 0x7f_ffff).unwrap_or(0);
        std::net::Ipv4Addr::from(value).to_string()
    };
    Ok(serde_json::from_value(json!({
        "metadata": {"name": format!("svc-{index}-x"), "namespace": NAMESPACE,
            "labels": {"kubernetes.io/service-name": format!("svc-{index}")}},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": [ip(0)], "conditions": {"ready": true}},
            {"addresses": [ip(1)], "conditions": {"ready": true}},
        ],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }))?)
}

async fn grow(client: &Client, from: usize, to: usize, clients: usize) -> Result<()> {
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);
    let results: Vec<Result<()>> = futures::stream::iter(from..to)
        .map(|index| {
            let (services, slices) = (services.clone(), slices.clone());
            async move {
                services
                    .create(&PostParams::default(), &service(index)?)
                    .await?;
                slices
                    .create(&PostParams::default(), &slice(index, 0)?)
                    .await?;
                Ok(())
            }
        })
        .buffer_unordered(clients.max(1))
        .collect()
        .await;
    results.into_iter().collect()
}

/// Waits until the proxy has applied rules computed at or after the current generation,
/// with at least `ports` service ports programmed.
async fn settle(watched: &rudder_network::Watched, metrics: &Metrics, ports: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let generation = *watched.changes.borrow();
        let slices = watched.slices.state().len();
        let synced = metrics.syncs.load(Ordering::Acquire) > 0;
        if synced
            && slices >= ports
            && metrics.applied_generation.load(Ordering::Acquire) >= generation
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the proxy did not catch up with {ports} Services in 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The iptables mode's table, beside the nftables mode's figures.
fn print_iptables(rows: &[Row], changes: usize) {
    let measured: Vec<(&Row, &Measured)> = rows
        .iter()
        .filter_map(|row| row.iptables.as_ref().map(|m| (row, m)))
        .collect();
    if measured.is_empty() {
        return;
    }
    let mut table = Table::new();
    table.load_preset(presets::UTF8_FULL_CONDENSED).set_header([
        "Services",
        "EndpointSlice write → rules p50",
        "p99",
        "proxy sync p50",
        "programmed from nothing",
        "p50 / nftables p50",
    ]);
    for (row, m) in &measured {
        let p50 = percentile(&m.latencies, 0.5);
        table.add_row([
            row.services.to_string(),
            ms(p50),
            ms(percentile(&m.latencies, 0.99)),
            ms(percentile(&m.syncs, 0.5)),
            ms(m.from_nothing),
            format!(
                "{:.1}×",
                p50.as_secs_f64() / row.p50.as_secs_f64().max(1e-6)
            ),
        ]);
    }
    println!(
        "the same in iptables mode ({changes} changes per size, iptables-restore --noflush in the same namespace):"
    );
    println!("{table}");
    if let (Some((first_row, first)), Some((last_row, last))) = (measured.first(), measured.last())
    {
        println!(
            "growth from {} to {} Services: change→rules p50 {:.2}×, from nothing {:.1}×",
            first_row.services,
            last_row.services,
            percentile(&last.latencies, 0.5).as_secs_f64()
                / percentile(&first.latencies, 0.5).as_secs_f64().max(1e-6),
            last.from_nothing.as_secs_f64() / first.from_nothing.as_secs_f64().max(1e-6),
        );
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

struct Row {
    services: usize,
    p50: Duration,
    p99: Duration,
    sync_p50: Duration,
    full: Duration,
    /// The in-memory part of a sync (model, rule set, diff).
    compute: Duration,
    iptables: Option<Measured>,
}

/// One proxy's figures at one size.
struct Measured {
    /// From its start to every Service programmed (its first, whole sync).
    from_nothing: Duration,
    /// EndpointSlice write → rules in the kernel, sorted.
    latencies: Vec<Duration>,
    /// The proxy's own sync time per change, sorted.
    syncs: Vec<Duration>,
}

/// Where a measurement runs.
struct Bench<'a> {
    config: &'a proxy::Config,
    watched: &'a rudder_network::Watched,
    slices: &'a Api<EndpointSlice>,
    stop: &'a CancellationToken,
    /// Slices there besides the bench's (the bootstrap Services').
    base: usize,
    changes: usize,
}

impl Bench<'_> {
    /// A proxy of its own on `backend`, started once the Services are there (as an agent
    /// restarting on a big cluster would, so growing them does not race its syncs), then
    /// `changes` random EndpointSlice replacements (`salt` keeps their endpoints new).
    async fn measure(&self, backend: proxy::Backend, size: usize, salt: usize) -> Result<Measured> {
        let mode = backend.name();
        let metrics = Arc::new(Metrics::for_backend(&backend));
        let proxy_stop = self.stop.child_token();
        tokio::spawn(proxy::run(
            self.config.clone(),
            self.watched.clone(),
            backend,
            metrics.clone(),
            proxy_stop.clone(),
        ));
        let started = Instant::now();
        settle(self.watched, &metrics, self.base + size).await?;
        let from_nothing = started.elapsed();
        eprintln!(
            "the proxy ({mode}) programmed {size} Services from nothing in {:.1} s",
            from_nothing.as_secs_f64()
        );
        let mut latencies = Vec::with_capacity(self.changes);
        let mut syncs = Vec::with_capacity(self.changes);
        for change in 0..self.changes {
            let index = rand::random_range(0..size);
            let name = format!("svc-{index}-x");
            let mut updated = slice(index, size * 1000 + salt + change + 1)?;
            let current = self.slices.get(&name).await?;
            updated.metadata.resource_version = current.metadata.resource_version.clone();
            let t0 = Instant::now();
            let written = self
                .slices
                .replace(&name, &PostParams::default(), &updated)
                .await?;
            let version = written.metadata.resource_version.clone();
            // Seen by the proxy's watch…
            let generation = loop {
                let seen = self
                    .watched
                    .slices
                    .get(&kube::runtime::reflector::ObjectRef::new(&name).within(NAMESPACE))
                    .is_some_and(|s| s.metadata.resource_version == version);
                if seen {
                    break *self.watched.changes.borrow();
                }
                if t0.elapsed() > Duration::from_secs(60) {
                    bail!("the proxy's watch never saw {name} at {version:?}");
                }
                tokio::time::sleep(Duration::from_micros(200)).await;
            };
            // …and in the kernel.
            while metrics.applied_generation.load(Ordering::Acquire) < generation {
                if t0.elapsed() > Duration::from_secs(60) {
                    bail!("the proxy ({mode}) never programmed {name}");
                }
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            latencies.push(t0.elapsed());
            syncs.push(Duration::from_micros(
                metrics.last_sync_micros.load(Ordering::Acquire),
            ));
        }
        proxy_stop.cancel();
        latencies.sort();
        syncs.sort();
        Ok(Measured {
            from_nothing,
            latencies,
            syncs,
        })
    }
}

pub async fn run(args: NetworkBenchArgs) -> Result<()> {
    let _netns = Netns::create()?;
    let nft = nft();
    if !nft.available().await {
        bail!("nft cannot program the bench's network namespace (install nftables; run as root)");
    }
    let ipt = iptables();
    if !args.skip_iptables && !ipt.available().await {
        bail!(
            "iptables cannot program the bench's network namespace (install iptables; run as \
             root; or --skip-iptables)"
        );
    }
    let ipt: Arc<dyn proxy::iptables::Iptables> = Arc::new(ipt);
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    let store = rudder_storage::open(&url)
        .await
        .context("opening the store")?;
    let mut config = rudder_apiserver::server::Config::new(dir.path().join("apiserver"));
    config.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let stop = CancellationToken::new();
    let running = rudder_apiserver::server::start(config, store, stop.clone())
        .await
        .context("starting the apiserver")?;
    let client = Client::try_from(admin_config(&running).await?)?;
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .context("creating the bench namespace")?;

    let watched = rudder_network::watch(client.clone(), stop.child_token());
    let mut proxy_config = proxy::Config::new("bench-node", vec!["10.244.0.0/16".into()]);
    proxy_config.min_sync_period = Duration::ZERO;
    let kernel: Arc<dyn Nft> = Arc::new(nft);
    watched.ready().await;
    // The bootstrap Services (kubernetes, kube-dns) are there too.
    let base = watched.slices.state().len();

    let mut rows = Vec::new();
    let mut have = 0;
    let slices_api: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);
    for &size in &args.services {
        if size > have {
            let started = Instant::now();
            grow(&client, have, size, args.clients).await?;
            eprintln!(
                "{size} Services with their EndpointSlices created in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            have = size;
        }
        let bench = Bench {
            config: &proxy_config,
            watched: &watched,
            slices: &slices_api,
            stop: &stop,
            base,
            changes: args.changes,
        };
        let nftables = bench
            .measure(proxy::Backend::Nftables(kernel.clone()), size, 0)
            .await?;
        // What a sync spends in memory: the model and rule set rebuilt, diffed against the last.
        let computing = Instant::now();
        let ports = proxy::model::service_ports(
            &watched.services.state(),
            &watched.slices.state(),
            "bench-node",
        );
        let skeleton = rules::skeleton(&proxy_config.rules);
        let desired = rules::ruleset(&ports, &proxy_config.rules);
        let _ = ruleset::diff(&skeleton, &desired, &desired);
        let compute = computing.elapsed();
        // The reference: the whole table written per change.
        let script = ruleset::full(&skeleton, &desired);
        let mut fulls = Vec::new();
        let runs = if size >= 5000 { 1 } else { 3 };
        for _ in 0..runs {
            let started = Instant::now();
            kernel.apply(&script).await.context("the whole table")?;
            fulls.push(started.elapsed());
        }
        fulls.sort();
        // The iptables mode alone in the namespace, then gone before the next size.
        proxy::cleanup(&*kernel, &proxy_config.rules.table).await?;
        let iptables = if args.skip_iptables {
            None
        } else {
            let measured = bench
                .measure(proxy::Backend::Iptables(ipt.clone()), size, args.changes)
                .await?;
            proxy::iptables::cleanup(&*ipt).await?;
            Some(measured)
        };
        rows.push(Row {
            services: size,
            p50: percentile(&nftables.latencies, 0.5),
            p99: percentile(&nftables.latencies, 0.99),
            sync_p50: percentile(&nftables.syncs, 0.5),
            full: fulls[fulls.len() / 2],
            compute,
            iptables,
        });
    }

    let mut table = Table::new();
    table.load_preset(presets::UTF8_FULL_CONDENSED).set_header([
        "Services",
        "EndpointSlice write → rules p50",
        "p99",
        "proxy sync p50",
        "of it in memory",
        "whole-table rewrite",
        "rewrite / sync",
    ]);
    for row in &rows {
        table.add_row([
            row.services.to_string(),
            ms(row.p50),
            ms(row.p99),
            ms(row.sync_p50),
            ms(row.compute),
            ms(row.full),
            format!(
                "{:.1}×",
                row.full.as_secs_f64() / row.sync_p50.as_secs_f64().max(1e-6)
            ),
        ]);
    }
    println!(
        "service rule programming ({} changes per size, nftables in a namespace of the bench's own):",
        args.changes
    );
    println!("{table}");
    if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
        println!(
            "growth from {} to {} Services: change→rules p50 {:.2}×, whole-table rewrite {:.1}× (flat is 1×)",
            first.services,
            last.services,
            last.p50.as_secs_f64() / first.p50.as_secs_f64().max(1e-6),
            last.full.as_secs_f64() / first.full.as_secs_f64().max(1e-6),
        );
    }

    print_iptables(&rows, args.changes);

    // DNS over the same Services.
    let mut dns_config = rudder_network::dns::Config::new(
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        Vec::new(),
    );
    dns_config.cluster_domain = "cluster.local".into();
    let server = rudder_network::dns::Server::bind(dns_config).await?;
    let address = server.local_addr();
    let records =
        rudder_network::dns::follow(watched.clone(), "cluster.local".into(), stop.child_token());
    tokio::spawn(server.run(records, stop.child_token()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let names: Vec<String> = (0..have.clamp(1, 1000))
        .map(|i| {
            format!(
                "svc-{}.{NAMESPACE}.svc.cluster.local",
                i * have.max(1) / have.clamp(1, 1000)
            )
        })
        .collect();
    let report = rudder_network::dns::load::run(
        address,
        names,
        args.dns_concurrency,
        Duration::from_secs(args.dns_seconds),
    )
    .await;
    let mut dns = Table::new();
    dns.load_preset(presets::UTF8_FULL_CONDENSED).set_header([
        "Services",
        "queries/s",
        "answered",
        "errors",
        "p50",
        "p99",
    ]);
    dns.add_row([
        have.to_string(),
        format!("{:.0}", report.qps()),
        report.answered().to_string(),
        report.errors.to_string(),
        ms(report.p50),
        ms(report.p99),
    ]);
    println!(
        "cluster DNS, A queries for Service names ({} in flight, {:?}, one process on this machine):",
        args.dns_concurrency, Duration::from_secs(args.dns_seconds)
    );
    println!("{dns}");
    stop.cancel();
    Ok(())
}
