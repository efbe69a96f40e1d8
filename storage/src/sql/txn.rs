//! Applies jobs inside the writer's SQL transaction.
//!
//! A [`Batch`] is the state of one database transaction: the latest row of every key it has
//! looked at or written (a cache, filled for a whole batch by one query up front), and the log
//! rows written but not yet sent to the database. Single-key work (creates, CAS updates and
//! deletes: nearly everything the apiserver does) runs from the cache, so a batch of N such
//! transactions costs a handful of statements, not several per transaction. Pending rows are
//! flushed with multi-row inserts before any range query and before commit.
//!
//! The transaction semantics themselves live in [`crate::log::txn`], shared with the Spanner
//! driver; this module is how the SQL engine reads and writes the log for them.

use std::collections::HashMap;

use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};

use super::dialect::{
    insert_rows, insert_rows_with, latest_rows, latest_rows_with, link_rows, link_rows_with,
    Dialect, Literal,
};
use async_trait::async_trait;

use super::reader::{range_at, read_lease};
use super::translate;
use crate::error::Result;
use crate::log::{LatestRow, LeaseRow, LogRow, LogState};
use crate::types::*;

/// Keys per prefetch query; rows per insert statement.
const KEYS_PER_QUERY: usize = 500;
const ROWS_PER_INSERT: usize = 100;
/// Keys and values per insert statement, so that one statement stays well under MySQL's
/// `max_allowed_packet` (16 MiB by default on MariaDB) however large the batch's values; a
/// single row can hold at most `MAX_TXN_BYTES` (1.5 MiB), so any row fits.
const BYTES_PER_INSERT: usize = 4 * 1024 * 1024;
/// Keys and values a batch may write into its statements' text (hex doubles them) to save
/// round trips; larger batches bind them.
const INLINE_BYTES: usize = 256 * 1024;

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
    /// The watch events of every row written, in order, for the log poller; `None` once the
    /// batch wrote something it cannot describe (a lease revoke deletes keys in SQL, a
    /// rolled-back job, a restore).
    events: Option<Vec<Event>>,
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
            events: Some(Vec::new()),
        }
    }

    /// From now on the batch's events are read back from the log, not handed over.
    pub fn events_unknown(&mut self) {
        self.events = None;
    }

    /// The watch events of everything the batch wrote, if it knows them all.
    pub fn take_events(&mut self) -> Option<Vec<Event>> {
        self.events.take()
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
            self.prefetched(chunk, &rows)?;
        }
        Ok(())
    }

    /// The statement that reads the latest rows of `keys` with the keys written into it (see
    /// [`Literal`]), to go in one round trip with the transaction's start; `None` when there
    /// are no keys or too many for one statement.
    pub fn prefetch_inline(dialect: &Dialect, keys: &[Vec<u8>]) -> Option<String> {
        let bytes: usize = keys.iter().map(Vec::len).sum();
        if keys.is_empty() || keys.len() > KEYS_PER_QUERY || bytes > INLINE_BYTES {
            return None;
        }
        let literals: Vec<String> = keys
            .iter()
            .map(|key| Literal::Bytes(key.clone()).render(dialect))
            .collect();
        Some(latest_rows_with(dialect, keys.len(), &|n| {
            literals[n - 1].clone()
        }))
    }

    /// Caches what a read of the latest rows of `keys` returned (keys without a row never
    /// existed, or are gone entirely).
    pub fn prefetched(&mut self, keys: &[Vec<u8>], rows: &[AnyRow]) -> Result<()> {
        for key in keys {
            self.cache.insert(key.clone(), None);
        }
        for row in rows {
            let latest = latest_from_row(row)?;
            self.cache.insert(latest.kv.key.clone(), Some(latest));
        }
        Ok(())
    }

    /// The statements that write the pending rows and links, with their values written into
    /// them (see [`Literal`]), to go in one round trip with the commit; `None` (nothing taken)
    /// when they are too large for that and must be flushed with bound arguments.
    pub fn take_inline_writes(&mut self) -> Option<String> {
        let bytes: usize = self
            .pending
            .iter()
            .map(|row| row.key.len() + row.value.len())
            .chain(self.links.iter().map(|(key, _, _)| key.len()))
            .sum();
        if bytes > INLINE_BYTES {
            return None;
        }
        let dialect = self.dialect;
        let mut statements = Vec::new();
        let pending = std::mem::take(&mut self.pending);
        for chunk in pending.chunks(ROWS_PER_INSERT) {
            let literals: Vec<String> = chunk
                .iter()
                .flat_map(|row| {
                    [
                        Literal::Int(row.revision),
                        Literal::Int(row.sub),
                        Literal::Bytes(row.key.clone()),
                        Literal::Bytes(row.value.clone()),
                        Literal::Int(row.create_revision),
                        Literal::Int(row.prev_revision),
                        Literal::Int(row.version),
                        Literal::Int(row.lease),
                        Literal::Int(i64::from(row.deleted)),
                        Literal::Int(row.next_revision),
                    ]
                })
                .map(|literal| literal.render(dialect))
                .collect();
            statements.push(insert_rows_with(dialect, chunk.len(), &|n| {
                literals[n - 1].clone()
            }));
        }
        let links = std::mem::take(&mut self.links);
        for chunk in links.chunks(ROWS_PER_INSERT) {
            let literals: Vec<String> = chunk
                .iter()
                .flat_map(|(key, revision, next)| {
                    [
                        Literal::Bytes(key.clone()),
                        Literal::Int(*revision),
                        Literal::Int(*next),
                    ]
                })
                .map(|literal| literal.render(dialect))
                .collect();
            statements.push(link_rows_with(dialect, chunk.len(), &|n| {
                literals[n - 1].clone()
            }));
        }
        Some(statements.join("; "))
    }

    /// The latest row of `key`, tombstone or not.
    pub async fn latest(&mut self, key: &[u8]) -> Result<Option<LatestRow>> {
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

    pub fn write(&mut self, row: LogRow) {
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
        let latest = LatestRow::of(&row);
        let previous = self.cache.insert(row.key.clone(), Some(latest.clone()));
        if let Some(events) = &mut self.events {
            match previous {
                // The previous row is the event's prev_kv, unless it was a tombstone.
                Some(previous) => {
                    let prev_kv = previous.filter(|row| !row.deleted).map(|row| row.kv);
                    events.push(latest.into_event(prev_kv));
                }
                // Never looked up, so its previous row is not known here.
                None => self.events = None,
            }
        }
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
        // Events of the rolled-back job may already be recorded.
        self.events = None;
        self.cache.clear();
        self.pending.clear();
        self.links.clear();
    }

    /// A range query on the database, which first receives pending rows.
    pub async fn range_now(
        &mut self,
        request: &RangeRequest,
        revision: Revision,
    ) -> Result<RangeResponse> {
        self.flush().await?;
        range_at(self.conn, self.dialect, request, revision).await
    }

    /// Runs one of the dialect's lease statements (`id`, then `ttl` when given).
    async fn execute_lease(&mut self, sql: &str, id: LeaseId, ttl: Option<i64>) -> Result<()> {
        let mut query = sqlx::query(sql).bind(id);
        if let Some(ttl) = ttl {
            query = query.bind(ttl);
        }
        query.execute(&mut *self.conn).await.map_err(translate)?;
        Ok(())
    }

    /// A lease's row, by the database's clock.
    pub async fn lease(&mut self, id: LeaseId) -> Result<Option<LeaseRow>> {
        read_lease(self.conn, self.dialect, id).await
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
        self.events = None;
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

#[async_trait]
impl LogState for Batch<'_> {
    fn revision(&self) -> Revision {
        self.revision
    }
    fn set_revision(&mut self, revision: Revision) {
        self.revision = revision;
    }
    fn compact_revision(&self) -> Revision {
        self.compact_revision
    }
    fn set_compact_revision(&mut self, revision: Revision) {
        self.compact_revision = revision;
    }
    async fn prefetch(&mut self, keys: Vec<Vec<u8>>) -> Result<()> {
        Batch::prefetch(self, keys).await
    }
    async fn latest(&mut self, key: &[u8]) -> Result<Option<LatestRow>> {
        Batch::latest(self, key).await
    }
    fn write(&mut self, row: LogRow) {
        Batch::write(self, row)
    }
    async fn range_now(
        &mut self,
        request: &RangeRequest,
        revision: Revision,
    ) -> Result<RangeResponse> {
        Batch::range_now(self, request, revision).await
    }
    async fn lease(&mut self, id: LeaseId) -> Result<Option<LeaseRow>> {
        Batch::lease(self, id).await
    }
    async fn insert_lease(&mut self, id: LeaseId, ttl: i64) -> Result<()> {
        self.execute_lease(self.dialect.insert_lease, id, Some(ttl))
            .await
    }
    async fn renew_lease(&mut self, id: LeaseId) -> Result<()> {
        self.execute_lease(self.dialect.renew_lease, id, None).await
    }
    async fn delete_lease(&mut self, id: LeaseId) -> Result<()> {
        self.execute_lease(self.dialect.delete_lease, id, None)
            .await
    }
    async fn revoke_keys(&mut self, lease: LeaseId) -> Result<()> {
        Batch::revoke_keys(self, lease).await
    }
}

fn latest_from_row(row: &AnyRow) -> Result<LatestRow> {
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
