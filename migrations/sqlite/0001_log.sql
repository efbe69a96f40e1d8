-- The log-structured key-value store: one row per key per revision that wrote it.
CREATE TABLE IF NOT EXISTS rudder_log (
    revision        INTEGER NOT NULL,
    sub             INTEGER NOT NULL,
    key             BLOB    NOT NULL,
    value           BLOB    NOT NULL,
    create_revision INTEGER NOT NULL,
    prev_revision   INTEGER NOT NULL,
    version         INTEGER NOT NULL,
    lease           INTEGER NOT NULL,
    deleted         INTEGER NOT NULL,
    -- Revision of the key's next row; 0 while this row is the key's latest.
    next_revision   INTEGER NOT NULL,
    PRIMARY KEY (revision, sub)
);
-- Covers range reads and counts at any revision without touching the table.
CREATE INDEX IF NOT EXISTS rudder_log_key_revision ON rudder_log (key, revision, next_revision, deleted);
CREATE INDEX IF NOT EXISTS rudder_log_lease ON rudder_log (lease) WHERE lease != 0;

-- The store's revision counter; a write transaction locks this row first.
CREATE TABLE IF NOT EXISTS rudder_meta (
    id               INTEGER PRIMARY KEY CHECK (id = 1),
    revision         INTEGER NOT NULL,
    compact_revision INTEGER NOT NULL
);
INSERT OR IGNORE INTO rudder_meta (id, revision, compact_revision) VALUES (1, 1, 0);

CREATE TABLE IF NOT EXISTS rudder_lease (
    id            INTEGER PRIMARY KEY,
    ttl           INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
);
