// Package image is a node's store of OCI images: compressed blobs in an OCI
// layout, each layer unpacked once into a content-addressed directory (named
// by its diff id) that every session using it shares read-only as an overlay
// lower dir, tags per tenant, pins per session, and garbage collection of what
// neither needs.
//
// On disk, under Deps.Dir (mode 0700: layers hold the images' setuid files
// as the images' own uids, so no host user may reach them):
//
//	blobs/sha256/<hex>   manifests, configs and compressed layers (an OCI layout with index.json)
//	layers/sha256/<hex>  unpacked layers, by diff id
//	tmp/<pid>-<n>        work in progress; renamed into place when whole, removed at New
//	state.json           tags, pins and image records
//	lock                 flock: state changes and GC, across processes sharing the store
package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/match"
	"golang.org/x/sys/unix"
)

// Image is an image a tenant can run: its layers unpacked on this node.
type Image struct {
	Ref    string   // normalised reference as asked (or "sha256:..." when asked by digest)
	Digest string   // manifest digest "sha256:..."
	Layers []string // absolute paths of the unpacked layer directories, bottom first
	Config Config
	Size   int64 // bytes of the unpacked layers

	Public       bool      // the tag is visible to every tenant
	Created      time.Time // when this node stored the image
	Architecture string
	OS           string
	LayerDigests []string // compressed layer digests, bottom first
	DiffIDs      []string // uncompressed layer digests, bottom first
}

// Config is what a runtime needs from the image's configuration.
type Config struct {
	Env, Entrypoint, Cmd []string
	WorkingDir, User     string
	Labels               map[string]string
}

// Progress reports a pull or import as it goes.
type Progress struct {
	Phase       string // "resolving", "fetching", "unpacking", "done"
	Layer       string // the layer being worked on ("sha256:...")
	Done        int64  // compressed bytes read so far (layers already on the node count as read)
	Total       int64  // compressed bytes of all layers
	LayersDone  int
	LayersTotal int
}

// Deps is what a Store needs.
type Deps struct {
	// Dir holds the store (e.g. <data-dir>/images). Required.
	Dir    string
	Logger *slog.Logger // required
	// Keychain gives a tenant's registry credentials; nil pulls anonymously.
	Keychain func(tenant string) authn.Keychain
	// MaxLayerBytes bounds the unpacked size of one layer (0: 64 GiB), so a
	// hostile layer of huge or sparse files cannot fill the disk.
	MaxLayerBytes int64
	// MaxLayerEntries bounds the files, directories and links of one layer
	// (0: 4 million), so a layer of empty files cannot use up the disk's
	// inodes while its bytes stay under MaxLayerBytes.
	MaxLayerEntries int64
	// MaxImportBytes bounds an archive being imported, as it unpacks
	// (0: 64 GiB): a small gzip bomb cannot fill the disk with its spool.
	MaxImportBytes int64
	// MaxTenantTags bounds the tags one tenant holds on the node (0: 1000).
	MaxTenantTags int
	// Platform this node runs; empty: linux and runtime.GOARCH.
	OS, Architecture string
}

// Store is a node's image store.
type Store struct {
	dir, blobs, layers, tmp string
	log                     *slog.Logger
	keychain                func(string) authn.Keychain
	maxLayer, maxEntries    int64
	maxImport               int64
	maxTags                 int
	os, arch                string
	layout                  layout.Path

	mu  sync.Mutex // serialises state changes within the process (flock does across)
	seq atomic.Int64
}

