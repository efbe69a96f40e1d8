//! PostgreSQL's statements (`$N` placeholders, the meta row locked `FOR UPDATE` as the
//! writers' lock, typed NULLs where a union needs them).

use super::Dialect;

/// The server's clock in milliseconds since the Unix epoch (`clock_timestamp`, not `now()`,
/// which would stand still for a whole transaction).
macro_rules! now_ms {
    () => {
        "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT"
    };
}

/// The snapshot statements' first part: the counters, and the revision a read is at.
macro_rules! meta_at {
    () => {
        "WITH m AS (SELECT revision, compact_revision, \
         CASE WHEN $3 > 0 THEN $3 ELSE revision END AS at FROM rudder_meta WHERE id = 1) "
    };
}

/// Live rows at revision `m.at` (rows written at or before it, not superseded by then).
macro_rules! live_at_m {
    () => {
        "l.revision <= (SELECT at FROM m) AND l.deleted = 0 \
         AND (l.next_revision = 0 OR l.next_revision > (SELECT at FROM m))"
    };
}

macro_rules! events {
    ($filter:literal) => {
        concat!(
            "SELECT l.revision, l.key, l.value, l.create_revision, l.version, l.lease, l.deleted, \
             l.prev_revision, p.value, p.create_revision, p.version, p.lease, p.deleted \
             FROM rudder_log l LEFT JOIN rudder_log p ON p.key = l.key AND p.revision = l.prev_revision \
             WHERE l.revision > $1 AND l.revision <= $2",
            $filter,
            " ORDER BY l.revision, l.sub"
        )
    };
}

