//! `rudder storage migrate` and `rudder storage snapshot save|restore|info`: moving a whole
//! store to another driver, or to a file and back, with every key's revisions kept so that
//! clients' resourceVersions stay valid (`docs/storage-copy.md`). Stop the servers on the
//! source first: what is written after the copy starts is not copied.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressStyle};
use rudder_storage::copy::snapshot::{self, SnapshotFile};
use rudder_storage::copy::{self, Plan, StoreSink};
use rudder_storage::{Storage, StorageConfig};

#[derive(clap::Args)]
pub struct MigrateArgs {
    /// The store to copy: sqlite://PATH, postgres://…, mysql://…, spanner://… or etcd://HOST:PORT
    #[arg(long)]
    from: String,
    /// The store to copy into; it must be empty (a new etcd, for etcd) unless --force.
    #[arg(long)]
    to: String,
    /// Delete everything the target holds first.
    #[arg(long)]
    force: bool,
    /// Copy only the current state (the target reports every earlier revision compacted),
    /// not the history since the source's last compaction.
    #[arg(long)]
    without_history: bool,
}

#[derive(Subcommand)]
pub enum SnapshotCommand {
    /// Write a consistent snapshot of a store (one revision) to FILE.
    Save {
        file: PathBuf,
        #[arg(long, env = "RUDDER_STORAGE")]
        storage: String,
        /// Only the current state, not the history since the last compaction.
        #[arg(long)]
        without_history: bool,
    },
    /// Load a snapshot into a store, which must be empty (a new etcd, for etcd) unless --force.
    Restore {
        file: PathBuf,
        #[arg(long, env = "RUDDER_STORAGE")]
        storage: String,
        /// Delete everything the store holds first.
        #[arg(long)]
        force: bool,
    },
    /// Check a snapshot's checksum and print what it holds.
    Info { file: PathBuf },
}

/// Opens a store for copying: no background compaction, which would cut the history short.
async fn open(url: &str) -> Result<Arc<dyn Storage>> {
    let mut config = StorageConfig::parse(url)?;
    config.compaction.interval = Duration::ZERO;
    rudder_storage::open_config(&config)
        .await
        .with_context(|| format!("opening {}", shown(url)))
}

/// Opens the store a copy goes into: refused when it holds keys, unless `force`, which
/// deletes them first (the store is opened first, so a database that does not exist yet is
/// created rather than an error).
async fn open_target(url: &str, force: bool) -> Result<Arc<dyn Storage>> {
    let target = open(url).await?;
    if copy::is_empty(target.as_ref()).await? {
        return Ok(target);
    }
    target.close().await;
    if !force {
        bail!(
            "{} is not empty: copy into an empty store, or pass --force to delete what it holds",
            shown(url)
        );
    }
    rudder_storage::wipe(url)
        .await
        .with_context(|| format!("emptying {}", shown(url)))?;
    open(url).await
}

pub async fn migrate(args: MigrateArgs) -> Result<()> {
    let source = open(&args.from).await?;
    let target = open_target(&args.to, args.force).await?;
    let result = async {
        let plan = copy::plan(source.as_ref(), !args.without_history).await?;
        describe(&plan, &shown(&args.from));
        let started = Instant::now();
        let bar = progress_bar(&plan);
        copy::dump(
            source.as_ref(),
            &plan,
            &mut StoreSink(target.as_ref()),
            &mut |done| bar.set_position(done),
        )
        .await
        .context("copying")?;
        bar.finish_and_clear();
        report_copy(&plan, started.elapsed());
        check(source.as_ref(), target.as_ref(), &plan).await
    }
    .await;
    source.close().await;
    target.close().await;
    result
}

