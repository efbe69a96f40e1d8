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

use std::sync::Arc;

use sqlx::{AnyConnection, AnyPool};
use sqlx::{Connection, Executor, Row};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_util::sync::CancellationToken;

use super::dialect::finish_write;
use super::dialect::Dialect;
use super::reader::{Clock, Meta};
use super::translate;
use super::txn::{keys_of, may_fail_midway, Batch};
use crate::error::{Error, Result};
use crate::types::*;

/// At most this many jobs share one database transaction.
const MAX_BATCH: usize = 256;
/// Revisions of history removed per compaction step.
const COMPACT_WINDOW: i64 = 1000;

/// One unit of work for the writer.
pub(crate) enum Job {
    Txn {
        request: TxnRequest,
        reply: oneshot::Sender<Result<TxnResponse>>,
    },
    LeaseGrant {
        id: LeaseId,
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
    pub dialect: &'static Dialect,
    pub jobs: mpsc::Receiver<Job>,
    /// Woken after every commit that wrote revisions.
    pub committed: Arc<Notify>,
    /// `pg_notify` channel for other processes.
    pub channel: String,
    pub shutdown: CancellationToken,
    pub clock: Clock,
}

impl Writer {
    pub async fn run(mut self) {
        // Physical compaction still to do: (target, next window start).
        let mut compaction: Option<(Revision, Revision)> = None;
        loop {
            let mut batch = Vec::new();
            if compaction.is_some() {
                while batch.len() < MAX_BATCH {
                    match self.jobs.try_recv() {
                        Ok(job) => batch.push(job),
                        Err(_) => break,
                    }
                }
            } else {
                tokio::select! {
                    _ = self.shutdown.cancelled() => return,
                    received = self.jobs.recv_many(&mut batch, MAX_BATCH) => {
                        if received == 0 {
                            return;
                        }
                    }
                }
            }
            if !batch.is_empty() {
                if let Some(started) = self.run_batch(batch).await {
                    compaction = Some(started);
                }
            }
            if let Some((target, start)) = compaction {
                compaction = match self.compact_window(target, start).await {
                    Ok(next) => next.map(|next| (target, next)),
                    Err(error) => {
                        tracing::warn!(%error, "compaction step failed; will retry");
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                        Some((target, start))
                    }
                };
            }
            if self.shutdown.is_cancelled() {
                return;
            }
        }
    }

