-- +goose Up
-- The table is rebuilt with an integer primary key: the full-text index
-- refers to rows by rowid, which only an INTEGER PRIMARY KEY keeps stable
-- across VACUUM.
CREATE TABLE history_entries_v2 (
    pk         INTEGER PRIMARY KEY,
    id         TEXT    NOT NULL UNIQUE,
    session_id TEXT    NOT NULL,
    run_id     TEXT    NOT NULL DEFAULT '',
    sequence   INTEGER NOT NULL,
    type       TEXT    NOT NULL,
    -- historyv1.EntryKind, derived from type.
    kind       INTEGER NOT NULL DEFAULT 0,
    time       INTEGER NOT NULL,
    tenant     TEXT    NOT NULL DEFAULT '',
    data       TEXT    NOT NULL DEFAULT '',
    -- What full-text search sees: message text, thinking, tool input and output.
    text       TEXT    NOT NULL DEFAULT '',
    blob_hash  TEXT    NOT NULL DEFAULT ''
);
INSERT INTO history_entries_v2 (id, session_id, run_id, sequence, type, kind, time, tenant, data)
    SELECT id, session_id, run_id, sequence, type,
           CASE WHEN type LIKE 'session.%' THEN 1 ELSE 7 END, time, tenant, data
    FROM history_entries ORDER BY sequence;
DROP TABLE history_entries;
ALTER TABLE history_entries_v2 RENAME TO history_entries;
CREATE INDEX history_entries_session_sequence ON history_entries (session_id, sequence);
CREATE INDEX history_entries_run_sequence ON history_entries (run_id, sequence);
CREATE INDEX history_entries_tenant_time ON history_entries (tenant, time);
CREATE INDEX history_entries_blob_hash ON history_entries (blob_hash);

CREATE VIRTUAL TABLE history_text USING fts5(
    text, content = 'history_entries', content_rowid = 'pk', tokenize = 'porter unicode61'
);
-- +goose StatementBegin
CREATE TRIGGER history_entries_text_insert AFTER INSERT ON history_entries WHEN new.text != '' BEGIN
    INSERT INTO history_text (rowid, text) VALUES (new.pk, new.text);
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER history_entries_text_delete AFTER DELETE ON history_entries WHEN old.text != '' BEGIN
    INSERT INTO history_text (history_text, rowid, text) VALUES ('delete', old.pk, old.text);
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER history_entries_text_delete;
DROP TRIGGER history_entries_text_insert;
DROP TABLE history_text;
CREATE TABLE history_entries_v1 (
    id         TEXT    NOT NULL PRIMARY KEY,
    session_id TEXT    NOT NULL,
    run_id     TEXT    NOT NULL DEFAULT '',
    sequence   INTEGER NOT NULL,
    type       TEXT    NOT NULL,
    time       INTEGER NOT NULL,
    tenant     TEXT    NOT NULL DEFAULT '',
    data       TEXT    NOT NULL DEFAULT ''
);
INSERT INTO history_entries_v1 SELECT id, session_id, run_id, sequence, type, time, tenant, data FROM history_entries;
DROP TABLE history_entries;
ALTER TABLE history_entries_v1 RENAME TO history_entries;
CREATE INDEX history_entries_session_sequence ON history_entries (session_id, sequence);
