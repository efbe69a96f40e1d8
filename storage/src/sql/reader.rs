//! Reads of the log: ranges at a revision, the event log for watches, leases, metadata. The
//! functions that take a connection serve both the read pool and the writer's transaction.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tracing::Instrument;

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::Row;
use sqlx::{AnyConnection, AnyPool};

use super::breaker::Breaker;
use super::dialect::Dialect;
use super::page_counts::PageCounts;
use super::{lost_connection, translate};
use crate::error::{Error, Result};
use crate::hub::Committed;
use crate::log::{group_by_revision, LatestRow, LeaseRow};
use crate::types::*;
use crate::watcher::History;

/// The store's counters, as in `rudder_meta`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Meta {
    pub revision: Revision,
    pub compact_revision: Revision,
    /// Compaction may have removed rows below this revision (see the writer's purge).
    pub purged_revision: Revision,
}

impl Meta {
    /// Fails with `Compacted` when history at `revision` is gone.
    pub fn ensure_readable(self, revision: Revision) -> Result<()> {
        if revision < self.compact_revision {
            return Err(Error::Compacted {
                requested: revision,
                compacted: self.compact_revision,
            });
        }
        Ok(())
    }
}

/// This process's wall clock (which tests may set ahead to simulate clock skew between servers).
/// Lease expiry never uses it — the database's clock decides — but the lease expirer compares
/// the two and warns when they drift apart, since other time-based behaviour (certificates,
/// tokens) will suffer from the skew.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Clock {
    pub offset_ms: i64,
}

impl Clock {
    /// Milliseconds since the Unix epoch.
    pub fn now_ms(self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
            + self.offset_ms
    }
}

pub(crate) async fn read_meta(conn: &mut AnyConnection, sql: &'static str) -> Result<Meta> {
    let row = sqlx::query(sql)
        .fetch_one(&mut *conn)
        .await
        .map_err(translate)?;
    Ok(Meta {
        revision: row.try_get(0).map_err(translate)?,
        compact_revision: row.try_get(1).map_err(translate)?,
        purged_revision: row.try_get(2).map_err(translate)?,
    })
}

/// A lease's row, on `conn`.
pub(crate) async fn read_lease(
    conn: &mut AnyConnection,
    dialect: &Dialect,
    id: LeaseId,
) -> Result<Option<LeaseRow>> {
    let row = sqlx::query(dialect.read_lease)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(translate)?;
    match row {
        None => Ok(None),
        Some(row) => Ok(Some(LeaseRow {
            ttl: row.try_get(0).map_err(translate)?,
            remaining_ms: row.try_get(1).map_err(translate)?,
        })),
    }
}

/// `(key, value, create_revision, mod_revision, version, lease)` columns 0..6.
fn kv_from_row(row: &AnyRow) -> Result<KeyValue> {
    Ok(KeyValue {
        key: row.try_get(0).map_err(translate)?,
        value: row.try_get(1).map_err(translate)?,
        create_revision: row.try_get(2).map_err(translate)?,
        mod_revision: row.try_get(3).map_err(translate)?,
        version: row.try_get(4).map_err(translate)?,
        lease: row.try_get(5).map_err(translate)?,
    })
}

/// SQL bounds of a key range: `(start, end, bounded)`; a single key is `[key, key\0)`.
fn bounds(range: &KeyRange) -> (Vec<u8>, Vec<u8>, bool) {
    if range.is_single_key() {
        let mut end = range.start.clone();
        end.push(0);
        (range.start.clone(), end, true)
    } else if range.is_unbounded() {
        (range.start.clone(), vec![0], false)
    } else {
        (range.start.clone(), range.end.clone(), true)
    }
}

/// A range read at `revision` on `conn`; the caller has checked the revision and fills the
/// response's header revision.
pub(crate) async fn range_at(
    conn: &mut AnyConnection,
    dialect: &Dialect,
    request: &RangeRequest,
    revision: Revision,
) -> Result<RangeResponse> {
    let (start, end, bounded) = bounds(&request.range);
    let count_sql = if bounded {
        dialect.count_bounded
    } else {
        dialect.count_unbounded
    };
    if request.count_only {
        let count = count_at(conn, count_sql, &start, &end, revision).await?;
        return Ok(RangeResponse {
            count,
            ..RangeResponse::default()
        });
    }
    let fetch = if request.limit > 0 {
        request.limit.saturating_add(1)
    } else {
        i64::MAX
    };
    let rows = sqlx::query(if bounded {
        dialect.range_bounded
    } else {
        dialect.range_unbounded
    })
    .bind(start.clone())
    .bind(end.clone())
    .bind(revision)
    .bind(fetch)
    .fetch_all(&mut *conn)
    .await
    .map_err(translate)?;
    let mut kvs = rows.iter().map(kv_from_row).collect::<Result<Vec<_>>>()?;
    let more = request.limit > 0 && kvs.len() as i64 > request.limit;
    if more {
        kvs.truncate(request.limit as usize);
    }
    if request.keys_only {
        kvs.iter_mut().for_each(|kv| kv.value.clear());
    }
    let count = if more {
        count_at(conn, count_sql, &start, &end, revision).await?
    } else {
        kvs.len() as i64
    };
    Ok(RangeResponse {
        kvs,
        more,
        count,
        revision,
    })
}

