// Package videostore hands recordings of a session's screen from the node
// that made them to the history that keeps them: a JetStream object store
// bucket both reach through NATS, so neither calls the other. A node puts a
// finished video under the recording's id, then publishes the event that
// names it; the history takes it into its blob store when it stores that
// event, and deletes the object.
package videostore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket is the object store bucket recordings pass through.
const Bucket = "DESKGRID_RECORDINGS"

// TTL bounds how long a video the history never took stays in the bucket.
const TTL = 7 * 24 * time.Hour

// ErrNotFound is a name with no video in the bucket.
var ErrNotFound = errors.New("videostore: no such video")

// Store is the bucket.
type Store struct {
	os jetstream.ObjectStore
}

// Open creates the bucket if it is missing and returns it.
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	os, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      Bucket,
		Description: "deskgrid recordings on their way from a node to the history",
		TTL:         TTL,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("videostore: open bucket %s: %w", Bucket, err)
	}
	return &Store{os: os}, nil
}

// Put stores r's bytes under name and returns how many there were.
func (s *Store) Put(ctx context.Context, name string, r io.Reader) (int64, error) {
	info, err := s.os.Put(ctx, jetstream.ObjectMeta{Name: name}, r)
	if err != nil {
		return 0, fmt.Errorf("videostore: put %s: %w", name, err)
	}
	return int64(info.Size), nil
}

// Get returns a reader of the video under name (ErrNotFound when there is
// none); the caller closes it. The reader verifies the object's digest at
// its end.
func (s *Store) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	r, err := s.os.Get(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("videostore: get %s: %w", name, err)
	}
	return r, nil
}

// Delete removes the video under name; a missing one is not an error.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := s.os.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("videostore: delete %s: %w", name, err)
	}
	return nil
}
