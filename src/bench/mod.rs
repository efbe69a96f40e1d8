//! `rudder bench storage`: the same storage workloads (create, update, get, list, watch,
//! compact) against every subject (sqlite, postgres, etcd) in one invocation. For each workload
//! the subjects run round-robin, in an order that rotates from round to round, so machine drift
//! hits them alike; every figure is also given as a ratio to real etcd measured in the same run.
//! This file has the flags and the driver loop; `workloads` the traffic, `subjects` what is
//! measured, `report` the figures and files, `charts` the pictures. `api` (with `api_report`)
//! is `rudder bench api`, the same idea through the Kubernetes API over HTTPS; `authz`,
//! `admission`, `scheduler`, `kubelet`, `network`, `watch` and `controllers` measure
//! authorization, the API's extensions (custom resources, webhooks, policies), the scheduler,
//! the node agent, service networking, many watchers and the controller-manager.

pub mod admission;
pub mod api;
mod api_report;
pub mod authz;
mod charts;
mod cluster;
pub mod controllers;
pub mod kubelet;
mod memory;
pub mod network;
mod report;
mod scale;
pub mod scheduler;
mod subjects;
pub mod watch;
mod workloads;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{MultiProgress, ProgressBar, ProgressState, ProgressStyle};

use report::Tally;
use subjects::{Subject, REFERENCE};
use workloads::{Params, Workload};

#[derive(clap::Args)]
pub struct StorageBenchArgs {
    /// Subjects to measure, comma-separated: sqlite, sqlite-normal, postgres, postgres-pair,
    /// mysql, mysql-pair, spanner, spanner-pair, etcd (the reference), gateway-<driver>.
    #[arg(long, default_value = "sqlite,postgres,etcd", value_delimiter = ',')]
    subjects: Vec<String>,
    /// Workloads to run, comma-separated, in this order.
    #[arg(
        long,
        value_enum,
        default_value = "create,update,get,list,watch,compact,revoke",
        value_delimiter = ','
    )]
    workloads: Vec<Workload>,
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
    /// MySQL/MariaDB URL for the mysql subjects; they work in databases of their own
    /// (`rudder_bench`, `rudder_bench_pair`), created when missing.
    #[arg(
        long,
        env = "RUDDER_BENCH_MYSQL_URL",
        default_value = "mysql://root@127.0.0.1:3306/test"
    )]
    mysql_url: String,
    /// Cloud Spanner emulator (`host:port`) for the spanner subjects; each works in a database
    /// of its own, dropped at the end.
    #[arg(
        long,
        env = "RUDDER_BENCH_SPANNER_EMULATOR",
        default_value = "127.0.0.1:9010"
    )]
    spanner_emulator: String,
    /// Write results.json, results.csv and charts (PNG and SVG) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Rounds; each round runs every subject once per workload, in rotating order.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Concurrent clients for create, update and get (and the writers beside a revoke). Several,
    /// comma-separated (`1,16,64,256`), run every workload at each: a scaling run.
    #[arg(long, default_value = "16", value_delimiter = ',')]
    writers: Vec<usize>,
    /// Bytes per value.
    #[arg(long, default_value_t = 1024)]
    value_size: usize,
    /// Keys created per subject in each round; also the key set updates and gets use (`10k`,
    /// `1m` allowed). Several, comma-separated (`10k,100k`), make a scaling run in which the
    /// list workload pages over that many keys.
    #[arg(long, alias = "writes", default_value = "2000", value_delimiter = ',', value_parser = scale::parse_count)]
    keys: Vec<usize>,
    /// Read-modify-write updates (get, then CAS update) per subject in each round.
    #[arg(long, default_value_t = 2000)]
    updates: usize,
    /// Point gets per subject in each round.
    #[arg(long, default_value_t = 5000)]
    gets: usize,
    /// Keys under the prefix that the list workload pages over.
    #[arg(long, default_value_t = 10_000)]
    list_keys: usize,
    /// Keys per page of a list.
    #[arg(long, default_value_t = 500)]
    page_size: usize,
    /// Full paged lists per subject in each round.
    #[arg(long, default_value_t = 3)]
    lists: usize,
    /// Watchers of the watched prefix.
    #[arg(long, default_value_t = 8)]
    watchers: usize,
    /// Watched puts per subject in each round.
    #[arg(long, default_value_t = 200)]
    events: usize,
    /// Updates of history written before each timed compaction.
    #[arg(long, default_value_t = 5000)]
    history: usize,
    /// Keys the history is spread over.
    #[arg(long, default_value_t = 100)]
    history_keys: usize,
    /// Keys attached to the lease the revoke workload revokes (kube-apiserver attaches a
    /// minute of Events to one lease).
    #[arg(long, default_value_t = 20_000)]
    revoke_keys: usize,
}

