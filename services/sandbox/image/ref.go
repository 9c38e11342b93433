package image

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Ref is a parsed image reference.
type Ref struct {
	// Name is the normalised form: "docker.io/library/debian:bookworm",
	// "registry:5000/team/app:v1", or "repo@sha256:..." for a digest.
	Name string
	// Tag is set for a tag reference, Digest for a digest reference (a bare
	// "sha256:<hex>" is one too, with no repository).
	Tag, Digest string
	// Repository without tag or digest ("" for a bare digest).
	Repository string
	ref        name.Reference
}

// ParseRef parses and normalises an image reference. A name without a
// registry is Docker Hub's ("debian" is "docker.io/library/debian:latest").
func ParseRef(s string) (Ref, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Ref{}, fmt.Errorf("an image reference is required: %w", ErrInvalid)
	}
	if strings.HasPrefix(s, "sha256:") {
		h, err := v1.NewHash(s)
		if err != nil || len(h.Hex) != 64 {
			return Ref{}, fmt.Errorf("image reference %q: not a sha256 digest: %w", s, ErrInvalid)
		}
		return Ref{Name: h.String(), Digest: h.String()}, nil
	}
	r, err := name.ParseReference(s, name.StrictValidation)
	if err != nil {
		// Strict validation wants an explicit tag; retry with the default.
		if r, err = name.ParseReference(s); err != nil {
			return Ref{}, fmt.Errorf("image reference %q: %v: %w", s, err, ErrInvalid)
		}
	}
	repo := r.Context()
	reg := repo.RegistryStr()
	if reg == name.DefaultRegistry {
		reg = "docker.io"
	}
	out := Ref{Repository: reg + "/" + repo.RepositoryStr(), ref: r}
	switch t := r.(type) {
	case name.Tag:
		out.Tag = t.TagStr()
		out.Name = out.Repository + ":" + out.Tag
	case name.Digest:
		out.Digest = t.DigestStr()
		out.Name = out.Repository + "@" + out.Digest
	}
	return out, nil
}

// remote is the reference to hand to a registry client.
func (r Ref) remote() (name.Reference, error) {
	if r.ref == nil {
		return nil, fmt.Errorf("image %s: a bare digest names no registry to pull from: %w", r.Name, ErrInvalid)
	}
	return r.ref, nil
}