    /// Applies a batch; returns a physical compaction to start, if one was asked for.
    async fn run_batch(&mut self, batch: Vec<Job>) -> Option<(Revision, Revision)> {
        let mut conn = match self.pool.acquire().await {
            Ok(conn) => conn,
            Err(error) => {
                fail_all(batch, &translate(error));
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
            Ok((wrote, compaction)) => {
                for (job, outcome) in batch.into_iter().zip(outcomes) {
                    reply(job, outcome);
                }
                if wrote {
                    self.committed.notify_one();
                }
                compaction
            }
            Err(error) => {
                let _ = conn.execute("ROLLBACK").await;
                // The connection's state is unknown: do not return it to the pool.
                let _ = conn.detach().close().await;
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
    ) -> Result<(bool, Option<(Revision, Revision)>)> {
        // No bind arguments: the simple protocol, which takes several statements at once.
        let locked = conn
            .fetch_all(self.dialect.begin_and_lock)
            .await
            .map_err(translate)?;
        let meta = match locked.first() {
            Some(row) => Meta {
                revision: row.try_get(0).map_err(translate)?,
                compact_revision: row.try_get(1).map_err(translate)?,
            },
            None => {
                return Err(Error::Backend {
                    message: "rudder_meta has no row: the database was not migrated".into(),
                    source: None,
                })
            }
        };
        let mut state = Batch::new(
            conn,
            self.dialect,
            meta.revision,
            meta.compact_revision,
            self.clock,
        );
        let mut keys = Vec::new();
        for job in batch {
            if let Job::Txn { request, .. } = job {
                keys_of(request, &mut keys);
            }
        }
        state.prefetch(keys).await?;
        let mut compaction = None;
        for job in batch {
            let protected = matches!(job, Job::Txn { request, .. } if may_fail_midway(request));
            if protected {
                state.flush().await?;
                state
                    .conn
                    .execute("SAVEPOINT rudder_job")
                    .await
                    .map_err(translate)?;
            }
            match self.apply_job(&mut state, job, protected).await {
                Ok((outcome, started)) => {
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
        Ok((wrote, compaction))
    }

    async fn apply_job(
        &self,
        state: &mut Batch<'_>,
        job: &Job,
        protected: bool,
    ) -> Result<(Outcome, Option<(Revision, Revision)>)> {
        let now = self.clock.now_ms();
        let outcome = match job {
            Job::Txn { request, .. } => Outcome::Txn(state.txn(request, protected).await?),
            Job::LeaseGrant { id, ttl, .. } => {
                if state.lease(*id).await?.is_some() {
                    return Err(Error::LeaseAlreadyExists(*id));
                }
                sqlx::query(self.dialect.insert_lease)
                    .bind(*id)
                    .bind(*ttl)
                    .bind(now + ttl * 1000)
                    .execute(&mut *state.conn)
                    .await
                    .map_err(translate)?;
                Outcome::Lease(Lease { id: *id, ttl: *ttl })
            }
            Job::LeaseKeepAlive { id, .. } => {
                let Some((ttl, expires)) = state.lease(*id).await? else {
                    return Err(Error::LeaseNotFound(*id));
                };
                if expires <= now {
                    return Err(Error::LeaseNotFound(*id));
                }
                sqlx::query(self.dialect.renew_lease)
                    .bind(*id)
                    .bind(now + ttl * 1000)
                    .execute(&mut *state.conn)
                    .await
                    .map_err(translate)?;
                Outcome::Ttl(ttl)
            }
            Job::LeaseRevoke {
                id, expired_only, ..
            } => {
                let Some((_, expires)) = state.lease(*id).await? else {
                    return Err(Error::LeaseNotFound(*id));
                };
                if *expired_only && expires > now {
                    return Ok((Outcome::Done, None));
                }
                state.flush().await?;
                let rows = sqlx::query(self.dialect.lease_keys)
                    .bind(*id)
                    .fetch_all(&mut *state.conn)
                    .await
                    .map_err(translate)?;
                let keys = rows
                    .iter()
                    .map(|row| row.try_get(0).map_err(translate))
                    .collect::<Result<Vec<Vec<u8>>>>()?;
                state.delete_keys(&keys).await?;
                sqlx::query(self.dialect.delete_lease)
                    .bind(*id)
                    .execute(&mut *state.conn)
                    .await
                    .map_err(translate)?;
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
                let start = state.compact_revision;
                state.compact_revision = target;
                return Ok((Outcome::Done, Some((target, start.max(0)))));
            }
        };
        Ok((outcome, None))
    }

    /// Deletes one window of history made obsolete by compaction to `target`; returns the next
    /// window's start, or `None` when done.
    async fn compact_window(&self, target: Revision, start: Revision) -> Result<Option<Revision>> {
        let end = (start + COMPACT_WINDOW).min(target);
        let mut conn = self.pool.acquire().await.map_err(translate)?;
        let mut tx = conn.begin().await.map_err(translate)?;
        sqlx::query(self.dialect.compact_window)
            .bind(target)
            .bind(start)
            .bind(end)
            .execute(&mut *tx)
            .await
            .map_err(translate)?;
        tx.commit().await.map_err(translate)?;
        Ok(if end >= target { None } else { Some(end) })
    }
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
        Job::LeaseRevoke { reply, .. } | Job::Compact { reply, .. } => {
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
            other => Error::Backend {
                message: other.to_string(),
                source: None,
            },
        };
        reply(job, Err(copy));
    }
}
