//! Applies jobs inside the writer's SQL transaction.
//!
//! A [`Batch`] is the state of one database transaction: the latest row of every key it has
//! looked at or written (a cache, filled for a whole batch by one query up front), and the log
//! rows written but not yet sent to the database. Single-key work (creates, CAS updates and
//! deletes: nearly everything the apiserver does) runs from the cache, so a batch of N such
//! transactions costs a handful of statements, not several per transaction. Pending rows are
//! flushed with multi-row inserts before any range query and before commit.
//!
//! All writes of one etcd transaction share one new revision, numbered by `sub`; as in etcd,
//! every compare of a transaction (nested ones included) sees the state before its writes,
//! while its range reads see its own earlier writes.

use std::collections::HashMap;

use sqlx::{AnyConnection, Row};

use super::dialect::{insert_rows, latest_rows, link_rows, Dialect};
use super::reader::{range_at, read_lease, LatestRow, LeaseRow};
use super::translate;
use crate::error::{Error, Result};
use crate::types::*;

/// Keys per prefetch query; rows per insert statement.
const KEYS_PER_QUERY: usize = 500;
const ROWS_PER_INSERT: usize = 100;
/// Keys and values per insert statement, so that one statement stays well under MySQL's
/// `max_allowed_packet` (16 MiB by default on MariaDB) however large the batch's values; a
/// single row can hold at most `MAX_TXN_BYTES` (1.5 MiB), so any row fits.
const BYTES_PER_INSERT: usize = 4 * 1024 * 1024;

/// A log row to write.
#[derive(Clone, Debug)]
pub(super) struct LogRow {
    pub(super) revision: Revision,
    pub(super) sub: i64,
    pub(super) key: Vec<u8>,
    pub(super) value: Vec<u8>,
    pub(super) create_revision: Revision,
    pub(super) prev_revision: Revision,
    pub(super) version: i64,
    pub(super) lease: LeaseId,
    pub(super) deleted: bool,
    /// The revision of the key's next row, when that row is in the same batch.
    pub(super) next_revision: Revision,
}

/// Splits rows into insert statements of at most `ROWS_PER_INSERT` rows and, past the first
/// row, `BYTES_PER_INSERT` bytes of keys and values.
fn insert_chunks(rows: &[LogRow]) -> Vec<&[LogRow]> {
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (index, row) in rows.iter().enumerate() {
        let size = row.key.len() + row.value.len();
        let full = index - start >= ROWS_PER_INSERT || bytes + size > BYTES_PER_INSERT;
        if index > start && full {
            chunks.push(&rows[start..index]);
            (start, bytes) = (index, 0);
        }
        bytes += size;
    }
    if start < rows.len() {
        chunks.push(&rows[start..]);
    }
    chunks
}

/// One database transaction's worth of jobs.
pub(crate) struct Batch<'c> {
    pub conn: &'c mut AnyConnection,
    pub dialect: &'static Dialect,
    /// The store's revision after the jobs applied so far.
    pub revision: Revision,
    pub compact_revision: Revision,
    /// Latest row per key (`None`: the key never existed), including pending writes.
    cache: HashMap<Vec<u8>, Option<LatestRow>>,
    pending: Vec<LogRow>,
    /// Rows already in the database that pending rows supersede: `(key, revision, next)`.
    links: Vec<(Vec<u8>, Revision, Revision)>,
}

impl<'c> Batch<'c> {
    pub fn new(
        conn: &'c mut AnyConnection,
        dialect: &'static Dialect,
        revision: Revision,
        compact_revision: Revision,
    ) -> Self {
        Self {
            conn,
            dialect,
            revision,
            compact_revision,
            cache: HashMap::new(),
            pending: Vec::new(),
            links: Vec::new(),
        }
    }

    /// Loads the latest rows of `keys` into the cache, in as few queries as possible.
    pub async fn prefetch(&mut self, keys: Vec<Vec<u8>>) -> Result<()> {
        let mut missing: Vec<Vec<u8>> = keys
            .into_iter()
            .filter(|key| !self.cache.contains_key(key))
            .collect();
        missing.sort();
        missing.dedup();
        for chunk in missing.chunks(KEYS_PER_QUERY) {
            let sql = latest_rows(self.dialect, chunk.len());
            let mut query = sqlx::query(&sql);
            for key in chunk {
                query = query.bind(key.clone());
            }
            let rows = query.fetch_all(&mut *self.conn).await.map_err(translate)?;
            for key in chunk {
                self.cache.insert(key.clone(), None);
            }
            for row in rows {
                let latest = latest_from_row(&row)?;
                self.cache.insert(latest.kv.key.clone(), Some(latest));
            }
        }
        Ok(())
    }

