// Package keystore keeps deskgrid's tenants and API keys in SQLite or
// PostgreSQL. A key's secret is never stored: only its hash (see
// auth.HashSecret), so the plaintext exists once, in CreateKey's answer.
package keystore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"time"

	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/sqlstore"
)

//go:embed migrations
var migrations embed.FS

const versionTable = "auth_goose_version"

// DefaultTenant is the tenant EnsureFirstKey creates: the one that owns
// what the services record when authentication is off.
const DefaultTenant = auth.DefaultTenant

// Errors the store returns (wrapped); callers map them to status codes.
var (
	ErrNotFound      = errors.New("not found")
	ErrExists        = errors.New("already exists")
	ErrInvalid       = errors.New("invalid argument")
	ErrTenantHasKeys = errors.New("tenant still has active keys: revoke them first or force the deletion")
)

// Tenant owns sessions, runs and keys.
type Tenant struct {
	ID         string
	Name       string
	CreateTime time.Time
}

// Key is a stored API key without its secret.
type Key struct {
	ID     string
	Tenant string
	Name   string
	Scopes auth.Scopes
	// Zero times: never used, not revoked, never expires.
	CreateTime   time.Time
	LastUsedTime time.Time
	RevokeTime   time.Time
	ExpireTime   time.Time
}

// Active reports whether the key authenticates at now.
func (k Key) Active(now time.Time) bool {
	return k.RevokeTime.IsZero() && (k.ExpireTime.IsZero() || now.Before(k.ExpireTime))
}

// Store is the tenants and keys in one database.
type Store struct {
	db       *sqlstore.DB
	w, r     *sql.DB
	postgres bool
	now      func() time.Time
}

func config(logger *slog.Logger) sqlstore.Config {
	sub, _ := fs.Sub(migrations, "migrations")
	// Keys are few and written rarely: a revocation must survive a power loss.
	return sqlstore.Config{Name: "auth", Migrations: sub, VersionTable: versionTable, Logger: logger, MaxConns: 8, Durable: true}
}

// Open picks the database from dsn: a postgres:// or postgresql:// URL is
// PostgreSQL (a search_path parameter picks the schema); anything else is
// a SQLite file path, optionally prefixed with "sqlite:", "sqlite://" or
// "file:" (see sqlstore.Open).
func Open(ctx context.Context, dsn string, logger *slog.Logger) (*Store, error) {
	return wrap(sqlstore.Open(ctx, dsn, config(logger)))
}

// OpenPostgres connects and migrates; replicas starting together take an
// advisory lock so only one migrates.
func OpenPostgres(ctx context.Context, dsn string, logger *slog.Logger) (*Store, error) {
	return wrap(sqlstore.OpenPostgres(ctx, dsn, config(logger)))
}

// OpenSQLite opens (creating if needed) the database file at path and
// migrates it. One connection writes, so writers queue in the process
// instead of failing on the file lock.
func OpenSQLite(ctx context.Context, path string, logger *slog.Logger) (*Store, error) {
	return wrap(sqlstore.OpenSQLite(ctx, path, config(logger)))
}

func wrap(db *sqlstore.DB, err error) (*Store, error) {
	if err != nil {
		return nil, err
	}
	return &Store{db: db, w: db.W, r: db.R, postgres: db.Postgres(), now: time.Now}, nil
}

