package keyseal

import (
	"bytes"
	"errors"
	"testing"
)

func TestSealOpen(t *testing.T) {
	kek := bytes.Repeat([]byte{7}, 32)
	s, err := New(kek)
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("sk-ant-very-secret")
	sealed := s.Seal("run-1", secret)
	if bytes.Contains(sealed, secret) {
		t.Fatal("sealed key holds the key in clear")
	}
	if again := s.Seal("run-1", secret); bytes.Equal(again, sealed) {
		t.Fatal("two seals of one key are equal: nonce reused")
	}
	got, err := s.Open("run-1", sealed)
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("open = %q, %v", got, err)
	}
	other, _ := New(bytes.Repeat([]byte{8}, 32))
	flipped := append([]byte(nil), sealed...)
	flipped[len(flipped)-1] ^= 1
	for name, tc := range map[string]struct {
		s      *Sealer
		run    string
		sealed []byte
	}{
		"other run":   {s, "run-2", sealed},
		"other kek":   {other, "run-1", sealed},
		"tampered":    {s, "run-1", flipped},
		"short":       {s, "run-1", sealed[:5]},
		"empty input": {s, "run-1", nil},
	} {
		if _, err := tc.s.Open(tc.run, tc.sealed); !errors.Is(err, ErrOpen) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := New([]byte("short")); err == nil {
		t.Fatal("a 5-byte kek was accepted")
	}
}
