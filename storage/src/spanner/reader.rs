//! Reads of the log: the queries serve both read-only snapshots (ranges, watches' history,
//! leases) and the writer's read-write transaction, since both are a Spanner `Transaction`.
//!
//! A range at revision R is the SQL engine's: rows written at or before R and not superseded by
//! then (`next_revision = 0 OR next_revision > R`), not tombstones. Every multi-query read runs
//! in one read-only transaction, so the counters and the rows come from one snapshot.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use gcloud_spanner::client::Client;
use gcloud_spanner::key::{Key, KeyRange as SpannerKeyRange, KeySet, RangeKind};
use gcloud_spanner::row::Row;
use gcloud_spanner::statement::Statement;
use gcloud_spanner::transaction::Transaction;

use super::{row_error, status_error};
use crate::error::{Error, Result};
use crate::hub::Committed;
use crate::log::{group_by_revision, LatestRow, LeaseRow};
use crate::types::*;
use crate::watcher::History;

/// The store's counters, as in `rudder_meta`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Meta {
    pub revision: Revision,
    pub compact_revision: Revision,
    /// Compaction may have removed rows below this revision.
    pub purged_revision: Revision,
}

impl Meta {
    /// The revision a read at `requested` (0: latest) reads, or why it cannot.
    pub fn check(self, requested: Revision) -> Result<Revision> {
        if requested <= 0 {
            return Ok(self.revision);
        }
        if requested > self.revision {
            return Err(Error::FutureRevision {
                requested,
                current: self.revision,
            });
        }
        if requested < self.compact_revision {
            return Err(Error::Compacted {
                requested,
                compacted: self.compact_revision,
            });
        }
        Ok(requested)
    }
}

/// Runs a query and collects its rows.
pub(super) async fn query(tx: &mut Transaction, statement: Statement) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut iter = tx
        .query(statement)
        .await
        .map_err(|status| status_error("a Spanner query failed", status))?;
    while let Some(row) = iter
        .next()
        .await
        .map_err(|status| status_error("reading a Spanner result failed", status))?
    {
        rows.push(row);
    }
    Ok(rows)
}

pub(super) fn column<T: gcloud_spanner::row::TryFromValue>(row: &Row, index: usize) -> Result<T> {
    row.column(index).map_err(row_error)
}

/// The meta row, by a point read of its key (not SQL: the emulator analyses every statement,
/// which costs it milliseconds, and this read runs in every transaction and poll).
pub(super) async fn read_meta(tx: &mut Transaction) -> Result<Meta> {
    let row = tx
        .read_row(
            "rudder_meta",
            &["revision", "compact_revision", "purged_revision"],
            Key::new(&1_i64),
        )
        .await
        .map_err(|status| status_error("reading Spanner's meta row failed", status))?;
    let row = row.ok_or_else(|| Error::Backend {
        message: "rudder_meta has no row: the database was not set up".into(),
        source: None,
    })?;
    let row = &row;
    Ok(Meta {
        revision: column(row, 0)?,
        compact_revision: column(row, 1)?,
        purged_revision: column(row, 2)?,
    })
}

