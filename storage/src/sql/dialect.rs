//! The SQL text of each database. The engine is the same for all of them: a dialect differs only
//! in its statements (placeholders, locking, notification) and in how its errors are translated.
//!
//! Every statement is a `&'static str`, so nothing user-supplied is ever spliced into SQL.

use crate::types::Revision;

/// One database's statements.
pub(crate) struct Dialect {
    pub name: &'static str,
    /// Opens a write transaction that excludes other writers and reads
    /// `(revision, compact_revision)`, in one round trip (several statements: simple protocol).
    pub begin_and_lock: &'static str,
    /// `(revision, compact_revision)`.
    pub read_meta: &'static str,
    /// Latest row of key `?1`: `(key, value, create_revision, revision, version, lease, deleted)`.
    pub latest_row: &'static str,
    /// Live kvs in `[?1, ?2)` at revision `?3`, at most `?4`:
    /// `(key, value, create_revision, revision, version, lease)`.
    pub range_bounded: &'static str,
    /// As `range_bounded` for keys `>= ?1`, with `?3`/`?4` kept in place (`?2` unused).
    pub range_unbounded: &'static str,
    /// One round trip for a read, from one snapshot: a row with the counters
    /// `(revision, compact_revision, NULL…)`, then the live kvs in `[?1, ?2)` at revision `?3`
    /// (0: the current one), at most `?4`, as `(NULL, NULL, key, value, create_revision,
    /// mod_revision, version, lease)`. (A union rather than a join, so the page is an ordered
    /// index scan that stops at the limit.)
    pub range_snapshot_bounded: &'static str,
    /// As `range_snapshot_bounded` for keys `>= ?1` (`?2` unused).
    pub range_snapshot_unbounded: &'static str,
    /// Count of live kvs in `[?1, ?2)` at revision `?3`.
    pub count_bounded: &'static str,
    /// Count of live kvs `>= ?1` at revision `?3` (`?2` unused).
    pub count_unbounded: &'static str,
    /// Log rows with revision in `(?1, ?2]`, with the previous row's fields.
    pub events_all: &'static str,
    /// As `events_all`, limited to keys in `[?3, ?4)`.
    pub events_bounded: &'static str,
    /// As `events_all`, limited to keys `>= ?3` (`?4` unused).
    pub events_unbounded: &'static str,
    /// Deletes rows in revision window `[?2, ?3)` no longer needed at compact revision `?1`.
    pub compact_window: &'static str,
    /// Size of the database in bytes.
    pub db_size: &'static str,
    /// Server version string.
    pub server_version: &'static str,
    /// Grants lease `?1` with TTL `?2` expiring at `?3` (unix ms).
    pub insert_lease: &'static str,
    /// `(ttl, expires_at_ms)` of lease `?1`.
    pub read_lease: &'static str,
    /// Moves lease `?1`'s expiry to `?2`.
    pub renew_lease: &'static str,
    pub delete_lease: &'static str,
    /// Ids of leases expired at `?1`.
    pub expired_leases: &'static str,
    pub list_leases: &'static str,
    /// Keys currently attached to lease `?1`.
    pub lease_keys: &'static str,
    /// The `n`th (1-based) bind placeholder, for statements built with a variable number of
    /// rows or keys (placeholders only: never data).
    pub placeholder: fn(usize) -> String,
}

