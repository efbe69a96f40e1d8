//! The writer's unit of work, shared by the log drivers: every write of a process
//! (transactions, lease changes, compaction, restores) is a [`Job`] that its one writer task
//! applies, with others, inside one database transaction ([`apply_job`]) and answers after
//! the commit ([`reply`]).

use tokio::sync::oneshot;

use super::{LeaseRow, LogState};
use crate::error::{Error, Result};
use crate::types::*;

/// Attempts at a random lease id before giving up (a collision is already one in 2^63).
const LEASE_ID_ATTEMPTS: usize = 8;

/// One unit of work for the writer.
pub(crate) enum Job {
    Txn {
        request: TxnRequest,
        reply: oneshot::Sender<Result<TxnResponse>>,
        /// The caller's span: the batch that applies the transaction is traced under the
        /// first of its callers' spans.
        caller: tracing::Span,
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
pub(crate) enum Outcome {
    Txn(TxnResponse),
    Lease(Lease),
    Ttl(i64),
    Done,
}

/// Applies one job to `state`; `protected`: the driver can undo a transaction that fails
/// half-way (see [`crate::log::txn::run`]).
pub(crate) async fn apply_job(
    state: &mut dyn LogState,
    job: &Job,
    protected: bool,
) -> Result<JobDone> {
    let outcome = match job {
        Job::Txn { request, .. } => Outcome::Txn(super::txn::run(state, request, protected).await?),
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
            state.insert_lease(id, *ttl).await?;
            Outcome::Lease(Lease { id, ttl: *ttl })
        }
        Job::LeaseKeepAlive { id, .. } => {
            let Some(LeaseRow { ttl, remaining_ms }) = state.lease(*id).await? else {
                return Err(Error::LeaseNotFound(*id));
            };
            if remaining_ms <= 0 {
                return Err(Error::LeaseNotFound(*id));
            }
            state.renew_lease(*id).await?;
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
            state.delete_lease(*id).await?;
            Outcome::Done
        }
        Job::Restore {
            step, first_sub, ..
        } => {
            super::restore::apply(state, step, *first_sub).await?;
            Outcome::Done
        }
        Job::Compact {
            revision: target, ..
        } => {
            let target = *target;
            if target > state.revision() {
                return Err(Error::FutureRevision {
                    requested: target,
                    current: state.revision(),
                });
            }
            if target <= state.compact_revision() {
                return Err(Error::Compacted {
                    requested: target,
                    compacted: state.compact_revision(),
                });
            }
            state.set_compact_revision(target);
            return Ok(JobDone {
                outcome: Outcome::Done,
                compaction: Some(target),
            });
        }
    };
    Ok(JobDone::of(outcome))
}

/// One job's answer, and the compaction it committed, if it was one.
pub(crate) struct JobDone {
    pub outcome: Outcome,
    pub compaction: Option<Revision>,
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
async fn unused_lease_id(state: &mut dyn LogState) -> Result<LeaseId> {
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

pub(crate) fn reply(job: Job, outcome: Result<Outcome>) {
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

pub(crate) fn fail_all(batch: Vec<Job>, error: &Error) {
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

/// The span a batch of `jobs` is traced under: the first transaction's caller's, else none.
pub(crate) fn batch_parent(jobs: &[Job]) -> tracing::Span {
    jobs.iter()
        .find_map(|job| match job {
            Job::Txn { caller, .. } if !caller.is_disabled() => Some(caller.clone()),
            _ => None,
        })
        .unwrap_or_else(tracing::Span::none)
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