// New opens (creating) the store at d.Dir and removes work a crashed process
// left half-done.
func New(ctx context.Context, d Deps) (*Store, error) {
	if d.Dir == "" {
		return nil, errors.New("image: Deps.Dir is required")
	}
	if d.Logger == nil {
		return nil, errors.New("image: Deps.Logger is required")
	}
	dir, err := filepath.Abs(d.Dir)
	if err != nil {
		return nil, err
	}
	s := &Store{
		dir:        dir,
		blobs:      dir,
		layers:     filepath.Join(dir, "layers", "sha256"),
		tmp:        filepath.Join(dir, "tmp"),
		log:        d.Logger,
		keychain:   d.Keychain,
		maxLayer:   d.MaxLayerBytes,
		maxEntries: d.MaxLayerEntries,
		maxImport:  d.MaxImportBytes,
		maxTags:    d.MaxTenantTags,
		os:         d.OS,
		arch:       d.Architecture,
	}
	if s.maxLayer <= 0 {
		s.maxLayer = 64 << 30
	}
	if s.maxEntries <= 0 {
		s.maxEntries = 4 << 20
	}
	if s.maxImport <= 0 {
		s.maxImport = 64 << 30
	}
	if s.maxTags <= 0 {
		s.maxTags = 1000
	}
	if s.os == "" {
		s.os = "linux"
	}
	if s.arch == "" {
		s.arch = runtime.GOARCH
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	for _, p := range []string{s.layers, s.tmp, filepath.Join(dir, "blobs", "sha256")} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			return nil, fmt.Errorf("image store: %w", err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "index.json")); errors.Is(err, fs.ErrNotExist) {
		if s.layout, err = layout.Write(dir, empty.Index); err != nil {
			return nil, fmt.Errorf("image store: %w", err)
		}
	} else if s.layout, err = layout.FromPath(dir); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	s.cleanTmp()
	return s, nil
}

// cleanTmp removes work in progress whose process is gone: a crash mid-pull
// leaves no half layer or blob that a later run could take for whole.
func (s *Store) cleanTmp() {
	entries, err := os.ReadDir(s.tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, _, _ := strings.Cut(e.Name(), "-")
		if n, err := strconv.Atoi(pid); err == nil && n != os.Getpid() && unix.Kill(n, 0) == nil {
			continue // another live process sharing the store
		}
		if err := os.RemoveAll(filepath.Join(s.tmp, e.Name())); err != nil {
			s.log.Warn("image store: removing leftover work", "path", e.Name(), "err", err)
		} else {
			s.log.Info("image store: removed an unfinished unpack", "path", e.Name())
		}
	}
}

// workDir makes a private directory under tmp, removed by the returned func.
func (s *Store) workDir() (string, func(), error) {
	p := filepath.Join(s.tmp, fmt.Sprintf("%d-%d-%d", os.Getpid(), time.Now().UnixNano(), s.seq.Add(1)))
	if err := os.Mkdir(p, 0o700); err != nil {
		return "", nil, err
	}
	return p, func() { _ = os.RemoveAll(p) }, nil
}

// ---- state ----

type tagRecord struct {
	Tenant  string    `json:"tenant"`
	Ref     string    `json:"ref"`
	Digest  string    `json:"digest"`
	Public  bool      `json:"public,omitempty"`
	Created time.Time `json:"created"`
}

type imageRecord struct {
	Digest       string    `json:"digest"`
	Config       Config    `json:"config"`
	ConfigDigest string    `json:"config_digest"`
	LayerDigests []string  `json:"layer_digests"`
	DiffIDs      []string  `json:"diff_ids"`
	Size         int64     `json:"size"`
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Created      time.Time `json:"created"`
}

type state struct {
	Tags   []tagRecord             `json:"tags"`
	Images map[string]*imageRecord `json:"images"`
	Layers map[string]int64        `json:"layers"` // diff id -> unpacked bytes
	Pins   map[string]string       `json:"pins"`   // owner -> digest
}

