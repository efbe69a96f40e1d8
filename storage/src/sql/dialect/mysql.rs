//! MySQL's and MariaDB's statements.
//!
//! What differs from the other dialects, and why:
//! - `?` placeholders are positional: each occurrence is a bind of its own, taken in the order
//!   of the text. The engine binds `?1..?4` once each, in order, so a statement that needs a
//!   parameter twice (or out of order) reads it from a one-row derived table of the parameters
//!   (`(SELECT ? AS lo, ? AS hi, ? AS at) p`), and `LIMIT ?` comes last, where the limit is bound.
//! - The parameters are cast (`CAST(? AS BINARY)`, `CAST(? AS SIGNED)`) so that a derived
//!   table's columns are binary strings and integers, whatever the connection's character set:
//!   key comparisons stay bytewise.
//! - `key` is a reserved word: it is always written `l.key` (a qualified name may be reserved)
//!   or quoted.
//! - Keys are `VARBINARY(2048)` (bytewise comparisons and a covering index), which MySQL
//!   reports as a string type; sqlx's `Any` driver would decode them as UTF-8 text. Every key
//!   the engine reads back is therefore selected as `COALESCE(l.key, <a NULL BLOB>)`, which the
//!   server types as a BLOB: the same bytes, decoded as bytes.
//! - There is no `UPDATE … FROM`: superseded rows are linked with `UPDATE … JOIN (SELECT …
//!   UNION ALL SELECT …)` (in [`super::link_rows`]).
//! - The writers' lock is the meta row, `SELECT … FOR UPDATE`, as on PostgreSQL.

use super::Dialect;

/// The server's clock in milliseconds since the Unix epoch. `NOW(3)` is the statement's start
/// (not the transaction's), with milliseconds; the cast makes it an integer (the `Any` driver
/// does not decode `DECIMAL`).
macro_rules! now_ms {
    () => {
        "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"
    };
}

/// A key column read back as bytes (see the module documentation).
macro_rules! key_bytes {
    ($column:literal) => {
        concat!("COALESCE(", $column, ", CAST(NULL AS BINARY(65536)))")
    };
}

/// The log as `l`, kept on the key index. Without the hint MariaDB read a page, and even a
/// single key, through the `(deleted, revision)` index (`deleted = 0` being an equality): every
/// live row, then a filesort.
macro_rules! log_by_key {
    () => {
        "rudder_log l FORCE INDEX (rudder_log_key_revision)"
    };
}

/// The bounds and revision of a range read, bound once each: `p.lo`, `p.hi`, `p.at`.
macro_rules! range_params {
    () => {
        "(SELECT CAST(? AS BINARY) AS lo, CAST(? AS BINARY) AS hi, CAST(? AS SIGNED) AS at) p"
    };
}

/// Live rows at revision `p.at` (rows written at or before it, not superseded by then).
macro_rules! live_at_p {
    () => {
        "l.revision <= p.at AND l.deleted = 0 AND (l.next_revision = 0 OR l.next_revision > p.at)"
    };
}

/// The snapshot statements' first part: the parameters (`p.at` is the requested revision, 0
/// for the current one), and the counters with the revision the read is at (`m.at`).
macro_rules! meta_at {
    () => {
        concat!(
            "WITH p AS (SELECT CAST(? AS BINARY) AS lo, CAST(? AS BINARY) AS hi, CAST(? AS SIGNED) AS at), \
             m AS (SELECT revision, compact_revision, \
             CASE WHEN p.at > 0 THEN p.at ELSE revision END AS at FROM rudder_meta, p WHERE id = 1) "
        )
    };
}

/// Live rows at revision `m.at`.
macro_rules! live_at_m {
    () => {
        "l.revision <= m.at AND l.deleted = 0 AND (l.next_revision = 0 OR l.next_revision > m.at)"
    };
}

// The range statements take the upper bound's condition: `l.key < p.hi` when bounded,
// `p.hi IS NOT NULL` (the bind still taken, and ignored) when not; `range_snapshot!`, which
// has no parameter table, takes it on the bind itself.

