// Package imagebuild builds a session image from a recipe kept in the repo:
// Debian packages installed with mmdebstrap into a root filesystem, files copied
// over it, a setup script run inside it, the result written as an OCI image
// layout (one gzip layer, an image config with the recipe's user, environment,
// working directory and labels) with go-containerregistry.
//
// A recipe is a directory:
//
//	recipe.yaml  name, suite, variant, dpkg options, image config, extends
//	packages     Debian packages, one a line ('#' starts a comment)
//	files/       copied over the root filesystem after the packages (owned by root)
//	setup.sh     run inside the root filesystem last, as root, with sh -eu
//
// A recipe that extends another gets the other's packages, files and setup
// first, then its own; the image config is the other's with its own fields
// laid over it. Built with a cache (Builder.Cached), such an image is the
// other's image with one layer on top: the other is built (or found) first,
// and only this recipe's packages, files and setup go into the new layer.
package imagebuild

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v4"
)

// Config is the part of the OCI image config a recipe sets.
type Config struct {
	User       string            `yaml:"user"`
	WorkingDir string            `yaml:"working_dir"`
	Env        []string          `yaml:"env"`
	Cmd        []string          `yaml:"cmd"`
	Labels     map[string]string `yaml:"labels"`
}

// SessionLabel names, in an image's config, the program a session runs as
// its desktop.
const SessionLabel = "org.deskgrid.session"

// Recipe is a loaded recipe directory, with what it extends already merged in.
type Recipe struct {
	// Dir is the recipe's directory (absolute).
	Dir         string
	Name        string   `yaml:"name"`
	Description string   `yaml:"description"`
	Suite       string   `yaml:"suite"`
	Variant     string   `yaml:"variant"`
	Extends     string   `yaml:"extends"`
	DpkgOptions []string `yaml:"dpkg_options"`
	Config      Config   `yaml:"config"`

	// Packages, in order, without duplicates.
	Packages []string `yaml:"-"`
	// FileDirs are the files/ trees to copy, base recipe first.
	FileDirs []string `yaml:"-"`
	// Scripts are the setup scripts to run, base recipe first.
	Scripts []string `yaml:"-"`
	// Base is the recipe this one extends, as loaded; nil when it extends
	// none. Own is what this recipe adds to it.
	Base *Recipe `yaml:"-"`
	Own  Own     `yaml:"-"`
	// dirs are every recipe directory that went into this one, base first.
	dirs []string
}

// Own is what a recipe adds to the one it extends.
type Own struct {
	Packages    []string
	DpkgOptions []string
	// FileDir and Script are empty when the recipe has no files/ or setup.sh.
	FileDir, Script string
}

// Load reads the recipe in dir and whatever it extends.
func Load(dir string) (*Recipe, error) {
	return load(dir, 0)
}

func load(dir string, depth int) (*Recipe, error) {
	if depth > 8 {
		return nil, fmt.Errorf("recipe %s: too many levels of extends", dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("recipe %s: %w", dir, err)
	}
	raw, err := os.ReadFile(filepath.Join(abs, "recipe.yaml"))
	if err != nil {
		return nil, fmt.Errorf("recipe %s: %w", dir, err)
	}
	var own Recipe
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&own); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("recipe %s: recipe.yaml: %w", dir, err)
	}
	pkgs, err := readPackages(filepath.Join(abs, "packages"))
	if err != nil {
		return nil, fmt.Errorf("recipe %s: %w", dir, err)
	}

	r := &Recipe{}
	if own.Extends != "" {
		base := own.Extends
		if !filepath.IsAbs(base) {
			base = filepath.Join(abs, base)
		}
		b, err := load(base, depth+1)
		if err != nil {
			return nil, fmt.Errorf("recipe %s extends: %w", dir, err)
		}
		// A copy, so the base stays as it was loaded.
		c := *b
		c.Packages = append([]string(nil), b.Packages...)
		c.FileDirs = append([]string(nil), b.FileDirs...)
		c.Scripts = append([]string(nil), b.Scripts...)
		c.DpkgOptions = append([]string(nil), b.DpkgOptions...)
		c.dirs = append([]string(nil), b.dirs...)
		c.Base = b
		r = &c
	}
	r.Own = Own{Packages: pkgs, DpkgOptions: own.DpkgOptions}
	r.Dir = abs
	r.Extends = own.Extends
	r.dirs = append(r.dirs, abs)
	r.Name = own.Name
	if own.Description != "" {
		r.Description = own.Description
	}
	if own.Suite != "" {
		r.Suite = own.Suite
	}
	if own.Variant != "" {
		r.Variant = own.Variant
	}
	r.DpkgOptions = append(r.DpkgOptions, own.DpkgOptions...)
	r.Config = mergeConfig(r.Config, own.Config)
	seen := map[string]bool{}
	for _, p := range r.Packages {
		seen[p] = true
	}
	for _, p := range pkgs {
		if !seen[p] {
			seen[p] = true
			r.Packages = append(r.Packages, p)
		}
	}
	if fi, err := os.Stat(filepath.Join(abs, "files")); err == nil && fi.IsDir() {
		r.FileDirs = append(r.FileDirs, filepath.Join(abs, "files"))
		r.Own.FileDir = filepath.Join(abs, "files")
	}
	if _, err := os.Stat(filepath.Join(abs, "setup.sh")); err == nil {
		r.Scripts = append(r.Scripts, filepath.Join(abs, "setup.sh"))
		r.Own.Script = filepath.Join(abs, "setup.sh")
	}
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("recipe %s: %w", dir, err)
	}
	return r, nil
}

