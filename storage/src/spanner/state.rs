//! One read-write transaction's view of the log while the writer applies a batch of jobs.
//!
//! Spanner buffers a transaction's mutations until commit: its own reads do not see them. So
//! the batch keeps everything it writes in memory — the latest row of every key it touched
//! (the cache), the new rows, the links that mark superseded rows, lease changes — and every
//! read overlays that on what the database held when the transaction began. At commit, all of
//! it becomes one list of mutations ([`SpannerBatch::mutations`]).
//!
//! There are no savepoints either: a job that may fail half-way runs inside a journal
//! ([`SpannerBatch::begin_job`]) that undoes its in-memory writes when it fails.

use std::collections::HashMap;

use async_trait::async_trait;
use gcloud_googleapis::spanner::v1::Mutation;
use gcloud_spanner::key::Key;
use gcloud_spanner::mutation::{delete, insert, insert_or_update, update};
use gcloud_spanner::transaction_rw::ReadWriteTransaction;

use super::reader::{self, database_now_ms, latest_rows, range_rows, read_lease};
use crate::error::Result;
use crate::log::{LatestRow, LeaseRow, LogRow, LogState};
use crate::types::*;

/// Keys per prefetch query.
const KEYS_PER_QUERY: usize = 500;

/// A lease as this batch leaves it.
#[derive(Clone, Copy, Debug)]
enum LeaseChange {
    Upsert { ttl: i64, expires_at_ms: i64 },
    Deleted,
}

/// What undoing the current job restores.
#[derive(Default)]
struct Journal {
    revision: Revision,
    compact_revision: Revision,
    pending: usize,
    links: usize,
    leases: HashMap<LeaseId, LeaseChange>,
    /// Cache entries as they were before the job changed them (`None`: absent).
    cache: Vec<(Vec<u8>, Option<Option<LatestRow>>)>,
    /// Pending rows whose `next_revision` the job set, with the value before.
    next: Vec<(usize, Revision)>,
}

pub(super) struct SpannerBatch<'t> {
    pub tx: &'t mut ReadWriteTransaction,
    pub revision: Revision,
    pub compact_revision: Revision,
    /// The revision committed when the transaction began: every database row is at or below it.
    cache: HashMap<Vec<u8>, Option<LatestRow>>,
    pending: Vec<LogRow>,
    /// Rows already in the database that pending rows supersede: `(key, revision, next)`.
    links: Vec<(Vec<u8>, Revision, Revision)>,
    leases: HashMap<LeaseId, LeaseChange>,
    now_ms: Option<i64>,
    journal: Option<Journal>,
}

impl<'t> SpannerBatch<'t> {
    pub fn new(
        tx: &'t mut ReadWriteTransaction,
        revision: Revision,
        compact_revision: Revision,
    ) -> Self {
        Self {
            tx,
            revision,
            compact_revision,
            cache: HashMap::new(),
            pending: Vec::new(),
            links: Vec::new(),
            leases: HashMap::new(),
            now_ms: None,
            journal: None,
        }
    }

    /// Starts journalling a job that may fail after writing.
    pub fn begin_job(&mut self) {
        self.journal = Some(Journal {
            revision: self.revision,
            compact_revision: self.compact_revision,
            pending: self.pending.len(),
            links: self.links.len(),
            leases: self.leases.clone(),
            ..Journal::default()
        });
    }

    /// Keeps what the journalled job wrote.
    pub fn end_job(&mut self) {
        self.journal = None;
    }

    /// Undoes what the journalled job wrote.
    pub fn undo_job(&mut self) {
        let Some(journal) = self.journal.take() else {
            return;
        };
        for (index, next) in journal.next.into_iter().rev() {
            if let Some(row) = self.pending.get_mut(index) {
                row.next_revision = next;
            }
        }
        for (key, before) in journal.cache.into_iter().rev() {
            match before {
                Some(entry) => {
                    self.cache.insert(key, entry);
                }
                None => {
                    self.cache.remove(&key);
                }
            }
        }
        self.pending.truncate(journal.pending);
        self.links.truncate(journal.links);
        self.leases = journal.leases;
        self.revision = journal.revision;
        self.compact_revision = journal.compact_revision;
    }

