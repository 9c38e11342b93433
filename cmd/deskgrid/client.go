package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	deskgrid "github.com/deskgrid/deskgrid/sdk"
)

func runScreenshot(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		out, format string
		quality     int
	)
	c, err := parseCLI("screenshot", args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&out, "o", "screenshot.png", "file to write, - for standard output")
		fs.StringVar(&format, "format", "png", "png or jpeg")
		fs.IntVar(&quality, "quality", 0, "JPEG quality 1-100 (0: 80)")
	})
	if err != nil {
		return err
	}
	pos := c.pos
	if len(pos) != 1 {
		return usageError("screenshot: want one session id")
	}
	req := &displayv1.ScreenshotRequest{SessionId: pos[0], Quality: int32(quality)}
	switch strings.ToLower(format) {
	case "png":
		req.Format = displayv1.ImageFormat_IMAGE_FORMAT_PNG
	case "jpeg", "jpg":
		req.Format = displayv1.ImageFormat_IMAGE_FORMAT_JPEG
	default:
		return usageError("-format %q: want png or jpeg", format)
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	defer c.close()
	resp, err := displayv1.NewDisplayServiceClient(c.conn).Screenshot(c.ctx, req)
	if err != nil {
		return rpcError(err)
	}
	if out == "-" {
		_, err = stdout.Write(resp.GetData())
		return err
	}
	// Written beside the target and renamed, so a reader never sees half a file.
	tmp := out + ".part"
	if err := os.WriteFile(tmp, resp.GetData(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return err
	}
	fmt.Fprintf(stderr, "wrote %s (%dx%d, %d bytes)\n", out, resp.GetWidth(), resp.GetHeight(), len(resp.GetData()))
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func parseLabels(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range splitList(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError("label %q: want key=value", kv)
		}
		m[k] = v
	}
	return m, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// rpcError turns a gRPC status into a short message a person can act on.
func rpcError(err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok {
		msg := st.Message()
		if st.Code() == codes.Unauthenticated {
			msg += "; " + keySources()
		}
		return fmt.Errorf("%s: %s", strings.ToLower(st.Code().String()), msg)
	}
	// The SDK's error, which names deskgrid itself: the same words.
	if de, ok := err.(*deskgrid.Error); ok {
		return fmt.Errorf("%s: %s", strings.ToLower(de.Code.String()), de.Message)
	}
	return err
}

// dialAddr is the address a client on this machine dials to reach a
// listener: a wildcard host (":9090", "0.0.0.0", "::") becomes loopback.
func dialAddr(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	ip := tcp.IP
	if ip == nil || ip.IsUnspecified() {
		// Go's wildcard listeners are dual-stack: IPv4 loopback reaches them.
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(tcp.Port))
}
