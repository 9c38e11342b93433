package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	"github.com/deskgrid/deskgrid/services/platform/sqlstore"
)

// SQL is a Store in SQLite or PostgreSQL.
type SQL struct {
	db       *sqlstore.DB
	w, r     *sql.DB
	postgres bool
}

// q rewrites ? placeholders to $n for PostgreSQL.
func (s *SQL) q(query string) string { return s.db.Rebind(query) }

func (s *SQL) bool(v bool) any {
	if s.postgres {
		return v
	}
	if v {
		return 1
	}
	return 0
}

func (s *SQL) Create(ctx context.Context, r *agentv1.Run, a Access) error {
	data, err := proto.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode run %s: %w", r.GetId(), err)
	}
	var sealed any
	if len(a.SealedKey) > 0 {
		sealed = a.SealedKey
	}
	_, err = s.w.ExecContext(ctx, s.q(`INSERT INTO agent_runs (id, tenant, session_id, state, create_time, update_time, data, base_url, own_key, sealed_key)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		r.GetId(), r.GetTenant(), r.GetSessionId(), int32(r.GetState()), createNanos(r), r.GetUpdateTime().AsTime().UnixNano(), data, a.BaseURL, s.bool(a.OwnKey), sealed)
	if err != nil && sqlstore.IsUnique(err) {
		return fmt.Errorf("%w: %s", ErrExists, r.GetId())
	}
	if err != nil {
		return fmt.Errorf("insert run %s: %w", r.GetId(), err)
	}
	return nil
}

func (s *SQL) Update(ctx context.Context, r *agentv1.Run) error {
	data, err := proto.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode run %s: %w", r.GetId(), err)
	}
	res, err := s.w.ExecContext(ctx, s.q(`UPDATE agent_runs SET state = ?, update_time = ?, data = ? WHERE id = ?`),
		int32(r.GetState()), r.GetUpdateTime().AsTime().UnixNano(), data, r.GetId())
	if err != nil {
		return fmt.Errorf("update run %s: %w", r.GetId(), err)
	}
	return affected(res, r.GetId())
}

func affected(res sql.Result, id string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("run %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return nil
}

func decodeRun(data []byte) (*agentv1.Run, error) {
	r := &agentv1.Run{}
	if err := proto.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("decode run: %w", err)
	}
	return r, nil
}

func (s *SQL) Get(ctx context.Context, id string) (*agentv1.Run, error) {
	var data []byte
	err := s.r.QueryRowContext(ctx, s.q(`SELECT data FROM agent_runs WHERE id = ?`), id).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("read run %s: %w", id, err)
	}
	return decodeRun(data)
}

func (s *SQL) List(ctx context.Context, tenant, sessionID string, pageSize int, tok string) ([]*agentv1.Run, string, error) {
	if pageSize <= 0 {
		pageSize = DefaultPageSize
	}
	query := `SELECT id, create_time, data FROM agent_runs WHERE tenant = ? AND session_id = ?`
	args := []any{tenant, sessionID}
	if tok != "" {
		n, id, err := parsePageToken(tok)
		if err != nil {
			return nil, "", err
		}
		query += ` AND (create_time < ? OR (create_time = ? AND id < ?))`
		args = append(args, n, n, id)
	}
	query += ` ORDER BY create_time DESC, id DESC LIMIT ?`
	args = append(args, pageSize+1)
	rows, err := s.r.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, "", fmt.Errorf("list runs: %w", err)
	}
	defer rows.Close()
	var (
		out    []*agentv1.Run
		next   string
		lastID string
		lastTS int64
	)
	for rows.Next() {
		var (
			id   string
			ts   int64
			data []byte
		)
		if err := rows.Scan(&id, &ts, &data); err != nil {
			return nil, "", fmt.Errorf("list runs: %w", err)
		}
		if len(out) == pageSize {
			next = pageToken(lastTS, lastID)
			break
		}
		r, err := decodeRun(data)
		if err != nil {
			return nil, "", err
		}
		out = append(out, r)
		lastID, lastTS = id, ts
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list runs: %w", err)
	}
	return out, next, nil
}

func (s *SQL) SaveConversation(ctx context.Context, id string, conv []byte) error {
	res, err := s.w.ExecContext(ctx, s.q(`UPDATE agent_runs SET conversation = ? WHERE id = ?`), conv, id)
	if err != nil {
		return fmt.Errorf("store conversation of run %s: %w", id, err)
	}
	return affected(res, id)
}

func (s *SQL) Conversation(ctx context.Context, id string) ([]byte, error) {
	var conv []byte
	err := s.r.QueryRowContext(ctx, s.q(`SELECT conversation FROM agent_runs WHERE id = ?`), id).Scan(&conv)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("read conversation of run %s: %w", id, err)
	}
	return conv, nil
}

func (s *SQL) Access(ctx context.Context, id string) (Access, error) {
	var (
		a   Access
		own any
	)
	err := s.r.QueryRowContext(ctx, s.q(`SELECT base_url, own_key, sealed_key FROM agent_runs WHERE id = ?`), id).Scan(&a.BaseURL, &own, &a.SealedKey)
	if errors.Is(err, sql.ErrNoRows) {
		return Access{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Access{}, fmt.Errorf("read run %s: %w", id, err)
	}
	switch v := own.(type) {
	case bool:
		a.OwnKey = v
	case int64:
		a.OwnKey = v != 0
	}
	return a, nil
}

func (s *SQL) Unfinished(ctx context.Context) ([]*agentv1.Run, error) {
	rows, err := s.r.QueryContext(ctx, s.q(`SELECT data FROM agent_runs WHERE state NOT IN (?, ?, ?)`),
		int32(agentv1.RunState_RUN_STATE_SUCCEEDED), int32(agentv1.RunState_RUN_STATE_FAILED), int32(agentv1.RunState_RUN_STATE_CANCELLED))
	if err != nil {
		return nil, fmt.Errorf("unfinished runs: %w", err)
	}
	defer rows.Close()
	var out []*agentv1.Run
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("unfinished runs: %w", err)
		}
		r, err := decodeRun(data)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Close closes the database.
func (s *SQL) Close() error { return s.db.Close() }
