package mcpserver

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"sync"
	"time"
)

// sessionIdle is how long an MCP session over HTTP lives without requests.
const sessionIdle = 30 * time.Minute

// sessionIDHeader names the MCP session a streamable HTTP request belongs to.
const sessionIDHeader = "Mcp-Session-Id"

// sessionOwners binds each MCP session to the key that opened it. A request
// naming a session with any other key (another tenant's, or another key of
// the same tenant) gets exactly what an unknown session gets: 404. Only a
// hash of the key is kept.
type sessionOwners struct {
	next http.Handler
	idle time.Duration
	now  func() time.Time

	mu    sync.Mutex
	owner map[string]owner
}

type owner struct {
	key  [sha256.Size]byte
	seen time.Time
}

func newSessionOwners(next http.Handler, idle time.Duration) *sessionOwners {
	return &sessionOwners{next: next, idle: idle, now: time.Now, owner: map[string]owner{}}
}

func (o *sessionOwners) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := sha256.Sum256([]byte(bearer(r.Header)))
	id := r.Header.Get(sessionIDHeader)
	if id == "" {
		// Opening a session: remember whose it is once the handler names it.
		o.next.ServeHTTP(&sessionIDRecorder{ResponseWriter: w, opened: func(id string) { o.add(id, key) }}, r)
		return
	}
	if !o.owns(id, key) {
		http.Error(w, "session not found", http.StatusNotFound)
		return
	}
	o.next.ServeHTTP(w, r)
	if r.Method == http.MethodDelete {
		o.mu.Lock()
		delete(o.owner, id)
		o.mu.Unlock()
	}
}

func (o *sessionOwners) owns(id string, key [sha256.Size]byte) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	own, ok := o.owner[id]
	if !ok || subtle.ConstantTimeCompare(own.key[:], key[:]) != 1 {
		return false
	}
	own.seen = o.now()
	o.owner[id] = own
	return true
}

func (o *sessionOwners) add(id string, key [sha256.Size]byte) {
	now := o.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, taken := o.owner[id]; taken {
		return
	}
	for k, v := range o.owner {
		if now.Sub(v.seen) > o.idle {
			delete(o.owner, k) // the MCP handler has closed it too
		}
	}
	o.owner[id] = owner{key: key, seen: now}
}

// sessionIDRecorder reports the Mcp-Session-Id the handler answers with.
type sessionIDRecorder struct {
	http.ResponseWriter
	opened func(id string)
	done   bool
}

func (s *sessionIDRecorder) record() {
	if s.done {
		return
	}
	s.done = true
	if id := s.Header().Get(sessionIDHeader); id != "" {
		s.opened(id)
	}
}

func (s *sessionIDRecorder) WriteHeader(code int) {
	if code < 300 {
		s.record()
	}
	s.done = true
	s.ResponseWriter.WriteHeader(code)
}

func (s *sessionIDRecorder) Write(b []byte) (int, error) {
	s.record()
	return s.ResponseWriter.Write(b)
}

func (s *sessionIDRecorder) Flush() {
	s.record()
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (s *sessionIDRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
