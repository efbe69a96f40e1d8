//! What the log-structured drivers (the SQL engine and Cloud Spanner) share: the row types of
//! a log with one row per key per revision, and how an etcd transaction or a restore step is
//! applied to such a log's state inside one database transaction ([`LogState`]).
//!
//! A driver implements [`LogState`] over its own transaction — how it reads the latest rows,
//! buffers new ones and answers range reads that must see the batch's own writes — and gets
//! etcd's transaction semantics ([`txn::run`]) and restores ([`restore::apply`]) from here, so
//! the two engines cannot drift apart on them.

use async_trait::async_trait;

use crate::error::Result;
use crate::hub::Committed;
use crate::types::*;

pub(crate) mod front;
pub(crate) mod jobs;
pub(crate) mod poller;
pub(crate) mod restore;
pub(crate) mod txn;

/// A log row to write.
#[derive(Clone, Debug)]
pub(crate) struct LogRow {
    pub revision: Revision,
    /// Numbers the rows one transaction wrote at one revision.
    pub sub: i64,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub create_revision: Revision,
    pub prev_revision: Revision,
    pub version: i64,
    pub lease: LeaseId,
    pub deleted: bool,
    /// The revision of the key's next row, when that row is in the same batch.
    pub next_revision: Revision,
}

/// The latest row of a key, tombstone or not.
#[derive(Clone, Debug)]
pub(crate) struct LatestRow {
    pub kv: KeyValue,
    pub deleted: bool,
}

impl LatestRow {
    /// The row `row` makes its key's latest.
    pub fn of(row: &LogRow) -> Self {
        Self {
            kv: KeyValue {
                key: row.key.clone(),
                value: row.value.clone(),
                create_revision: row.create_revision,
                mod_revision: row.revision,
                version: row.version,
                lease: row.lease,
            },
            deleted: row.deleted,
        }
    }
}

impl LatestRow {
    /// The watch event of this row with `prev_kv`: a tombstone is a delete whose kv holds only
    /// the key and the revision.
    pub fn into_event(self, prev_kv: Option<KeyValue>) -> Event {
        if self.deleted {
            Event {
                kind: EventKind::Delete,
                kv: KeyValue {
                    key: self.kv.key,
                    mod_revision: self.kv.mod_revision,
                    ..KeyValue::default()
                },
                prev_kv,
            }
        } else {
            Event {
                kind: EventKind::Put,
                kv: self.kv,
                prev_kv,
            }
        }
    }
}

/// Events in revision order, grouped into one [`Committed`] per revision.
pub(crate) fn group_by_revision(events: Vec<Event>) -> Vec<Committed> {
    let mut grouped: Vec<(Revision, Vec<Event>)> = Vec::new();
    for event in events {
        let revision = event.kv.mod_revision;
        match grouped.last_mut() {
            Some((last, events)) if *last == revision => events.push(event),
            _ => grouped.push((revision, vec![event])),
        }
    }
    grouped
        .into_iter()
        .map(|(revision, events)| Committed::new(revision, events))
        .collect()
}

/// A lease as its row says, timed by the database's clock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeaseRow {
    /// The TTL granted, in seconds.
    pub ttl: i64,
    /// Milliseconds until it expires (zero or less: expired).
    pub remaining_ms: i64,
}

/// One database transaction's view of the log while a batch of jobs is applied to it.
#[async_trait]
pub(crate) trait LogState: Send {
    /// The store's revision after the jobs applied so far.
    fn revision(&self) -> Revision;
    fn set_revision(&mut self, revision: Revision);
    fn compact_revision(&self) -> Revision;
    fn set_compact_revision(&mut self, revision: Revision);

    /// Loads the latest rows of `keys`, so that later lookups need no round trip.
    async fn prefetch(&mut self, keys: Vec<Vec<u8>>) -> Result<()>;

    /// The latest row of `key` (tombstone or not), including this batch's writes.
    async fn latest(&mut self, key: &[u8]) -> Result<Option<LatestRow>>;

    /// Adds a row to the batch (the key's previous row stops being its latest).
    fn write(&mut self, row: LogRow);

    /// A range read at `revision` that sees this batch's writes.
    async fn range_now(
        &mut self,
        request: &RangeRequest,
        revision: Revision,
    ) -> Result<RangeResponse>;

    /// A lease's row, by the database's clock.
    async fn lease(&mut self, id: LeaseId) -> Result<Option<LeaseRow>>;

    /// Stores a new lease of `ttl` seconds, expiring `ttl` seconds from now.
    async fn insert_lease(&mut self, id: LeaseId, ttl: i64) -> Result<()>;

    /// Renews a lease for its full TTL, from the database's now.
    async fn renew_lease(&mut self, id: LeaseId) -> Result<()>;

    /// Removes a lease's row (its keys are revoked first, with [`LogState::revoke_keys`]).
    async fn delete_lease(&mut self, id: LeaseId) -> Result<()>;

    /// Deletes every live key attached to `lease`, at the next revision if there are any.
    async fn revoke_keys(&mut self, lease: LeaseId) -> Result<()>;

    /// The live row of `key`, if any.
    async fn live(&mut self, key: &[u8]) -> Result<Option<KeyValue>> {
        Ok(self
            .latest(key)
            .await?
            .filter(|row| !row.deleted)
            .map(|row| row.kv))
    }

    /// Whether `lease` exists and has not expired.
    async fn lease_exists(&mut self, lease: LeaseId) -> Result<bool> {
        Ok(self
            .lease(lease)
            .await?
            .is_some_and(|lease| lease.remaining_ms > 0))
    }
}
