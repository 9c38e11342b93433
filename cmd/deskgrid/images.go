package main

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

// imagesBuild, when set, makes an image from a recipe (`deskgrid images
// build`); the default desktop image's builder installs it.
var imagesBuild func(ctx context.Context, args []string, stdout, stderr io.Writer) error

func runImages(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError("images: want list, pull, import, rm, inspect or build")
	}
	sub, args := args[0], args[1:]
	if sub == "build" {
		if imagesBuild == nil {
			return usageError("images build: this build of deskgrid has no image builder")
		}
		return imagesBuild(ctx, args, stdout, stderr)
	}
	switch sub {
	case "pull", "list", "ls", "inspect", "rm", "delete", "import":
	default:
		return usageError("images: unknown subcommand %q", sub)
	}
	var (
		ref      string
		allNodes bool
		node     string
	)
	c, err := newCLI(ctx, "images "+sub, args, stdout, stderr, func(fs *flag.FlagSet) {
		// Pulls and imports of desktop images take minutes, not one.
		t := fs.Lookup("timeout")
		t.DefValue = (30 * time.Minute).String()
		_ = t.Value.Set(t.DefValue)
		nodeFlag := func(what string) {
			fs.StringVar(&node, "node", "", "in a cluster (through the session service): the `id` of the node to "+what+" (see deskgrid nodes list); ignored by a single machine")
		}
		switch sub {
		case "pull":
			fs.BoolVar(&allNodes, "all-nodes", false, "pull onto every live node of the cluster at once (through the session service), with each node's progress and result; exits non-zero when any node failed")
			nodeFlag("pull onto (a cluster needs -node or -all-nodes)")
		case "list", "ls":
			nodeFlag("list; without it a cluster lists every live node's images, with the nodes holding each")
		case "inspect":
			nodeFlag("ask; without it a cluster asks every live node and lists those holding the image")
		case "rm", "delete":
			nodeFlag("delete from (a cluster needs it)")
		case "import":
			fs.StringVar(&ref, "tag", "", "tag for the imported image (default: the names the archive carries)")
			fs.BoolVar(&allNodes, "all-nodes", false, "import onto every live node of the cluster in turn (through the session service), the archive streamed to each, with each node's result; exits non-zero when any node failed")
			nodeFlag("import onto (a cluster needs -node or -all-nodes)")
		}
	})
	if err != nil {
		return err
	}
	defer c.close()
	client := imagev1.NewImageServiceClient(c.conn)

	one := func() (string, error) {
		if len(c.pos) != 1 {
			return "", usageError("images %s: want one image reference", sub)
		}
		return c.pos[0], nil
	}
	switch sub {
	case "list", "ls":
		resp, err := client.ListImages(c.ctx, &imagev1.ListImagesRequest{NodeId: node})
		if err != nil {
			return rpcError(err)
		}
		return printImages(stdout, c.cf.output, resp.GetImages()...)
	case "inspect":
		r, err := one()
		if err != nil {
			return err
		}
		resp, err := client.GetImage(c.ctx, &imagev1.GetImageRequest{Ref: r, NodeId: node})
		if err != nil {
			return rpcError(err)
		}
		b, _ := protojson.MarshalOptions{Multiline: true}.Marshal(resp.GetImage())
		fmt.Fprintln(stdout, string(b))
		return nil
	case "rm", "delete":
		r, err := one()
		if err != nil {
			return err
		}
		if _, err := client.DeleteImage(c.ctx, &imagev1.DeleteImageRequest{Ref: r, NodeId: node}); err != nil {
			return rpcError(err)
		}
		fmt.Fprintln(stdout, "deleted", r)
		return nil
	case "pull":
		r, err := one()
		if err != nil {
			return err
		}
		if allNodes && node != "" {
			return usageError("images pull: -node and -all-nodes exclude each other")
		}
		if allNodes {
			return pullAllNodes(c.ctx, sessionv1.NewNodeServiceClient(c.conn), r, c.cf.output, stdout, stderr)
		}
		stream, err := client.PullImage(c.ctx, &imagev1.PullImageRequest{Ref: r, NodeId: node})
		if err != nil {
			return rpcError(err)
		}
		bar := newProgress(stderr)
		for {
			m, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return errors.New("pull: the node ended the stream without an image")
			}
			if err != nil {
				bar.done()
				return rpcError(err)
			}
			if p := m.GetProgress(); p != nil {
				if c.cf.output == "table" {
					bar.show("%s", progressLine(p))
				}
				continue
			}
			bar.done()
			return printImages(stdout, c.cf.output, m.GetImage())
		}
	case "import":
		path, err := one()
		if err != nil {
			return err
		}
		if allNodes && node != "" {
			return usageError("images import: -node and -all-nodes exclude each other")
		}
		f, err := openImportArchive(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if allNodes {
			return importAllNodes(c.ctx, client, sessionv1.NewNodeServiceClient(c.conn), f, ref, c.cf.output, stdout, stderr)
		}
		var progress func(int64, int64)
		bar := newProgress(stderr)
		if c.cf.output == "table" {
			progress = func(sent, size int64) {
				bar.show("importing %s: %s / %s", path, humanBytes(sent), humanBytes(size))
			}
		}
		imgs, err := importArchive(c.ctx, client, f, ref, node, progress)
		bar.done()
		if err != nil {
			return rpcError(err)
		}
		return printImages(stdout, c.cf.output, imgs...)
	}
	return nil
}

