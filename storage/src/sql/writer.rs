//! The single write path. Every write of this process (transactions, lease changes, compaction)
//! is a [`Job`] sent to one task that owns the write connection. The task drains whatever jobs
//! are waiting, applies them in one database transaction (each inside a savepoint, so one job's
//! failure leaves the others intact), commits once, and then answers every job.
//!
//! ```text
//!  callers ──Job──▶ mpsc ──▶ writer task: BEGIN; lock meta; [SAVEPOINT; job; RELEASE]×n;
//!                                         UPDATE meta + NOTIFY + COMMIT ──▶ replies, poke poller
//! ```
//!
//! The meta row lock serializes writers of *all* processes on one database, so revisions are
//! gapless and commit in revision order; SQLite's `BEGIN IMMEDIATE` does the same for a file.
//!
//! Between batches the task also removes the rows compaction made obsolete ([`Purge`]), a
//! bounded number per step, and only once this process's log poller has published every
//! revision up to the compaction's target — so no local watcher ever misses an event because
//! its rows went first. Watchers of other processes that fall that far behind are told
//! (`purged_revision` in the meta row, set before any row goes) and end with `Compacted`.

use std::sync::Arc;

use sqlx::{AnyConnection, AnyPool};
use sqlx::{Executor, Row};
use tokio::sync::{mpsc, watch, Notify};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::breaker::Breaker;
use super::dialect::finish_write;
use super::dialect::Dialect;
use super::reader::Meta;
use super::txn::Batch;
use super::{connection_lost, translate};
use crate::error::{Error, Result};
use crate::log::group_by_revision;
use crate::log::jobs::{apply_job, batch_parent, fail_all, reply, Job, JobDone, Outcome};
use crate::log::poller::Handoffs;
use crate::log::txn::{keys_of, may_fail_midway};
use crate::types::*;

/// At most this many jobs share one database transaction.
const MAX_BATCH: usize = 256;
/// Rows removed per compaction step (one statement), so writes wait little between steps.
const PURGE_ROWS: i64 = 1000;

pub(crate) struct Writer {
    pub pool: AnyPool,
    /// Fails acquires at once while the server is down.
    pub breaker: Arc<Breaker>,
    pub dialect: &'static Dialect,
    pub jobs: mpsc::Receiver<Job>,
    /// Woken after every commit that wrote revisions.
    pub committed: Arc<Notify>,
    /// Where each commit's events go for the poller, when the batch knows all of them.
    pub handoffs: Arc<Handoffs>,
    /// `pg_notify` channel for other processes.
    pub channel: String,
    pub shutdown: CancellationToken,
    /// The last revision this process's log poller has published to watchers.
    pub published: watch::Receiver<Revision>,
    /// The compacted revision at start: its rows may still be there (a stop mid-purge).
    pub resume_purge: Revision,
}

/// Compaction's physical half: rows obsolete at `target` still to remove.
#[derive(Clone, Copy, Debug)]
struct Purge {
    target: Revision,
    /// Whether `purged_revision` already says so (it must, before the first row goes).
    marked: bool,
}