/// The page of a snapshot read, with the counters on every row: the meta row joined to the
/// page, not a union with it. MariaDB materializes a union, and the derived tables in it, in
/// temporary tables, which hold the BLOB values and so go to disk: four files for every get.
/// The join is the index walk alone; an empty page brings no counters back, and the reader
/// reads them with the range's count (see `Reader::range_once`). The revision is bound once:
/// a row is live at `at` when `at` lies in `[revision, next_revision)`.
macro_rules! range_snapshot {
    ($bound:literal) => {
        concat!(
            "SELECT m.revision, m.compact_revision, ",
            key_bytes!("l.key"),
            ", l.value, l.create_revision, l.revision, l.version, l.lease \
             FROM rudder_meta m JOIN ",
            log_by_key!(),
            " ON l.key >= CAST(? AS BINARY) AND ",
            $bound,
            " AND COALESCE(NULLIF(CAST(? AS SIGNED), 0), m.revision) \
             BETWEEN l.revision AND IF(l.next_revision = 0, 9223372036854775807, l.next_revision - 1) \
             AND l.deleted = 0 WHERE m.id = 1 ORDER BY l.key LIMIT ?"
        )
    };
}

macro_rules! count_snapshot {
    ($bound:literal) => {
        concat!(
            meta_at!(),
            "SELECT m.revision, m.compact_revision, (SELECT COUNT(*) FROM ",
            log_by_key!(),
            " WHERE l.key >= p.lo AND ",
            $bound,
            " AND ",
            live_at_m!(),
            ") FROM m, p"
        )
    };
}

macro_rules! range {
    ($bound:literal) => {
        concat!(
            "SELECT ",
            key_bytes!("l.key"),
            ", l.value, l.create_revision, l.revision, l.version, l.lease FROM ",
            log_by_key!(),
            ", ",
            range_params!(),
            " WHERE l.key >= p.lo AND ",
            $bound,
            " AND ",
            live_at_p!(),
            " ORDER BY l.key LIMIT ?"
        )
    };
}

macro_rules! count {
    ($bound:literal) => {
        concat!(
            "SELECT COUNT(*) FROM ",
            log_by_key!(),
            ", ",
            range_params!(),
            " WHERE l.key >= p.lo AND ",
            $bound,
            " AND ",
            live_at_p!()
        )
    };
}

macro_rules! events {
    ($filter:literal) => {
        concat!(
            "SELECT l.revision, ",
            key_bytes!("l.key"),
            ", l.value, l.create_revision, l.version, l.lease, l.deleted, \
             l.prev_revision, p.value, p.create_revision, p.version, p.lease, p.deleted \
             FROM rudder_log l LEFT JOIN rudder_log p ON p.key = l.key AND p.revision = l.prev_revision \
             WHERE l.revision > ? AND l.revision <= ?",
            $filter,
            " ORDER BY l.revision, l.sub"
        )
    };
}

