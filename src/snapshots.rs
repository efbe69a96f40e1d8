//! Scheduled snapshots of the store (`rudder server --snapshot-interval 12h`), as k3s takes
//! etcd snapshots: every interval a consistent snapshot (Rudder's own format, restorable into
//! any driver with `rudder storage snapshot restore`) goes into `--snapshot-dir`, and only the
//! newest `--snapshot-retention` are kept.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rudder_storage::copy::snapshot;
use rudder_storage::{Error as StorageError, Storage};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const PREFIX: &str = "rudder-snapshot-";
const SUFFIX: &str = ".snap";
/// Attempts at a snapshot with history before one of the current state alone: the server's
/// own compaction may overtake a snapshot that reads the history it is about to remove.
const ATTEMPTS: usize = 3;

#[derive(clap::Args, Clone, Debug)]
pub struct SnapshotArgs {
    /// Take a snapshot of the store this often (e.g. 12h); none when unset.
    #[arg(long, value_parser = crate::serve::parse_interval)]
    snapshot_interval: Option<Duration>,
    /// How many scheduled snapshots to keep; older ones are deleted.
    #[arg(long, default_value_t = 5)]
    snapshot_retention: usize,
    /// Where scheduled snapshots go (default: `<data-dir>/snapshots`).
    #[arg(long)]
    snapshot_dir: Option<PathBuf>,
}

impl SnapshotArgs {
    /// Starts the schedule, if one is asked for.
    pub fn spawn(
        &self,
        data_dir: &Path,
        store: Arc<dyn Storage>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Option<JoinHandle<()>>> {
        let Some(interval) = self.snapshot_interval.filter(|every| !every.is_zero()) else {
            return Ok(None);
        };
        if self.snapshot_retention == 0 {
            anyhow::bail!("--snapshot-retention must keep at least one snapshot");
        }
        let dir = self
            .snapshot_dir
            .clone()
            .unwrap_or_else(|| data_dir.join("snapshots"));
        std::fs::create_dir_all(&dir)
            .map_err(|error| anyhow::anyhow!("creating {}: {error}", dir.display()))?;
        let retention = self.snapshot_retention;
        Ok(Some(tokio::spawn(async move {
            remove_partial(&dir);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(interval) => {}
                }
                tokio::select! {
                    // A snapshot cut short leaves a `.part` file, removed at the next start.
                    _ = shutdown.cancelled() => return,
                    _ = take(store.as_ref(), &dir) => {}
                }
                prune(&dir, retention);
            }
        })))
    }
}

/// Takes one snapshot into `dir`, logging the outcome.
async fn take(store: &dyn Storage, dir: &Path) {
    let stamp = k8s_openapi::jiff::Timestamp::now().strftime("%Y%m%dT%H%M%S%.3fZ");
    let path = dir.join(format!("{PREFIX}{stamp}{SUFFIX}"));
    let started = std::time::Instant::now();
    let mut result = Err(StorageError::Closed);
    for attempt in 1..=ATTEMPTS + 1 {
        let history = attempt <= ATTEMPTS;
        result = snapshot::save(store, &path, history, &mut |_| {}).await;
        match &result {
            Err(StorageError::Compacted { .. }) => continue,
            _ => break,
        }
    }
    match result {
        Ok(saved) => tracing::info!(
            path = %path.display(),
            revision = saved.header.plan.revision,
            keys = saved.header.plan.keys,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "took a scheduled snapshot of the store"
        ),
        Err(error) => tracing::warn!(
            path = %path.display(),
            %error,
            "a scheduled snapshot of the store failed"
        ),
    }
}

/// Scheduled snapshots in `dir`, oldest first (their names sort by time).
fn scheduled(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with(PREFIX) && name.ends_with(SUFFIX))
        })
        .collect();
    found.sort();
    found
}

/// Deletes all but the newest `retention` scheduled snapshots.
fn prune(dir: &Path, retention: usize) {
    let found = scheduled(dir);
    let excess = found.len().saturating_sub(retention);
    for old in &found[..excess] {
        if let Err(error) = std::fs::remove_file(old) {
            tracing::warn!(path = %old.display(), %error, "could not delete an old snapshot");
        }
    }
}

/// Removes what a snapshot interrupted by a stop left behind.
fn remove_partial(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let partial = path
            .file_name()
            .and_then(|name| name.to_str())
            .is_some_and(|name| name.starts_with(PREFIX) && name.ends_with(".part"));
        if partial {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn pruning_keeps_the_newest_scheduled_snapshots_and_nothing_else_is_touched() {
        let dir = tempfile::tempdir().unwrap();
        for stamp in [
            "20261201T000000.000Z",
            "20261203T000000.000Z",
            "20261202T000000.000Z",
        ] {
            std::fs::write(dir.path().join(format!("{PREFIX}{stamp}{SUFFIX}")), b"x").unwrap();
        }
        std::fs::write(dir.path().join("mine.snap"), b"x").unwrap();
        std::fs::write(dir.path().join(format!("{PREFIX}x{SUFFIX}.part")), b"x").unwrap();
        prune(dir.path(), 2);
        remove_partial(dir.path());
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "mine.snap",
                "rudder-snapshot-20261202T000000.000Z.snap",
                "rudder-snapshot-20261203T000000.000Z.snap"
            ]
        );
    }
}
