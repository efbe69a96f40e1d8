//! etcd's transaction semantics on a log's state: every compare of a transaction (nested ones
//! included) sees the state before its writes, its range reads see its own earlier writes, and
//! all its writes share one new revision, numbered by `sub`.

use super::{LogRow, LogState};
use crate::error::{Error, Result};
use crate::types::*;

/// Runs `request` as the next revision's transaction. Only a `protected` transaction (one the
/// driver can undo on its own, with nothing pending before it) may fail after writing; any
/// other such failure fails the whole batch, so nothing half-done is ever committed.
pub(crate) async fn run(
    state: &mut dyn LogState,
    request: &TxnRequest,
    protected: bool,
) -> Result<TxnResponse> {
    let mut context = TxnContext { state, sub: 0 };
    let result = context.execute(request).await;
    let wrote = context.sub > 0;
    match result {
        Ok(response) => {
            if wrote {
                let revision = context.state.revision() + 1;
                context.state.set_revision(revision);
            }
            Ok(response)
        }
        Err(error) if wrote && !protected => Err(Error::Backend {
            message: format!("transaction failed after writing part of itself: {error}"),
            source: None,
        }),
        Err(error) => Err(error),
    }
}

/// One etcd transaction being applied within a batch.
struct TxnContext<'b> {
    state: &'b mut dyn LogState,
    /// Rows written so far at this transaction's revision.
    sub: i64,
}

impl TxnContext<'_> {
    /// The revision this transaction writes at.
    fn revision(&self) -> Revision {
        self.state.revision() + 1
    }

    /// The store's revision once this transaction commits.
    fn resulting_revision(&self) -> Revision {
        if self.sub > 0 {
            self.revision()
        } else {
            self.state.revision()
        }
    }

    async fn execute(&mut self, request: &TxnRequest) -> Result<TxnResponse> {
        let mut path = Vec::new();
        self.plan(request, &mut path).await?;
        let mut path = path.into_iter();
        self.run(request, &mut path).await
    }

    /// Evaluates the compares along the branches that will run, in pre-order, before any write.
    async fn plan(&mut self, request: &TxnRequest, path: &mut Vec<bool>) -> Result<()> {
        let mut succeeded = true;
        for compare in &request.compare {
            if !self.holds(compare).await? {
                succeeded = false;
                break;
            }
        }
        path.push(succeeded);
        let branch = if succeeded {
            &request.success
        } else {
            &request.failure
        };
        for op in branch {
            if let TxnOp::Txn(nested) = op {
                Box::pin(self.plan(nested, path)).await?;
            }
        }
        Ok(())
    }

    async fn run(
        &mut self,
        request: &TxnRequest,
        path: &mut std::vec::IntoIter<bool>,
    ) -> Result<TxnResponse> {
        let succeeded = path.next().ok_or_else(|| Error::Backend {
            message: "transaction plan is shorter than the transaction".into(),
            source: None,
        })?;
        let branch = if succeeded {
            &request.success
        } else {
            &request.failure
        };
        let mut responses = Vec::with_capacity(branch.len());
        for op in branch {
            let response = match op {
                TxnOp::Range(range) => TxnOpResponse::Range(self.range(range).await?),
                TxnOp::Put(put) => TxnOpResponse::Put(self.put(put).await?),
                TxnOp::DeleteRange(delete) => {
                    TxnOpResponse::DeleteRange(self.delete_range(delete).await?)
                }
                TxnOp::Txn(nested) => TxnOpResponse::Txn(Box::pin(self.run(nested, path)).await?),
            };
            responses.push(response);
        }
        Ok(TxnResponse {
            succeeded,
            responses,
            revision: self.resulting_revision(),
        })
    }

    async fn holds(&mut self, compare: &Compare) -> Result<bool> {
        let kvs = if compare.range.is_single_key() {
            self.state
                .live(&compare.range.start)
                .await?
                .into_iter()
                .collect()
        } else {
            let revision = self.revision();
            self.state
                .range_now(&RangeRequest::new(compare.range.clone()), revision)
                .await?
                .kvs
        };
        if kvs.is_empty() {
            return Ok(match compare.target {
                CompareTarget::Value(_) => false,
                _ => compare_kv(compare, &KeyValue::default()),
            });
        }
        Ok(kvs.iter().all(|kv| compare_kv(compare, kv)))
    }

    async fn range(&mut self, request: &RangeRequest) -> Result<RangeResponse> {
        let current = self.state.revision();
        let revision = if request.revision <= 0 {
            self.revision()
        } else if request.revision > current {
            return Err(Error::FutureRevision {
                requested: request.revision,
                current,
            });
        } else if request.revision < self.state.compact_revision() {
            return Err(Error::Compacted {
                requested: request.revision,
                compacted: self.state.compact_revision(),
            });
        } else {
            request.revision
        };
        let mut response =
            if request.range.is_single_key() && request.revision <= 0 && !request.count_only {
                // The common "get on failure" read: straight from the cache.
                let kvs: Vec<KeyValue> = self
                    .state
                    .live(&request.range.start)
                    .await?
                    .into_iter()
                    .map(|mut kv| {
                        if request.keys_only {
                            kv.value.clear();
                        }
                        kv
                    })
                    .collect();
                let count = kvs.len() as i64;
                RangeResponse {
                    kvs,
                    more: false,
                    count,
                    revision,
                }
            } else {
                self.state.range_now(request, revision).await?
            };
        response.revision = self.resulting_revision();
        Ok(response)
    }

    async fn put(&mut self, request: &PutRequest) -> Result<PutResponse> {
        let latest = self.state.latest(&request.key).await?;
        let live = latest
            .as_ref()
            .filter(|row| !row.deleted)
            .map(|row| row.kv.clone());
        if (request.ignore_value || request.ignore_lease) && live.is_none() {
            return Err(Error::KeyNotFound);
        }
        let value = match (&live, request.ignore_value) {
            (Some(current), true) => current.value.clone(),
            _ => request.value.clone(),
        };
        let lease = match (&live, request.ignore_lease) {
            (Some(current), true) => current.lease,
            _ => request.lease,
        };
        if lease != 0 && !self.state.lease_exists(lease).await? {
            return Err(Error::LeaseNotFound(lease));
        }
        let revision = self.revision();
        let (create_revision, version) = match &live {
            Some(current) => (current.create_revision, current.version + 1),
            None => (revision, 1),
        };
        let row = LogRow {
            revision,
            sub: self.sub,
            key: request.key.clone(),
            value,
            create_revision,
            prev_revision: latest.as_ref().map_or(0, |row| row.kv.mod_revision),
            version,
            lease,
            deleted: false,
            next_revision: 0,
        };
        self.sub += 1;
        self.state.write(row);
        Ok(PutResponse {
            prev_kv: if request.prev_kv { live } else { None },
        })
    }

    async fn delete_range(&mut self, request: &DeleteRangeRequest) -> Result<DeleteRangeResponse> {
        let kvs = if request.range.is_single_key() {
            self.state
                .live(&request.range.start)
                .await?
                .into_iter()
                .collect()
        } else {
            let revision = self.revision();
            self.state
                .range_now(&RangeRequest::new(request.range.clone()), revision)
                .await?
                .kvs
        };
        for kv in &kvs {
            self.tombstone(kv);
        }
        Ok(DeleteRangeResponse {
            deleted: kvs.len() as i64,
            prev_kvs: if request.prev_kv { kvs } else { Vec::new() },
        })
    }

    fn tombstone(&mut self, current: &KeyValue) {
        let row = LogRow {
            revision: self.revision(),
            sub: self.sub,
            key: current.key.clone(),
            value: Vec::new(),
            create_revision: 0,
            prev_revision: current.mod_revision,
            version: 0,
            lease: 0,
            deleted: true,
            next_revision: 0,
        };
        self.sub += 1;
        self.state.write(row);
    }
}