    /// The latest row of `key`, tombstone or not.
    pub(super) async fn latest(&mut self, key: &[u8]) -> Result<Option<LatestRow>> {
        if let Some(cached) = self.cache.get(key) {
            return Ok(cached.clone());
        }
        // Not cached, so it has no pending rows: the database is up to date for it.
        let row = sqlx::query(self.dialect.latest_row)
            .bind(key.to_vec())
            .fetch_optional(&mut *self.conn)
            .await
            .map_err(translate)?;
        let latest = row.as_ref().map(latest_from_row).transpose()?;
        self.cache.insert(key.to_vec(), latest.clone());
        Ok(latest)
    }

    async fn live(&mut self, key: &[u8]) -> Result<Option<KeyValue>> {
        Ok(self
            .latest(key)
            .await?
            .filter(|row| !row.deleted)
            .map(|row| row.kv))
    }

    pub(super) fn write(&mut self, row: LogRow) {
        // The row this one supersedes stops being its key's latest.
        if row.prev_revision != 0 {
            let previous =
                self.pending.iter_mut().rev().find(|pending| {
                    pending.key == row.key && pending.revision == row.prev_revision
                });
            match previous {
                Some(previous) => previous.next_revision = row.revision,
                None => self
                    .links
                    .push((row.key.clone(), row.prev_revision, row.revision)),
            }
        }
        let latest = LatestRow {
            kv: KeyValue {
                key: row.key.clone(),
                value: row.value.clone(),
                create_revision: row.create_revision,
                mod_revision: row.revision,
                version: row.version,
                lease: row.lease,
            },
            deleted: row.deleted,
        };
        self.cache.insert(row.key.clone(), Some(latest));
        self.pending.push(row);
    }

    /// Sends pending rows to the database.
    pub async fn flush(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        for chunk in insert_chunks(&pending) {
            let sql = insert_rows(self.dialect, chunk.len());
            let mut query = sqlx::query(&sql);
            for row in chunk {
                query = query
                    .bind(row.revision)
                    .bind(row.sub)
                    .bind(row.key.clone())
                    .bind(row.value.clone())
                    .bind(row.create_revision)
                    .bind(row.prev_revision)
                    .bind(row.version)
                    .bind(row.lease)
                    .bind(i64::from(row.deleted))
                    .bind(row.next_revision);
            }
            query.execute(&mut *self.conn).await.map_err(translate)?;
        }
        let links = std::mem::take(&mut self.links);
        for chunk in links.chunks(ROWS_PER_INSERT) {
            let sql = link_rows(self.dialect, chunk.len());
            let mut query = sqlx::query(&sql);
            for (key, revision, next) in chunk {
                query = query.bind(key.clone()).bind(*revision).bind(*next);
            }
            query.execute(&mut *self.conn).await.map_err(translate)?;
        }
        Ok(())
    }

    /// Forgets cached state (after a savepoint rollback); pending rows must be empty.
    pub fn forget(&mut self) {
        self.cache.clear();
        self.pending.clear();
        self.links.clear();
    }

    /// A range query on the database, which first receives pending rows.
    async fn range_now(
        &mut self,
        request: &RangeRequest,
        revision: Revision,
    ) -> Result<RangeResponse> {
        self.flush().await?;
        range_at(self.conn, self.dialect, request, revision).await
    }

    pub async fn lease_exists(&mut self, lease: LeaseId) -> Result<bool> {
        Ok(self
            .lease(lease)
            .await?
            .is_some_and(|lease| lease.remaining_ms > 0))
    }

    /// A lease's row, by the database's clock.
    pub async fn lease(&mut self, id: LeaseId) -> Result<Option<LeaseRow>> {
        read_lease(self.conn, self.dialect, id).await
    }