impl StorageBenchArgs {
    fn params(&self) -> Result<Params> {
        let lowest = |values: &[usize]| values.iter().copied().min().unwrap_or(0);
        let counts = [
            ("--rounds", self.rounds),
            ("--writers", lowest(&self.writers)),
            ("--keys", lowest(&self.keys)),
            ("--updates", self.updates),
            ("--gets", self.gets),
            ("--list-keys", self.list_keys),
            ("--page-size", self.page_size),
            ("--lists", self.lists),
            ("--watchers", self.watchers),
            ("--events", self.events),
            ("--history", self.history),
            ("--history-keys", self.history_keys),
            ("--revoke-keys", self.revoke_keys),
        ];
        if let Some((flag, _)) = counts.iter().find(|(_, value)| *value == 0) {
            bail!("{flag} must be at least 1");
        }
        Ok(Params {
            writers: self.writers.first().copied().unwrap_or(1),
            value_size: self.value_size,
            keys: self.keys.first().copied().unwrap_or(1),
            updates: self.updates,
            gets: self.gets,
            list_keys: self.list_keys,
            page_size: self.page_size,
            lists: self.lists,
            watchers: self.watchers,
            events: self.events,
            history: self.history,
            history_keys: self.history_keys,
            revoke_keys: self.revoke_keys,
        })
    }
}

