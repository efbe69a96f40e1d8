//! The single write path, as the SQL engine's: every write of this process is a [`Job`] sent
//! to one task, which applies whatever jobs are waiting in one read-write transaction and
//! commits once.
//!
//! ```text
//!  callers ──Job──▶ mpsc ──▶ writer task: begin; read rudder_meta (a lock on the counter);
//!                                         prefetch the keys' latest rows; apply each job in
//!                                         memory; buffer the mutations; commit ──▶ replies
//! ```
//!
//! Reading the meta row in the transaction serializes the writers of every server: Spanner
//! aborts one of two transactions that both read and write it, and the loser runs again from
//! the start (its reads are redone, so nothing stale is committed). Revisions are therefore
//! gapless and commit in order, and a reader that sees the counter at R sees every row at or
//! below R. The cost is that one database commits one batch at a time, whatever its size.
//!
//! Compaction's rows are removed between batches, once this process's poller has published
//! up to the target, as in the SQL engine.

use std::sync::Arc;
use std::time::Duration;

use gcloud_gax::grpc::Code;
use gcloud_googleapis::spanner::v1::Mutation;
use gcloud_spanner::client::{Client, Error as SpannerError};
use gcloud_spanner::key::Key;
use gcloud_spanner::mutation::delete;
use gcloud_spanner::statement::Statement;
use gcloud_spanner::transaction_rw::ReadWriteTransaction;
use tokio::sync::{mpsc, watch, Notify};
use tokio_util::sync::CancellationToken;

use super::reader::{column, query, read_meta};
use super::state::SpannerBatch;
use crate::error::{Error, Result};
use crate::log::jobs::{apply_job, fail_all, reply, Job, Outcome};
use crate::log::txn::{keys_of, may_fail_midway};
use crate::log::LogState;
use crate::types::*;

/// At most this many jobs share one transaction.
const MAX_BATCH: usize = 256;
/// Rows removed per compaction step.
const PURGE_ROWS: i64 = 1000;
/// How long a batch is run again while Spanner keeps aborting it (another server's writer
/// holds the meta row) before its jobs fail as unavailable.
const ABORT_RETRY_DEADLINE: Duration = Duration::from_secs(30);

pub(super) struct Writer {
    pub client: Client,
    pub jobs: mpsc::Receiver<Job>,
    /// Woken after every commit that wrote revisions.
    pub committed: Arc<Notify>,
    pub shutdown: CancellationToken,
    /// The last revision this process's poller has published to watchers.
    pub published: watch::Receiver<Revision>,
    /// The compacted revision at start: its rows may still be there.
    pub resume_purge: Revision,
}

/// What one attempt at a batch produced.
struct Attempt {
    outcomes: Vec<Result<Outcome>>,
    wrote: bool,
    compaction: Option<Revision>,
}

impl Writer {
    pub async fn run(mut self) {
        let mut purge = (self.resume_purge > 0).then_some(self.resume_purge);
        loop {
            let ready = purge.is_some_and(|target| *self.published.borrow() >= target);
            let mut batch = Vec::new();
            if ready {
                while batch.len() < MAX_BATCH {
                    match self.jobs.try_recv() {
                        Ok(job) => batch.push(job),
                        Err(_) => break,
                    }
                }
            } else {
                let waiting_for_poller = purge.is_some();
                tokio::select! {
                    _ = self.shutdown.cancelled() => return,
                    received = self.jobs.recv_many(&mut batch, MAX_BATCH) => {
                        if received == 0 {
                            return;
                        }
                    }
                    changed = self.published.changed(), if waiting_for_poller => {
                        if changed.is_err() {
                            return;
                        }
                    }
                }
            }
            if !batch.is_empty() {
                if let Some(target) = self.run_batch(batch).await {
                    purge = Some(purge.map_or(target, |p| p.max(target)));
                }
            }
            if let Some(target) = purge.filter(|t| *self.published.borrow() >= *t) {
                purge = match self.purge_step(target).await {
                    Ok(true) => Some(target),
                    Ok(false) => None,
                    Err(error) => {
                        tracing::warn!(%error, "removing compacted rows failed; will retry");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        Some(target)
                    }
                };
            }
            if self.shutdown.is_cancelled() {
                return;
            }
        }
    }

    /// Applies a batch, running it again when Spanner aborts it; returns the target of a
    /// compaction it committed.
    async fn run_batch(&mut self, batch: Vec<Job>) -> Option<Revision> {
        let mut retry = AbortRetry::new();
        loop {
            let mut tx = match self.client.begin_read_write_transaction().await {
                Ok(tx) => tx,
                Err(error) => {
                    let error = super::client_error("starting a Spanner transaction failed", error);
                    if is_aborted(&error) && retry.wait().await {
                        continue;
                    }
                    fail_all(batch, &error);
                    return None;
                }
            };
            let attempt = apply(&mut tx, &batch).await;
            let (attempt, mutations) = match attempt {
                Ok(done) => done,
                Err(error) => {
                    let aborted = is_aborted(&error);
                    let _ = tx
                        .end::<(), SpannerError>(
                            Err(SpannerError::InvalidConfig("rolled back".into())),
                            None,
                        )
                        .await;
                    if aborted && retry.wait().await {
                        continue;
                    }
                    fail_all(batch, &error);
                    return None;
                }
            };
            tx.buffer_write(mutations);
            match tx.end::<(), SpannerError>(Ok(()), None).await {
                Ok(_) => {
                    for (job, outcome) in batch.into_iter().zip(attempt.outcomes) {
                        reply(job, outcome);
                    }
                    if attempt.wrote {
                        self.committed.notify_one();
                    }
                    return attempt.compaction;
                }
                Err(error) => {
                    let code = match &error {
                        SpannerError::GRPC(status) => Some(status.code()),
                        _ => None,
                    };
                    if code == Some(Code::Aborted) && retry.wait().await {
                        continue;
                    }
                    let error = Error::Unavailable {
                        message: "committing to Spanner failed; the writes may or may not have \
                                  been applied"
                            .into(),
                        source: None,
                    };
                    fail_all(batch, &error);
                    return None;
                }
            }
        }
    }