// withState runs fn on the state under the store's lock (exclusive across
// processes), saving it when fn asks to.
func (s *Store) withState(fn func(st *state) (save bool, err error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	lf, err := os.OpenFile(filepath.Join(s.dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("image store lock: %w", err)
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("image store lock: %w", err)
	}
	st := &state{Images: map[string]*imageRecord{}, Layers: map[string]int64{}, Pins: map[string]string{}}
	p := filepath.Join(s.dir, "state.json")
	if b, err := os.ReadFile(p); err == nil {
		if err := json.Unmarshal(b, st); err != nil {
			return fmt.Errorf("image store state %s: %w", p, err)
		}
		if st.Images == nil {
			st.Images = map[string]*imageRecord{}
		}
		if st.Layers == nil {
			st.Layers = map[string]int64{}
		}
		if st.Pins == nil {
			st.Pins = map[string]string{}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("image store state: %w", err)
	}
	save, err := fn(st)
	if err != nil || !save {
		return err
	}
	b, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("image store state: %w", err)
	}
	if f, err := os.Open(tmp); err == nil {
		_ = f.Sync()
		f.Close()
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("image store state: %w", err)
	}
	return nil
}

func (s *Store) layerPath(diffID string) string {
	return filepath.Join(s.layers, strings.TrimPrefix(diffID, "sha256:"))
}

func (s *Store) toImage(rec *imageRecord, ref string, public bool) *Image {
	img := &Image{
		Ref:          ref,
		Digest:       rec.Digest,
		Config:       rec.Config,
		Size:         rec.Size,
		Public:       public,
		Created:      rec.Created,
		Architecture: rec.Architecture,
		OS:           rec.OS,
		LayerDigests: slices.Clone(rec.LayerDigests),
		DiffIDs:      slices.Clone(rec.DiffIDs),
	}
	for _, d := range rec.DiffIDs {
		img.Layers = append(img.Layers, s.layerPath(d))
	}
	return img
}

// visible finds the tag a tenant sees for ref: its own, else a public one.
func visible(st *state, tenant, ref string) *tagRecord {
	var public *tagRecord
	for i := range st.Tags {
		t := &st.Tags[i]
		if t.Ref != ref {
			continue
		}
		if t.Tenant == tenant {
			return t
		}
		if t.Public && public == nil {
			public = t
		}
	}
	return public
}

// canSee reports whether a tenant may use an image by digest: some tag it
// sees points at it.
func canSee(st *state, tenant, digest string) (public bool, ok bool) {
	for _, t := range st.Tags {
		if t.Digest != digest {
			continue
		}
		if t.Tenant == tenant {
			return t.Public, true
		}
		if t.Public {
			public, ok = true, true
		}
	}
	return public, ok
}

// Resolve finds an image on this node for a tenant: a tag it owns or a
// public one, or a digest such a tag points at. It never touches the network.
func (s *Store) Resolve(ctx context.Context, tenant, ref string) (*Image, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	var out *Image
	err = s.withState(func(st *state) (bool, error) {
		digest, name, public := r.Digest, r.Name, false
		if r.Tag != "" {
			t := visible(st, tenant, r.Name)
			if t == nil {
				return false, fmt.Errorf("image %s: %w on this node (pull it first)", r.Name, ErrNotFound)
			}
			digest, public = t.Digest, t.Public
		} else {
			var ok bool
			if public, ok = canSee(st, tenant, digest); !ok {
				return false, fmt.Errorf("image %s: %w on this node", ref, ErrNotFound)
			}
			if strings.HasPrefix(ref, "sha256:") {
				name = digest
			}
		}
		rec := st.Images[digest]
		if rec == nil {
			return false, fmt.Errorf("image %s (%s): %w on this node", name, digest, ErrNotFound)
		}
		out = s.toImage(rec, name, public)
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	for _, l := range out.Layers {
		if _, err := os.Stat(l); err != nil {
			return nil, fmt.Errorf("image %s: layer %s is missing (%w): pull it again", out.Ref, filepath.Base(l), ErrNotFound)
		}
	}
	return out, nil
}

// List returns the images a tenant sees: its own tags and public ones.
func (s *Store) List(ctx context.Context, tenant string) ([]*Image, error) {
	var out []*Image
	err := s.withState(func(st *state) (bool, error) {
		seen := map[string]bool{}
		for _, t := range st.Tags {
			if t.Tenant == tenant {
				seen[t.Ref] = true
			}
		}
		for _, t := range st.Tags {
			if t.Tenant != tenant && (!t.Public || seen[t.Ref]) {
				continue
			}
			if t.Tenant != tenant {
				seen[t.Ref] = true
			}
			if rec := st.Images[t.Digest]; rec != nil {
				out = append(out, s.toImage(rec, t.Ref, t.Public))
			}
		}
		return false, nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Ref < out[j].Ref })
	return out, err
}

// Tag is one tag the store holds: a tenant's name for an image.
type Tag struct {
	Tenant, Ref, Digest string
	Public              bool
}

// Tags lists the tags of every tenant whose image the store holds, for the
// node's report of its images to placement.
func (s *Store) Tags(ctx context.Context) ([]Tag, error) {
	var out []Tag
	err := s.withState(func(st *state) (bool, error) {
		for _, t := range st.Tags {
			if st.Images[t.Digest] != nil {
				out = append(out, Tag{Tenant: t.Tenant, Ref: t.Ref, Digest: t.Digest, Public: t.Public})
			}
		}
		return false, nil
	})
	return out, err
}

// roomForTag refuses a tag the tenant does not hold yet once it holds
// maxTags: every image call reads the store's state, so one tenant's
// thousands of tags would slow every other's. The system's are not counted.
func (s *Store) roomForTag(st *state, tenant, ref string) error {
	if tenant == "" {
		return nil
	}
	n := 0
	for _, t := range st.Tags {
		if t.Tenant != tenant {
			continue
		}
		if t.Ref == ref {
			return nil // moved, not added
		}
		n++
	}
	if n >= s.maxTags {
		return fmt.Errorf("the tenant holds %d image tags on this node, the most it may; delete some first: %w", n, ErrExhausted)
	}
	return nil
}

// tag points a tenant's ref at an image, replacing what it pointed at.
func tag(st *state, tenant, ref, digest string) {
	for i := range st.Tags {
		if st.Tags[i].Tenant == tenant && st.Tags[i].Ref == ref {
			st.Tags[i].Digest = digest
			st.Tags[i].Created = time.Now().UTC()
			return
		}
	}
	st.Tags = append(st.Tags, tagRecord{Tenant: tenant, Ref: ref, Digest: digest, Created: time.Now().UTC()})
}

// Delete removes a tenant's tag (or, for a digest, every tag of the tenant's
// pointing at it) and collects what nothing needs any more. An image a
// session still uses stays on disk until the session ends.
func (s *Store) Delete(ctx context.Context, tenant, ref string) error {
	r, err := ParseRef(ref)
	if err != nil {
		return err
	}
	err = s.withState(func(st *state) (bool, error) {
		n := len(st.Tags)
		st.Tags = slices.DeleteFunc(st.Tags, func(t tagRecord) bool {
			if t.Tenant != tenant {
				return false
			}
			if r.Tag != "" {
				return t.Ref == r.Name
			}
			return t.Digest == r.Digest
		})
		if len(st.Tags) == n {
			return false, fmt.Errorf("image %s: %w", ref, ErrNotFound)
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	_, err = s.GC(ctx)
	return err
}

// SetPublic makes a tenant's tag visible to every tenant (or private again).
// Only an administrator should be let to call it.
func (s *Store) SetPublic(ctx context.Context, tenant, ref string, public bool) error {
	r, err := ParseRef(ref)
	if err != nil {
		return err
	}
	if r.Tag == "" {
		return fmt.Errorf("image %s: only a tag can be made public: %w", ref, ErrInvalid)
	}
	return s.withState(func(st *state) (bool, error) {
		for i := range st.Tags {
			if st.Tags[i].Tenant == tenant && st.Tags[i].Ref == r.Name {
				st.Tags[i].Public = public
				return true, nil
			}
		}
		return false, fmt.Errorf("image %s: %w", r.Name, ErrNotFound)
	})
}

// Pin records that owner (a session) runs the image with this digest, so GC
// keeps it while untagged. An owner pins one image; pinning again moves it.
func (s *Store) Pin(owner, digest string) error {
	if owner == "" {
		return fmt.Errorf("pin: an owner is required: %w", ErrInvalid)
	}
	return s.withState(func(st *state) (bool, error) {
		if st.Images[digest] == nil {
			return false, fmt.Errorf("image %s: %w on this node", digest, ErrNotFound)
		}
		st.Pins[owner] = digest
		return true, nil
	})
}

// Unpin releases owner's pin; what nothing else needs is collected.
func (s *Store) Unpin(owner string) error {
	found := false
	err := s.withState(func(st *state) (bool, error) {
		_, found = st.Pins[owner]
		delete(st.Pins, owner)
		return found, nil
	})
	if err != nil || !found {
		return err
	}
	_, err = s.GC(context.Background())
	return err
}

// Pins lists owner -> digest, for a node reconciling its sessions.
func (s *Store) Pins() (map[string]string, error) {
	var out map[string]string
	err := s.withState(func(st *state) (bool, error) {
		out = st.Pins
		return false, nil
	})
	return out, err
}

// GC removes images no tag or pin names, then blobs and unpacked layers no
// remaining image uses. It returns the bytes freed.
func (s *Store) GC(ctx context.Context) (int64, error) {
	var freed int64
	err := s.withState(func(st *state) (bool, error) {
		keep := map[string]bool{}
		for _, t := range st.Tags {
			keep[t.Digest] = true
		}
		for _, d := range st.Pins {
			keep[d] = true
		}
		changed := false
		var dropped []v1.Hash
		for d := range st.Images {
			if !keep[d] {
				delete(st.Images, d)
				changed = true
				if h, err := v1.NewHash(d); err == nil {
					dropped = append(dropped, h)
				}
			}
		}
		if len(dropped) > 0 {
			if err := s.layout.RemoveDescriptors(match.Digests(dropped...)); err != nil {
				return changed, fmt.Errorf("gc index: %w", err)
			}
		}
		blobs, layers := map[string]bool{}, map[string]bool{}
		for d, rec := range st.Images {
			blobs[hexOf(d)] = true
			blobs[hexOf(rec.ConfigDigest)] = true
			for _, l := range rec.LayerDigests {
				blobs[hexOf(l)] = true
			}
			for _, l := range rec.DiffIDs {
				layers[hexOf(l)] = true
			}
		}
		for l := range st.Layers {
			if !layers[hexOf(l)] {
				delete(st.Layers, l)
				changed = true
			}
		}
		// Work in progress (tmp) holds nothing GC could see: blobs and layers
		// are renamed into place only while an ingest holds the state lock.
		if entries, err := os.ReadDir(s.layers); err == nil {
			for _, e := range entries {
				if layers[e.Name()] {
					continue
				}
				p := filepath.Join(s.layers, e.Name())
				freed += duBytes(p)
				if err := os.RemoveAll(p); err != nil {
					return changed, fmt.Errorf("gc layer %s: %w", e.Name(), err)
				}
			}
		}
		bdir := filepath.Join(s.dir, "blobs", "sha256")
		if entries, err := os.ReadDir(bdir); err == nil {
			for _, e := range entries {
				if blobs[e.Name()] {
					continue
				}
				if fi, err := e.Info(); err == nil {
					freed += fi.Size()
				}
				if err := os.Remove(filepath.Join(bdir, e.Name())); err != nil {
					return changed, fmt.Errorf("gc blob %s: %w", e.Name(), err)
				}
			}
		}
		return changed, nil
	})
	if err == nil && freed > 0 {
		s.log.Info("image store: collected", "bytes", freed)
	}
	return freed, err
}

// Usage is the store's disk use.
type Usage struct {
	Images      int   // distinct images (by digest)
	Layers      int   // unpacked layers
	LayerBytes  int64 // bytes of the unpacked layers
	BlobBytes   int64 // bytes of the compressed blobs, manifests and configs
	PinnedBytes int64 // unpacked bytes that pinned images use
}

// Usage reports the store's disk use.
func (s *Store) Usage(ctx context.Context) (Usage, error) {
	var u Usage
	err := s.withState(func(st *state) (bool, error) {
		u.Images = len(st.Images)
		u.Layers = len(st.Layers)
		for _, n := range st.Layers {
			u.LayerBytes += n
		}
		pinned := map[string]bool{}
		for _, d := range st.Pins {
			if rec := st.Images[d]; rec != nil {
				for _, l := range rec.DiffIDs {
					if !pinned[l] {
						pinned[l] = true
						u.PinnedBytes += st.Layers[l]
					}
				}
			}
		}
		return false, nil
	})
	u.BlobBytes = duBytes(filepath.Join(s.dir, "blobs"))
	return u, err
}

func hexOf(d string) string { return strings.TrimPrefix(d, "sha256:") }

// duBytes is the apparent size of the regular files under p.
func duBytes(p string) int64 {
	var n int64
	_ = filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// Pinned returns the image owner pins, whatever tags point at it now.
func (s *Store) Pinned(owner string) (*Image, error) {
	var out *Image
	err := s.withState(func(st *state) (bool, error) {
		d, ok := st.Pins[owner]
		if !ok || st.Images[d] == nil {
			return false, fmt.Errorf("no image pinned by %s: %w", owner, ErrNotFound)
		}
		out = s.toImage(st.Images[d], d, false)
		return false, nil
	})
	return out, err
}
