package auth

import (
	"strings"
	"testing"
)

func TestNewKeyParses(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		plain, id, hash := NewKey()
		gotID, secret, err := ParseKey(plain)
		if err != nil {
			t.Fatalf("ParseKey(%q): %v", plain, err)
		}
		if gotID != id || !SecretMatches(id, secret, hash) || seen[plain] {
			t.Fatalf("key %q: id %q/%q, matches %v, repeated %v", plain, gotID, id, SecretMatches(id, secret, hash), seen[plain])
		}
		seen[plain] = true
	}
}

func TestParseKeyRefuses(t *testing.T) {
	good, id, hash := NewKey()
	_, secret, _ := ParseKey(good)
	cases := map[string]string{
		"empty":            "",
		"prefix only":      "dg_",
		"no prefix":        strings.TrimPrefix(good, "dg_"),
		"other prefix":     "sk_" + strings.TrimPrefix(good, "dg_"),
		"upper id":         "dg_" + strings.ToUpper(id) + "_" + secret,
		"upper secret":     "dg_" + id + "_" + strings.ToUpper(secret),
		"short secret":     good[:len(good)-1],
		"long secret":      good + "a",
		"bad separator":    "dg_" + id + "-" + secret,
		"id not hex":       "dg_" + "g" + id[1:] + "_" + secret,
		"secret bad char":  "dg_" + id + "_" + "1" + secret[1:],
		"spare bits set":   "dg_" + id + "_" + secret[:len(secret)-1] + "z",
		"trailing space":   good + " ",
		"leading space":    " " + good,
		"newline injected": "dg_" + id + "_" + secret[:10] + "\n" + secret[11:],
	}
	for name, k := range cases {
		if _, _, err := ParseKey(k); err == nil {
			t.Errorf("%s: ParseKey(%q) accepted", name, k)
		}
	}
	// The hash is bound to its id: the same secret under another id fails.
	_, otherID, _ := NewKey()
	if SecretMatches(otherID, secret, hash) {
		t.Fatal("hash valid under another id")
	}
	flip := "a"
	if secret[0] == 'a' {
		flip = "b"
	}
	if SecretMatches(id, flip+secret[1:], hash) {
		t.Fatal("wrong secret matches")
	}
}

func FuzzParseKey(f *testing.F) {
	good, _, _ := NewKey()
	f.Add(good)
	f.Add("dg_0123456789abcdef_" + strings.Repeat("a", 52))
	f.Add("dg__")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		id, secret, err := ParseKey(s)
		if err != nil {
			return
		}
		// Whatever parses is exactly the canonical form of its parts.
		if KeyPrefix+id+"_"+secret != s || len(id) != keyIDLen || len(secret) != keySecretLen {
			t.Fatalf("ParseKey(%q) = %q, %q", s, id, secret)
		}
		if !SecretMatches(id, secret, HashSecret(id, secret)) {
			t.Fatal("hash round trip")
		}
	})
}

func TestScopes(t *testing.T) {
	cases := []struct {
		have Scopes
		want Scope
		ok   bool
	}{
		{Scopes{ScopeRead}, ScopeRead, true},
		{Scopes{ScopeRead}, ScopeWrite, false},
		{Scopes{ScopeRead}, ScopeAdmin, false},
		{Scopes{ScopeWrite}, ScopeRead, true},
		{Scopes{ScopeWrite}, ScopeWrite, true},
		{Scopes{ScopeWrite}, ScopeAdmin, false},
		{Scopes{ScopeAdmin}, ScopeRead, true},
		{Scopes{ScopeAdmin}, ScopeAdmin, true},
		{nil, ScopeRead, false},
		{Scopes{"root"}, ScopeRead, false},
		{Scopes{ScopeAdmin}, "", false},
		{Scopes{ScopeAdmin}, "root", false},
	}
	for _, c := range cases {
		if got := c.have.Has(c.want); got != c.ok {
			t.Errorf("%v.Has(%q) = %v", c.have, c.want, got)
		}
	}
	ss, err := ParseScopes(" Write, read,write ")
	if err != nil || ss.String() != "read,write" {
		t.Fatalf("ParseScopes = %v, %v", ss, err)
	}
	for _, bad := range []string{"", ",", "read,root"} {
		if _, err := ParseScopes(bad); err == nil {
			t.Errorf("ParseScopes(%q) accepted", bad)
		}
	}
	if (Principal{System: true}).Can(ScopeAdmin) != true || (Principal{Scopes: Scopes{ScopeRead}}).Can(ScopeWrite) {
		t.Fatal("Principal.Can")
	}
}
