-- +goose Up
CREATE TABLE history_entries (
    id         TEXT        NOT NULL PRIMARY KEY,
    session_id TEXT        NOT NULL,
    run_id     TEXT        NOT NULL DEFAULT '',
    sequence   BIGINT      NOT NULL,
    type       TEXT        NOT NULL,
    time       TIMESTAMPTZ NOT NULL,
    tenant     TEXT        NOT NULL DEFAULT '',
    -- JSON text as ingested; TEXT rather than JSONB so that no payload can make
    -- a batch fail to insert and stall ingestion.
    data       TEXT        NOT NULL DEFAULT ''
);
CREATE INDEX history_entries_session_sequence ON history_entries (session_id, sequence);

-- +goose Down
DROP TABLE history_entries;
