-- +goose Up
CREATE TABLE auth_tenants (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL DEFAULT '',
    create_time BIGINT NOT NULL
);
CREATE TABLE auth_keys (
    id             TEXT PRIMARY KEY,
    tenant         TEXT NOT NULL REFERENCES auth_tenants (id),
    name           TEXT NOT NULL DEFAULT '',
    hash           BYTEA NOT NULL,
    scopes         TEXT NOT NULL,
    create_time    BIGINT NOT NULL,
    last_used_time BIGINT NOT NULL DEFAULT 0,
    revoke_time    BIGINT NOT NULL DEFAULT 0,
    expire_time    BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX auth_keys_tenant ON auth_keys (tenant, create_time);

-- +goose Down
DROP TABLE auth_keys;
DROP TABLE auth_tenants;