    /// Removes one step's rows that compaction to `target` made obsolete; `true` while more
    /// remain.
    async fn purge_step(&self, target: Revision) -> Result<bool> {
        let statement = |sql: &str| {
            let mut statement = Statement::new(sql);
            statement.add_param("target", &target);
            statement.add_param("limit", &PURGE_ROWS);
            statement
        };
        let superseded = statement(
            "SELECT key, revision FROM rudder_log WHERE next_revision <> 0 \
             AND next_revision <= @target LIMIT @limit",
        );
        let tombstones = statement(
            "SELECT key, revision FROM rudder_log WHERE deleted = true AND revision < @target \
             LIMIT @limit",
        );
        let result = self
            .client
            .read_write_transaction(|tx| {
                let (superseded, tombstones) = (superseded.clone(), tombstones.clone());
                Box::pin(async move {
                    // Say so first: another server's poller that reads the log later ends its
                    // watches with Compacted instead of delivering a history with holes.
                    let mut mark = Statement::new(
                        "UPDATE rudder_meta SET purged_revision = @target \
                         WHERE id = 1 AND purged_revision < @target",
                    );
                    mark.add_param("target", &target);
                    tx.update(mark).await.map_err(SpannerError::from)?;
                    let mut rows = 0;
                    for statement in [superseded, tombstones] {
                        let found = query(tx, statement)
                            .await
                            .map_err(|error| SpannerError::InvalidConfig(error.to_string()))?;
                        rows += found.len();
                        let mut keys = Vec::with_capacity(found.len());
                        for row in &found {
                            let key: Vec<u8> = column(row, 0)
                                .map_err(|error| SpannerError::InvalidConfig(error.to_string()))?;
                            let revision: i64 = column(row, 1)
                                .map_err(|error| SpannerError::InvalidConfig(error.to_string()))?;
                            keys.push(Key::composite(&[&key, &revision]));
                        }
                        if !keys.is_empty() {
                            tx.buffer_write(vec![delete("rudder_log", keys)]);
                        }
                    }
                    Ok::<usize, SpannerError>(rows)
                })
            })
            .await
            .map_err(|error| super::client_error("removing compacted rows failed", error))?;
        Ok(result.1 >= PURGE_ROWS as usize)
    }
}

/// One attempt at a batch inside `tx`: the outcomes and the mutations to commit.
async fn apply(tx: &mut ReadWriteTransaction, batch: &[Job]) -> Result<(Attempt, Vec<Mutation>)> {
    let meta = read_meta(tx).await?;
    let mut state = SpannerBatch::new(tx, meta.revision, meta.compact_revision);
    let mut keys = Vec::new();
    for job in batch {
        if let Job::Txn { request, .. } = job {
            keys_of(request, &mut keys);
        }
    }
    LogState::prefetch(&mut state, keys).await?;
    let mut outcomes = Vec::with_capacity(batch.len());
    let mut compaction = None;
    for job in batch {
        let protected = matches!(job, Job::Txn { request, .. } if may_fail_midway(request))
            || matches!(job, Job::Restore { .. });
        if protected {
            state.begin_job();
        }
        match apply_job(&mut state, job, protected).await {
            Ok(done) => {
                state.end_job();
                if done.compaction.is_some() {
                    compaction = done.compaction;
                }
                outcomes.push(Ok(done.outcome));
            }
            Err(error @ (Error::Backend { .. } | Error::Unavailable { .. })) => return Err(error),
            Err(error) => {
                state.undo_job();
                outcomes.push(Err(error));
            }
        }
    }
    let moved = state.revision != meta.revision || state.compact_revision != meta.compact_revision;
    let wrote = state.revision != meta.revision;
    let mutations = state.mutations(moved.then_some((state.revision, state.compact_revision)));
    Ok((
        Attempt {
            outcomes,
            wrote,
            compaction,
        },
        mutations,
    ))
}

/// Whether a failed read inside the transaction was Spanner aborting it (run it again).
fn is_aborted(error: &Error) -> bool {
    match error {
        Error::Unavailable { message, .. } | Error::Backend { message, .. } => {
            message.contains(super::ABORTED_MARK)
        }
        _ => false,
    }
}

/// Waits between attempts at a batch Spanner aborted: jittered, doubling from 2 ms to 200 ms,
/// so that two servers' writers that abort each other fall out of step, for as long as
/// [`ABORT_RETRY_DEADLINE`]. (The client library's own retry gives up after five attempts,
/// which two busy writers on one database exhaust.)
struct AbortRetry {
    started: std::time::Instant,
    delay: Duration,
}

impl AbortRetry {
    fn new() -> Self {
        AbortRetry {
            started: std::time::Instant::now(),
            delay: Duration::from_millis(2),
        }
    }

    /// Sleeps before the next attempt; `false` once the deadline has passed.
    async fn wait(&mut self) -> bool {
        if self.started.elapsed() >= ABORT_RETRY_DEADLINE {
            return false;
        }
        let jittered = self.delay.mul_f64(rand::random_range(0.5..1.5));
        tokio::time::sleep(jittered).await;
        self.delay = (self.delay * 2).min(Duration::from_millis(200));
        true
    }
}
