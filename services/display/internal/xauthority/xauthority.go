// Package xauthority writes and reads the Xauthority files that hold a
// display's MIT-MAGIC-COOKIE-1, in the format of libXau.
package xauthority

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// CookieName is the only authorization protocol deskgrid uses.
const CookieName = "MIT-MAGIC-COOKIE-1"

// CookieLen is the length of an MIT-MAGIC-COOKIE-1 in bytes.
const CookieLen = 16

// familyWild matches any address, so one entry serves the X server and every
// client that is given the file, whatever host name it sees.
const familyWild = 0xFFFF

// NewCookie returns a fresh random cookie.
func NewCookie() ([]byte, error) {
	c := make([]byte, CookieLen)
	if _, err := rand.Read(c); err != nil {
		return nil, fmt.Errorf("generate X cookie: %w", err)
	}
	return c, nil
}

// Encode returns an Xauthority file with one wildcard entry for cookie. An
// empty display number matches every display, so the file can be written
// before the X server has chosen its number.
func Encode(cookie []byte) []byte {
	var b bytes.Buffer
	put16 := func(v int) { _ = binary.Write(&b, binary.BigEndian, uint16(v)) }
	put16(familyWild)
	put16(0) // address
	put16(0) // display number
	put16(len(CookieName))
	b.WriteString(CookieName)
	put16(len(cookie))
	b.Write(cookie)
	return b.Bytes()
}

// Write stores cookie in a new Xauthority file at path, readable only by its
// owner. The file is renamed into place so a reader never sees half of it.
func Write(path string, cookie []byte) error {
	if len(cookie) != CookieLen {
		return fmt.Errorf("X cookie has %d bytes, want %d", len(cookie), CookieLen)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".xauth-*")
	if err != nil {
		return fmt.Errorf("write Xauthority: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write Xauthority: %w", err)
	}
	if _, err := tmp.Write(Encode(cookie)); err != nil {
		tmp.Close()
		return fmt.Errorf("write Xauthority: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write Xauthority: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write Xauthority: %w", err)
	}
	return nil
}

// Read returns the first MIT-MAGIC-COOKIE-1 in the Xauthority file at path.
func Read(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read Xauthority: %w", err)
	}
	r := bytes.NewReader(data)
	for {
		var family uint16
		if err := binary.Read(r, binary.BigEndian, &family); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("read Xauthority %s: no %s entry", path, CookieName)
			}
			return nil, fmt.Errorf("read Xauthority %s: %w", path, err)
		}
		var fields [4][]byte
		for i := range fields {
			var n uint16
			if err := binary.Read(r, binary.BigEndian, &n); err != nil {
				return nil, fmt.Errorf("read Xauthority %s: truncated: %w", path, err)
			}
			fields[i] = make([]byte, n)
			if _, err := io.ReadFull(r, fields[i]); err != nil {
				return nil, fmt.Errorf("read Xauthority %s: truncated: %w", path, err)
			}
		}
		if string(fields[2]) == CookieName && len(fields[3]) == CookieLen {
			return fields[3], nil
		}
	}
}