// importArchive streams the archive f, from its start, to one node (node;
// "" on a single machine), calling progress, when set, with the bytes sent
// so far and f's size. An error of the call is its gRPC status; one of
// reading f is not.
func importArchive(ctx context.Context, client imagev1.ImageServiceClient, f *os.File, ref, node string, progress func(sent, size int64)) ([]*imagev1.Image, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("images import: %w", err)
	}
	var size int64
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	stream, err := client.ImportImage(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&imagev1.ImportImageRequest{Data: &imagev1.ImportImageRequest_Header{Header: &imagev1.ImportImageHeader{Ref: ref, NodeId: node}}}); err != nil {
		_, err = stream.CloseAndRecv()
		return nil, err
	}
	buf := make([]byte, 256<<10)
	var sent int64
	for {
		n, rerr := f.Read(buf)
		if n > 0 {
			if err := stream.Send(&imagev1.ImportImageRequest{Data: &imagev1.ImportImageRequest_Chunk{Chunk: buf[:n]}}); err != nil {
				break // the answer says why
			}
			sent += int64(n)
			if progress != nil && size > 0 {
				progress(sent, size)
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return nil, fmt.Errorf("images import: %w", rerr)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, err
	}
	return resp.GetImages(), nil
}

// importAllNodes imports the archive f onto every live node in turn: its
// progress on stderr, then each node's result and a summary on stdout. A
// node that failed makes the command fail.
func importAllNodes(ctx context.Context, images imagev1.ImageServiceClient, nodes sessionv1.NodeServiceClient, f *os.File, ref, output string, stdout, stderr io.Writer) error {
	resp, err := nodes.ListNodes(ctx, &sessionv1.ListNodesRequest{})
	if err != nil {
		return rpcError(err)
	}
	var ids []string
	for _, n := range resp.GetNodes() {
		if n.GetState() != sessionv1.NodeState_NODE_STATE_DOWN {
			ids = append(ids, n.GetId())
		}
	}
	if len(ids) == 0 {
		return errors.New("images import: no live node to import onto; see `deskgrid nodes list`")
	}
	sort.Strings(ids)
	type result struct {
		node string
		imgs []*imagev1.Image
		err  error
	}
	var (
		results []result
		failed  int
	)
	for _, id := range ids {
		var progress func(int64, int64)
		bar := newProgress(stderr)
		if output == "table" {
			progress = func(sent, size int64) {
				bar.show("%s: importing %s / %s", id, humanBytes(sent), humanBytes(size))
			}
		}
		imgs, err := importArchive(ctx, images, f, ref, id, progress)
		bar.done()
		if err != nil {
			if _, ok := status.FromError(err); !ok || ctx.Err() != nil {
				return rpcError(err) // the archive or the command, not the node
			}
			failed++
		}
		results = append(results, result{id, imgs, err})
	}
	if output == "json" {
		for _, r := range results {
			line := map[string]any{"nodeId": r.node}
			if r.err != nil {
				st := status.Convert(r.err)
				line["errorCode"], line["error"] = st.Code().String(), st.Message()
			} else {
				var ims []json.RawMessage
				for _, im := range r.imgs {
					b, _ := protojson.Marshal(im)
					ims = append(ims, b)
				}
				line["images"] = ims
			}
			b, _ := json.Marshal(line)
			fmt.Fprintln(stdout, string(b))
		}
		b, _ := json.Marshal(map[string]int{"nodes": len(ids), "succeeded": len(ids) - failed, "failed": failed})
		fmt.Fprintln(stdout, string(b))
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tRESULT\tREF\tDIGEST")
		for _, r := range results {
			if r.err != nil {
				st := status.Convert(r.err)
				fmt.Fprintf(tw, "%s\tfailed: %s: %s\t\t\n", r.node, strings.ToLower(st.Code().String()), st.Message())
				continue
			}
			for _, im := range r.imgs {
				d := im.GetDigest()
				if len(d) > 19 {
					d = d[:19]
				}
				fmt.Fprintf(tw, "%s\timported\t%s\t%s\n", r.node, im.GetRef(), d)
			}
		}
		_ = tw.Flush()
		fmt.Fprintf(stdout, "%s: imported onto %d of %d nodes", f.Name(), len(ids)-failed, len(ids))
		if failed > 0 {
			fmt.Fprintf(stdout, ", failed on %d", failed)
		}
		fmt.Fprintln(stdout)
	}
	if failed > 0 {
		return fmt.Errorf("images import: failed on %d of %d nodes", failed, len(ids))
	}
	return nil
}

// pullAllNodes pulls ref onto every live node: a line on stderr whenever a
// node reaches a new phase or layer, then each node's result and a summary
// on stdout. A node that failed makes the command fail.
func pullAllNodes(ctx context.Context, nodes sessionv1.NodeServiceClient, ref, output string, stdout, stderr io.Writer) error {
	stream, err := nodes.PullImageOnNodes(ctx, &sessionv1.PullImageOnNodesRequest{Ref: ref})
	if err != nil {
		return rpcError(err)
	}
	type seen struct {
		phase  string
		layers int32
	}
	last := map[string]seen{}
	var results []*sessionv1.NodePullResult
	var summary *sessionv1.NodePullSummary
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			err = nil
		}
		if err == nil && m != nil {
			switch {
			case m.GetProgress() != nil:
				p := m.GetProgress()
				cur := seen{p.GetProgress().GetPhase(), p.GetProgress().GetLayersDone()}
				if output == "table" && last[p.GetNodeId()] != cur {
					last[p.GetNodeId()] = cur
					fmt.Fprintf(stderr, "%s: %s\n", p.GetNodeId(), progressLine(p.GetProgress()))
				}
			case m.GetResult() != nil:
				results = append(results, m.GetResult())
			case m.GetSummary() != nil:
				summary = m.GetSummary()
			}
			continue
		}
		if output == "json" {
			for _, r := range results {
				b, _ := protojson.Marshal(r)
				fmt.Fprintln(stdout, string(b))
			}
			if summary != nil {
				b, _ := protojson.Marshal(summary)
				fmt.Fprintln(stdout, string(b))
			}
		} else {
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tRESULT\tDIGEST\tSIZE")
			for _, r := range results {
				if r.GetErrorCode() != "" {
					fmt.Fprintf(tw, "%s\tfailed: %s: %s\t\t\n", r.GetNodeId(), strings.ToLower(r.GetErrorCode()), r.GetError())
					continue
				}
				d := r.GetImage().GetDigest()
				if len(d) > 19 {
					d = d[:19]
				}
				fmt.Fprintf(tw, "%s\tpulled\t%s\t%s\n", r.GetNodeId(), d, humanBytes(r.GetImage().GetSize()))
			}
			_ = tw.Flush()
			if summary != nil {
				fmt.Fprintf(stdout, "%s: pulled onto %d of %d nodes", ref, summary.GetSucceeded(), summary.GetNodes())
				if summary.GetFailed() > 0 {
					fmt.Fprintf(stdout, ", failed on %d", summary.GetFailed())
				}
				fmt.Fprintln(stdout)
			}
		}
		if err != nil {
			return rpcError(err)
		}
		if summary == nil {
			return errors.New("pull: the session service ended the stream without a summary")
		}
		return nil
	}
}

