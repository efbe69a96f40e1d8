//! The SQL text of each database. The engine is the same for all of them: a dialect differs only
//! in its statements (placeholders, locking, notification) and in how its errors are translated.
//!
//! Every statement is a `&'static str`, so nothing user-supplied is ever spliced into SQL.
//! Each database's statements live in a module of their own ([`sqlite`], [`postgres`],
//! [`mysql`]).

mod mysql;
mod postgres;
mod sqlite;

use crate::types::Revision;

/// One database's statements.
pub(crate) struct Dialect {
    pub name: &'static str,
    /// The log's columns in `insert_rows` order ([`LOG_COLUMNS`], quoted where a name is a
    /// reserved word).
    pub log_columns: &'static str,
    /// `l.key` as the statements select it, so that it decodes as bytes.
    pub read_key: &'static str,
    /// The log as `l`, for reads by key: with MySQL's index hint that keeps them on the key
    /// index (see `query_plans`).
    pub log_by_key: &'static str,
    /// Opens a write transaction that excludes other writers and reads
    /// `(revision, compact_revision, purged_revision)`, in one round trip (several statements:
    /// simple protocol).
    pub begin_and_lock: &'static str,
    /// `(revision, compact_revision, purged_revision)`.
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
    /// index scan that stops at the limit.) MySQL's is the join, with the counters on every
    /// row and none when the page is empty (see its dialect).
    pub range_snapshot_bounded: &'static str,
    /// As `range_snapshot_bounded` for keys `>= ?1` (`?2` unused).
    pub range_snapshot_unbounded: &'static str,
    /// Count of live kvs in `[?1, ?2)` at revision `?3`.
    pub count_bounded: &'static str,
    /// Count of live kvs `>= ?1` at revision `?3` (`?2` unused).
    pub count_unbounded: &'static str,
    /// From one snapshot: `(revision, compact_revision, count)`, the count of live kvs in
    /// `[?1, ?2)` at revision `?3` (0: the current one). A count and the counters it is checked
    /// against must come from one snapshot, or compaction could run in between.
    pub count_snapshot_bounded: &'static str,
    /// As `count_snapshot_bounded` for keys `>= ?1` (`?2` unused).
    pub count_snapshot_unbounded: &'static str,
    /// Log rows with revision in `(?1, ?2]`, with the previous row's fields.
    pub events_all: &'static str,
    /// As `events_all`, limited to keys in `[?3, ?4)`.
    pub events_bounded: &'static str,
    /// As `events_all`, limited to keys `>= ?3` (`?4` unused).
    pub events_unbounded: &'static str,
    /// Records that compaction to `?1` is about to remove rows (before any goes).
    pub mark_purged: &'static str,
    /// Deletes at most `?2` rows superseded at or below revision `?1`.
    pub purge_superseded: &'static str,
    /// Deletes at most `?2` tombstones below revision `?1`.
    pub purge_tombstones: &'static str,
    /// Size of the database in bytes.
    pub db_size: &'static str,
    /// Server version string.
    pub server_version: &'static str,
    /// The database's clock, in milliseconds since the Unix epoch. Lease times are always the
    /// database's, so that servers whose clocks disagree still agree on when a lease expires.
    pub database_now_ms: &'static str,
    /// Grants lease `?1` with TTL `?2` seconds, expiring by the database's clock.
    pub insert_lease: &'static str,
    /// `(ttl, milliseconds left)` of lease `?1`, by the database's clock.
    pub read_lease: &'static str,
    /// Moves lease `?1`'s expiry a full TTL past the database's clock.
    pub renew_lease: &'static str,
    pub delete_lease: &'static str,
    /// Ids of leases expired by the database's clock.
    pub expired_leases: &'static str,
    pub list_leases: &'static str,
    /// Keys currently attached to lease `?1`.
    pub lease_keys: &'static str,
    /// Tombstones at revision `?2` for every live key attached to lease `?1`, in one statement
    /// (numbered by key); then `revoke_link` marks the rows they supersede.
    pub revoke_tombstones: &'static str,
    /// Marks the live rows of lease `?1` below revision `?2` superseded at `?2`.
    pub revoke_link: &'static str,
    /// The `n`th (1-based) bind placeholder, for statements built with a variable number of
    /// rows or keys (placeholders only: never data).
    pub placeholder: fn(usize) -> String,
}

pub(crate) use mysql::MYSQL;
pub(crate) use postgres::POSTGRES;
pub(crate) use sqlite::SQLITE;

/// An argument written into a statement's text instead of bound, so that several statements
/// can go to the server as one simple query (one round trip). Only integers and hex digits
/// ever reach the text, so no value can change what a statement does.
#[derive(Clone, Debug)]
pub(crate) enum Literal {
    Int(i64),
    Bytes(Vec<u8>),
}

