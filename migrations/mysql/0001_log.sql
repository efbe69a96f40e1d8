-- The log-structured key-value store on MySQL/MariaDB (InnoDB), as the other dialects' schema
-- (migrations/postgres) in one migration.
-- Keys are VARBINARY, so comparisons and ORDER BY are byte order whatever the collation; the
-- 2048-byte limit is the engine's (MAX_KEY_BYTES) and keeps index entries under InnoDB's 3072.
CREATE TABLE IF NOT EXISTS rudder_log (
    revision        BIGINT          NOT NULL,
    sub             BIGINT          NOT NULL,
    `key`           VARBINARY(2048) NOT NULL,
    value           LONGBLOB        NOT NULL,
    create_revision BIGINT          NOT NULL,
    prev_revision   BIGINT          NOT NULL,
    version         BIGINT          NOT NULL,
    lease           BIGINT          NOT NULL,
    deleted         BIGINT          NOT NULL,
    -- Revision of the key's next row; 0 while this row is the key's latest.
    next_revision   BIGINT          NOT NULL,
    PRIMARY KEY (revision, sub),
    -- Covers range reads and counts at any revision without touching the table (InnoDB has
    -- no INCLUDE: the covered columns are trailing key parts).
    KEY rudder_log_key_revision (`key`, revision, next_revision, deleted),
    KEY rudder_log_lease (lease),
    -- Compaction finds what it may remove through these. MySQL has no partial indexes, so
    -- unlike PostgreSQL's and SQLite's they hold one entry per row, not only the history not
    -- yet compacted; compaction's scans still read only that history (next_revision > 0,
    -- deleted = 1), and every write pays for one more index entry per row.
    KEY rudder_log_superseded (next_revision),
    KEY rudder_log_tombstones (deleted, revision)
) ENGINE = InnoDB;

-- The store's revision counter; a write transaction locks this row first (SELECT … FOR
-- UPDATE), so writers commit one after another in revision order and revisions have no gaps.
CREATE TABLE IF NOT EXISTS rudder_meta (
    id               BIGINT PRIMARY KEY CHECK (id = 1),
    revision         BIGINT NOT NULL,
    compact_revision BIGINT NOT NULL,
    -- The revision up to which compaction has started removing rows (set before the rows go).
    purged_revision  BIGINT NOT NULL DEFAULT 0
) ENGINE = InnoDB;
INSERT IGNORE INTO rudder_meta (id, revision, compact_revision, purged_revision) VALUES (1, 1, 0, 0);

CREATE TABLE IF NOT EXISTS rudder_lease (
    id            BIGINT PRIMARY KEY,
    ttl           BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL
) ENGINE = InnoDB;
