// Package payload reads what the history needs from an event's payload JSON:
// the entry's kind, the text full-text search indexes, and a screenshot's
// bytes, which it moves to the blob store and replaces by their hash.
//
// It reads fields by their JSON names, so an agent may publish the
// historyv1.Agent* messages or any message (or google.protobuf.Struct) with
// fields of the same names.
package payload

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/deskgrid/deskgrid/services/history/internal/blob"
	"github.com/deskgrid/deskgrid/services/history/store"
	"github.com/deskgrid/deskgrid/services/platform/events"
)

// Field names, as protojson writes them.
const (
	fieldType     = "@type"
	fieldValue    = "value"
	fieldData     = "data"
	fieldBlobHash = "blobHash"
	structType    = "type.googleapis.com/google.protobuf.Struct"
)

// textFields are, per kind, the fields whose text search finds.
var textFields = map[store.Kind][]string{
	store.KindMessage:    {"text", "thinking"},
	store.KindToolCall:   {"tool", "inputJson", "input", "output"},
	store.KindToolResult: {"tool", "output"},
}

// Prepare sets e.Kind from e.Type and e.Text from the payload. For a
// screenshot, or a call on a session whose reply held one, whose payload
// holds its bytes ("data", base64) it puts them in blobs and writes
// "blobHash" in their place; with blobs nil the bytes stay inline. A
// payload that is not a JSON object is kept as it is, without text; only a
// failing blob store is an error.
func Prepare(ctx context.Context, e *store.Entry, blobs blob.Store) error {
	e.Kind = store.KindOf(e.Type)
	fields, ok := textFields[e.Kind]
	withImage := e.Kind == store.KindScreenshot || strings.HasPrefix(e.Type, store.TrailPrefix)
	if !ok && !withImage {
		return nil
	}
	outer, obj := parse(e.Data)
	if obj == nil {
		return nil
	}
	if ok {
		var parts []string
		for _, f := range fields {
			if s, ok := obj[f].(string); ok && s != "" {
				parts = append(parts, s)
			}
		}
		e.Text = strings.Join(parts, "\n")
	}
	if !withImage {
		return nil
	}
	if h, ok := obj[fieldBlobHash].(string); ok && blob.ValidHash(h) {
		e.BlobHash = h
	}
	enc, ok := obj[fieldData].(string)
	if !ok || blobs == nil {
		return nil
	}
	data, err := decodeBase64(enc)
	if err != nil {
		return nil
	}
	h, err := blobs.Put(ctx, data)
	if err != nil {
		return fmt.Errorf("payload: screenshot of %s: %w", e.ID, err)
	}
	delete(obj, fieldData)
	obj[fieldBlobHash] = h
	b, err := json.Marshal(outer)
	if err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	e.Data, e.BlobHash = string(b), h
	return nil
}

// Inline puts the bytes of a screenshot entry's blob back into its payload
// as "data", so the entry stands alone, as in an export.
func Inline(ctx context.Context, e *store.Entry, blobs blob.Store) error {
	if e.BlobHash == "" || blobs == nil {
		return nil
	}
	outer, obj := parse(e.Data)
	if obj == nil {
		return nil
	}
	data, err := blobs.Get(ctx, e.BlobHash)
	if err != nil {
		return fmt.Errorf("payload: blob of %s: %w", e.ID, err)
	}
	obj[fieldData] = base64.StdEncoding.EncodeToString(data)
	b, err := json.Marshal(outer)
	if err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	e.Data = string(b)
	return nil
}

// parse returns the payload object and the object holding its fields: the
// same, or for a Struct payload its "value".
func parse(data string) (outer, fields map[string]any) {
	if data == "" {
		return nil, nil
	}
	dec := json.NewDecoder(strings.NewReader(data))
	// Numbers stay as written: int64 fields must not pass through float64.
	dec.UseNumber()
	if err := dec.Decode(&outer); err != nil || outer == nil {
		return nil, nil
	}
	if outer[fieldType] == structType {
		if v, ok := outer[fieldValue].(map[string]any); ok {
			return outer, v
		}
		return nil, nil
	}
	return outer, outer
}

func decodeBase64(s string) ([]byte, error) {
	// protojson writes standard base64 and reads either alphabet.
	if b, err := base64.StdEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	s = strings.TrimRight(s, "=")
	if b, err := base64.RawURLEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	return base64.RawStdEncoding.DecodeString(s)
}

// fieldObject names, in a recording's end event, the videostore object
// holding its video.
const fieldObject = "object"

// VideoObject returns the videostore object a recording's end event names
// (its video on the way from the node), or "" for any other entry.
func VideoObject(e *store.Entry) string {
	if e.Type != events.TypeRecordingStopped && e.Type != events.TypeRecordingFailed {
		return ""
	}
	_, obj := parse(e.Data)
	name, _ := obj[fieldObject].(string)
	return name
}

// SetVideoBlob records that a recording's video is the blob hash: the
// payload's object becomes its "blobHash", and the entry refers to it.
func SetVideoBlob(e *store.Entry, hash string) error {
	outer, obj := parse(e.Data)
	if obj == nil {
		return fmt.Errorf("payload: recording %s has no payload", e.ID)
	}
	delete(obj, fieldObject)
	obj[fieldBlobHash] = hash
	b, err := json.Marshal(outer)
	if err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	e.Data, e.BlobHash = string(b), hash
	return nil
}