/// The single keys a transaction may read or write, for [`Batch::prefetch`].
pub(crate) fn keys_of(request: &TxnRequest, keys: &mut Vec<Vec<u8>>) {
    for compare in &request.compare {
        if compare.range.is_single_key() {
            keys.push(compare.range.start.clone());
        }
    }
    for op in request.success.iter().chain(&request.failure) {
        match op {
            TxnOp::Put(put) => keys.push(put.key.clone()),
            TxnOp::DeleteRange(delete) if delete.range.is_single_key() => {
                keys.push(delete.range.start.clone())
            }
            TxnOp::Range(range) if range.range.is_single_key() => {
                keys.push(range.range.start.clone())
            }
            TxnOp::Txn(nested) => keys_of(nested, keys),
            _ => {}
        }
    }
}

/// Whether a transaction can fail after writing part of itself (and so needs a savepoint).
pub(crate) fn may_fail_midway(request: &TxnRequest) -> bool {
    request
        .success
        .iter()
        .chain(&request.failure)
        .any(|op| match op {
            TxnOp::Put(put) => put.lease != 0 || put.ignore_value || put.ignore_lease,
            TxnOp::Range(range) => range.revision > 0,
            TxnOp::Txn(nested) => may_fail_midway(nested),
            TxnOp::DeleteRange(_) => false,
        })
}

/// etcd's compare semantics for one kv.
pub(crate) fn compare_kv(compare: &Compare, kv: &KeyValue) -> bool {
    use std::cmp::Ordering;
    let ordering = match &compare.target {
        CompareTarget::Version(version) => kv.version.cmp(version),
        CompareTarget::CreateRevision(revision) => kv.create_revision.cmp(revision),
        CompareTarget::ModRevision(revision) => kv.mod_revision.cmp(revision),
        CompareTarget::Lease(lease) => kv.lease.cmp(lease),
        CompareTarget::Value(value) => kv.value.as_slice().cmp(value.as_slice()),
    };
    match compare.op {
        CompareOp::Equal => ordering == Ordering::Equal,
        CompareOp::NotEqual => ordering != Ordering::Equal,
        CompareOp::Greater => ordering == Ordering::Greater,
        CompareOp::Less => ordering == Ordering::Less,
    }
}
