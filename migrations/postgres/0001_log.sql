-- The log-structured key-value store: one row per key per revision that wrote it.
-- Keys are bytea, so comparisons are byte order whatever the database's collation.
CREATE TABLE IF NOT EXISTS rudder_log (
    revision        BIGINT NOT NULL,
    sub             BIGINT NOT NULL,
    key             BYTEA  NOT NULL,
    value           BYTEA  NOT NULL,
    create_revision BIGINT NOT NULL,
    prev_revision   BIGINT NOT NULL,
    version         BIGINT NOT NULL,
    lease           BIGINT NOT NULL,
    deleted         BIGINT NOT NULL,
    -- Revision of the key's next row; 0 while this row is the key's latest.
    next_revision   BIGINT NOT NULL,
    PRIMARY KEY (revision, sub)
);
-- Covers range reads and counts at any revision without touching the table.
CREATE UNIQUE INDEX IF NOT EXISTS rudder_log_key_revision ON rudder_log (key, revision) INCLUDE (next_revision, deleted);
CREATE INDEX IF NOT EXISTS rudder_log_lease ON rudder_log (lease) WHERE lease <> 0;

-- The store's revision counter; a write transaction locks this row first, so writers commit
-- one after another in revision order and revisions have no gaps.
CREATE TABLE IF NOT EXISTS rudder_meta (
    id               BIGINT PRIMARY KEY CHECK (id = 1),
    revision         BIGINT NOT NULL,
    compact_revision BIGINT NOT NULL
);
INSERT INTO rudder_meta (id, revision, compact_revision) VALUES (1, 1, 0) ON CONFLICT DO NOTHING;

CREATE TABLE IF NOT EXISTS rudder_lease (
    id            BIGINT PRIMARY KEY,
    ttl           BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL
);
