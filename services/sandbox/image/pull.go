package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Pull fetches ref from its registry (the platform of this node out of a
// multi-platform index), stores it and tags it for tenant. Layers already on
// the node are not fetched again.
func (s *Store) Pull(ctx context.Context, tenant, ref string, progress func(Progress)) (*Image, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	rr, err := r.remote()
	if err != nil {
		return nil, err
	}
	if progress != nil {
		progress(Progress{Phase: "resolving"})
	}
	kc := authn.Keychain(authn.NewMultiKeychain())
	if s.keychain != nil {
		kc = s.keychain(tenant)
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc)}
	desc, err := remote.Get(rr, opts...)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", r.Name, classify(err))
	}
	var img v1.Image
	switch {
	case desc.MediaType.IsIndex():
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, fmt.Errorf("pull %s: %w", r.Name, classify(err))
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, fmt.Errorf("pull %s: %w", r.Name, classify(err))
		}
		var have []string
		var pick *v1.Descriptor
		for i := range im.Manifests {
			m := &im.Manifests[i]
			if m.Platform == nil {
				continue
			}
			have = append(have, m.Platform.OS+"/"+m.Platform.Architecture)
			if pick == nil && m.Platform.OS == s.os && m.Platform.Architecture == s.arch {
				pick = m
			}
		}
		if pick == nil {
			return nil, fmt.Errorf("pull %s: no image for %s/%s (it has %s): %w", r.Name, s.os, s.arch, strings.Join(have, ", "), ErrPrecondition)
		}
		if img, err = idx.Image(pick.Digest); err != nil {
			return nil, fmt.Errorf("pull %s: %w", r.Name, classify(err))
		}
	case desc.MediaType.IsImage():
		if img, err = desc.Image(); err != nil {
			return nil, fmt.Errorf("pull %s: %w", r.Name, classify(err))
		}
	default:
		return nil, fmt.Errorf("pull %s: %s is not a container image: %w", r.Name, desc.MediaType, ErrInvalid)
	}
	name := r.Name
	if r.Tag == "" {
		name = "" // pulled by digest: reachable by its digest
	}
	out, err := s.ingest(ctx, img, tenant, name, nil, progress)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", r.Name, err)
	}
	if r.Digest != "" && r.Tag == "" && out.Digest != r.Digest && !desc.MediaType.IsIndex() {
		return nil, fmt.Errorf("pull %s: the registry served %s: %w", r.Name, out.Digest, ErrInvalid)
	}
	return out, nil
}

// classify turns a registry or transport failure into one of the store's
// kinds.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrPrecondition) || errors.Is(err, ErrUnavailable) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.Is(err, fs.ErrNotExist) {
		// A blob an archive's manifest names but the archive does not hold.
		return fmt.Errorf("the archive lacks it: %v: %w", err, ErrInvalid)
	}
	var te *transport.Error
	if errors.As(err, &te) {
		for _, d := range te.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode:
				return fmt.Errorf("%v: %w", err, ErrNotFound)
			case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				return fmt.Errorf("the registry refused access (%v): %w", err, ErrPrecondition)
			case transport.NameInvalidErrorCode, transport.TagInvalidErrorCode, transport.ManifestInvalidErrorCode, transport.DigestInvalidErrorCode:
				return fmt.Errorf("%v: %w", err, ErrInvalid)
			}
		}
		switch {
		case te.StatusCode == http.StatusNotFound:
			return fmt.Errorf("%v: %w", err, ErrNotFound)
		case te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden:
			return fmt.Errorf("the registry refused access (%v): %w", err, ErrPrecondition)
		}
		return fmt.Errorf("the registry failed: %v: %w", err, ErrUnavailable)
	}
	var ne net.Error
	var ue *url.Error
	var oe *net.OpError
	if errors.As(err, &ne) || errors.As(err, &ue) || errors.As(err, &oe) {
		return fmt.Errorf("the registry is unreachable: %v: %w", err, ErrUnavailable)
	}
	return fmt.Errorf("%v: %w", err, ErrInvalid)
}