    /// Runs `request` as the next revision's transaction. Only a `protected` transaction (run
    /// inside a savepoint, with nothing pending before it) may fail after writing; any other
    /// such failure fails the whole batch, so nothing half-done is ever committed.
    pub async fn txn(&mut self, request: &TxnRequest, protected: bool) -> Result<TxnResponse> {
        let mut context = TxnContext {
            batch: self,
            sub: 0,
        };
        let result = context.execute(request).await;
        let wrote = context.sub > 0;
        match result {
            Ok(response) => {
                if wrote {
                    self.revision += 1;
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

    /// Deletes every live key attached to `lease` as the next revision, in two set-based
    /// statements however many keys there are (kube-apiserver attaches a minute of Events to
    /// one lease), keeping the cache true for the keys it deleted.
    pub async fn revoke_keys(&mut self, lease: LeaseId) -> Result<()> {
        self.flush().await?;
        let revision = self.revision + 1;
        let deleted = sqlx::query(self.dialect.revoke_tombstones)
            .bind(lease)
            .bind(revision)
            .execute(&mut *self.conn)
            .await
            .map_err(translate)?
            .rows_affected();
        if deleted == 0 {
            return Ok(());
        }
        sqlx::query(self.dialect.revoke_link)
            .bind(lease)
            .bind(revision)
            .execute(&mut *self.conn)
            .await
            .map_err(translate)?;
        // The cache may hold some of these keys as live: say they are deleted.
        for (key, cached) in self.cache.iter_mut() {
            if cached
                .as_ref()
                .is_some_and(|row| !row.deleted && row.kv.lease == lease)
            {
                *cached = Some(LatestRow {
                    kv: KeyValue {
                        key: key.clone(),
                        mod_revision: revision,
                        ..KeyValue::default()
                    },
                    deleted: true,
                });
            }
        }
        self.revision = revision;
        Ok(())
    }
}

fn latest_from_row(row: &sqlx::any::AnyRow) -> Result<LatestRow> {
    let deleted: i64 = row.try_get(6).map_err(translate)?;
    Ok(LatestRow {
        kv: KeyValue {
            key: row.try_get(0).map_err(translate)?,
            value: row.try_get(1).map_err(translate)?,
            create_revision: row.try_get(2).map_err(translate)?,
            mod_revision: row.try_get(3).map_err(translate)?,
            version: row.try_get(4).map_err(translate)?,
            lease: row.try_get(5).map_err(translate)?,
        },
        deleted: deleted != 0,
    })
}

/// One etcd transaction being applied within a batch.
struct TxnContext<'b, 'c> {
    batch: &'b mut Batch<'c>,
    /// Rows written so far at this transaction's revision.
    sub: i64,
}

impl TxnContext<'_, '_> {
    /// The revision this transaction writes at.
    fn revision(&self) -> Revision {
        self.batch.revision + 1
    }

    /// The store's revision once this transaction commits.
    fn resulting_revision(&self) -> Revision {
        if self.sub > 0 {
            self.revision()
        } else {
            self.batch.revision
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
            self.batch
                .live(&compare.range.start)
                .await?
                .into_iter()
                .collect()
        } else {
            let revision = self.revision();
            self.batch
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
        let current = self.batch.revision;
        let revision = if request.revision <= 0 {
            self.revision()
        } else if request.revision > current {
            return Err(Error::FutureRevision {
                requested: request.revision,
                current,
            });
        } else if request.revision < self.batch.compact_revision {
            return Err(Error::Compacted {
                requested: request.revision,
                compacted: self.batch.compact_revision,
            });
        } else {
            request.revision
        };
        let mut response =
            if request.range.is_single_key() && request.revision <= 0 && !request.count_only {
                // The common "get on failure" read: straight from the cache.
                let kvs: Vec<KeyValue> = self
                    .batch
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
                self.batch.range_now(request, revision).await?
            };
        response.revision = self.resulting_revision();
        Ok(response)
    }

    async fn put(&mut self, request: &PutRequest) -> Result<PutResponse> {
        let latest = self.batch.latest(&request.key).await?;
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
        if lease != 0 && !self.batch.lease_exists(lease).await? {
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
        self.batch.write(row);
        Ok(PutResponse {
            prev_kv: if request.prev_kv { live } else { None },
        })
    }

    async fn delete_range(&mut self, request: &DeleteRangeRequest) -> Result<DeleteRangeResponse> {
        let kvs = if request.range.is_single_key() {
            self.batch
                .live(&request.range.start)
                .await?
                .into_iter()
                .collect()
        } else {
            let revision = self.revision();
            self.batch
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
        self.batch.write(row);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(bytes: usize) -> LogRow {
        LogRow {
            revision: 1,
            sub: 0,
            key: b"k".to_vec(),
            value: vec![0; bytes.saturating_sub(1)],
            create_revision: 1,
            prev_revision: 0,
            version: 1,
            lease: 0,
            deleted: false,
            next_revision: 0,
        }
    }

    #[test]
    fn inserts_are_split_by_rows_and_by_bytes() {
        let small: Vec<LogRow> = (0..250).map(|_| row(10)).collect();
        let sizes: Vec<usize> = insert_chunks(&small).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, vec![100, 100, 50]);

        // Ten rows of 1.5 MiB: at most two fit in 4 MiB, and every row is sent once.
        let large: Vec<LogRow> = (0..10).map(|_| row(1536 * 1024)).collect();
        let chunks = insert_chunks(&large);
        assert!(chunks.iter().all(|c| c.len() == 2), "{:?}", chunks.len());
        assert_eq!(chunks.iter().map(|c| c.len()).sum::<usize>(), 10);

        // A row over the budget on its own still goes, alone.
        let huge = vec![row(5 * 1024 * 1024), row(10)];
        let sizes: Vec<usize> = insert_chunks(&huge).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, vec![1, 1]);
        assert!(insert_chunks(&[]).is_empty());
    }
}
