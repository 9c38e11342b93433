-- +goose Up
CREATE TABLE history_entries (
    id         TEXT    NOT NULL PRIMARY KEY,
    session_id TEXT    NOT NULL,
    run_id     TEXT    NOT NULL DEFAULT '',
    sequence   INTEGER NOT NULL,
    type       TEXT    NOT NULL,
    -- Unix nanoseconds: SQLite has no time type and integers sort.
    time       INTEGER NOT NULL,
    tenant     TEXT    NOT NULL DEFAULT '',
    data       TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX history_entries_session_sequence ON history_entries (session_id, sequence);

-- +goose Down
DROP TABLE history_entries;
