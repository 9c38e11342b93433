-- +goose Up
CREATE TABLE agent_runs (
    id           TEXT PRIMARY KEY,
    tenant       TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    state        INTEGER NOT NULL,
    create_time  INTEGER NOT NULL,
    update_time  INTEGER NOT NULL,
    data         BLOB NOT NULL,
    conversation BLOB,
    base_url     TEXT NOT NULL DEFAULT '',
    own_key      INTEGER NOT NULL DEFAULT 0,
    sealed_key   BLOB
);
CREATE INDEX agent_runs_session_order ON agent_runs (tenant, session_id, create_time DESC, id DESC);
CREATE INDEX agent_runs_state ON agent_runs (state);

-- +goose Down
DROP TABLE agent_runs;