pub(crate) const SQLITE: Dialect = Dialect {
    name: "sqlite",
    begin_and_lock: "BEGIN IMMEDIATE; SELECT revision, compact_revision FROM rudder_meta WHERE id = 1",
    read_meta: "SELECT revision, compact_revision FROM rudder_meta WHERE id = 1",
    latest_row: "SELECT key, value, create_revision, revision, version, lease, deleted \
        FROM rudder_log WHERE key = ?1 ORDER BY revision DESC LIMIT 1",
    range_bounded: "SELECT l.key, l.value, l.create_revision, l.revision, l.version, l.lease \
        FROM rudder_log l WHERE l.key >= ?1 AND l.key < ?2 AND l.revision <= ?3 AND l.deleted = 0 \
        AND (l.next_revision = 0 OR l.next_revision > ?3) \
        ORDER BY l.key LIMIT ?4",
    range_unbounded: "SELECT l.key, l.value, l.create_revision, l.revision, l.version, l.lease \
        FROM rudder_log l WHERE l.key >= ?1 AND ?2 IS NOT NULL AND l.revision <= ?3 AND l.deleted = 0 \
        AND (l.next_revision = 0 OR l.next_revision > ?3) \
        ORDER BY l.key LIMIT ?4",
    range_snapshot_bounded: "WITH m AS (SELECT revision, compact_revision, \
        CASE WHEN ?3 > 0 THEN ?3 ELSE revision END AS at FROM rudder_meta WHERE id = 1) \
        SELECT revision, compact_revision, NULL, NULL, NULL, NULL, NULL, NULL FROM m \
        UNION ALL SELECT * FROM (\
        SELECT NULL, NULL, l.key, l.value, l.create_revision, l.revision, l.version, l.lease \
        FROM rudder_log l WHERE l.key >= ?1 AND l.key < ?2 AND l.revision <= (SELECT at FROM m) \
        AND l.deleted = 0 AND (l.next_revision = 0 OR l.next_revision > (SELECT at FROM m)) \
        ORDER BY l.key LIMIT ?4) AS page",
    range_snapshot_unbounded: "WITH m AS (SELECT revision, compact_revision, \
        CASE WHEN ?3 > 0 THEN ?3 ELSE revision END AS at FROM rudder_meta WHERE id = 1) \
        SELECT revision, compact_revision, NULL, NULL, NULL, NULL, NULL, NULL FROM m \
        UNION ALL SELECT * FROM (\
        SELECT NULL, NULL, l.key, l.value, l.create_revision, l.revision, l.version, l.lease \
        FROM rudder_log l WHERE l.key >= ?1 AND ?2 IS NOT NULL AND l.revision <= (SELECT at FROM m) \
        AND l.deleted = 0 AND (l.next_revision = 0 OR l.next_revision > (SELECT at FROM m)) \
        ORDER BY l.key LIMIT ?4) AS page",
    count_bounded: "SELECT COUNT(*) FROM rudder_log l WHERE l.key >= ?1 AND l.key < ?2 AND l.revision <= ?3 AND l.deleted = 0 \
        AND (l.next_revision = 0 OR l.next_revision > ?3)",
    count_unbounded: "SELECT COUNT(*) FROM rudder_log l WHERE l.key >= ?1 AND ?2 IS NOT NULL AND l.revision <= ?3 AND l.deleted = 0 \
        AND (l.next_revision = 0 OR l.next_revision > ?3)",
    events_all: "SELECT l.revision, l.key, l.value, l.create_revision, l.version, l.lease, l.deleted, \
        l.prev_revision, p.value, p.create_revision, p.version, p.lease, p.deleted \
        FROM rudder_log l LEFT JOIN rudder_log p ON p.key = l.key AND p.revision = l.prev_revision \
        WHERE l.revision > ?1 AND l.revision <= ?2 ORDER BY l.revision, l.sub",
    events_bounded: "SELECT l.revision, l.key, l.value, l.create_revision, l.version, l.lease, l.deleted, \
        l.prev_revision, p.value, p.create_revision, p.version, p.lease, p.deleted \
        FROM rudder_log l LEFT JOIN rudder_log p ON p.key = l.key AND p.revision = l.prev_revision \
        WHERE l.revision > ?1 AND l.revision <= ?2 AND l.key >= ?3 AND l.key < ?4 ORDER BY l.revision, l.sub",
    events_unbounded: "SELECT l.revision, l.key, l.value, l.create_revision, l.version, l.lease, l.deleted, \
        l.prev_revision, p.value, p.create_revision, p.version, p.lease, p.deleted \
        FROM rudder_log l LEFT JOIN rudder_log p ON p.key = l.key AND p.revision = l.prev_revision \
        WHERE l.revision > ?1 AND l.revision <= ?2 AND l.key >= ?3 AND ?4 IS NOT NULL ORDER BY l.revision, l.sub",
    compact_window: "DELETE FROM rudder_log WHERE revision >= ?2 AND revision < ?3 AND revision < ?1 \
        AND (deleted = 1 OR (next_revision <> 0 AND next_revision <= ?1))",
    db_size: "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
    server_version: "SELECT 'SQLite ' || sqlite_version()",
    insert_lease: "INSERT INTO rudder_lease (id, ttl, expires_at_ms) VALUES (?1, ?2, ?3)",
    read_lease: "SELECT ttl, expires_at_ms FROM rudder_lease WHERE id = ?1",
    renew_lease: "UPDATE rudder_lease SET expires_at_ms = ?2 WHERE id = ?1",
    delete_lease: "DELETE FROM rudder_lease WHERE id = ?1",
    expired_leases: "SELECT id FROM rudder_lease WHERE expires_at_ms <= ?1",
    list_leases: "SELECT id FROM rudder_lease ORDER BY id",
    lease_keys: "SELECT l.key FROM rudder_log l WHERE l.lease = ?1 AND l.deleted = 0 \
        AND l.next_revision = 0 ORDER BY l.key",
    placeholder: |n| format!("?{n}"),
};