func (r *Recipe) validate() error {
	switch {
	case r.Name == "":
		return errors.New("recipe.yaml has no name")
	case r.Suite == "":
		return errors.New("recipe.yaml has no suite (for example bookworm)")
	case len(r.Packages) == 0:
		return errors.New("no packages listed")
	}
	for _, p := range r.Packages {
		if strings.ContainsAny(p, ", \t") || strings.HasPrefix(p, "-") {
			return fmt.Errorf("package %q is not a Debian package name", p)
		}
	}
	return nil
}

func mergeConfig(base, over Config) Config {
	out := base
	if over.User != "" {
		out.User = over.User
	}
	if over.WorkingDir != "" {
		out.WorkingDir = over.WorkingDir
	}
	if len(over.Cmd) > 0 {
		out.Cmd = over.Cmd
	}
	if len(over.Env) > 0 {
		idx := map[string]int{}
		out.Env = append([]string(nil), base.Env...)
		for i, kv := range out.Env {
			k, _, _ := strings.Cut(kv, "=")
			idx[k] = i
		}
		for _, kv := range over.Env {
			k, _, _ := strings.Cut(kv, "=")
			if i, ok := idx[k]; ok {
				out.Env[i] = kv
			} else {
				idx[k] = len(out.Env)
				out.Env = append(out.Env, kv)
			}
		}
	}
	if len(over.Labels) > 0 {
		out.Labels = map[string]string{}
		for k, v := range base.Labels {
			out.Labels[k] = v
		}
		for k, v := range over.Labels {
			out.Labels[k] = v
		}
	}
	return out
}

func readPackages(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out, sc.Err()
}

// Hash is a digest of everything that goes into the image: every file of the
// recipe and of the recipes it extends (names, modes and contents), and the
// files the builder itself writes into every image. The same recipe gives
// the same hash, so a built image can be cached under it.
func (r *Recipe) Hash() (string, error) {
	h := sha256.New()
	for _, hook := range append([]string{imageHostname, imageHosts, imageResolv}, emptyDirs...) {
		io.WriteString(h, hook)
		h.Write([]byte{0})
	}
	for _, dir := range r.dirs {
		var paths []string
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			paths = append(paths, p)
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("hash recipe %s: %w", dir, err)
		}
		sort.Strings(paths)
		for _, p := range paths {
			fi, err := os.Lstat(p)
			if err != nil {
				return "", fmt.Errorf("hash recipe: %w", err)
			}
			rel, _ := filepath.Rel(dir, p)
			// The type and the executable bit: what a git checkout keeps.
			fmt.Fprintf(h, "%s\x00%v\x00%v\x00", rel, fi.Mode().Type(), fi.Mode()&0o100 != 0)
			switch {
			case fi.Mode().IsRegular():
				f, err := os.Open(p)
				if err != nil {
					return "", fmt.Errorf("hash recipe: %w", err)
				}
				_, err = io.Copy(h, f)
				f.Close()
				if err != nil {
					return "", fmt.Errorf("hash recipe: %w", err)
				}
			case fi.Mode()&fs.ModeSymlink != 0:
				target, err := os.Readlink(p)
				if err != nil {
					return "", fmt.Errorf("hash recipe: %w", err)
				}
				io.WriteString(h, target)
			}
			h.Write([]byte{0})
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
