package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/sqlstore"
	"github.com/deskgrid/deskgrid/services/session/state"
)

// sqlStore is the Store over database/sql. Writes go through w and reads
// through r; they are the same pool except on SQLite, where one connection
// writes and several read.
type sqlStore struct {
	db   *sqlstore.DB
	w, r *sql.DB
}

// bind rewrites ? placeholders for the database.
func (s *sqlStore) bind(q string) string { return s.db.Rebind(q) }

// row is the column form of a session.
type row struct {
	tenant     string
	state      int32
	nodeID     string
	createTime int64
	updateTime int64
	expireAt   sql.NullInt64
	idleAt     sql.NullInt64
	generation int64
	data       []byte
}

func toRow(s *sessionv1.Session) (row, error) {
	if s.GetId() == "" {
		return row{}, errors.New("session has no id")
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
	if err != nil {
		return row{}, fmt.Errorf("encode session %s: %w", s.GetId(), err)
	}
	r := row{
		tenant:     s.GetTenant(),
		state:      int32(s.GetState()),
		nodeID:     s.GetNodeId(),
		createTime: s.GetCreateTime().AsTime().UnixNano(),
		updateTime: s.GetUpdateTime().AsTime().UnixNano(),
		generation: s.GetGeneration(),
		data:       data,
	}
	if s.GetExpireTime() != nil {
		r.expireAt = sql.NullInt64{Int64: s.GetExpireTime().AsTime().UnixNano(), Valid: true}
	}
	if s.GetLastActiveTime() != nil && s.GetIdleTimeout().AsDuration() > 0 {
		at := s.GetLastActiveTime().AsTime().Add(s.GetIdleTimeout().AsDuration())
		r.idleAt = sql.NullInt64{Int64: at.UnixNano(), Valid: true}
	}
	return r, nil
}

func decode(data []byte) (*sessionv1.Session, error) {
	s := &sessionv1.Session{}
	if err := proto.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("decode session: %w", err)
	}
	return s, nil
}

