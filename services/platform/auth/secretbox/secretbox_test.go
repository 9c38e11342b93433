package secretbox

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestSealOpen(t *testing.T) {
	k1 := NewKey("k1")
	box, err := New(k1)
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("sk-ant-api03-very-secret")
	a := box.Seal(secret, []byte("run-1"))
	b := box.Seal(secret, []byte("run-1"))
	if bytes.Equal(a, b) {
		t.Fatal("two seals of the same secret are equal: nonce reused")
	}
	if bytes.Contains(a, secret) {
		t.Fatal("plaintext visible in the sealed value")
	}
	got, err := box.Open(a, []byte("run-1"))
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("open = %q, %v", got, err)
	}
	if id, _ := KeyID(a); id != "k1" {
		t.Fatalf("key id %q", id)
	}
	empty := box.Seal(nil, nil)
	if got, err := box.Open(empty, nil); err != nil || len(got) != 0 {
		t.Fatalf("empty secret: %q %v", got, err)
	}

	cases := map[string][]byte{
		"other record":     nil, // opened with other associated data below
		"empty":            {},
		"version only":     {1},
		"wrong version":    append([]byte{2}, a[1:]...),
		"zero-length id":   {1, 0, 'x'},
		"id past the end":  {1, 200, 'k'},
		"truncated":        a[:len(a)-1],
		"no ciphertext":    a[:2+2+12],
		"relabelled key":   append([]byte{1, 2, 'k', '2'}, a[4:]...),
		"flipped tag byte": flip(a, len(a)-1),
		"flipped nonce":    flip(a, 5),
		"flipped body":     flip(a, 2+2+12),
	}
	for name, sealed := range cases {
		ad := []byte("run-1")
		if name == "other record" {
			sealed, ad = a, []byte("run-2")
		}
		if _, err := box.Open(sealed, ad); !errors.Is(err, ErrOpen) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A box with the key relabelled k2 does not open k1's values either.
	k2same := Key{ID: "k2", Secret: k1.Secret}
	box2, _ := New(k2same, Key{ID: "k1", Secret: NewKey("x").Secret})
	if _, err := box2.Open(a, []byte("run-1")); !errors.Is(err, ErrOpen) {
		t.Fatalf("wrong key under the same id: %v", err)
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x01
	return c
}

func TestRotation(t *testing.T) {
	old, next := NewKey("2026-01"), NewKey("2026-06")
	before, _ := New(old)
	sealedOld := before.Seal([]byte("secret"), []byte("id"))

	// Step 1: add the new key first, keep the old one.
	during, err := New(next, old)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := during.Open(sealedOld, []byte("id")); err != nil || string(got) != "secret" {
		t.Fatalf("old value during rotation: %q %v", got, err)
	}
	sealedNew := during.Seal([]byte("secret"), []byte("id"))
	if id, _ := KeyID(sealedNew); id != "2026-06" || during.CurrentKeyID() != "2026-06" {
		t.Fatalf("sealed with %q", id)
	}
	// Step 2: re-seal what was sealed with the old key.
	if !during.NeedsRotation(sealedOld) || during.NeedsRotation(sealedNew) {
		t.Fatal("NeedsRotation")
	}
	resealed, err := during.Reseal(sealedOld, []byte("id"))
	if err != nil {
		t.Fatal(err)
	}
	if same, err := during.Reseal(sealedNew, []byte("id")); err != nil || !bytes.Equal(same, sealedNew) {
		t.Fatalf("reseal of a current value: %v", err)
	}
	if _, err := during.Reseal(sealedOld, []byte("other")); !errors.Is(err, ErrOpen) {
		t.Fatalf("reseal with wrong associated data: %v", err)
	}
	// Step 3: drop the old key; everything still opens.
	after, _ := New(next)
	for _, s := range [][]byte{resealed, sealedNew} {
		if got, err := after.Open(s, []byte("id")); err != nil || string(got) != "secret" {
			t.Fatalf("after rotation: %q %v", got, err)
		}
	}
	_, err = after.Open(sealedOld, []byte("id"))
	if !errors.Is(err, ErrOpen) || !strings.Contains(err.Error(), "2026-01") {
		t.Fatalf("a value under a dropped key: %v", err)
	}
}

func TestKeysFromConfig(t *testing.T) {
	k := NewKey("x").Secret
	spec := "new:" + base64.StdEncoding.EncodeToString(k) + ", old:" + hex.EncodeToString(k) + ",url:" + base64.RawURLEncoding.EncodeToString(k)
	keys, err := ParseKeys(spec)
	if err != nil || len(keys) != 3 || keys[0].ID != "new" || keys[1].ID != "old" || !bytes.Equal(keys[2].Secret, k) {
		t.Fatalf("ParseKeys = %+v, %v", keys, err)
	}
	short := base64.StdEncoding.EncodeToString(k[:16])
	for _, bad := range []string{"", ",", "nokey", ":" + base64.StdEncoding.EncodeToString(k), "a:" + short, "a:!!!"} {
		_, err := ParseKeys(bad)
		if err == nil {
			t.Errorf("ParseKeys(%q) accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), short) {
			t.Errorf("key material in the error: %v", err)
		}
	}
	for _, keys := range [][]Key{nil, {{ID: "a", Secret: k[:16]}}, {{ID: "", Secret: k}}, {{ID: "a", Secret: k}, {ID: "a", Secret: k}}} {
		if _, err := New(keys...); err == nil {
			t.Errorf("New(%d keys) accepted", len(keys))
		}
	}
}

func FuzzOpen(f *testing.F) {
	box, _ := New(NewKey("k1"))
	f.Add(box.Seal([]byte("secret"), nil))
	f.Add([]byte{1, 2, 'k', '1'})
	f.Fuzz(func(t *testing.T, b []byte) {
		// Never panics; forgeries never open.
		if _, err := box.Open(b, nil); err == nil {
			if _, err := box.Open(b, []byte("x")); err == nil {
				t.Fatal("opened under two associated data")
			}
		}
	})
}

func BenchmarkSealOpen(b *testing.B) {
	box, _ := New(NewKey("k1"))
	secret := []byte("sk-ant-api03-0123456789abcdef0123456789abcdef")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := box.Open(box.Seal(secret, []byte("run")), []byte("run")); err != nil {
			b.Fatal(err)
		}
	}
}
