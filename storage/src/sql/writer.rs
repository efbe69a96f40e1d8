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
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio_util::sync::CancellationToken;

use super::breaker::Breaker;
use super::dialect::finish_write;
use super::dialect::Dialect;
use super::reader::{LeaseRow, Meta};
use super::translate;
use super::txn::{keys_of, may_fail_midway, Batch};
use crate::error::{Error, Result};
use crate::types::*;

/// At most this many jobs share one database transaction.
const MAX_BATCH: usize = 256;
/// Rows removed per compaction step (one statement), so writes wait little between steps.
const PURGE_ROWS: i64 = 1000;
/// Attempts at a random lease id before giving up (a collision is already one in 2^63).
const LEASE_ID_ATTEMPTS: usize = 8;

/// One unit of work for the writer.
pub(crate) enum Job {
    Txn {
        request: TxnRequest,
        reply: oneshot::Sender<Result<TxnResponse>>,
    },
    /// Grants a lease; `id` `None` lets the writer pick an unused one.
    LeaseGrant {
        id: Option<LeaseId>,
        ttl: i64,
        reply: oneshot::Sender<Result<Lease>>,
    },
    LeaseKeepAlive {
        id: LeaseId,
        reply: oneshot::Sender<Result<i64>>,
    },
    /// Revokes a lease and deletes its keys; `expired_only` skips a lease renewed meanwhile.
    LeaseRevoke {
        id: LeaseId,
        expired_only: bool,
        reply: oneshot::Sender<Result<()>>,
    },
    Compact {
        revision: Revision,
        reply: oneshot::Sender<Result<()>>,
    },
    /// One step of loading a copy of another store; `first_sub` numbers its base rows.
    Restore {
        step: RestoreStep,
        first_sub: i64,
        reply: oneshot::Sender<Result<()>>,
    },
}

/// What a job produced, before the commit makes it true.
enum Outcome {
    Txn(TxnResponse),
    Lease(Lease),
    Ttl(i64),
    Done,
}