pub(crate) const MYSQL: Dialect = Dialect {
    name: "mysql",
    log_columns: "revision, sub, `key`, value, create_revision, prev_revision, version, lease, \
        deleted, next_revision",
    read_key: key_bytes!("l.key"),
    log_by_key: log_by_key!(),
    // The session runs at READ COMMITTED (see `SqlStore::open_mysql`): the writer holds the
    // meta row lock, so each of its statements sees every earlier commit; its UPDATEs and
    // DELETEs lock only the rows they change (no gap locks to collide with compaction's
    // deletes); and every read is one statement, whose snapshot is consistent on its own.
    begin_and_lock: "START TRANSACTION; \
        SELECT revision, compact_revision, purged_revision FROM rudder_meta WHERE id = 1 FOR UPDATE",
    read_meta: "SELECT revision, compact_revision, purged_revision FROM rudder_meta WHERE id = 1",
    latest_row: concat!(
        "SELECT ",
        key_bytes!("l.key"),
        ", l.value, l.create_revision, l.revision, l.version, l.lease, l.deleted FROM ",
        log_by_key!(),
        " WHERE l.key = ? AND l.next_revision = 0"
    ),
    range_bounded: range!("l.key < p.hi"),
    range_unbounded: range!("p.hi IS NOT NULL"),
    range_snapshot_bounded: range_snapshot!("l.key < CAST(? AS BINARY)"),
    range_snapshot_unbounded: range_snapshot!("CAST(? AS BINARY) IS NOT NULL"),
    count_bounded: count!("l.key < p.hi"),
    count_unbounded: count!("p.hi IS NOT NULL"),
    count_snapshot_bounded: count_snapshot!("l.key < p.hi"),
    count_snapshot_unbounded: count_snapshot!("p.hi IS NOT NULL"),
    events_all: events!(""),
    events_bounded: events!(" AND l.key >= ? AND l.key < ?"),
    events_unbounded: events!(" AND l.key >= ? AND ? IS NOT NULL"),
    mark_purged: "UPDATE rudder_meta SET purged_revision = GREATEST(purged_revision, ?) WHERE id = 1",
    // No partial indexes: the indexes on `next_revision` and `(deleted, revision)` hold every
    // row, and these range scans skip the latest rows (`next_revision = 0`) and live rows.
    purge_superseded: "DELETE FROM rudder_log WHERE next_revision > 0 AND next_revision <= ? LIMIT ?",
    purge_tombstones: "DELETE FROM rudder_log WHERE deleted = 1 AND revision < ? LIMIT ?",
    db_size: "SELECT CAST(COALESCE(SUM(data_length + index_length), 0) AS SIGNED) \
        FROM information_schema.tables WHERE table_schema = DATABASE() \
        AND table_name IN ('rudder_log', 'rudder_meta', 'rudder_lease')",
    server_version: "SELECT CONCAT(IF(VERSION() LIKE '%MariaDB%', 'MariaDB ', 'MySQL '), VERSION())",
    database_now_ms: concat!("SELECT ", now_ms!()),
    insert_lease: concat!(
        "INSERT INTO rudder_lease (id, ttl, expires_at_ms) SELECT p.id, p.ttl, ",
        now_ms!(),
        " + p.ttl * 1000 FROM (SELECT CAST(? AS SIGNED) AS id, CAST(? AS SIGNED) AS ttl) p"
    ),
    read_lease: concat!(
        "SELECT ttl, expires_at_ms - ",
        now_ms!(),
        " FROM rudder_lease WHERE id = ?"
    ),
    renew_lease: concat!(
        "UPDATE rudder_lease SET expires_at_ms = ",
        now_ms!(),
        " + ttl * 1000 WHERE id = ?"
    ),
    delete_lease: "DELETE FROM rudder_lease WHERE id = ?",
    expired_leases: concat!(
        "SELECT id FROM rudder_lease WHERE expires_at_ms <= ",
        now_ms!()
    ),
    list_leases: "SELECT id FROM rudder_lease ORDER BY id",
    lease_keys: concat!(
        "SELECT ",
        key_bytes!("l.key"),
        " FROM rudder_log l WHERE l.lease = ? AND l.deleted = 0 AND l.next_revision = 0 ORDER BY l.key"
    ),
    revoke_tombstones: "INSERT INTO rudder_log (revision, sub, `key`, value, create_revision, \
        prev_revision, version, lease, deleted, next_revision) \
        SELECT p.rev, ROW_NUMBER() OVER (ORDER BY l.key) - 1, l.key, X'', 0, l.revision, 0, 0, 1, 0 \
        FROM rudder_log l JOIN (SELECT CAST(? AS SIGNED) AS lease_id, CAST(? AS SIGNED) AS rev) p \
        ON l.lease = p.lease_id WHERE l.deleted = 0 AND l.next_revision = 0",
    revoke_link: "UPDATE rudder_log l \
        JOIN (SELECT CAST(? AS SIGNED) AS lease_id, CAST(? AS SIGNED) AS rev) p ON l.lease = p.lease_id \
        SET l.next_revision = p.rev \
        WHERE l.deleted = 0 AND l.next_revision = 0 AND l.revision < p.rev",
    placeholder: |_| "?".to_string(),
};