// lockID is an advisory lock of the store's own (not the migrations').
func lockID(what string) int64 {
	h := fnv.New64a()
	h.Write([]byte("deskgrid.auth/" + what))
	return int64(h.Sum64() &^ (1 << 63))
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// q rewrites ? placeholders to $n for PostgreSQL.
func (s *Store) q(query string) string { return s.db.Rebind(query) }

// ValidTenantID checks a tenant id: 1 to 63 lower-case letters, digits and
// dashes, not starting with a dash (safe in paths, labels and subjects).
func ValidTenantID(id string) error {
	ok := len(id) >= 1 && len(id) <= 63 && id[0] != '-'
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'
	}
	if !ok {
		return fmt.Errorf("%w: tenant id %q must be 1-63 lower-case letters, digits or dashes, starting with a letter or digit", ErrInvalid, id)
	}
	return nil
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// CreateTenant adds a tenant; name is free text for people.
func (s *Store) CreateTenant(ctx context.Context, id, name string) (Tenant, error) {
	if err := ValidTenantID(id); err != nil {
		return Tenant{}, err
	}
	t := Tenant{ID: id, Name: name, CreateTime: s.now()}
	_, err := s.w.ExecContext(ctx, s.q("INSERT INTO auth_tenants (id, name, create_time) VALUES (?, ?, ?)"), t.ID, t.Name, nanos(t.CreateTime))
	if err != nil {
		if sqlstore.IsUnique(err) {
			return Tenant{}, fmt.Errorf("tenant %q: %w", id, ErrExists)
		}
		return Tenant{}, fmt.Errorf("create tenant %q: %w", id, err)
	}
	return t, nil
}

// GetTenant returns one tenant.
func (s *Store) GetTenant(ctx context.Context, id string) (Tenant, error) {
	var t Tenant
	var ct int64
	err := s.r.QueryRowContext(ctx, s.q("SELECT id, name, create_time FROM auth_tenants WHERE id = ?"), id).Scan(&t.ID, &t.Name, &ct)
	if errors.Is(err, sql.ErrNoRows) {
		return Tenant{}, fmt.Errorf("tenant %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("get tenant %q: %w", id, err)
	}
	t.CreateTime = fromNanos(ct)
	return t, nil
}

// ListTenants returns every tenant by id.
func (s *Store) ListTenants(ctx context.Context) ([]Tenant, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT id, name, create_time FROM auth_tenants ORDER BY id")
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	defer rows.Close()
	var out []Tenant
	for rows.Next() {
		var t Tenant
		var ct int64
		if err := rows.Scan(&t.ID, &t.Name, &ct); err != nil {
			return nil, fmt.Errorf("list tenants: %w", err)
		}
		t.CreateTime = fromNanos(ct)
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return out, nil
}

// DeleteTenant removes a tenant and its revoked or expired keys. While it
// still has active keys it refuses with ErrTenantHasKeys, unless force,
// which deletes those too. The tenant's sessions and runs are the
// services' to end.
func (s *Store) DeleteTenant(ctx context.Context, id string, force bool) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("delete tenant %q: %w", id, err)
	}
	defer func() { _ = tx.Rollback() }()
	now := nanos(s.now())
	var active int
	if err := tx.QueryRowContext(ctx, s.q("SELECT count(*) FROM auth_keys WHERE tenant = ? AND revoke_time = 0 AND (expire_time = 0 OR expire_time > ?)"), id, now).Scan(&active); err != nil {
		return fmt.Errorf("delete tenant %q: %w", id, err)
	}
	if active > 0 && !force {
		return fmt.Errorf("tenant %q has %d active keys: %w", id, active, ErrTenantHasKeys)
	}
	if _, err := tx.ExecContext(ctx, s.q("DELETE FROM auth_keys WHERE tenant = ?"), id); err != nil {
		return fmt.Errorf("delete tenant %q keys: %w", id, err)
	}
	res, err := tx.ExecContext(ctx, s.q("DELETE FROM auth_tenants WHERE id = ?"), id)
	if err != nil {
		return fmt.Errorf("delete tenant %q: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("tenant %q: %w", id, ErrNotFound)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("delete tenant %q: %w", id, err)
	}
	return nil
}

// CreateKey makes a key for tenant and returns it with its plaintext,
// which is shown to the user once and never again. A zero expire means the
// key does not expire.
func (s *Store) CreateKey(ctx context.Context, tenant string, scopes auth.Scopes, name string, expire time.Time) (Key, string, error) {
	return s.createKey(ctx, s.w, tenant, scopes, name, expire)
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *Store) createKey(ctx context.Context, db execer, tenant string, scopes auth.Scopes, name string, expire time.Time) (Key, string, error) {
	scopes, err := auth.NormalizeScopes(scopes)
	if err != nil {
		return Key{}, "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	now := s.now()
	if !expire.IsZero() && !expire.After(now) {
		return Key{}, "", fmt.Errorf("%w: expiry %s is not in the future", ErrInvalid, expire.Format(time.RFC3339))
	}
	var exists int
	if err := db.QueryRowContext(ctx, s.q("SELECT count(*) FROM auth_tenants WHERE id = ?"), tenant).Scan(&exists); err != nil {
		return Key{}, "", fmt.Errorf("create key: %w", err)
	}
	if exists == 0 {
		return Key{}, "", fmt.Errorf("tenant %q: %w", tenant, ErrNotFound)
	}
	plain, id, hash := auth.NewKey()
	k := Key{ID: id, Tenant: tenant, Name: name, Scopes: scopes, CreateTime: now, ExpireTime: expire}
	_, err = db.ExecContext(ctx, s.q("INSERT INTO auth_keys (id, tenant, name, hash, scopes, create_time, expire_time) VALUES (?, ?, ?, ?, ?, ?, ?)"),
		k.ID, k.Tenant, k.Name, hash, k.Scopes.String(), nanos(now), nanos(expire))
	if err != nil {
		return Key{}, "", fmt.Errorf("create key for %q: %w", tenant, err)
	}
	return k, plain, nil
}

const keyColumns = "id, tenant, name, scopes, create_time, last_used_time, revoke_time, expire_time"

type scanner interface{ Scan(...any) error }

func scanKey(sc scanner, extra ...any) (Key, error) {
	var k Key
	var scopes string
	var ct, lu, rt, et int64
	if err := sc.Scan(append([]any{&k.ID, &k.Tenant, &k.Name, &scopes, &ct, &lu, &rt, &et}, extra...)...); err != nil {
		return Key{}, err
	}
	ss, err := auth.ParseScopes(scopes)
	if err != nil {
		return Key{}, fmt.Errorf("key %s: stored scopes: %w", k.ID, err)
	}
	k.Scopes = ss
	k.CreateTime, k.LastUsedTime, k.RevokeTime, k.ExpireTime = fromNanos(ct), fromNanos(lu), fromNanos(rt), fromNanos(et)
	return k, nil
}

// GetKey returns one key.
func (s *Store) GetKey(ctx context.Context, id string) (Key, error) {
	k, err := scanKey(s.r.QueryRowContext(ctx, s.q("SELECT "+keyColumns+" FROM auth_keys WHERE id = ?"), id))
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, fmt.Errorf("key %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Key{}, fmt.Errorf("get key %q: %w", id, err)
	}
	return k, nil
}

// ListKeys returns a tenant's keys, revoked ones included, oldest first;
// tenant "" lists every tenant's keys.
func (s *Store) ListKeys(ctx context.Context, tenant string) ([]Key, error) {
	query, args := "SELECT "+keyColumns+" FROM auth_keys ORDER BY create_time, id", []any{}
	if tenant != "" {
		query, args = s.q("SELECT "+keyColumns+" FROM auth_keys WHERE tenant = ? ORDER BY create_time, id"), []any{tenant}
	}
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	defer rows.Close()
	var out []Key
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list keys: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return out, nil
}

// RevokeKey ends a key. Verifiers that cached it stop accepting it within
// their cache TTL (at once in a process that calls Verifier.Forget).
// Revoking a revoked key keeps its first revocation time.
func (s *Store) RevokeKey(ctx context.Context, id string) error {
	res, err := s.w.ExecContext(ctx, s.q("UPDATE auth_keys SET revoke_time = CASE WHEN revoke_time = 0 THEN ? ELSE revoke_time END WHERE id = ?"), nanos(s.now()), id)
	if err != nil {
		return fmt.Errorf("revoke key %q: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("key %q: %w", id, ErrNotFound)
	}
	return nil
}

// LookupKey implements auth.KeySource.
func (s *Store) LookupKey(ctx context.Context, id string) (auth.KeyRecord, error) {
	var hash []byte
	k, err := scanKey(s.r.QueryRowContext(ctx, s.q("SELECT "+keyColumns+", hash FROM auth_keys WHERE id = ?"), id), &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return auth.KeyRecord{}, fmt.Errorf("key %q: %w", id, auth.ErrKeyNotFound)
	}
	if err != nil {
		return auth.KeyRecord{}, fmt.Errorf("look up key %q: %w", id, err)
	}
	return auth.KeyRecord{ID: k.ID, Tenant: k.Tenant, Hash: hash, Scopes: k.Scopes,
		LastUsedTime: k.LastUsedTime, RevokeTime: k.RevokeTime, ExpireTime: k.ExpireTime}, nil
}

// TouchKey implements auth.KeySource: it records the last use, never moving
// it backwards.
func (s *Store) TouchKey(ctx context.Context, id string, t time.Time) error {
	_, err := s.w.ExecContext(ctx, s.q("UPDATE auth_keys SET last_used_time = ? WHERE id = ? AND last_used_time < ?"), nanos(t), id, nanos(t))
	if err != nil {
		return fmt.Errorf("touch key %q: %w", id, err)
	}
	return nil
}

// EnsureFirstKey bootstraps a new installation: when no key has ever been
// created it creates the tenant DefaultTenant (if missing) and an admin key
// for it, and returns the key's plaintext with created = true, for the
// caller to print once. Otherwise it returns "", false. Replicas starting
// together create one key between them.
func (s *Store) EnsureFirstKey(ctx context.Context) (plaintext string, created bool, err error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return "", false, fmt.Errorf("first key: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if s.postgres {
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", lockID("first-key")); err != nil {
			return "", false, fmt.Errorf("first key: %w", err)
		}
	}
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM auth_keys").Scan(&n); err != nil {
		return "", false, fmt.Errorf("first key: %w", err)
	}
	if n > 0 {
		return "", false, nil
	}
	if err := tx.QueryRowContext(ctx, s.q("SELECT count(*) FROM auth_tenants WHERE id = ?"), DefaultTenant).Scan(&n); err != nil {
		return "", false, fmt.Errorf("first key: %w", err)
	}
	if n == 0 {
		if _, err := tx.ExecContext(ctx, s.q("INSERT INTO auth_tenants (id, name, create_time) VALUES (?, ?, ?)"), DefaultTenant, "Default tenant", nanos(s.now())); err != nil {
			return "", false, fmt.Errorf("first key: default tenant: %w", err)
		}
	}
	_, plain, err := s.createKey(ctx, tx, DefaultTenant, auth.Scopes{auth.ScopeAdmin}, "bootstrap", time.Time{})
	if err != nil {
		return "", false, fmt.Errorf("first key: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return "", false, fmt.Errorf("first key: %w", err)
	}
	return plain, true, nil
}