impl Literal {
    /// This argument as `dialect` reads it: a decimal integer, or the bytes in hex
    /// (`decode('…', 'hex')` on PostgreSQL, whatever `standard_conforming_strings` says;
    /// `X'…'` elsewhere).
    pub fn render(&self, dialect: &Dialect) -> String {
        match self {
            Literal::Int(value) => value.to_string(),
            Literal::Bytes(bytes) => {
                let hex = to_hex(bytes);
                if dialect.name == "postgres" {
                    format!("decode('{hex}', 'hex')")
                } else {
                    format!("X'{hex}'")
                }
            }
        }
    }
}

/// Lower-case hex digits of `bytes`.
fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

/// Columns of a log row, in `insert_row` order.
pub(crate) const LOG_COLUMNS: &str =
    "revision, sub, key, value, create_revision, prev_revision, version, lease, deleted, next_revision";

/// Columns per row in [`insert_rows`].
pub(crate) const LOG_COLUMN_COUNT: usize = 10;

/// `INSERT` of `rows` log rows in one statement.
pub(crate) fn insert_rows(dialect: &Dialect, rows: usize) -> String {
    insert_rows_with(dialect, rows, &dialect.placeholder)
}

/// [`insert_rows`] with the `n`th (1-based) argument written by `argument`: a placeholder, or
/// a literal ([`Literal`]).
pub(crate) fn insert_rows_with(
    dialect: &Dialect,
    rows: usize,
    argument: &dyn Fn(usize) -> String,
) -> String {
    let mut sql = format!("INSERT INTO rudder_log ({}) VALUES ", dialect.log_columns);
    for row in 0..rows {
        if row > 0 {
            sql.push(',');
        }
        sql.push('(');
        for column in 0..LOG_COLUMN_COUNT {
            if column > 0 {
                sql.push(',');
            }
            sql.push_str(&argument(row * LOG_COLUMN_COUNT + column + 1));
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
    link_rows_with(dialect, rows, &dialect.placeholder)
}

/// [`link_rows`] with the `n`th (1-based) argument written by `argument`.
pub(crate) fn link_rows_with(
    dialect: &Dialect,
    rows: usize,
    argument: &dyn Fn(usize) -> String,
) -> String {
    if dialect.name == "mysql" {
        // No `UPDATE … FROM (VALUES …)`: a join with a union of the triples, typed by casts.
        let values: Vec<String> = (0..rows)
            .map(|row| {
                let (k, r, n) = (
                    argument(row * 3 + 1),
                    argument(row * 3 + 2),
                    argument(row * 3 + 3),
                );
                if row == 0 {
                    format!("SELECT CAST({k} AS BINARY) AS k, CAST({r} AS SIGNED) AS r, CAST({n} AS SIGNED) AS n")
                } else {
                    format!("SELECT CAST({k} AS BINARY), CAST({r} AS SIGNED), CAST({n} AS SIGNED)")
                }
            })
            .collect();
        return format!(
            "UPDATE rudder_log l JOIN ({}) v ON l.key = v.k AND l.revision = v.r SET l.next_revision = v.n",
            values.join(" UNION ALL ")
        );
    }
    let cast = |n: usize, ty: &str| match dialect.name {
        "postgres" => format!("{}::{ty}", argument(n)),
        _ => argument(n),
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
    latest_rows_with(dialect, keys, &dialect.placeholder)
}

/// [`latest_rows`] with the `n`th (1-based) key written by `argument`.
pub(crate) fn latest_rows_with(
    dialect: &Dialect,
    keys: usize,
    argument: &dyn Fn(usize) -> String,
) -> String {
    let list: Vec<String> = (1..=keys).map(argument).collect();
    format!(
        "SELECT {}, l.value, l.create_revision, l.revision, l.version, l.lease, l.deleted FROM {} \
         WHERE l.key IN ({}) AND l.next_revision = 0",
        dialect.read_key,
        dialect.log_by_key,
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

    #[test]
    fn literals_are_integers_and_hex_digits_only() {
        let key = Literal::Bytes(b"/k'); DROP TABLE rudder_log; --".to_vec());
        let postgres = key.render(&POSTGRES);
        assert!(postgres.starts_with("decode('2f6b27293b") && postgres.ends_with("', 'hex')"));
        assert_eq!(Literal::Bytes(vec![0, 255]).render(&MYSQL), "X'00ff'");
        assert_eq!(Literal::Bytes(Vec::new()).render(&SQLITE), "X''");
        assert_eq!(Literal::Int(-42).render(&POSTGRES), "-42");
        let args = [
            Literal::Bytes(b"k".to_vec()),
            Literal::Int(5),
            Literal::Int(7),
        ];
        let linked = link_rows_with(&POSTGRES, 1, &|n| args[n - 1].render(&POSTGRES));
        assert!(
            linked.contains("(decode('6b', 'hex')::bytea, 5::bigint, 7::bigint)"),
            "{linked}"
        );
        let linked = link_rows_with(&MYSQL, 1, &|n| args[n - 1].render(&MYSQL));
        assert!(
            linked.contains("CAST(X'6b' AS BINARY) AS k, CAST(5 AS SIGNED) AS r"),
            "{linked}"
        );
        assert_eq!(link_rows(&MYSQL, 2).matches('?').count(), 6);
    }
}
