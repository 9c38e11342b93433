package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/deskgrid/deskgrid/services/display"
	"github.com/deskgrid/deskgrid/services/platform/config"
	"github.com/deskgrid/deskgrid/services/sandbox"
	"github.com/deskgrid/deskgrid/services/sandbox/cgroup"
)

// dataDirLock is held by a running node for its data dir, so `deskgrid gc`
// never collects what a live deskgrid owns, and two never share one.
const dataDirLock = "deskgrid.lock"

// lockDataDir takes the data dir's lock, failing at once if a running
// deskgrid holds it. The lock ends with the process.
func lockDataDir(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, dataDirLock), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another deskgrid is running on data dir %s", dir)
		}
		return nil, err
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// runGC lists, and unless -dry-run removes, what sessions of a deskgrid that
// is not running left on this machine: X servers, sockets, authority files,
// overlay mounts, cgroups and directories. A running node does the same at
// start; this is for a node that will not be started again, or to look.
func runGC(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", defaultDataDir(), "the deskgrid's data dir")
	runDir := fs.String("runtime-dir", defaultRuntimeDir(), "the deskgrid's runtime dir")
	dryRun := fs.Bool("dry-run", false, "only list what would be removed")
	if err := config.Parse(fs, args, nil); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("gc: unexpected arguments %q", fs.Args())
	}
	unlock, err := lockDataDir(*dataDir)
	if err != nil {
		return fmt.Errorf("%w: it collects its own leftovers at start; stop it before running gc", err)
	}
	defer unlock()

	root := filepath.Join(*dataDir, "sandbox")
	found := leftovers(*dataDir, *runDir, root)
	if len(found) == 0 {
		fmt.Fprintln(stdout, "nothing left behind")
		return nil
	}
	for _, f := range found {
		fmt.Fprintln(stdout, f)
	}
	if *dryRun {
		fmt.Fprintf(stdout, "%d leftovers; run without -dry-run to remove them\n", len(found))
		return nil
	}
	dc := display.DefaultConfig()
	dc.RuntimeDir = *runDir
	dc.WarmDisplays = 0
	d, err := display.New(ctx, dc, display.Deps{})
	if err != nil {
		return err
	}
	removedD, derr := d.Reconcile(ctx, nil)
	_ = d.Close(ctx)
	sc := sandbox.DefaultConfig()
	sc.Root = root
	sc.CgroupParent = "deskgrid-" + shortHash(root)
	b, err := sandbox.New(ctx, sc, sandbox.Deps{})
	if err != nil {
		return errors.Join(derr, err)
	}
	removedS, serr := b.Reconcile(ctx, nil)
	cerr := b.Close(ctx)
	fmt.Fprintf(stdout, "removed %d displays and %d sandboxes\n", len(removedD), len(removedS))
	if rest := leftovers(*dataDir, *runDir, root); len(rest) > 0 {
		return errors.Join(derr, serr, cerr, fmt.Errorf("still left: %s", strings.Join(rest, ", ")))
	}
	return errors.Join(derr, serr, cerr)
}

// leftovers lists what a deskgrid's sessions left: per-session directories,
// overlay mounts and cgroups.
func leftovers(dataDir, runDir, sandboxRoot string) []string {
	var out []string
	for _, d := range []struct{ kind, dir string }{
		{"display", filepath.Join(runDir, "displays")},
		{"warm display", filepath.Join(runDir, "display-pool")},
		{"sandbox", filepath.Join(sandboxRoot, "sandboxes")},
	} {
		ents, _ := os.ReadDir(d.dir)
		for _, e := range ents {
			out = append(out, d.kind+" "+filepath.Join(d.dir, e.Name()))
		}
	}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 4 && strings.HasPrefix(fields[4], sandboxRoot+"/") {
				out = append(out, "mount "+fields[4])
			}
		}
		f.Close()
	}
	if h, err := cgroup.Detect("deskgrid-" + shortHash(sandboxRoot)); err == nil {
		if ids, err := h.List(); err == nil {
			for _, id := range ids {
				out = append(out, "cgroup "+id)
			}
		}
	}
	sort.Strings(out)
	return out
}
