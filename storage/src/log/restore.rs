//! Loading a copy of another store ([`RestoreStep`]) inside a log driver's write transaction: rows go
//! into the log exactly as the source had them (revisions, version, lease), and the meta row
//! jumps to the copy's revision — the log needs no row at every revision, since the watch
//! poller follows the meta row's counter, not the rows. Rows keep the lease ids the source
//! wrote, as the source's own rows do after a lease is gone.

use super::{LogRow, LogState};
use crate::error::{Error, Result};
use crate::types::*;

/// Applies one step. `first_sub` numbers base rows uniquely across `Keys` steps (several keys
/// share a revision when one transaction wrote them, and their pages come apart).
pub(crate) async fn apply(
    state: &mut dyn LogState,
    step: &RestoreStep,
    first_sub: i64,
) -> Result<()> {
    match step {
        RestoreStep::Leases(leases) => {
            for lease in leases {
                if state.lease(lease.id).await?.is_some() {
                    return Err(Error::LeaseAlreadyExists(lease.id));
                }
                state.insert_lease(lease.id, lease.ttl).await?;
            }
        }
        RestoreStep::Keys(kvs) => {
            state
                .prefetch(kvs.iter().map(|kv| kv.key.clone()).collect())
                .await?;
            for (index, kv) in kvs.iter().enumerate() {
                if state.latest(&kv.key).await?.is_some() {
                    return Err(Error::InvalidArgument(format!(
                        "the copy holds {} twice, or the target is not empty",
                        String::from_utf8_lossy(&kv.key)
                    )));
                }
                crate::copy::check_revisions(kv)?;
                state.write(LogRow {
                    revision: kv.mod_revision,
                    sub: first_sub + index as i64,
                    key: kv.key.clone(),
                    value: kv.value.clone(),
                    create_revision: kv.create_revision,
                    prev_revision: 0,
                    version: kv.version,
                    lease: kv.lease,
                    deleted: false,
                    next_revision: 0,
                });
            }
        }
        RestoreStep::History(revisions) => {
            state
                .prefetch(
                    revisions
                        .iter()
                        .flat_map(|revision| &revision.events)
                        .map(|event| event.kv.key.clone())
                        .collect(),
                )
                .await?;
            for RevisionEvents { revision, events } in revisions {
                apply_revision(state, *revision, events).await?;
            }
        }
        RestoreStep::Finish {
            revision,
            compacted,
        } => {
            if *revision < state.revision() || *compacted > *revision {
                return Err(Error::InvalidArgument(format!(
                    "the copy ends at revision {revision} (compacted {compacted}), \
                     before the target's {}",
                    state.revision()
                )));
            }
            state.set_revision(*revision);
            let compacted = (*compacted).max(state.compact_revision());
            state.set_compact_revision(compacted);
        }
    }
    Ok(())
}

/// Writes one revision of the history; its keys' latest rows are in the cache.
async fn apply_revision(
    state: &mut dyn LogState,
    revision: Revision,
    events: &[Event],
) -> Result<()> {
    if revision <= state.revision() {
        return Err(Error::InvalidArgument(format!(
            "revision {revision} of the copy is not after the target's {}",
            state.revision()
        )));
    }
    for (sub, event) in events.iter().enumerate() {
        let latest = state.latest(&event.kv.key).await?;
        let prev_revision = latest.as_ref().map_or(0, |row| row.kv.mod_revision);
        let row = match event.kind {
            EventKind::Put => {
                crate::copy::check_revisions(&event.kv)?;
                LogRow {
                    revision,
                    sub: sub as i64,
                    key: event.kv.key.clone(),
                    value: event.kv.value.clone(),
                    create_revision: event.kv.create_revision,
                    prev_revision,
                    version: event.kv.version,
                    lease: event.kv.lease,
                    deleted: false,
                    next_revision: 0,
                }
            }
            EventKind::Delete => {
                if latest.is_none_or(|row| row.deleted) {
                    return Err(Error::InvalidArgument(format!(
                        "revision {revision} of the copy deletes {}, which it does not hold",
                        String::from_utf8_lossy(&event.kv.key)
                    )));
                }
                LogRow {
                    revision,
                    sub: sub as i64,
                    key: event.kv.key.clone(),
                    value: Vec::new(),
                    create_revision: 0,
                    prev_revision,
                    version: 0,
                    lease: 0,
                    deleted: true,
                    next_revision: 0,
                }
            }
        };
        state.write(row);
    }
    state.set_revision(revision);
    Ok(())
}