pub async fn snapshot(command: SnapshotCommand) -> Result<()> {
    match command {
        SnapshotCommand::Save {
            file,
            storage,
            without_history,
        } => {
            let source = open(&storage).await?;
            let started = Instant::now();
            let plan = copy::plan(source.as_ref(), !without_history).await?;
            describe(&plan, &shown(&storage));
            let bar = progress_bar(&plan);
            let saved = snapshot::save(source.as_ref(), &file, !without_history, &mut |done| {
                bar.set_position(done)
            })
            .await;
            bar.finish_and_clear();
            source.close().await;
            let saved = saved.with_context(|| format!("saving {}", file.display()))?;
            report_copy(&saved.header.plan, started.elapsed());
            info(&file, &saved);
            Ok(())
        }
        SnapshotCommand::Restore {
            file,
            storage,
            force,
        } => {
            let snapshot = SnapshotFile::open(&file)?;
            let target = open_target(&storage, force).await?;
            let plan = snapshot.header.plan;
            let started = Instant::now();
            let bar = progress_bar(&plan);
            let restored = snapshot
                .restore(&mut StoreSink(target.as_ref()), &mut |done| {
                    bar.set_position(done)
                })
                .await;
            bar.finish_and_clear();
            let status = target.status().await;
            target.close().await;
            restored.with_context(|| format!("restoring {}", file.display()))?;
            report_copy(&plan, started.elapsed());
            let status = status?;
            println!(
                "restored into {}: revision {}, compacted {}",
                status.driver, status.revision, status.compact_revision
            );
            Ok(())
        }
        SnapshotCommand::Info { file } => {
            let snapshot = SnapshotFile::open(&file)?;
            info(&file, &snapshot);
            Ok(())
        }
    }
}

fn info(file: &Path, snapshot: &SnapshotFile) {
    let header = &snapshot.header;
    let size = std::fs::metadata(file).map_or(0, |metadata| metadata.len());
    println!("snapshot:  {} ({size} bytes)", file.display());
    println!("format:    {}", snapshot::FORMAT);
    println!("from:      {}", header.driver);
    println!("taken:     {} ms after the epoch", header.created_unix_ms);
    println!(
        "revision:  {} (history from {}, compacted {})",
        header.plan.revision, header.plan.base, header.plan.compacted
    );
    println!("keys:      {}", header.plan.keys);
    println!("sha256:    {} (checked)", snapshot.checksum);
}

fn describe(plan: &Plan, source: &str) {
    eprintln!(
        "copying {source} at revision {}: {} keys as of revision {}, then {} revisions of history",
        plan.revision,
        plan.keys,
        plan.base,
        plan.revision - plan.base
    );
}

fn progress_bar(plan: &Plan) -> ProgressBar {
    let bar = ProgressBar::new(plan.total_work());
    if let Ok(style) = ProgressStyle::with_template(
        "{elapsed_precise} [{bar:40}] {pos}/{len} keys and revisions, {per_sec}, ETA {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

fn report_copy(plan: &Plan, elapsed: Duration) {
    let seconds = elapsed.as_secs_f64().max(0.001);
    println!(
        "copied {} keys and {} revisions of history in {:.1} s ({:.0} keys and revisions/s)",
        plan.keys,
        plan.revision - plan.base,
        seconds,
        plan.total_work() as f64 / seconds
    );
}

/// Compares the copy with its source, key by key, at the copy's revision and base.
async fn check(source: &dyn Storage, target: &dyn Storage, plan: &Plan) -> Result<()> {
    let status = target.status().await?;
    if status.revision < plan.revision {
        bail!(
            "the target is at revision {}, before the source's {}",
            status.revision,
            plan.revision
        );
    }
    let totals = copy::verify(source, target, plan.revision)
        .await
        .context("verifying the copy")?;
    if plan.base < plan.revision {
        copy::verify(source, target, plan.base)
            .await
            .context("verifying the copy's history")?;
    }
    println!(
        "verified: {} keys ({} bytes of values) identical at revision {} (sha256 {})",
        totals.keys, totals.value_bytes, plan.revision, totals.digest
    );
    println!(
        "target: {}, revision {}, compacted {}",
        status.driver, status.revision, status.compact_revision
    );
    Ok(())
}

/// A storage URL with its password, if any, left out.
fn shown(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_string(),
    }
}
