-- +goose Up
-- pk orders rows by arrival: search pages newest first by it.
ALTER TABLE history_entries ADD COLUMN pk BIGINT GENERATED ALWAYS AS IDENTITY;
CREATE UNIQUE INDEX history_entries_pk ON history_entries (pk);
-- historyv1.EntryKind, derived from type.
ALTER TABLE history_entries ADD COLUMN kind SMALLINT NOT NULL DEFAULT 0;
UPDATE history_entries SET kind = CASE WHEN type LIKE 'session.%' THEN 1 ELSE 7 END;
-- What full-text search sees: message text, thinking, tool input and output.
ALTER TABLE history_entries ADD COLUMN text TEXT NOT NULL DEFAULT '';
ALTER TABLE history_entries ADD COLUMN text_tsv tsvector
    GENERATED ALWAYS AS (to_tsvector('english', text)) STORED;
ALTER TABLE history_entries ADD COLUMN blob_hash TEXT NOT NULL DEFAULT '';
CREATE INDEX history_entries_text_tsv ON history_entries USING gin (text_tsv);
CREATE INDEX history_entries_run_sequence ON history_entries (run_id, sequence);
CREATE INDEX history_entries_tenant_time ON history_entries (tenant, time);
CREATE INDEX history_entries_blob_hash ON history_entries (blob_hash) WHERE blob_hash <> '';

-- +goose Down
DROP INDEX history_entries_blob_hash;
DROP INDEX history_entries_tenant_time;
DROP INDEX history_entries_run_sequence;
DROP INDEX history_entries_text_tsv;
ALTER TABLE history_entries DROP COLUMN blob_hash;
ALTER TABLE history_entries DROP COLUMN text_tsv;
ALTER TABLE history_entries DROP COLUMN text;
ALTER TABLE history_entries DROP COLUMN kind;
DROP INDEX history_entries_pk;
ALTER TABLE history_entries DROP COLUMN pk;
