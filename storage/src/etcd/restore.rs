//! Loading a copy of another store into etcd ([`RestoreStep`]). etcd numbers revisions
//! itself, one per write transaction, so a copy keeps its revisions only by replaying a write
//! at every one of them, starting from a fresh etcd:
//!
//! - each base key is written at its `create_revision`, then `version − 2` more times, then
//!   at its `mod_revision` (so etcd gives it the same create revision, mod revision and
//!   version as the source had; values in between are not known, and nobody can read them
//!   after compaction);
//! - history revisions replay their events as one transaction each;
//! - a revision with nothing to write gets a put of a filler key outside the store's keys
//!   (`\0rudder/restore-filler` + prefix), deleted again by the next real write.
//!
//! Base keys are held in memory until the first history revision or the end, since the
//! schedule needs all of them. Leases are granted with their ids, which etcd allows; a lease
//! that copied writes name but the source has since revoked is granted for the replay and
//! revoked at the end (its keys were deleted by then).

use std::collections::{BTreeMap, HashSet};

use etcd_client::{DeleteOptions, PutOptions, Txn, TxnOp as EtcdTxnOp};

use super::{translate, EtcdStore};
use crate::error::{Error, Result};
use crate::interface::Storage;
use crate::types::*;

/// TTL of a lease granted for copied writes that name a lease the source no longer has.
const DEAD_LEASE_TTL: i64 = 3600;
/// etcd's default `--max-txn-ops`.
const MAX_TXN_OPS: usize = 128;

/// What the loader has done so far.
#[derive(Default)]
pub(super) struct Loader {
    /// Base keys not yet written.
    base: Vec<KeyValue>,
    /// Whether the base has been written (no more `Keys` steps then).
    base_written: bool,
    /// etcd's revision after the loader's last write (0: not read yet).
    revision: Revision,
    /// Whether the filler key exists.
    filler_live: bool,
    /// Leases that exist in this etcd.
    leases: HashSet<LeaseId>,
    /// Leases granted only because copied writes name them (the source had revoked them
    /// by the copy's revision): revoked again at the end.
    dead_leases: Vec<LeaseId>,
}

/// One write of a key in the replay.
struct Write {
    key: Vec<u8>,
    value: Vec<u8>,
    lease: LeaseId,
    delete: bool,
}

impl EtcdStore {
    pub(super) async fn restore_step(&self, step: RestoreStep) -> Result<()> {
        let mut loader = self.restore.lock().await;
        if loader.revision == 0 {
            loader.revision = self.status().await?.revision;
            loader.leases = self.lease_list().await?.into_iter().collect();
        }
        match step {
            RestoreStep::Leases(leases) => {
                for lease in leases {
                    self.lease_grant(lease.ttl, lease.id).await?;
                    loader.leases.insert(lease.id);
                }
            }
            RestoreStep::Keys(kvs) => {
                if loader.base_written {
                    return Err(Error::InvalidArgument(
                        "base keys of a copy came after its history".into(),
                    ));
                }
                loader.base.extend(kvs);
            }
            RestoreStep::History(revisions) => {
                self.write_base(&mut loader).await?;
                for RevisionEvents { revision, events } in revisions {
                    let writes = events
                        .into_iter()
                        .map(|event| Write {
                            delete: event.kind == EventKind::Delete,
                            key: event.kv.key,
                            value: event.kv.value,
                            lease: event.kv.lease,
                        })
                        .collect();
                    self.write_at(&mut loader, revision, writes).await?;
                }
            }
            RestoreStep::Finish {
                revision,
                compacted,
            } => {
                self.write_base(&mut loader).await?;
                if revision > loader.revision {
                    self.write_at(&mut loader, revision, Vec::new()).await?;
                }
                if loader.filler_live {
                    // Only when the last revision wrote something and an earlier one was a
                    // gap: the filler's delete is one revision past the copy's.
                    let next = loader.revision + 1;
                    self.write_at(&mut loader, next, Vec::new()).await?;
                }
                for lease in std::mem::take(&mut loader.dead_leases) {
                    self.lease_revoke(lease).await?;
                }
                if compacted > 1 && compacted > self.status().await?.compact_revision {
                    self.compact(compacted).await?;
                }
            }
        }
        Ok(())
    }