pub(crate) const POSTGRES: Dialect = Dialect {
    name: "postgres",
    log_columns: super::LOG_COLUMNS,
    read_key: "l.key",
    log_by_key: "rudder_log l",
    begin_and_lock: "BEGIN; SELECT revision, compact_revision, purged_revision \
        FROM rudder_meta WHERE id = 1 FOR UPDATE",
    read_meta: "SELECT revision, compact_revision, purged_revision FROM rudder_meta WHERE id = 1",
    latest_row: "SELECT key, value, create_revision, revision, version, lease, deleted \
        FROM rudder_log WHERE key = $1 AND next_revision = 0",
    range_bounded: "SELECT l.key, l.value, l.create_revision, l.revision, l.version, l.lease \
        FROM rudder_log l WHERE l.key >= $1 AND l.key < $2 AND l.revision <= $3 AND l.deleted = 0 \
        AND (l.next_revision = 0 OR l.next_revision > $3) \
        ORDER BY l.key LIMIT $4",
    range_unbounded: "SELECT l.key, l.value, l.create_revision, l.revision, l.version, l.lease \
        FROM rudder_log l WHERE l.key >= $1 AND $2::bytea IS NOT NULL AND l.revision <= $3 AND l.deleted = 0 \
        AND (l.next_revision = 0 OR l.next_revision > $3) \
        ORDER BY l.key LIMIT $4",
    range_snapshot_bounded: concat!(
        meta_at!(),
        "SELECT revision, compact_revision, NULL::bytea, NULL::bytea, NULL::bigint, NULL::bigint, \
         NULL::bigint, NULL::bigint FROM m \
         UNION ALL SELECT * FROM (\
         SELECT NULL::bigint, NULL::bigint, l.key, l.value, l.create_revision, l.revision, l.version, l.lease \
         FROM rudder_log l WHERE l.key >= $1 AND l.key < $2 AND ",
        live_at_m!(),
        " ORDER BY l.key LIMIT $4) AS page"
    ),
    range_snapshot_unbounded: concat!(
        meta_at!(),
        "SELECT revision, compact_revision, NULL::bytea, NULL::bytea, NULL::bigint, NULL::bigint, \
         NULL::bigint, NULL::bigint FROM m \
         UNION ALL SELECT * FROM (\
         SELECT NULL::bigint, NULL::bigint, l.key, l.value, l.create_revision, l.revision, l.version, l.lease \
         FROM rudder_log l WHERE l.key >= $1 AND $2::bytea IS NOT NULL AND ",
        live_at_m!(),
        " ORDER BY l.key LIMIT $4) AS page"
    ),
    count_bounded: "SELECT COUNT(*) FROM rudder_log l WHERE l.key >= $1 AND l.key < $2 AND l.revision <= $3 AND l.deleted = 0 \
        AND (l.next_revision = 0 OR l.next_revision > $3)",
    count_unbounded: "SELECT COUNT(*) FROM rudder_log l WHERE l.key >= $1 AND $2::bytea IS NOT NULL AND l.revision <= $3 AND l.deleted = 0 \
        AND (l.next_revision = 0 OR l.next_revision > $3)",
    count_snapshot_bounded: concat!(
        meta_at!(),
        "SELECT revision, compact_revision, (SELECT COUNT(*) FROM rudder_log l \
         WHERE l.key >= $1 AND l.key < $2 AND ",
        live_at_m!(),
        ") FROM m"
    ),
    count_snapshot_unbounded: concat!(
        meta_at!(),
        "SELECT revision, compact_revision, (SELECT COUNT(*) FROM rudder_log l \
         WHERE l.key >= $1 AND $2::bytea IS NOT NULL AND ",
        live_at_m!(),
        ") FROM m"
    ),
    events_all: events!(""),
    events_bounded: events!(" AND l.key >= $3 AND l.key < $4"),
    events_unbounded: events!(" AND l.key >= $3 AND $4::bytea IS NOT NULL"),
    mark_purged: "UPDATE rudder_meta SET purged_revision = $1 WHERE id = 1 AND purged_revision < $1",
    purge_superseded: "DELETE FROM rudder_log WHERE (revision, sub) IN (SELECT revision, sub \
        FROM rudder_log WHERE next_revision <> 0 AND next_revision <= $1 LIMIT $2)",
    purge_tombstones: "DELETE FROM rudder_log WHERE (revision, sub) IN (SELECT revision, sub \
        FROM rudder_log WHERE deleted = 1 AND revision < $1 LIMIT $2)",
    db_size: "SELECT (pg_total_relation_size('rudder_log') + pg_total_relation_size('rudder_meta') \
        + pg_total_relation_size('rudder_lease'))::BIGINT",
    server_version: "SELECT 'PostgreSQL ' || current_setting('server_version')",
    database_now_ms: concat!("SELECT ", now_ms!()),
    insert_lease: concat!(
        "INSERT INTO rudder_lease (id, ttl, expires_at_ms) VALUES ($1, $2, ",
        now_ms!(),
        " + $2 * 1000)"
    ),
    read_lease: concat!(
        "SELECT ttl, expires_at_ms - ",
        now_ms!(),
        " FROM rudder_lease WHERE id = $1"
    ),
    renew_lease: concat!(
        "UPDATE rudder_lease SET expires_at_ms = ",
        now_ms!(),
        " + ttl * 1000 WHERE id = $1"
    ),
    delete_lease: "DELETE FROM rudder_lease WHERE id = $1",
    expired_leases: concat!(
        "SELECT id FROM rudder_lease WHERE expires_at_ms <= ",
        now_ms!()
    ),
    list_leases: "SELECT id FROM rudder_lease ORDER BY id",
    lease_keys: "SELECT l.key FROM rudder_log l WHERE l.lease = $1 AND l.deleted = 0 \
        AND l.next_revision = 0 ORDER BY l.key",
    revoke_tombstones: "INSERT INTO rudder_log (revision, sub, key, value, create_revision, \
        prev_revision, version, lease, deleted, next_revision) \
        SELECT $2, ROW_NUMBER() OVER (ORDER BY l.key) - 1, l.key, ''::bytea, 0, l.revision, 0, 0, 1, 0 \
        FROM rudder_log l WHERE l.lease = $1 AND l.deleted = 0 AND l.next_revision = 0",
    revoke_link: "UPDATE rudder_log SET next_revision = $2 \
        WHERE lease = $1 AND deleted = 0 AND next_revision = 0 AND revision < $2",
    placeholder: |n| format!("${n}"),
};