pub(crate) const POSTGRES: Dialect = Dialect {
    name: "postgres",
    begin_and_lock: "BEGIN; SELECT revision, compact_revision FROM rudder_meta WHERE id = 1 FOR UPDATE",
    read_meta: "SELECT revision, compact_revision FROM rudder_meta WHERE id = 1",
    latest_row: "SELECT key, value, create_revision, revision, version, lease, deleted \
        FROM rudder_log WHERE key = $1 ORDER BY revision DESC LIMIT 1",
    range_bounded: "SELECT l.key, l.value, l.create_revision, l.revision, l.version, l.lease \
        FROM rudder_log l WHERE l.key >= $1 AND l.key < $2 AND l.revision <= $3 AND l.deleted = 0 \
        AND (l.next_revision = 0 OR l.next_revision > $3) \
        ORDER BY l.key LIMIT $4",
    range_unbounded: "SELECT l.key, l.value, l.create_revision, l.revision, l.version, l.lease \
        FROM rudder_log l WHERE l.key >= $1 AND $2::bytea IS NOT NULL AND l.revision <= $3 AND l.deleted = 0 \
        AND (l.next_revision = 0 OR l.next_revision > $3) \
        ORDER BY l.key LIMIT $4",
    range_snapshot_bounded: "WITH m AS (SELECT revision, compact_revision, \
        CASE WHEN $3 > 0 THEN $3 ELSE revision END AS at FROM rudder_meta WHERE id = 1) \
        SELECT revision, compact_revision, NULL::bytea, NULL::bytea, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint FROM m \
        UNION ALL SELECT * FROM (\
        SELECT NULL::bigint, NULL::bigint, l.key, l.value, l.create_revision, l.revision, l.version, l.lease \
        FROM rudder_log l WHERE l.key >= $1 AND l.key < $2 AND l.revision <= (SELECT at FROM m) \
        AND l.deleted = 0 AND (l.next_revision = 0 OR l.next_revision > (SELECT at FROM m)) \
        ORDER BY l.key LIMIT $4) AS page",
    range_snapshot_unbounded: "WITH m AS (SELECT revision, compact_revision, \
        CASE WHEN $3 > 0 THEN $3 ELSE revision END AS at FROM rudder_meta WHERE id = 1) \
        SELECT revision, compact_revision, NULL::bytea, NULL::bytea, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint FROM m \
        UNION ALL SELECT * FROM (\
        SELECT NULL::bigint, NULL::bigint, l.key, l.value, l.create_revision, l.revision, l.version, l.lease \
        FROM rudder_log l WHERE l.key >= $1 AND $2::bytea IS NOT NULL AND l.revision <= (SELECT at FROM m) \
        AND l.deleted = 0 AND (l.next_revision = 0 OR l.next_revision > (SELECT at FROM m)) \
        ORDER BY l.key LIMIT $4) AS page",
    count_bounded: "SELECT COUNT(*) FROM rudder_log l WHERE l.key >= $1 AND l.key < $2 AND l.revision <= $3 AND l.deleted = 0 \
        AND (l.next_revision = 0 OR l.next_revision > $3)",
    count_unbounded: "SELECT COUNT(*) FROM rudder_log l WHERE l.key >= $1 AND $2::bytea IS NOT NULL AND l.revision <= $3 AND l.deleted = 0 \
        AND (l.next_revision = 0 OR l.next_revision > $3)",
    events_all: "SELECT l.revision, l.key, l.value, l.create_revision, l.version, l.lease, l.deleted, \
        l.prev_revision, p.value, p.create_revision, p.version, p.lease, p.deleted \
        FROM rudder_log l LEFT JOIN rudder_log p ON p.key = l.key AND p.revision = l.prev_revision \
        WHERE l.revision > $1 AND l.revision <= $2 ORDER BY l.revision, l.sub",
    events_bounded: "SELECT l.revision, l.key, l.value, l.create_revision, l.version, l.lease, l.deleted, \
        l.prev_revision, p.value, p.create_revision, p.version, p.lease, p.deleted \
        FROM rudder_log l LEFT JOIN rudder_log p ON p.key = l.key AND p.revision = l.prev_revision \
        WHERE l.revision > $1 AND l.revision <= $2 AND l.key >= $3 AND l.key < $4 ORDER BY l.revision, l.sub",
    events_unbounded: "SELECT l.revision, l.key, l.value, l.create_revision, l.version, l.lease, l.deleted, \
        l.prev_revision, p.value, p.create_revision, p.version, p.lease, p.deleted \
        FROM rudder_log l LEFT JOIN rudder_log p ON p.key = l.key AND p.revision = l.prev_revision \
        WHERE l.revision > $1 AND l.revision <= $2 AND l.key >= $3 AND $4::bytea IS NOT NULL ORDER BY l.revision, l.sub",
    compact_window: "DELETE FROM rudder_log WHERE revision >= $2 AND revision < $3 AND revision < $1 \
        AND (deleted = 1 OR (next_revision <> 0 AND next_revision <= $1))",
    db_size: "SELECT (pg_total_relation_size('rudder_log') + pg_total_relation_size('rudder_meta') \
        + pg_total_relation_size('rudder_lease'))::BIGINT",
    server_version: "SELECT 'PostgreSQL ' || current_setting('server_version')",
    insert_lease: "INSERT INTO rudder_lease (id, ttl, expires_at_ms) VALUES ($1, $2, $3)",
    read_lease: "SELECT ttl, expires_at_ms FROM rudder_lease WHERE id = $1",
    renew_lease: "UPDATE rudder_lease SET expires_at_ms = $2 WHERE id = $1",
    delete_lease: "DELETE FROM rudder_lease WHERE id = $1",
    expired_leases: "SELECT id FROM rudder_lease WHERE expires_at_ms <= $1",
    list_leases: "SELECT id FROM rudder_lease ORDER BY id",
    lease_keys: "SELECT l.key FROM rudder_log l WHERE l.lease = $1 AND l.deleted = 0 \
        AND l.next_revision = 0 ORDER BY l.key",
    placeholder: |n| format!("${n}"),
};