    fn set_cache(&mut self, key: Vec<u8>, entry: Option<LatestRow>) {
        let before = self.cache.insert(key.clone(), entry);
        if let Some(journal) = &mut self.journal {
            journal.cache.push((key, before));
        }
    }

    async fn now_ms(&mut self) -> Result<i64> {
        if let Some(now) = self.now_ms {
            return Ok(now);
        }
        let now = database_now_ms(self.tx).await?;
        self.now_ms = Some(now);
        Ok(now)
    }

    /// Everything the batch wrote, as mutations, with the meta row when its counters moved.
    pub fn mutations(&self, meta: Option<(Revision, Revision)>) -> Vec<Mutation> {
        let mut mutations = Vec::with_capacity(self.pending.len() + self.links.len() + 1);
        for row in &self.pending {
            mutations.push(insert(
                "rudder_log",
                &[
                    "key",
                    "revision",
                    "sub",
                    "value",
                    "create_revision",
                    "prev_revision",
                    "version",
                    "lease",
                    "deleted",
                    "next_revision",
                ],
                &[
                    &row.key,
                    &row.revision,
                    &row.sub,
                    &row.value,
                    &row.create_revision,
                    &row.prev_revision,
                    &row.version,
                    &row.lease,
                    &row.deleted,
                    &row.next_revision,
                ],
            ));
        }
        for (key, revision, next) in &self.links {
            mutations.push(update(
                "rudder_log",
                &["key", "revision", "next_revision"],
                &[key, revision, next],
            ));
        }
        for (id, change) in &self.leases {
            mutations.push(match change {
                LeaseChange::Upsert { ttl, expires_at_ms } => insert_or_update(
                    "rudder_lease",
                    &["id", "ttl", "expires_at_ms"],
                    &[id, ttl, expires_at_ms],
                ),
                LeaseChange::Deleted => delete("rudder_lease", Key::new(id)),
            });
        }
        if let Some((revision, compact_revision)) = meta {
            mutations.push(update(
                "rudder_meta",
                &["id", "revision", "compact_revision"],
                &[&1_i64, &revision, &compact_revision],
            ));
        }
        mutations
    }
}