func (s *sqlStore) Create(ctx context.Context, sess *sessionv1.Session, requestID string) error {
	r, err := toRow(sess)
	if err != nil {
		return err
	}
	var rid sql.NullString
	if requestID != "" {
		rid = sql.NullString{String: requestID, Valid: true}
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("create session %s: %w", sess.GetId(), err)
	}
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(ctx, s.bind(`INSERT INTO session_records
		(id, tenant, state, node_id, request_id, create_time, update_time, expire_at, idle_at, generation, data)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		sess.GetId(), r.tenant, r.state, r.nodeID, rid, r.createTime, r.updateTime, r.expireAt, r.idleAt, r.generation, r.data)
	if err != nil {
		if sqlstore.IsUnique(err) {
			return fmt.Errorf("create session %s: %w", sess.GetId(), ErrAlreadyExists)
		}
		return fmt.Errorf("create session %s: %w", sess.GetId(), err)
	}
	for k, v := range sess.GetLabels() {
		if _, err := tx.ExecContext(ctx, s.bind(`INSERT INTO session_labels (session_id, label_key, label_value) VALUES (?, ?, ?)`),
			sess.GetId(), k, v); err != nil {
			return fmt.Errorf("create session %s: label %s: %w", sess.GetId(), k, err)
		}
	}
	if err := tx.Commit(); err != nil {
		if sqlstore.IsUnique(err) {
			return fmt.Errorf("create session %s: %w", sess.GetId(), ErrAlreadyExists)
		}
		return fmt.Errorf("create session %s: commit: %w", sess.GetId(), err)
	}
	return nil
}

func (s *sqlStore) Get(ctx context.Context, id string) (*sessionv1.Session, error) {
	var data []byte
	err := s.r.QueryRowContext(ctx, s.bind(`SELECT data FROM session_records WHERE id = ?`), id).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("session %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get session %s: %w", id, err)
	}
	return decode(data)
}

func (s *sqlStore) Update(ctx context.Context, sess *sessionv1.Session, expectGeneration int64) error {
	r, err := toRow(sess)
	if err != nil {
		return err
	}
	res, err := s.w.ExecContext(ctx, s.bind(`UPDATE session_records SET
		state = ?, node_id = ?, update_time = ?, expire_at = ?, idle_at = ?, generation = ?, data = ?
		WHERE id = ? AND generation = ?`),
		r.state, r.nodeID, r.updateTime, r.expireAt, r.idleAt, r.generation, r.data, sess.GetId(), expectGeneration)
	if err != nil {
		return fmt.Errorf("update session %s: %w", sess.GetId(), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("update session %s: %w", sess.GetId(), err)
	}
	if n == 1 {
		return nil
	}
	// Nothing matched: tell a vanished session from a changed one.
	var gen int64
	err = s.w.QueryRowContext(ctx, s.bind(`SELECT generation FROM session_records WHERE id = ?`), sess.GetId()).Scan(&gen)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("update session %s: %w", sess.GetId(), ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("update session %s: %w", sess.GetId(), err)
	}
	return fmt.Errorf("update session %s: generation is %d, not %d: %w", sess.GetId(), gen, expectGeneration, ErrConflict)
}

// pageToken is the position after the last session of a page, with a hash
// of the filters that made it.
type pageToken struct {
	CreateTime int64  `json:"c"`
	ID         string `json:"i"`
	Filter     uint64 `json:"f"`
}

func filterHash(f Filter) uint64 {
	h := fnv.New64a()
	w := func(s string) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	w(f.Tenant)
	w(f.NodeID)
	states := slices.Clone(f.States)
	slices.Sort(states)
	states = slices.Compact(states)
	for _, st := range states {
		w(strconv.Itoa(int(st)))
	}
	w("|")
	keys := make([]string, 0, len(f.Labels))
	for k := range f.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w(k)
		w(f.Labels[k])
	}
	return h.Sum64()
}

func encodeToken(t pageToken) string {
	b, _ := json.Marshal(t)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeToken(s string, f Filter) (pageToken, error) {
	var t pageToken
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return t, ErrInvalidPageToken
	}
	if err := json.Unmarshal(b, &t); err != nil || t.ID == "" {
		return t, ErrInvalidPageToken
	}
	if t.Filter != filterHash(f) {
		return t, fmt.Errorf("%w: made for other filters", ErrInvalidPageToken)
	}
	return t, nil
}

func (s *sqlStore) List(ctx context.Context, f Filter) ([]*sessionv1.Session, string, error) {
	size := f.PageSize
	if size <= 0 {
		size = DefaultPageSize
	}
	var (
		where []string
		args  []any
	)
	if f.Tenant != "" {
		where = append(where, "s.tenant = ?")
		args = append(args, f.Tenant)
	}
	if f.NodeID != "" {
		where = append(where, "s.node_id = ?")
		args = append(args, f.NodeID)
	}
	if len(f.States) > 0 {
		where = append(where, "s.state IN ("+placeholders(len(f.States))+")")
		for _, st := range f.States {
			args = append(args, int32(st))
		}
	}
	keys := make([]string, 0, len(f.Labels))
	for k := range f.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		where = append(where, "EXISTS (SELECT 1 FROM session_labels l WHERE l.session_id = s.id AND l.label_key = ? AND l.label_value = ?)")
		args = append(args, k, f.Labels[k])
	}
	if f.PageToken != "" {
		t, err := decodeToken(f.PageToken, f)
		if err != nil {
			return nil, "", err
		}
		where = append(where, "(s.create_time < ? OR (s.create_time = ? AND s.id < ?))")
		args = append(args, t.CreateTime, t.CreateTime, t.ID)
	}
	q := "SELECT s.create_time, s.id, s.data FROM session_records s"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY s.create_time DESC, s.id DESC LIMIT ?"
	args = append(args, size+1)

	rows, err := s.r.QueryContext(ctx, s.bind(q), args...)
	if err != nil {
		return nil, "", fmt.Errorf("list sessions: %w", err)
	}
	defer rows.Close()
	var (
		out  []*sessionv1.Session
		last pageToken
		more bool
	)
	for rows.Next() {
		if len(out) == size {
			more = true
			break
		}
		var (
			ct   int64
			id   string
			data []byte
		)
		if err := rows.Scan(&ct, &id, &data); err != nil {
			return nil, "", fmt.Errorf("list sessions: %w", err)
		}
		sess, err := decode(data)
		if err != nil {
			return nil, "", err
		}
		out = append(out, sess)
		last = pageToken{CreateTime: ct, ID: id}
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list sessions: %w", err)
	}
	next := ""
	if more {
		last.Filter = filterHash(f)
		next = encodeToken(last)
	}
	return out, next, nil
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func (s *sqlStore) FindByRequestID(ctx context.Context, tenant, requestID string) (*sessionv1.Session, error) {
	var data []byte
	err := s.r.QueryRowContext(ctx, s.bind(`SELECT data FROM session_records WHERE tenant = ? AND request_id = ?`),
		tenant, requestID).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("request %q: %w", requestID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("find request %q: %w", requestID, err)
	}
	return decode(data)
}

func (s *sqlStore) ForgetFailedRequest(ctx context.Context, tenant, requestID, id string) (bool, error) {
	res, err := s.w.ExecContext(ctx, s.bind(`UPDATE session_records SET request_id = NULL
		WHERE tenant = ? AND request_id = ? AND id = ? AND state = ?`), tenant, requestID, id, int32(state.Failed))
	if err != nil {
		return false, fmt.Errorf("forget request %q: %w", requestID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("forget request %q: %w", requestID, err)
	}
	return n == 1, nil
}

func (s *sqlStore) query(ctx context.Context, what, q string, args ...any) ([]*sessionv1.Session, error) {
	rows, err := s.r.QueryContext(ctx, s.bind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []*sessionv1.Session
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		sess, err := decode(data)
		if err != nil {
			return nil, err
		}
		out = append(out, sess)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

func (s *sqlStore) ListExpired(ctx context.Context, now time.Time, limit int) ([]*sessionv1.Session, error) {
	if limit <= 0 {
		limit = DefaultPageSize
	}
	n := now.UnixNano()
	return s.query(ctx, "list expired sessions", `SELECT data FROM session_records
		WHERE (state IN (?, ?) AND expire_at IS NOT NULL AND expire_at <= ?)
		   OR (state = ? AND idle_at IS NOT NULL AND idle_at <= ?)
		ORDER BY update_time LIMIT ?`,
		int32(state.Running), int32(state.Suspended), n, int32(state.Running), n, limit)
}

func (s *sqlStore) ListStale(ctx context.Context, states []sessionv1.SessionState, before time.Time, limit int) ([]*sessionv1.Session, error) {
	if len(states) == 0 {
		return nil, nil
	}
	if limit <= 0 {
		limit = DefaultPageSize
	}
	args := make([]any, 0, len(states)+2)
	for _, st := range states {
		args = append(args, int32(st))
	}
	args = append(args, before.UnixNano(), limit)
	return s.query(ctx, "list stale sessions", `SELECT data FROM session_records
		WHERE state IN (`+placeholders(len(states))+`) AND update_time < ?
		ORDER BY update_time LIMIT ?`, args...)
}

func (s *sqlStore) ListActive(ctx context.Context, nodeID string) ([]*sessionv1.Session, error) {
	var active []any
	for _, st := range state.All() {
		if state.IsActive(st) {
			active = append(active, int32(st))
		}
	}
	q := `SELECT data FROM session_records WHERE state IN (` + placeholders(len(active)) + `)`
	args := active
	if nodeID != "" {
		q += ` AND node_id = ?`
		args = append(args, nodeID)
	}
	return s.query(ctx, "list active sessions", q+` ORDER BY create_time, id`, args...)
}

func (s *sqlStore) Close() error { return s.db.Close() }