/// Columns of a log row, in `insert_row` order.
pub(crate) const LOG_COLUMNS: &str =
    "revision, sub, key, value, create_revision, prev_revision, version, lease, deleted, next_revision";

/// Columns per row in [`insert_rows`].
pub(crate) const LOG_COLUMN_COUNT: usize = 10;

/// `INSERT` of `rows` log rows in one statement.
pub(crate) fn insert_rows(dialect: &Dialect, rows: usize) -> String {
    let mut sql = format!("INSERT INTO rudder_log ({LOG_COLUMNS}) VALUES ");
    for row in 0..rows {
        if row > 0 {
            sql.push(',');
        }
        sql.push('(');
        for column in 0..LOG_COLUMN_COUNT {
            if column > 0 {
                sql.push(',');
            }
            sql.push_str(&(dialect.placeholder)(row * LOG_COLUMN_COUNT + column + 1));
        }
        sql.push(')');
    }
    sql
}

/// Ends a write transaction in one round trip: stores the new counters, tells other processes
/// on `channel` (PostgreSQL) and commits. Only integers and the channel — a name made of
/// `[a-z0-9_]` (the schema name is validated) — are spliced in; never data.
pub(crate) fn finish_write(
    dialect: &Dialect,
    revision: Option<Revision>,
    compact_revision: Option<Revision>,
    channel: &str,
) -> String {
    let mut sql = String::new();
    let mut assignments = Vec::new();
    if let Some(revision) = revision {
        assignments.push(format!("revision = {revision}"));
    }
    if let Some(compact_revision) = compact_revision {
        assignments.push(format!("compact_revision = {compact_revision}"));
    }
    if !assignments.is_empty() {
        sql.push_str(&format!(
            "UPDATE rudder_meta SET {} WHERE id = 1; ",
            assignments.join(", ")
        ));
    }
    if let (Some(revision), "postgres") = (revision, dialect.name) {
        let safe = !channel.is_empty()
            && channel
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if safe {
            sql.push_str(&format!("NOTIFY {channel}, '{revision}'; "));
        }
    }
    sql.push_str("COMMIT");
    sql
}