async fn count_at(
    conn: &mut AnyConnection,
    sql: &'static str,
    start: &[u8],
    end: &[u8],
    revision: Revision,
) -> Result<i64> {
    let row = sqlx::query(sql)
        .bind(start.to_vec())
        .bind(end.to_vec())
        .bind(revision)
        .fetch_one(&mut *conn)
        .await
        .map_err(translate)?;
    row.try_get::<i64, _>(0).map_err(translate)
}

/// Log rows in `(after, upto]` (optionally within `range`), grouped by revision, with prev_kv.
pub(crate) async fn events_between(
    conn: &mut AnyConnection,
    dialect: &Dialect,
    range: Option<&KeyRange>,
    after: Revision,
    upto: Revision,
) -> Result<Vec<Committed>> {
    let query = match range.map(bounds) {
        None => sqlx::query(dialect.events_all).bind(after).bind(upto),
        Some((start, end, bounded)) => sqlx::query(if bounded {
            dialect.events_bounded
        } else {
            dialect.events_unbounded
        })
        .bind(after)
        .bind(upto)
        .bind(start)
        .bind(end),
    };
    let rows = query.fetch_all(&mut *conn).await.map_err(translate)?;
    let mut events = Vec::with_capacity(rows.len());
    for row in rows {
        let revision: i64 = row.try_get(0).map_err(translate)?;
        let key: Vec<u8> = row.try_get(1).map_err(translate)?;
        let deleted: i64 = row.try_get(6).map_err(translate)?;
        let prev_revision: i64 = row.try_get(7).map_err(translate)?;
        let prev_value: Option<Vec<u8>> = row.try_get(8).map_err(translate)?;
        let prev_deleted: Option<i64> = row.try_get(12).map_err(translate)?;
        let prev_kv = match (prev_value, prev_deleted) {
            (Some(value), Some(0)) => Some(KeyValue {
                key: key.clone(),
                value,
                create_revision: row.try_get(9).map_err(translate)?,
                mod_revision: prev_revision,
                version: row.try_get(10).map_err(translate)?,
                lease: row.try_get(11).map_err(translate)?,
            }),
            _ => None,
        };
        let written = if deleted != 0 {
            LatestRow {
                kv: KeyValue {
                    key,
                    mod_revision: revision,
                    ..KeyValue::default()
                },
                deleted: true,
            }
        } else {
            LatestRow {
                kv: KeyValue {
                    key,
                    value: row.try_get(2).map_err(translate)?,
                    create_revision: row.try_get(3).map_err(translate)?,
                    mod_revision: revision,
                    version: row.try_get(4).map_err(translate)?,
                    lease: row.try_get(5).map_err(translate)?,
                },
                deleted: false,
            }
        };
        events.push(written.into_event(prev_kv));
    }
    Ok(group_by_revision(events))
}

/// Reads through the read pool.
pub(crate) struct Reader {
    pub pool: AnyPool,
    pub dialect: &'static Dialect,
    /// Fails acquires at once while the server is down.
    pub breaker: Arc<Breaker>,
    /// Counts of the rest of paged reads in progress, so later pages need not count again.
    pub page_counts: PageCounts,
}