#[async_trait]
impl LogState for SpannerBatch<'_> {
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
        let mut missing: Vec<Vec<u8>> = keys
            .into_iter()
            .filter(|key| !self.cache.contains_key(key))
            .collect();
        missing.sort();
        missing.dedup();
        for chunk in missing.chunks(KEYS_PER_QUERY) {
            let rows = latest_rows(self.tx, chunk).await?;
            for key in chunk {
                self.cache.insert(key.clone(), None);
            }
            for row in rows {
                // One row per key has no successor; keep the newest should there be two.
                let newer = match self.cache.get(&row.kv.key) {
                    Some(Some(cached)) => cached.kv.mod_revision < row.kv.mod_revision,
                    _ => true,
                };
                if newer {
                    self.cache.insert(row.kv.key.clone(), Some(row));
                }
            }
        }
        Ok(())
    }

    async fn latest(&mut self, key: &[u8]) -> Result<Option<LatestRow>> {
        if let Some(cached) = self.cache.get(key) {
            return Ok(cached.clone());
        }
        LogState::prefetch(self, vec![key.to_vec()]).await?;
        Ok(self.cache.get(key).cloned().flatten())
    }

    fn write(&mut self, row: LogRow) {
        if row.prev_revision != 0 {
            let previous = self.pending.iter().rposition(|pending| {
                pending.key == row.key && pending.revision == row.prev_revision
            });
            match previous {
                Some(index) => {
                    let before = self.pending[index].next_revision;
                    self.pending[index].next_revision = row.revision;
                    if let Some(journal) = &mut self.journal {
                        journal.next.push((index, before));
                    }
                }
                None => self
                    .links
                    .push((row.key.clone(), row.prev_revision, row.revision)),
            }
        }
        self.set_cache(row.key.clone(), Some(LatestRow::of(&row)));
        self.pending.push(row);
    }

    async fn range_now(
        &mut self,
        request: &RangeRequest,
        revision: Revision,
    ) -> Result<RangeResponse> {
        // The database as the transaction began, then this batch's rows at or below `revision`.
        let stored = range_rows(self.tx, &request.range, revision, 0, false).await?;
        let mut live: std::collections::BTreeMap<Vec<u8>, KeyValue> =
            stored.into_iter().map(|kv| (kv.key.clone(), kv)).collect();
        let mut newest: HashMap<&[u8], &LogRow> = HashMap::new();
        for row in &self.pending {
            if row.revision <= revision && request.range.contains(&row.key) {
                newest.insert(row.key.as_slice(), row);
            }
        }
        for (key, row) in newest {
            if row.deleted {
                live.remove(key);
            } else {
                live.insert(key.to_vec(), LatestRow::of(row).kv);
            }
        }
        let count = live.len() as i64;
        let mut kvs: Vec<KeyValue> = live.into_values().collect();
        let more = request.limit > 0 && kvs.len() as i64 > request.limit;
        if more {
            kvs.truncate(request.limit as usize);
        }
        if request.keys_only {
            for kv in &mut kvs {
                kv.value.clear();
            }
        }
        if request.count_only {
            kvs.clear();
        }
        Ok(RangeResponse {
            kvs,
            more,
            count,
            revision,
        })
    }

    async fn lease(&mut self, id: LeaseId) -> Result<Option<LeaseRow>> {
        match self.leases.get(&id).copied() {
            Some(LeaseChange::Deleted) => Ok(None),
            Some(LeaseChange::Upsert { ttl, expires_at_ms }) => {
                let now = self.now_ms().await?;
                Ok(Some(LeaseRow {
                    ttl,
                    remaining_ms: expires_at_ms - now,
                }))
            }
            None => read_lease(self.tx, id).await,
        }
    }

    async fn insert_lease(&mut self, id: LeaseId, ttl: i64) -> Result<()> {
        let now = self.now_ms().await?;
        self.leases.insert(
            id,
            LeaseChange::Upsert {
                ttl,
                expires_at_ms: now + ttl * 1000,
            },
        );
        Ok(())
    }

    async fn renew_lease(&mut self, id: LeaseId) -> Result<()> {
        let Some(lease) = LogState::lease(self, id).await? else {
            return Ok(());
        };
        LogState::insert_lease(self, id, lease.ttl).await
    }

    async fn delete_lease(&mut self, id: LeaseId) -> Result<()> {
        self.leases.insert(id, LeaseChange::Deleted);
        Ok(())
    }

    async fn revoke_keys(&mut self, lease: LeaseId) -> Result<()> {
        let mut keys = reader::lease_keys(self.tx, lease).await?;
        keys.extend(
            self.cache
                .iter()
                .filter(|(_, row)| {
                    row.as_ref()
                        .is_some_and(|row| !row.deleted && row.kv.lease == lease)
                })
                .map(|(key, _)| key.clone()),
        );
        keys.sort();
        keys.dedup();
        LogState::prefetch(self, keys.clone()).await?;
        let revision = self.revision + 1;
        let mut sub = 0;
        for key in keys {
            let Some(current) = LogState::live(self, &key).await? else {
                continue;
            };
            if current.lease != lease {
                continue;
            }
            LogState::write(
                self,
                LogRow {
                    revision,
                    sub,
                    key,
                    value: Vec::new(),
                    create_revision: 0,
                    prev_revision: current.mod_revision,
                    version: 0,
                    lease: 0,
                    deleted: true,
                    next_revision: 0,
                },
            );
            sub += 1;
        }
        if sub > 0 {
            self.revision = revision;
        }
        Ok(())
    }
}
