-- +goose Up
CREATE TABLE session_records (
    id          TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    state       INTEGER NOT NULL,
    node_id     TEXT NOT NULL DEFAULT '',
    request_id  TEXT,
    create_time INTEGER NOT NULL,
    update_time INTEGER NOT NULL,
    expire_at   INTEGER,
    idle_at     INTEGER,
    generation  INTEGER NOT NULL,
    data        BLOB NOT NULL
);
CREATE UNIQUE INDEX session_records_request ON session_records (tenant, request_id) WHERE request_id IS NOT NULL;
CREATE INDEX session_records_order ON session_records (create_time DESC, id DESC);
CREATE INDEX session_records_tenant_order ON session_records (tenant, create_time DESC, id DESC);
CREATE INDEX session_records_node_state ON session_records (node_id, state);
CREATE INDEX session_records_expire ON session_records (state, expire_at);
CREATE INDEX session_records_idle ON session_records (state, idle_at);
CREATE INDEX session_records_update ON session_records (state, update_time);

CREATE TABLE session_labels (
    session_id  TEXT NOT NULL REFERENCES session_records (id) ON DELETE CASCADE,
    label_key   TEXT NOT NULL,
    label_value TEXT NOT NULL,
    PRIMARY KEY (session_id, label_key)
);
CREATE INDEX session_labels_pair ON session_labels (label_key, label_value, session_id);

-- +goose Down
DROP TABLE session_labels;
DROP TABLE session_records;
