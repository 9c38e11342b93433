package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Pull fetches ref from its registry (the platform of this node out of a
// multi-platform index), stores it and tags it for tenant. Layers already on
// the node are not fetched again.
func (s *Store) Pull(ctx context.Context, tenant, ref string, progress func(Progress)) (*Image, error) {
	im, err := s.pull(ctx, tenant, ref, progress)
	return im, s.scrub(err)
}

func (s *Store) pull(ctx context.Context, tenant, ref string, progress func(Progress)) (*Image, error) {
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
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc), remote.WithTransport(registryTransport)}
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

// registryTransport is remote's default transport with a dialer that
// refuses link-local addresses: a reference names any host, and a
// registry's 401 names any token URL (its realm), both reached from the
// node; neither may be the cloud's metadata service (169.254.169.254,
// fd00:ec2::254). Private and loopback addresses stay allowed: registries
// live there.
var registryTransport http.RoundTripper = func() http.RoundTripper {
	t := remote.DefaultTransport.(*http.Transport).Clone()
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: refuseMetadata}
	t.DialContext = d.DialContext
	return t
}()

var awsMetadataV6 = netip.MustParseAddr("fd00:ec2::254")

func refuseMetadata(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("registry address %s: %w", address, err)
	}
	a := ap.Addr().Unmap()
	if a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsMulticast() || a.IsUnspecified() || a == awsMetadataV6 {
		return fmt.Errorf("%s is a link-local, multicast or metadata address, never a registry's", a)
	}
	return nil
}

// registryMessage tells what a registry answered: the request, the status
// and the registry's own error codes and messages, never the body of an
// answer that is no registry error. A reference or a realm may name any
// service the node reaches; what that service says stays on the node.
func registryMessage(te *transport.Error) string {
	msg := fmt.Sprintf("%d %s", te.StatusCode, http.StatusText(te.StatusCode))
	if te.Request != nil && te.Request.URL != nil {
		u := *te.Request.URL
		u.RawQuery, u.User, u.Fragment = "", nil, ""
		msg = te.Request.Method + " " + u.String() + ": " + msg
	}
	for _, d := range te.Errors {
		m := d.Message
		if len(m) > 200 {
			m = m[:200] + "…"
		}
		msg += fmt.Sprintf("; %s: %s", d.Code, strings.ToValidUTF8(m, "?"))
	}
	return msg
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
		// A blob an archive's manifest names but the archive does not hold
		// (named by its digest, not by where the node unpacked the archive).
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("the archive lacks blob %s: %w", filepath.Base(pe.Path), ErrInvalid)
		}
		return fmt.Errorf("the archive lacks it: %w", ErrInvalid)
	}
	var te *transport.Error
	if errors.As(err, &te) {
		msg := registryMessage(te)
		for _, d := range te.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode:
				return fmt.Errorf("%s: %w", msg, ErrNotFound)
			case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				return fmt.Errorf("the registry refused access (%s): %w", msg, ErrPrecondition)
			case transport.NameInvalidErrorCode, transport.TagInvalidErrorCode, transport.ManifestInvalidErrorCode, transport.DigestInvalidErrorCode:
				return fmt.Errorf("%s: %w", msg, ErrInvalid)
			}
		}
		switch {
		case te.StatusCode == http.StatusNotFound:
			return fmt.Errorf("%s: %w", msg, ErrNotFound)
		case te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden:
			return fmt.Errorf("the registry refused access (%s): %w", msg, ErrPrecondition)
		}
		return fmt.Errorf("the registry failed: %s: %w", msg, ErrUnavailable)
	}
	var ne net.Error
	var ue *url.Error
	var oe *net.OpError
	if errors.As(err, &ne) || errors.As(err, &ue) || errors.As(err, &oe) {
		return fmt.Errorf("the registry is unreachable: %v: %w", err, ErrUnavailable)
	}
	return fmt.Errorf("%v: %w", err, ErrInvalid)
}