pub(crate) struct Writer {
    pub pool: AnyPool,
    /// Fails acquires at once while the server is down.
    pub breaker: Arc<Breaker>,
    pub dialect: &'static Dialect,
    pub jobs: mpsc::Receiver<Job>,
    /// Woken after every commit that wrote revisions.
    pub committed: Arc<Notify>,
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
        let mut conn = match self.breaker.acquire(&self.pool).await {
            Ok(conn) => conn,
            Err(error) => {
                self.breaker.observe(&error);
                fail_all(batch, &error);
                return None;
            }
        };
        let mut outcomes = Vec::with_capacity(batch.len());
        let started = std::time::Instant::now();
        let result = self.apply(&mut conn, &batch, &mut outcomes).await;
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
                if applied.wrote {
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
                None
            }
        }
    }

    async fn apply(
        &self,
        conn: &mut AnyConnection,
        batch: &[Job],
        outcomes: &mut Vec<Result<Outcome>>,
    ) -> Result<Applied> {
        // No bind arguments: the simple protocol, which takes several statements at once.
        let locked = conn
            .fetch_all(self.dialect.begin_and_lock)
            .await
            .map_err(translate)?;
        let meta = match locked.first() {
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
        let mut keys = Vec::new();
        for job in batch {
            if let Job::Txn { request, .. } = job {
                keys_of(request, &mut keys);
            }
        }
        state.prefetch(keys).await?;
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
            match self.apply_job(&mut state, job, protected).await {
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
        state.flush().await?;
        let (revision, compact_revision) = (state.revision, state.compact_revision);
        let wrote = revision != meta.revision;
        let finish = finish_write(
            self.dialect,
            wrote.then_some(revision),
            (compact_revision != meta.compact_revision).then_some(compact_revision),
            &self.channel,
        );
        conn.execute(finish.as_str()).await.map_err(translate)?;
        Ok(Applied { wrote, compaction })
    }

    async fn apply_job(
        &self,
        state: &mut Batch<'_>,
        job: &Job,
        protected: bool,
    ) -> Result<JobDone> {
        let outcome = match job {
            Job::Txn { request, .. } => Outcome::Txn(state.txn(request, protected).await?),
            Job::LeaseGrant { id, ttl, .. } => {
                let id = match id {
                    Some(id) => {
                        if state.lease(*id).await?.is_some() {
                            return Err(Error::LeaseAlreadyExists(*id));
                        }
                        *id
                    }
                    None => unused_lease_id(state).await?,
                };
                sqlx::query(self.dialect.insert_lease)
                    .bind(id)
                    .bind(*ttl)
                    .execute(&mut *state.conn)
                    .await
                    .map_err(translate)?;
                Outcome::Lease(Lease { id, ttl: *ttl })
            }
            Job::LeaseKeepAlive { id, .. } => {
                let Some(LeaseRow { ttl, remaining_ms }) = state.lease(*id).await? else {
                    return Err(Error::LeaseNotFound(*id));
                };
                if remaining_ms <= 0 {
                    return Err(Error::LeaseNotFound(*id));
                }
                sqlx::query(self.dialect.renew_lease)
                    .bind(*id)
                    .execute(&mut *state.conn)
                    .await
                    .map_err(translate)?;
                Outcome::Ttl(ttl)
            }
            Job::LeaseRevoke {
                id, expired_only, ..
            } => {
                let Some(lease) = state.lease(*id).await? else {
                    return Err(Error::LeaseNotFound(*id));
                };
                if *expired_only && lease.remaining_ms > 0 {
                    return Ok(JobDone::of(Outcome::Done));
                }
                state.revoke_keys(*id).await?;
                sqlx::query(self.dialect.delete_lease)
                    .bind(*id)
                    .execute(&mut *state.conn)
                    .await
                    .map_err(translate)?;
                Outcome::Done
            }
            Job::Restore {
                step, first_sub, ..
            } => {
                super::restore::apply(state, self.dialect, step, *first_sub).await?;
                Outcome::Done
            }
            Job::Compact {
                revision: target, ..
            } => {
                let target = *target;
                if target > state.revision {
                    return Err(Error::FutureRevision {
                        requested: target,
                        current: state.revision,
                    });
                }
                if target <= state.compact_revision {
                    return Err(Error::Compacted {
                        requested: target,
                        compacted: state.compact_revision,
                    });
                }
                state.compact_revision = target;
                return Ok(JobDone {
                    outcome: Outcome::Done,
                    compaction: Some(target),
                });
            }
        };
        Ok(JobDone::of(outcome))
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
    /// Whether it wrote a revision (watchers are woken).
    wrote: bool,
    /// The target of a compaction it committed, whose rows are purged next.
    compaction: Option<Revision>,
}

/// One job's answer, and the compaction it committed, if it was one.
struct JobDone {
    outcome: Outcome,
    compaction: Option<Revision>,
}

impl JobDone {
    fn of(outcome: Outcome) -> Self {
        Self {
            outcome,
            compaction: None,
        }
    }
}

/// A random lease id (positive, as etcd's) that no lease has.
async fn unused_lease_id(state: &mut Batch<'_>) -> Result<LeaseId> {
    for _ in 0..LEASE_ID_ATTEMPTS {
        let id = positive_lease_id(rand::random::<i64>());
        if state.lease(id).await?.is_none() {
            return Ok(id);
        }
    }
    Err(Error::Backend {
        message: "no unused lease id found".into(),
        source: None,
    })
}

/// A lease id from 64 random bits: the sign bit cleared (no overflow, unlike `abs`), never 0.
pub(crate) fn positive_lease_id(bits: i64) -> LeaseId {
    (bits & i64::MAX).max(1)
}

fn reply(job: Job, outcome: Result<Outcome>) {
    let mismatch = || Error::Backend {
        message: "writer produced the wrong outcome for a job".into(),
        source: None,
    };
    match job {
        Job::Txn { reply, .. } => {
            let _ = reply.send(outcome.and_then(|o| {
                if let Outcome::Txn(r) = o {
                    Ok(r)
                } else {
                    Err(mismatch())
                }
            }));
        }
        Job::LeaseGrant { reply, .. } => {
            let _ = reply.send(outcome.and_then(|o| {
                if let Outcome::Lease(l) = o {
                    Ok(l)
                } else {
                    Err(mismatch())
                }
            }));
        }
        Job::LeaseKeepAlive { reply, .. } => {
            let _ = reply.send(outcome.and_then(|o| {
                if let Outcome::Ttl(t) = o {
                    Ok(t)
                } else {
                    Err(mismatch())
                }
            }));
        }
        Job::LeaseRevoke { reply, .. }
        | Job::Compact { reply, .. }
        | Job::Restore { reply, .. } => {
            let _ = reply.send(outcome.map(|_| ()));
        }
    }
}

fn fail_all(batch: Vec<Job>, error: &Error) {
    for job in batch {
        let copy = match error {
            Error::Unavailable { message, .. } => Error::Unavailable {
                message: message.clone(),
                source: None,
            },
            Error::Backend { message, .. } => Error::Backend {
                message: message.clone(),
                source: None,
            },
            other => Error::Backend {
                message: other.to_string(),
                source: None,
            },
        };
        reply(job, Err(copy));
    }
}

#[cfg(test)]
mod tests {
    use super::positive_lease_id;

    #[test]
    fn random_lease_ids_are_positive_for_every_input() {
        for bits in [i64::MIN, -1, 0, 1, i64::MAX, -42] {
            let id = positive_lease_id(bits);
            assert!(id > 0, "{bits} gave {id}");
        }
        assert_eq!(positive_lease_id(i64::MIN), 1);
        assert_eq!(positive_lease_id(-1), i64::MAX);
    }
}