impl Reader {
    async fn conn(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Any>> {
        self.breaker.acquire(&self.pool).await
    }

    /// Runs a read, and again on another connection while its connection turns out to be
    /// gone (the server restarted since it was last used; every pooled connection may be):
    /// reads can be repeated, and pooled connections are pinged only after a second idle (a
    /// round trip saved on every read).
    async fn retrying<T, F, Fut>(&self, read: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        // A dead connection is dropped when its read fails, so the pool runs out of them.
        let attempts = self.pool.options().get_max_connections() + 1;
        let mut attempt = 1;
        loop {
            match read().await {
                Err(error) if lost_connection(&error) && attempt < attempts => attempt += 1,
                result => return result,
            }
        }
    }

    pub async fn meta(&self) -> Result<Meta> {
        self.retrying(|| async {
            let mut conn = self.conn().await?;
            read_meta(&mut conn, self.dialect.read_meta).await
        })
        .await
    }

    /// Checks a requested revision against the store's counters.
    pub fn check_revision(meta: Meta, requested: Revision) -> Result<Revision> {
        if requested <= 0 {
            return Ok(meta.revision);
        }
        if requested > meta.revision {
            return Err(Error::FutureRevision {
                requested,
                current: meta.revision,
            });
        }
        meta.ensure_readable(requested)?;
        Ok(requested)
    }

    pub async fn range(&self, request: &RangeRequest) -> Result<RangeResponse> {
        self.retrying(|| self.range_once(request)).await
    }

    async fn range_once(&self, request: &RangeRequest) -> Result<RangeResponse> {
        let mut conn = self.conn().await?;
        if request.count_only {
            return self.count(&mut conn, request).await;
        }
        // The counters and the rows in one statement, so one snapshot and one round trip.
        let (start, end, bounded) = bounds(&request.range);
        let sql = if bounded {
            self.dialect.range_snapshot_bounded
        } else {
            self.dialect.range_snapshot_unbounded
        };
        let fetch = if request.limit > 0 {
            request.limit.saturating_add(1)
        } else {
            i64::MAX
        };
        let rows = sqlx::query(sql)
            .bind(start.clone())
            .bind(end.clone())
            .bind(request.revision.max(0))
            .bind(fetch)
            .fetch_all(&mut *conn)
            .instrument(tracing::debug_span!(
                "sql.range",
                driver = self.dialect.name
            ))
            .await
            .map_err(translate)?;
        // The counters come in a row of their own (a union) or on every row of the page (a
        // join, MySQL's): a row may bring the counters, a kv, or both.
        let mut meta = None;
        let mut kvs = Vec::with_capacity(rows.len());
        for row in &rows {
            let current: Option<i64> = row.try_get(0).map_err(translate)?;
            if let Some(revision) = current {
                meta = Some(Meta {
                    revision,
                    compact_revision: row.try_get(1).map_err(translate)?,
                    purged_revision: 0,
                });
            }
            let key: Option<Vec<u8>> = row.try_get(2).map_err(translate)?;
            let Some(key) = key else {
                continue;
            };
            let value: Option<Vec<u8>> = if request.keys_only {
                Some(Vec::new())
            } else {
                row.try_get(3).map_err(translate)?
            };
            kvs.push(KeyValue {
                key,
                value: value.unwrap_or_default(),
                create_revision: row.try_get(4).map_err(translate)?,
                mod_revision: row.try_get(5).map_err(translate)?,
                version: row.try_get(6).map_err(translate)?,
                lease: row.try_get(7).map_err(translate)?,
            });
        }
        let Some(meta) = meta else {
            // An empty page from a join brings no counters.
            return self.empty_page(conn, request).await;
        };
        let revision = Self::check_revision(meta, request.revision)?;
        // A union's rows come in no promised order: put the page in key order.
        kvs.sort_by(|a, b| a.key.cmp(&b.key));
        let more = request.limit > 0 && kvs.len() as i64 > request.limit;
        let count = if more {
            kvs.truncate(request.limit as usize);
            let count = match self.page_counts.take(&start, &end, revision) {
                Some(count) => count,
                None => {
                    let count_sql = if bounded {
                        self.dialect.count_bounded
                    } else {
                        self.dialect.count_unbounded
                    };
                    let count = count_at(&mut conn, count_sql, &start, &end, revision)
                        .instrument(tracing::debug_span!(
                            "sql.count",
                            driver = self.dialect.name
                        ))
                        .await?;
                    // Compaction may have run between the two statements.
                    read_meta(&mut conn, self.dialect.read_meta)
                        .await?
                        .ensure_readable(revision)?;
                    count
                }
            };
            if let Some(last) = kvs.last() {
                let remaining = count - kvs.len() as i64;
                self.page_counts
                    .remember(&last.key, &end, revision, remaining);
            }
            count
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

    /// The answer to a read whose page came back empty and without the counters (MySQL's join):
    /// the range's count and the counters from one snapshot. A count of 0 is the empty answer
    /// at that revision; keys written since the page was read are read at the revision
    /// counted, once more.
    async fn empty_page(
        &self,
        mut conn: sqlx::pool::PoolConnection<sqlx::Any>,
        request: &RangeRequest,
    ) -> Result<RangeResponse> {
        let counted = self.count(&mut conn, request).await?;
        // Not held while the page is read again on another.
        drop(conn);
        if counted.count == 0 {
            return Ok(RangeResponse {
                revision: counted.revision,
                ..RangeResponse::default()
            });
        }
        if request.revision > 0 {
            // The page was read at this revision, and the count (at the same revision) found
            // keys: only a row removed in between can do that.
            return Err(Error::Backend {
                message: "a page and its count at one revision disagree".into(),
                source: None,
            });
        }
        let at = RangeRequest {
            revision: counted.revision,
            ..request.clone()
        };
        let mut response = Box::pin(self.range_once(&at)).await?;
        response.revision = counted.revision;
        Ok(response)
    }

    /// A count-only read: the count and the counters it is checked against from one snapshot.
    async fn count(
        &self,
        conn: &mut AnyConnection,
        request: &RangeRequest,
    ) -> Result<RangeResponse> {
        let (start, end, bounded) = bounds(&request.range);
        let sql = if bounded {
            self.dialect.count_snapshot_bounded
        } else {
            self.dialect.count_snapshot_unbounded
        };
        let row = sqlx::query(sql)
            .bind(start)
            .bind(end)
            .bind(request.revision.max(0))
            .fetch_one(&mut *conn)
            .instrument(tracing::debug_span!(
                "sql.count",
                driver = self.dialect.name
            ))
            .await
            .map_err(translate)?;
        let meta = Meta {
            revision: row.try_get(0).map_err(translate)?,
            compact_revision: row.try_get(1).map_err(translate)?,
            purged_revision: 0,
        };
        Self::check_revision(meta, request.revision)?;
        Ok(RangeResponse {
            count: row.try_get(2).map_err(translate)?,
            revision: meta.revision,
            ..RangeResponse::default()
        })
    }

    pub async fn events(
        &self,
        range: Option<&KeyRange>,
        after: Revision,
        upto: Revision,
    ) -> Result<Vec<Committed>> {
        self.retrying(|| async {
            let mut conn = self.conn().await?;
            events_between(&mut conn, self.dialect, range, after, upto).await
        })
        .await
    }

    /// The one value a one-row, one-column statement returns.
    async fn scalar<T>(&self, sql: &'static str) -> Result<T>
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any> + Send + Unpin,
    {
        self.retrying(|| async {
            let row = sqlx::query(sql)
                .fetch_one(&mut *self.conn().await?)
                .await
                .map_err(translate)?;
            row.try_get(0).map_err(translate)
        })
        .await
    }

    pub async fn db_size(&self) -> Result<i64> {
        self.scalar(self.dialect.db_size).await
    }

    /// The database's clock, in milliseconds since the Unix epoch.
    pub async fn database_now_ms(&self) -> Result<i64> {
        self.scalar(self.dialect.database_now_ms).await
    }

    pub async fn server_version(&self) -> Result<String> {
        self.scalar(self.dialect.server_version).await
    }

    /// A lease's row, by the database's clock.
    pub async fn lease(&self, id: LeaseId) -> Result<Option<LeaseRow>> {
        self.retrying(|| async {
            let mut conn = self.conn().await?;
            read_lease(&mut conn, self.dialect, id).await
        })
        .await
    }

    pub async fn lease_keys(&self, id: LeaseId) -> Result<Vec<Vec<u8>>> {
        self.column(|| sqlx::query(self.dialect.lease_keys).bind(id))
            .await
    }

    pub async fn ids(&self, sql: &'static str) -> Result<Vec<LeaseId>> {
        self.column(|| sqlx::query(sql)).await
    }

    /// The first column of every row the query `make` builds returns.
    async fn column<'q, T>(
        &self,
        make: impl Fn() -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    ) -> Result<Vec<T>>
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any> + Send + Unpin,
    {
        self.retrying(|| async {
            let rows = make()
                .fetch_all(&mut *self.conn().await?)
                .await
                .map_err(translate)?;
            rows.iter()
                .map(|row| row.try_get(0).map_err(translate))
                .collect()
        })
        .await
    }
}

/// The log as watch history: checks compaction, then reads the window.
pub(crate) struct LogHistory(pub std::sync::Arc<Reader>);

#[async_trait]
impl History for LogHistory {
    async fn events(
        &self,
        range: &KeyRange,
        after: Revision,
        upto: Revision,
    ) -> Result<Vec<Committed>> {
        self.0.meta().await?.ensure_readable(after + 1)?;
        let events = self.0.events(Some(range), after, upto).await?;
        // Compaction may have run while we read: those rows are not trustworthy then.
        self.0.meta().await?.ensure_readable(after + 1)?;
        Ok(events)
    }
}