impl Writer {
    pub async fn run(mut self) {
        let mut purge = (self.resume_purge > 0).then_some(Purge {
            target: self.resume_purge,
            marked: false,
        });
        loop {
            let ready = purge.is_some_and(|p| *self.published.borrow() >= p.target);
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
                            // The poller stopped: the store is closing.
                            return;
                        }
                    }
                }
            }
            if !batch.is_empty() {
                if let Some(target) = self.run_batch(batch).await {
                    // A later target covers everything an earlier one still had to remove.
                    purge = Some(Purge {
                        target: purge.map_or(target, |p| p.target.max(target)),
                        marked: false,
                    });
                }
            }
            if let Some(step) = purge.filter(|p| *self.published.borrow() >= p.target) {
                purge = match self.purge_step(step).await {
                    Ok(next) => next,
                    Err(error) => {
                        tracing::warn!(%error, "removing compacted rows failed; will retry");
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                        Some(step)
                    }
                };
            }
            if self.shutdown.is_cancelled() {
                return;
            }
        }
    }

    /// Applies a batch; returns the target of a compaction it committed, if any.
    async fn run_batch(&mut self, batch: Vec<Job>) -> Option<Revision> {
        let mut outcomes = Vec::with_capacity(batch.len());
        let started = std::time::Instant::now();
        let mut attempt = 0;
        let (mut conn, result) = loop {
            let mut conn = match self.breaker.acquire(&self.pool).await {
                Ok(conn) => conn,
                Err(error) => {
                    self.breaker.observe(&error);
                    fail_all(batch, &error);
                    return None;
                }
            };
            let mut stale = false;
            let span = batch_parent(&batch).in_scope(|| {
                tracing::debug_span!(
                    "sql.batch",
                    driver = self.dialect.name,
                    jobs = batch.len(),
                    attempt
                )
            });
            let result = self
                .apply(&mut conn, &batch, &mut outcomes, &mut stale)
                .instrument(span)
                .await;
            attempt += 1;
            match result {
                // A connection that died while pooled (the server restarted) fails the first
                // statement, before anything happened: one more try on a new connection.
                Err(error) if stale && attempt == 1 => {
                    self.breaker.observe(&error);
                    let _ = sqlx::Connection::close(conn.detach()).await;
                    outcomes.clear();
                }
                result => break (conn, result),
            }
        };
        tracing::debug!(
            jobs = batch.len(),
            elapsed_us = started.elapsed().as_micros() as u64,
            "write batch"
        );
        match result {
            Ok(applied) => {
                for (job, outcome) in batch.into_iter().zip(outcomes) {
                    reply(job, outcome);
                }
                if let Some(written) = applied.written {
                    if let Some(events) = written.events {
                        self.handoffs
                            .push(written.after, written.upto, group_by_revision(events));
                    }
                    self.committed.notify_one();
                }
                applied.compaction
            }
            Err(error) => {
                let _ = conn.execute("ROLLBACK").await;
                // The connection's state is unknown: do not return it to the pool.
                let _ = sqlx::Connection::close(conn.detach()).await;
                self.breaker.observe(&error);
                fail_all(batch, &error);
                // The commit may have happened all the same: the poller looks in the log.
                self.handoffs.request_read();
                self.committed.notify_one();
                None
            }
        }
    }

    async fn apply(
        &self,
        conn: &mut AnyConnection,
        batch: &[Job],
        outcomes: &mut Vec<Result<Outcome>>,
        stale: &mut bool,
    ) -> Result<Applied> {
        let mut keys = Vec::new();
        for job in batch {
            if let Job::Txn { request, .. } = job {
                keys_of(request, &mut keys);
            }
        }
        keys.sort();
        keys.dedup();
        // Over a network, the keys' latest rows are read in the same round trip as the lock
        // (written into the statement); SQLite has no round trips to save.
        let inline = self.dialect.name != "sqlite";
        let prefetch = inline
            .then(|| Batch::prefetch_inline(self.dialect, &keys))
            .flatten();
        let begin = match &prefetch {
            Some(prefetch) => format!("{}; {prefetch}", self.dialect.begin_and_lock),
            None => self.dialect.begin_and_lock.to_string(),
        };
        // No bind arguments: the simple protocol, which takes several statements at once.
        let lock = tracing::debug_span!("sql.begin_and_lock", keys = keys.len());
        let locked = match conn.fetch_all(begin.as_str()).instrument(lock).await {
            Ok(rows) => rows,
            Err(error) => {
                *stale = connection_lost(&error);
                return Err(translate(error));
            }
        };
        let meta = match locked.first().filter(|row| row.len() == 3) {
            Some(row) => Meta {
                revision: row.try_get(0).map_err(translate)?,
                compact_revision: row.try_get(1).map_err(translate)?,
                purged_revision: row.try_get(2).map_err(translate)?,
            },
            None => {
                return Err(Error::Backend {
                    message: "rudder_meta has no row: the database was not migrated".into(),
                    source: None,
                })
            }
        };
        let mut state = Batch::new(conn, self.dialect, meta.revision, meta.compact_revision);
        // A restore writes rows of its own making: let the poller read those from the log.
        if batch.iter().any(|job| matches!(job, Job::Restore { .. })) {
            state.events_unknown();
        }
        match prefetch {
            Some(_) => state.prefetched(&keys, &locked[1..])?,
            None => state.prefetch(keys).await?,
        }
        let mut compaction = None;
        for job in batch {
            let protected = matches!(job, Job::Txn { request, .. } if may_fail_midway(request))
                || matches!(job, Job::Restore { .. });
            if protected {
                state.flush().await?;
                state
                    .conn
                    .execute("SAVEPOINT rudder_job")
                    .await
                    .map_err(translate)?;
            }
            match apply_job(&mut state, job, protected).await {
                Ok(JobDone {
                    outcome,
                    compaction: started,
                }) => {
                    if protected {
                        state.flush().await?;
                        state
                            .conn
                            .execute("RELEASE SAVEPOINT rudder_job")
                            .await
                            .map_err(translate)?;
                    }
                    if started.is_some() {
                        compaction = started;
                    }
                    outcomes.push(Ok(outcome));
                }
                Err(error @ (Error::Backend { .. } | Error::Unavailable { .. })) => {
                    return Err(error)
                }
                Err(error) => {
                    if protected {
                        state
                            .conn
                            .execute("ROLLBACK TO SAVEPOINT rudder_job")
                            .await
                            .map_err(translate)?;
                        state
                            .conn
                            .execute("RELEASE SAVEPOINT rudder_job")
                            .await
                            .map_err(translate)?;
                        state.forget();
                    }
                    outcomes.push(Err(error));
                }
            }
        }
        // The last rows go with the commit, in one round trip, when they are small enough.
        let writes = match inline.then(|| state.take_inline_writes()).flatten() {
            Some(writes) => writes,
            None => {
                state.flush().await?;
                String::new()
            }
        };
        let (revision, compact_revision) = (state.revision, state.compact_revision);
        let wrote = revision != meta.revision;
        let events = state.take_events();
        let mut finish = finish_write(
            self.dialect,
            wrote.then_some(revision),
            (compact_revision != meta.compact_revision).then_some(compact_revision),
            &self.channel,
        );
        if !writes.is_empty() {
            finish = format!("{writes}; {finish}");
        }
        if wrote {
            self.handoffs.committing(revision);
        }
        conn.execute(finish.as_str())
            .instrument(tracing::debug_span!("sql.commit"))
            .await
            .map_err(translate)?;
        let written = wrote.then_some(Written {
            after: meta.revision,
            upto: revision,
            events,
        });
        Ok(Applied {
            written,
            compaction,
        })
    }

    /// Removes one step's worth of rows compaction to `purge.target` made obsolete: rows
    /// superseded at or below it, and tombstones below it (what no read or watch at or above
    /// the compacted revision can see). Returns what is left to do, `None` when done.
    async fn purge_step(&self, purge: Purge) -> Result<Option<Purge>> {
        let mut conn = self.breaker.acquire(&self.pool).await?;
        if !purge.marked {
            sqlx::query(self.dialect.mark_purged)
                .bind(purge.target)
                .execute(&mut *conn)
                .await
                .map_err(translate)?;
        }
        let marked = Purge {
            marked: true,
            ..purge
        };
        for statement in [self.dialect.purge_superseded, self.dialect.purge_tombstones] {
            let removed = sqlx::query(statement)
                .bind(purge.target)
                .bind(PURGE_ROWS)
                .execute(&mut *conn)
                .await
                .map_err(translate)?
                .rows_affected();
            if removed >= PURGE_ROWS as u64 {
                return Ok(Some(marked));
            }
        }
        Ok(None)
    }
}

/// What a committed batch did.
struct Applied {
    /// The revisions it wrote, if any (watchers are woken).
    written: Option<Written>,
    /// The target of a compaction it committed, whose rows are purged next.
    compaction: Option<Revision>,
}

/// The revisions `(after, upto]` a batch committed.
struct Written {
    after: Revision,
    upto: Revision,
    /// Every event of them in order, when the batch knows them all.
    events: Option<Vec<Event>>,
}
