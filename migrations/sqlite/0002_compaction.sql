-- Compaction finds what it may remove through these two small indexes: rows superseded by a
-- later write (next_revision set), and tombstones. Neither grows with the number of keys,
-- only with the history not yet compacted.
CREATE INDEX IF NOT EXISTS rudder_log_superseded ON rudder_log (next_revision) WHERE next_revision <> 0;
CREATE INDEX IF NOT EXISTS rudder_log_tombstones ON rudder_log (revision) WHERE deleted = 1;
-- The revision up to which compaction has started removing rows (it is set before the rows
-- go): a watcher that read the log below it may have missed events.
ALTER TABLE rudder_meta ADD COLUMN purged_revision INTEGER NOT NULL DEFAULT 0;