// progress shows a long call's progress on w: redrawn in place on a
// terminal; elsewhere (a log, a pipe) a line at most every progressEvery, so
// the log is not flooded.
type progress struct {
	w     io.Writer
	tty   bool
	last  time.Time
	drawn bool
}

const progressEvery = 5 * time.Second

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		p.tty = err == nil
	}
	return p
}

func (p *progress) show(format string, a ...any) {
	if p.tty {
		fmt.Fprintf(p.w, "\r"+format, a...)
		p.drawn = true
		return
	}
	if !p.last.IsZero() && time.Since(p.last) < progressEvery {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.w, format+"\n", a...)
}

// done ends the line drawn in place, if any.
func (p *progress) done() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

func progressLine(p *imagev1.PullProgress) string {
	return fmt.Sprintf("%-9s layers %d/%d  %s / %s", p.GetPhase(), p.GetLayersDone(), p.GetLayersTotal(), humanBytes(p.GetDoneBytes()), humanBytes(p.GetTotalBytes()))
}

func printImages(w io.Writer, output string, imgs ...*imagev1.Image) error {
	if output == "json" {
		for _, im := range imgs {
			b, err := protojson.Marshal(im)
			if err != nil {
				return err
			}
			fmt.Fprintln(w, string(b))
		}
		return nil
	}
	// A cluster's list that named no node says which nodes hold each.
	nodes := false
	for _, im := range imgs {
		nodes = nodes || len(im.GetNodeIds()) > 0
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "REF\tDIGEST\tLAYERS\tSIZE\tPUBLIC"
	if nodes {
		head += "\tNODES"
	}
	fmt.Fprintln(tw, head)
	for _, im := range imgs {
		d := im.GetDigest()
		if len(d) > 19 {
			d = d[:19]
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%v", im.GetRef(), d, len(im.GetLayers()), humanBytes(im.GetSize()), im.GetPublic())
		if nodes {
			fmt.Fprintf(tw, "\t%s", strings.Join(im.GetNodeIds(), ","))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// openImportArchive opens what `images import` sends: an archive as it is,
// or an OCI image layout directory (what `images build -o` writes) as a tar
// of it, made in a temporary file that is gone once the file is closed.
func openImportArchive(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usageError("images import: %v", err)
	}
	fi, err := f.Stat()
	if err != nil || !fi.IsDir() {
		return f, err
	}
	f.Close()
	if _, err := os.Stat(filepath.Join(path, "oci-layout")); err != nil {
		return nil, usageError("images import: %s is a directory but not an OCI image layout (it has no oci-layout file); give a layout directory or an archive (docker save, or a layout as a tar)", path)
	}
	tmp, err := os.CreateTemp("", "deskgrid-import-*.tar")
	if err != nil {
		return nil, fmt.Errorf("images import: %w", err)
	}
	// Unlinked at once: the open file is all that is needed, and nothing is
	// left behind however the command ends.
	_ = os.Remove(tmp.Name())
	if err := tarDir(tmp, path); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("images import: %s: %w", path, err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("images import: %w", err)
	}
	return tmp, nil
}

// tarDir writes the regular files and directories beneath dir to w as a tar,
// with names relative to dir; symbolic links are followed.
func tarDir(w io.Writer, dir string) error {
	dir, err := filepath.EvalSymlinks(dir) // /var/cache/deskgrid/images/desktop is a link
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	err = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		switch {
		case fi.IsDir():
			return tw.WriteHeader(&tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: fi.ModTime()})
		case fi.Mode().IsRegular():
			if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: fi.Size(), ModTime: fi.ModTime()}); err != nil {
				return err
			}
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			_, err = io.Copy(tw, src)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
