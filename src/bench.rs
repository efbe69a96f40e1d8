//! `rudder bench storage`: create throughput of each storage driver, measured in one run with
//! the subjects interleaved round by round (so machine drift hits them alike), and reported as
//! ratios to etcd when etcd is among the subjects.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use rudder_storage::{CreateOutcome, Storage};

#[derive(clap::Args)]
pub struct StorageBenchArgs {
    /// Subjects to measure, comma-separated: sqlite, postgres, etcd.
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
    /// Concurrent writers.
    #[arg(long, default_value_t = 16)]
    writers: usize,
    /// Bytes per value.
    #[arg(long, default_value_t = 1024)]
    value_size: usize,
    /// Creates per subject in each round.
    #[arg(long, default_value_t = 3000)]
    writes: usize,
    /// Rounds; each round runs every subject once, in rotating order.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

struct Subject {
    name: String,
    url: String,
    store: Arc<dyn Storage>,
    latencies: Histogram<u64>,
    busy: Duration,
    writes: usize,
}

pub async fn run(args: StorageBenchArgs) -> Result<()> {
    if args.writers == 0 || args.writes == 0 || args.rounds == 0 {
        bail!("--writers, --writes and --rounds must be at least 1");
    }
    let tag = format!("{:08x}", rand::random::<u32>());
    let scratch = std::env::temp_dir().join(format!("rudder-bench-{tag}"));
    let mut subjects = Vec::new();
    for name in &args.subjects {
        let url = match name.as_str() {
            "sqlite" => format!(
                "sqlite://{}?compact_interval=0",
                scratch.join("state.db").display()
            ),
            "postgres" => {
                let separator = if args.postgres_url.contains('?') {
                    '&'
                } else {
                    '?'
                };
                format!(
                    "{}{separator}schema=rudder_bench_{tag}&compact_interval=0",
                    args.postgres_url
                )
            }
            "etcd" => format!(
                "etcd://{}/rudder-bench-{tag}?compact_interval=0",
                args.etcd_endpoint
            ),
            other => bail!("unknown subject {other:?}: use sqlite, postgres or etcd"),
        };
        let store = rudder_storage::open(&url)
            .await
            .with_context(|| format!("opening the {name} subject"))?;
        subjects.push(Subject {
            name: name.clone(),
            url,
            store,
            latencies: Histogram::new(3)?,
            busy: Duration::ZERO,
            writes: 0,
        });
    }
    println!(
        "create throughput: {} writers, {} B values, {} creates per subject in each of {} rounds",
        args.writers, args.value_size, args.writes, args.rounds
    );
    let value = vec![b'v'; args.value_size];
    for round in 0..args.rounds {
        for offset in 0..subjects.len() {
            let index = (round + offset) % subjects.len();
            let subject = &mut subjects[index];
            let prefix = format!("/bench/r{round}/");
            let (elapsed, latencies) =
                creates(&subject.store, &prefix, &value, args.writes, args.writers).await?;
            subject.busy += elapsed;
            subject.writes += args.writes;
            subject.latencies.add(latencies)?;
            eprintln!(
                "round {}/{}: {:<8} {:>9.0} creates/s",
                round + 1,
                args.rounds,
                subject.name,
                args.writes as f64 / elapsed.as_secs_f64()
            );
        }
    }
    report(&subjects);
    for subject in &subjects {
        subject.store.close().await;
        if let Err(error) = rudder_storage::wipe(&subject.url).await {
            eprintln!("could not clean up the {} subject: {error}", subject.name);
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// Runs `count` creates of distinct keys with `writers` concurrent clients.
async fn creates(
    store: &Arc<dyn Storage>,
    prefix: &str,
    value: &[u8],
    count: usize,
    writers: usize,
) -> Result<(Duration, Histogram<u64>)> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let store = store.clone();
        let value = value.to_vec();
        let prefix = prefix.to_string();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Histogram::<u64>::new(3)?;
            for i in (writer..count).step_by(writers) {
                let key = format!("{prefix}{i:08}");
                let begun = Instant::now();
                match store.create(key.as_bytes(), &value, 0).await? {
                    CreateOutcome::Created { .. } => {}
                    CreateOutcome::AlreadyExists { .. } => bail!("key {key} already existed"),
                }
                latencies.record(begun.elapsed().as_micros() as u64)?;
            }
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
    let mut all = Histogram::<u64>::new(3)?;
    for task in tasks {
        all.add(task.await??)?;
    }
    Ok((started.elapsed(), all))
}

fn report(subjects: &[Subject]) {
    let throughput = |s: &Subject| s.writes as f64 / s.busy.as_secs_f64();
    let reference = subjects.iter().find(|s| s.name == "etcd").map(throughput);
    println!();
    println!(
        "{:<10} {:>8} {:>12} {:>8} {:>8} {:>8} {:>9}",
        "subject", "creates", "creates/s", "p50 ms", "p90 ms", "p99 ms", "vs etcd"
    );
    for subject in subjects {
        let ms = |q: f64| subject.latencies.value_at_quantile(q) as f64 / 1000.0;
        let ratio = reference.map_or("-".to_string(), |r| {
            format!("{:.2}x", throughput(subject) / r)
        });
        println!(
            "{:<10} {:>8} {:>12.0} {:>8.2} {:>8.2} {:>8.2} {:>9}",
            subject.name,
            subject.writes,
            throughput(subject),
            ms(0.5),
            ms(0.9),
            ms(0.99),
            ratio
        );
    }
}