/// The key condition of a range, with its parameters added to `statement`'s text and params.
fn key_condition(range: &KeyRange, column: &str) -> (String, Vec<(&'static str, Vec<u8>)>) {
    if range.is_single_key() {
        (format!("{column} = @lo"), vec![("lo", range.start.clone())])
    } else if range.is_unbounded() {
        (
            format!("{column} >= @lo"),
            vec![("lo", range.start.clone())],
        )
    } else {
        (
            format!("{column} >= @lo AND {column} < @hi"),
            vec![("lo", range.start.clone()), ("hi", range.end.clone())],
        )
    }
}

/// `rows` live at `@rev`, within `range`.
fn live_at(range: &KeyRange, select: &str, tail: &str) -> Statement {
    let (keys, params) = key_condition(range, "key");
    let mut statement = Statement::new(format!(
        "SELECT {select} FROM rudder_log WHERE {keys} AND revision <= @rev \
         AND (next_revision = 0 OR next_revision > @rev) AND deleted = false{tail}"
    ));
    for (name, value) in params {
        statement.add_param(name, &value);
    }
    statement
}

/// The live keys of `range` at `revision`, in key order, at most `limit` (0: all).
pub(super) async fn range_rows(
    tx: &mut Transaction,
    range: &KeyRange,
    revision: Revision,
    limit: i64,
    keys_only: bool,
) -> Result<Vec<KeyValue>> {
    let value = if keys_only { "b''" } else { "value" };
    let select = format!("key, {value}, create_revision, revision, version, lease");
    let tail = if limit > 0 {
        " ORDER BY key LIMIT @limit"
    } else {
        " ORDER BY key"
    };
    let mut statement = live_at(range, &select, tail);
    statement.add_param("rev", &revision);
    if limit > 0 {
        statement.add_param("limit", &limit);
    }
    query(tx, statement)
        .await?
        .iter()
        .map(|row| {
            Ok(KeyValue {
                key: column(row, 0)?,
                value: column(row, 1)?,
                create_revision: column(row, 2)?,
                mod_revision: column(row, 3)?,
                version: column(row, 4)?,
                lease: column(row, 5)?,
            })
        })
        .collect()
}

/// How many keys of `range` are live at `revision`.
pub(super) async fn count_rows(
    tx: &mut Transaction,
    range: &KeyRange,
    revision: Revision,
) -> Result<i64> {
    let mut statement = live_at(range, "COUNT(*)", "");
    statement.add_param("rev", &revision);
    let rows = query(tx, statement).await?;
    match rows.first() {
        Some(row) => column(row, 0),
        None => Ok(0),
    }
}

/// `key` as it was at `revision`, if it existed then: a read of the key's rows by primary key
/// prefix (its revisions that compaction left), not SQL — one key is the common get, and the
/// emulator answers SQL by scanning the whole log.
async fn key_at(
    tx: &mut Transaction,
    key: &[u8],
    revision: Revision,
    keys_only: bool,
) -> Result<Option<KeyValue>> {
    let key = key.to_vec();
    let prefix = SpannerKeyRange::new(Key::new(&key), Key::new(&key), RangeKind::ClosedClosed);
    for row in read_log_rows(tx, prefix).await? {
        let (mut found, next) = log_row(&row)?;
        let written = found.kv.mod_revision;
        if written <= revision && (next == 0 || next > revision) {
            if found.deleted {
                return Ok(None);
            }
            if keys_only {
                found.kv.value = Vec::new();
            }
            return Ok(Some(found.kv));
        }
    }
    Ok(None)
}

/// What [`read_log_rows`] reads of each log row, in the order [`log_row`] decodes.
const LOG_ROW_COLUMNS: [&str; 8] = [
    "key",
    "revision",
    "value",
    "create_revision",
    "version",
    "lease",
    "deleted",
    "next_revision",
];

/// The log rows in `keys`, read by primary key (not SQL), with [`LOG_ROW_COLUMNS`].
async fn read_log_rows(tx: &mut Transaction, keys: impl Into<KeySet>) -> Result<Vec<Row>> {
    let mut iter = tx
        .read("rudder_log", &LOG_ROW_COLUMNS, keys)
        .await
        .map_err(|status| status_error("reading Spanner log rows failed", status))?;
    let mut rows = Vec::new();
    while let Some(row) = iter
        .next()
        .await
        .map_err(|status| status_error("reading a Spanner result failed", status))?
    {
        rows.push(row);
    }
    Ok(rows)
}

/// A row read with [`LOG_ROW_COLUMNS`], and the revision that superseded it (0: none).
fn log_row(row: &Row) -> Result<(LatestRow, Revision)> {
    let found = LatestRow {
        kv: KeyValue {
            key: column(row, 0)?,
            mod_revision: column(row, 1)?,
            value: column(row, 2)?,
            create_revision: column(row, 3)?,
            version: column(row, 4)?,
            lease: column(row, 5)?,
        },
        deleted: column(row, 6)?,
    };
    Ok((found, column(row, 7)?))
}

/// The latest rows (tombstones too) of `keys`.
pub(super) async fn latest_rows(tx: &mut Transaction, keys: &[Vec<u8>]) -> Result<Vec<LatestRow>> {
    let mut statement = Statement::new(
        "SELECT key, value, create_revision, revision, version, lease, deleted FROM rudder_log \
         WHERE key IN UNNEST(@keys) AND next_revision = 0",
    );
    statement.add_param("keys", &keys.to_vec());
    let mut latest: Vec<LatestRow> = Vec::new();
    for row in query(tx, statement).await? {
        let found = LatestRow {
            kv: KeyValue {
                key: column(&row, 0)?,
                value: column(&row, 1)?,
                create_revision: column(&row, 2)?,
                mod_revision: column(&row, 3)?,
                version: column(&row, 4)?,
                lease: column(&row, 5)?,
            },
            deleted: column(&row, 6)?,
        };
        latest.push(found);
    }
    Ok(latest)
}

/// A lease's row, by the database's clock.
pub(super) async fn read_lease(tx: &mut Transaction, id: LeaseId) -> Result<Option<LeaseRow>> {
    let mut statement = Statement::new(
        "SELECT ttl, expires_at_ms - UNIX_MILLIS(CURRENT_TIMESTAMP()) FROM rudder_lease WHERE id = @id",
    );
    statement.add_param("id", &id);
    let rows = query(tx, statement).await?;
    match rows.first() {
        None => Ok(None),
        Some(row) => Ok(Some(LeaseRow {
            ttl: column(row, 0)?,
            remaining_ms: column(row, 1)?,
        })),
    }
}

/// The database's clock, in milliseconds since the epoch.
pub(super) async fn database_now_ms(tx: &mut Transaction) -> Result<i64> {
    let rows = query(
        tx,
        Statement::new("SELECT UNIX_MILLIS(CURRENT_TIMESTAMP())"),
    )
    .await?;
    match rows.first() {
        Some(row) => column(row, 0),
        None => Err(Error::Backend {
            message: "Spanner returned no time".into(),
            source: None,
        }),
    }
}

/// The live keys attached to `lease`.
pub(super) async fn lease_keys(tx: &mut Transaction, lease: LeaseId) -> Result<Vec<Vec<u8>>> {
    let mut statement = Statement::new(
        "SELECT key FROM rudder_log WHERE lease = @lease AND next_revision = 0 AND deleted = false \
         ORDER BY key",
    );
    statement.add_param("lease", &lease);
    query(tx, statement)
        .await?
        .iter()
        .map(|row| column(row, 0))
        .collect()
}

/// Log rows in `(after, upto]` (optionally within `range`), grouped by revision, with prev_kv.
///
/// The rows come through the revision index and the rows they supersede by a point read of
/// their primary keys, not a self-join: the emulator runs a join as nested scans of the log,
/// which made a poll cost more the longer the log grew.
pub(super) async fn events_between(
    tx: &mut Transaction,
    range: Option<&KeyRange>,
    after: Revision,
    upto: Revision,
) -> Result<Vec<Committed>> {
    let (keys, params) = match range {
        Some(range) => {
            let (condition, params) = key_condition(range, "key");
            (format!(" AND {condition}"), params)
        }
        None => (String::new(), Vec::new()),
    };
    let mut statement = Statement::new(format!(
        "SELECT revision, key, value, create_revision, version, lease, deleted, prev_revision \
         FROM rudder_log@{{FORCE_INDEX=rudder_log_by_revision}} \
         WHERE revision > @after AND revision <= @upto{keys} ORDER BY revision, sub"
    ));
    statement.add_param("after", &after);
    statement.add_param("upto", &upto);
    for (name, value) in params {
        statement.add_param(name, &value);
    }
    let rows = query(tx, statement).await?;
    let mut superseded = Vec::new();
    for row in &rows {
        let prev_revision: i64 = column(row, 7)?;
        if prev_revision != 0 {
            let key: Vec<u8> = column(row, 1)?;
            superseded.push(Key::composite(&[&key, &prev_revision]));
        }
    }
    let previous = previous_rows(tx, superseded).await?;
    let mut events = Vec::with_capacity(rows.len());
    for row in rows {
        let revision: i64 = column(&row, 0)?;
        let key: Vec<u8> = column(&row, 1)?;
        let prev_revision: i64 = column(&row, 7)?;
        let prev_kv = previous
            .get(&(key.clone(), prev_revision))
            .filter(|previous| !previous.deleted)
            .map(|previous| previous.kv.clone());
        let written = LatestRow {
            kv: KeyValue {
                key,
                value: column(&row, 2)?,
                create_revision: column(&row, 3)?,
                mod_revision: revision,
                version: column(&row, 4)?,
                lease: column(&row, 5)?,
            },
            deleted: column(&row, 6)?,
        };
        events.push(written.into_event(prev_kv));
    }
    Ok(group_by_revision(events))
}

/// The log rows at `keys` (`(key, revision)` primary keys) that still exist, by key and
/// revision.
async fn previous_rows(
    tx: &mut Transaction,
    keys: Vec<Key>,
) -> Result<HashMap<(Vec<u8>, Revision), LatestRow>> {
    let mut found = HashMap::new();
    if keys.is_empty() {
        return Ok(found);
    }
    for row in read_log_rows(tx, keys).await? {
        let (previous, _) = log_row(&row)?;
        found.insert(
            (previous.kv.key.clone(), previous.kv.mod_revision),
            previous,
        );
    }
    Ok(found)
}

/// Reads outside the writer, each in a read-only snapshot.
pub(super) struct Reader {
    pub client: Client,
}

impl Reader {
    async fn snapshot(&self) -> Result<gcloud_spanner::transaction_ro::ReadOnlyTransaction> {
        self.client
            .read_only_transaction()
            .await
            .map_err(|error| super::client_error("starting a Spanner read failed", error))
    }

    pub async fn meta(&self) -> Result<Meta> {
        let mut tx = self.snapshot().await?;
        read_meta(&mut tx).await
    }

    pub async fn range(&self, request: &RangeRequest) -> Result<RangeResponse> {
        let mut tx = self.snapshot().await?;
        let meta = read_meta(&mut tx).await?;
        let revision = meta.check(request.revision)?;
        if request.range.is_single_key() {
            let kvs: Vec<KeyValue> =
                key_at(&mut tx, &request.range.start, revision, request.keys_only)
                    .await?
                    .into_iter()
                    .collect();
            let count = kvs.len() as i64;
            return Ok(RangeResponse {
                kvs: if request.count_only { Vec::new() } else { kvs },
                more: false,
                count,
                revision: meta.revision,
            });
        }
        if request.count_only {
            return Ok(RangeResponse {
                count: count_rows(&mut tx, &request.range, revision).await?,
                revision: meta.revision,
                ..RangeResponse::default()
            });
        }
        let fetch = if request.limit > 0 {
            request.limit.saturating_add(1)
        } else {
            0
        };
        let mut kvs =
            range_rows(&mut tx, &request.range, revision, fetch, request.keys_only).await?;
        let more = request.limit > 0 && kvs.len() as i64 > request.limit;
        let count = if more {
            kvs.truncate(request.limit as usize);
            count_rows(&mut tx, &request.range, revision).await?
        } else {
            kvs.len() as i64
        };
        Ok(RangeResponse {
            kvs,
            more,
            count,
            revision: meta.revision,
        })
    }

    /// Events in `(after, upto]` and the counters, from one snapshot.
    pub async fn events(
        &self,
        range: Option<&KeyRange>,
        after: Revision,
        upto: Revision,
    ) -> Result<(Meta, Vec<Committed>)> {
        let mut tx = self.snapshot().await?;
        let meta = read_meta(&mut tx).await?;
        let upto = upto.min(meta.revision);
        // An idle poller asks every interval; nothing new is one point read, not a scan.
        if upto <= after {
            return Ok((meta, Vec::new()));
        }
        let committed = events_between(&mut tx, range, after, upto).await?;
        Ok((meta, committed))
    }

    pub async fn lease(&self, id: LeaseId) -> Result<Option<LeaseRow>> {
        let mut tx = self.snapshot().await?;
        read_lease(&mut tx, id).await
    }

    pub async fn lease_keys(&self, id: LeaseId) -> Result<Vec<Vec<u8>>> {
        let mut tx = self.snapshot().await?;
        lease_keys(&mut tx, id).await
    }

    pub async fn lease_ids(&self, expired_only: bool) -> Result<Vec<LeaseId>> {
        let mut tx = self.snapshot().await?;
        let sql = if expired_only {
            "SELECT id FROM rudder_lease WHERE expires_at_ms <= UNIX_MILLIS(CURRENT_TIMESTAMP()) ORDER BY id"
        } else {
            "SELECT id FROM rudder_lease WHERE expires_at_ms > UNIX_MILLIS(CURRENT_TIMESTAMP()) ORDER BY id"
        };
        query(&mut tx, Statement::new(sql))
            .await?
            .iter()
            .map(|row| column(row, 0))
            .collect()
    }

    /// The bytes of keys and values in the log (Spanner reports no file size).
    pub async fn db_size(&self) -> Result<i64> {
        let mut tx = self.snapshot().await?;
        let rows = query(
            &mut tx,
            Statement::new(
                "SELECT COALESCE(SUM(BYTE_LENGTH(key) + BYTE_LENGTH(value) + 64), 0) FROM rudder_log",
            ),
        )
        .await?;
        match rows.first() {
            Some(row) => column(row, 0),
            None => Ok(0),
        }
    }
}

/// The log read back for watches that start in the past.
pub(super) struct LogHistory(pub Arc<Reader>);

#[async_trait]
impl History for LogHistory {
    async fn events(
        &self,
        range: &KeyRange,
        after: Revision,
        upto: Revision,
    ) -> Result<Vec<Committed>> {
        let (meta, committed) = self.0.events(Some(range), after, upto).await?;
        // From one snapshot: the rows are whole if the counters say the history is there.
        let first = after + 1;
        if first < meta.compact_revision {
            return Err(Error::Compacted {
                requested: first,
                compacted: meta.compact_revision,
            });
        }
        Ok(committed)
    }
}