/// Marks `rows` rows `(key, revision)` as superseded at `next_revision`, in one statement
/// (placeholders in triples: key, revision, next revision).
pub(crate) fn link_rows(dialect: &Dialect, rows: usize) -> String {
    let cast = |n: usize, ty: &str| match dialect.name {
        "postgres" => format!("{}::{ty}", (dialect.placeholder)(n)),
        _ => (dialect.placeholder)(n),
    };
    let values: Vec<String> = (0..rows)
        .map(|row| {
            format!(
                "({}, {}, {})",
                cast(row * 3 + 1, "bytea"),
                cast(row * 3 + 2, "bigint"),
                cast(row * 3 + 3, "bigint")
            )
        })
        .collect();
    format!(
        "WITH v(key, revision, next) AS (VALUES {}) UPDATE rudder_log SET next_revision = v.next FROM v \
         WHERE rudder_log.key = v.key AND rudder_log.revision = v.revision",
        values.join(", ")
    )
}

/// The latest rows (tombstones included) of `keys` keys, in one statement:
/// `(key, value, create_revision, revision, version, lease, deleted)`.
pub(crate) fn latest_rows(dialect: &Dialect, keys: usize) -> String {
    let list: Vec<String> = (1..=keys).map(dialect.placeholder).collect();
    format!(
        "SELECT l.key, l.value, l.create_revision, l.revision, l.version, l.lease, l.deleted FROM rudder_log l \
         WHERE l.key IN ({}) AND l.next_revision = 0",
        list.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_ends_with_counters_notification_and_commit_in_one_round_trip() {
        assert_eq!(
            finish_write(&POSTGRES, Some(7), None, "rudder_public"),
            "UPDATE rudder_meta SET revision = 7 WHERE id = 1; NOTIFY rudder_public, '7'; COMMIT"
        );
        assert_eq!(
            finish_write(&SQLITE, Some(7), Some(3), ""),
            "UPDATE rudder_meta SET revision = 7, compact_revision = 3 WHERE id = 1; COMMIT"
        );
        assert_eq!(
            finish_write(&POSTGRES, None, None, "rudder_x; DROP"),
            "COMMIT"
        );
    }

    #[test]
    fn generated_statements_use_each_dialects_placeholders() {
        assert_eq!(
            insert_rows(&POSTGRES, 2),
            format!("INSERT INTO rudder_log ({LOG_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10),($11,$12,$13,$14,$15,$16,$17,$18,$19,$20)")
        );
        assert!(latest_rows(&SQLITE, 3).contains("IN (?1,?2,?3)"));
    }
}