    /// Replays the base keys: each at its create revision, its intermediate versions, and its
    /// mod revision.
    async fn write_base(&self, loader: &mut Loader) -> Result<()> {
        if loader.base_written {
            return Ok(());
        }
        loader.base_written = true;
        let mut schedule: BTreeMap<Revision, Vec<Write>> = BTreeMap::new();
        for kv in std::mem::take(&mut loader.base) {
            crate::copy::check_revisions(&kv)?;
            let earlier = (0..kv.version - 1).map(|step| kv.create_revision + step);
            for revision in earlier.chain([kv.mod_revision]) {
                schedule.entry(revision).or_default().push(Write {
                    key: kv.key.clone(),
                    value: kv.value.clone(),
                    lease: kv.lease,
                    delete: false,
                });
            }
        }
        if let Some((&first, _)) = schedule.first_key_value() {
            if first <= loader.revision {
                return Err(Error::InvalidArgument(format!(
                    "this etcd is at revision {}, and the copy has a key created at revision \
                     {first}: etcd's revision cannot go back, so load the copy into a new etcd \
                     (an empty data directory)",
                    loader.revision
                )));
            }
        }
        for (revision, writes) in schedule {
            self.write_at(loader, revision, writes).await?;
        }
        Ok(())
    }

    /// Writes `writes` as etcd's revision `revision`, with filler writes for any revisions
    /// before it that have nothing of their own.
    async fn write_at(
        &self,
        loader: &mut Loader,
        revision: Revision,
        writes: Vec<Write>,
    ) -> Result<()> {
        if revision <= loader.revision {
            return Err(Error::InvalidArgument(format!(
                "revision {revision} of the copy is not after etcd's {}",
                loader.revision
            )));
        }
        for write in &writes {
            if write.lease != 0 && !write.delete && loader.leases.insert(write.lease) {
                self.lease_grant(DEAD_LEASE_TTL, write.lease).await?;
                loader.dead_leases.push(write.lease);
            }
        }
        while loader.revision + 1 < revision {
            let filler = EtcdTxnOp::put(self.filler_key(), Vec::new(), None);
            self.commit(loader, vec![filler]).await?;
            loader.filler_live = true;
        }
        let mut ops: Vec<EtcdTxnOp> = writes
            .into_iter()
            .map(|write| {
                if write.delete {
                    EtcdTxnOp::delete(self.key(&write.key), None::<DeleteOptions>)
                } else {
                    let options = PutOptions::new().with_lease(write.lease);
                    EtcdTxnOp::put(self.key(&write.key), write.value, Some(options))
                }
            })
            .collect();
        if loader.filler_live {
            ops.push(EtcdTxnOp::delete(self.filler_key(), None::<DeleteOptions>));
            loader.filler_live = false;
        } else if ops.is_empty() {
            ops.push(EtcdTxnOp::put(self.filler_key(), Vec::new(), None));
            loader.filler_live = true;
        }
        if ops.len() > MAX_TXN_OPS {
            return Err(Error::InvalidArgument(format!(
                "revision {revision} of the copy writes {} keys, over etcd's default \
                 --max-txn-ops of {MAX_TXN_OPS}",
                ops.len()
            )));
        }
        self.commit(loader, ops).await
    }

    /// Commits one transaction, which must become the next revision.
    async fn commit(&self, loader: &mut Loader, ops: Vec<EtcdTxnOp>) -> Result<()> {
        let response = self
            .client
            .kv_client()
            .txn(Txn::new().and_then(ops))
            .await
            .map_err(translate)?;
        let revision = response.header().map_or(0, |header| header.revision());
        if revision != loader.revision + 1 {
            return Err(Error::InvalidArgument(format!(
                "etcd wrote revision {revision} where the copy needed {}: something else \
                 writes to this etcd; load the copy into an etcd nobody else uses",
                loader.revision + 1
            )));
        }
        loader.revision = revision;
        Ok(())
    }

    /// The filler key: outside the store's keys, like the progress fence.
    fn filler_key(&self) -> Vec<u8> {
        let mut key = b"\0rudder/restore-filler".to_vec();
        key.extend_from_slice(&self.prefix);
        key
    }
}
