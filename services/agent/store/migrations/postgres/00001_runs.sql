-- +goose Up
CREATE TABLE agent_runs (
    id           TEXT PRIMARY KEY,
    tenant       TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    state        INTEGER NOT NULL,
    create_time  BIGINT NOT NULL,
    update_time  BIGINT NOT NULL,
    data         BYTEA NOT NULL,
    conversation BYTEA,
    base_url     TEXT NOT NULL DEFAULT '',
    own_key      BOOLEAN NOT NULL DEFAULT FALSE,
    sealed_key   BYTEA
);
CREATE INDEX agent_runs_session_order ON agent_runs (tenant, session_id, create_time DESC, id DESC);
CREATE INDEX agent_runs_state ON agent_runs (state);

-- +goose Down
DROP TABLE agent_runs;