pub async fn run(args: StorageBenchArgs) -> Result<()> {
    let params = args.params()?;
    let mut workloads: Vec<Workload> = Vec::new();
    for workload in &args.workloads {
        if !workloads.contains(workload) {
            workloads.push(*workload);
        }
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let options = subjects::Options {
        tag: format!("{:08x}", rand::random::<u32>()),
        etcd_endpoint: args.etcd_endpoint.clone(),
        postgres_url: args.postgres_url.clone(),
        mysql_url: args.mysql_url.clone(),
        spanner_emulator: args.spanner_emulator.clone(),
    };
    let subjects = subjects::open_all(&args.subjects, &options).await?;
    let points = scale::points(&args.keys, &args.writers);
    if points.len() > 1 {
        let keys_vary = args.keys.len() > 1;
        let outcome = tokio::select! {
            outcome = measure_points(&subjects, &workloads, &params, &points, keys_vary, args.rounds) => outcome,
            _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
        };
        let names: Vec<String> = subjects.iter().map(|s| s.name.clone()).collect();
        subjects::close_all(subjects).await;
        return report_scaling(&args, &names, &workloads, &params, &outcome?);
    }
    let outcome = tokio::select! {
        outcome = measure(&subjects, &workloads, &params, args.rounds, 0) => outcome,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };
    let names: Vec<String> = subjects.iter().map(|s| s.name.clone()).collect();
    subjects::close_all(subjects).await;
    let tallies = outcome?;

    let rows = report::rows(&workloads, &names, &tallies, REFERENCE);
    let machine = report::Machine::here();
    println!(
        "rudder bench storage: {} round(s) of {} on {}; {} clients, {} B values; machine: {} cores, {} GiB",
        args.rounds,
        workloads.iter().map(|w| w.name()).collect::<Vec<_>>().join(", "),
        names.join(", "),
        params.writers,
        params.value_size,
        machine.cores,
        machine.memory_gib.map_or("?".to_string(), |m| format!("{m}")),
    );
    println!("{}", report::table(&rows, REFERENCE));
    println!(
        "ops/s: operations ÷ time in the workload, over all rounds; latencies over all operations; \
         vs {REFERENCE}: ops/s ÷ {REFERENCE}'s ops/s in this run (above 1 is faster)."
    );
    if let Some(dir) = &args.out {
        let summary = report::Summary {
            command: report::command_line(std::env::args()),
            machine,
            reference: REFERENCE,
            subjects: &names,
            rounds: args.rounds,
            params: &params,
            results: &rows,
        };
        write_out(dir, &summary)?;
    }
    Ok(())
}

/// A scaling run: every workload at every point, then each subject's server memory.
async fn measure_points(
    subjects: &[Subject],
    workloads: &[Workload],
    base: &Params,
    points: &[scale::Point],
    keys_vary: bool,
    rounds: usize,
) -> Result<Vec<scale::Measured>> {
    let names: Vec<String> = subjects.iter().map(|s| s.name.clone()).collect();
    let mut measured = Vec::new();
    for (index, &point) in points.iter().enumerate() {
        eprintln!(
            "== {} keys, {} writers",
            scale::count_label(point.keys),
            point.writers
        );
        let params = scale::params_at(base, point, keys_vary);
        // Rounds are numbered across points, so each round's keys are new.
        let tallies = measure(subjects, workloads, &params, rounds, index * rounds).await?;
        let memory = subjects
            .iter()
            .map(|subject| scale::Memory {
                subject: subject.name.clone(),
                server_pss_bytes: subject.server_port.and_then(memory::server_pss),
            })
            .collect();
        measured.push(scale::Measured {
            point,
            results: report::rows(workloads, &names, &tallies, REFERENCE),
            memory,
            bench_rss_bytes: memory::own_rss(),
        });
    }
    Ok(measured)
}

/// Prints (and with `--out` writes) what a scaling run measured.
fn report_scaling(
    args: &StorageBenchArgs,
    names: &[String],
    workloads: &[Workload],
    params: &Params,
    measured: &[scale::Measured],
) -> Result<()> {
    let machine = report::Machine::here();
    println!(
        "rudder bench storage (scaling): {} round(s) of {} on {}; writers {:?}, keys {}; {} B values; machine: {} cores, {} GiB",
        args.rounds,
        workloads.iter().map(|w| w.name()).collect::<Vec<_>>().join(", "),
        names.join(", "),
        args.writers,
        args.keys.iter().map(|k| scale::count_label(*k)).collect::<Vec<_>>().join(","),
        params.value_size,
        machine.cores,
        machine.memory_gib.map_or("?".to_string(), |m| format!("{m}")),
    );
    println!("{}", scale::table(measured, &args.writers, REFERENCE));
    println!("each cell: ops/s (p99 ms, ops/s ÷ {REFERENCE}'s at the same point in this run).");
    println!("{}", scale::memory_table(measured));
    println!("published, not measured here:");
    for figure in scale::PUBLISHED {
        println!("  - {figure}");
    }
    if let Some(dir) = &args.out {
        let summary = scale::Summary {
            command: report::command_line(std::env::args()),
            machine,
            reference: REFERENCE,
            subjects: names,
            rounds: args.rounds,
            params,
            published_not_measured_here: scale::PUBLISHED,
            points: measured,
        };
        let charts = scale::write_files(dir, &summary)?;
        eprintln!(
            "wrote results.json, results.csv and {} charts to {}",
            charts.len(),
            dir.display()
        );
    }
    Ok(())
}

/// Runs the untimed setup on every subject, then each workload round by round with the
/// subjects in rotating order; returns `tallies[workload][subject]`. Rounds are numbered from
/// `first_round` (each round writes keys of its own).
async fn measure(
    subjects: &[Subject],
    workloads: &[Workload],
    params: &Params,
    rounds: usize,
    first_round: usize,
) -> Result<Vec<Vec<Tally>>> {
    let progress = Progress::new((workloads.len() * rounds + 1) * subjects.len())?;
    for subject in subjects {
        progress.start(
            format!("setup {}", subject.name),
            params.setup_steps(workloads),
        );
        workloads::setup(&subject.store, params, workloads, &progress.step)
            .await
            .with_context(|| format!("setting up the {} subject", subject.name))?;
        progress.done(format!("setup {}: done", subject.name));
    }
    let mut tallies = Vec::new();
    for &workload in workloads {
        let mut row = Vec::new();
        for _ in subjects {
            row.push(Tally::new()?);
        }
        for round in 0..rounds {
            for offset in 0..subjects.len() {
                let index = (round + offset) % subjects.len();
                let subject = &subjects[index];
                let what = format!(
                    "{} {} round {}/{rounds}",
                    workload.name(),
                    subject.name,
                    round + 1
                );
                progress.start(what.clone(), params.steps(workload));
                let sample = workloads::run(
                    workload,
                    &subject.store,
                    params,
                    first_round + round,
                    &progress.step,
                )
                .await
                .with_context(|| format!("{what} failed"))?;
                progress.done(format!(
                    "{what}: {} {}/s, p99 {:.2} ms",
                    report::format_rate(report::throughput(sample.ops, sample.elapsed)),
                    workload.unit(),
                    report::percentile_ms(&sample.latencies, 0.99)
                ));
                row[index].add(&sample)?;
            }
        }
        tallies.push(row);
    }
    progress.finish();
    Ok(tallies)
}

/// The progress display on stderr: one bar for the whole run, one for the current step. When
/// stderr is not a terminal the bars stay hidden and each finished step prints one line.
struct Progress {
    bars: MultiProgress,
    overall: ProgressBar,
    step: ProgressBar,
    terminal: bool,
}

impl Progress {
    fn new(steps: usize) -> Result<Self> {
        let bars = MultiProgress::new();
        let overall = bars.add(ProgressBar::new(steps as u64));
        overall.set_style(
            ProgressStyle::with_template("{prefix:>7} [{bar:32}] {pos}/{len} steps, {elapsed}")
                .context("progress bar template")?
                .progress_chars("=> "),
        );
        overall.set_prefix("bench");
        let step = bars.add(ProgressBar::new(0));
        step.set_style(
            ProgressStyle::with_template("{prefix:>7} [{bar:32}] {pos}/{len} {msg} ({rate})")
                .context("progress bar template")?
                .with_key(
                    "rate",
                    |state: &ProgressState, out: &mut dyn std::fmt::Write| {
                        let _ = write!(out, "{:.0}/s", state.per_sec());
                    },
                )
                .progress_chars("=> "),
        );
        step.set_prefix("step");
        Ok(Self {
            bars,
            overall,
            step,
            terminal: std::io::stderr().is_terminal(),
        })
    }

    fn start(&self, message: String, steps: u64) {
        self.step.reset();
        self.step.set_length(steps);
        self.step.set_message(message);
    }

    fn done(&self, line: String) {
        self.overall.inc(1);
        if self.terminal {
            let _ = self.bars.println(line);
        } else {
            eprintln!("{line}");
        }
    }

    fn finish(&self) {
        self.step.finish_and_clear();
        self.overall.finish_and_clear();
    }
}

fn write_out(dir: &Path, summary: &report::Summary) -> Result<()> {
    report::write_files(dir, summary)?;
    let charts = charts::write(dir, summary.results)?;
    eprintln!(
        "wrote results.json, results.csv and {} charts to {}",
        charts.len(),
        dir.display()
    );
    Ok(())
}
