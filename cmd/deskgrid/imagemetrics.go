package main

import (
	"context"
	"time"

	"golang.org/x/sys/unix"

	"github.com/deskgrid/deskgrid/services/platform/metrics"
	"github.com/deskgrid/deskgrid/services/sandbox/image"
)

// imageStoreUsage reads what the node's image store holds, and the room on
// the filesystem under dir, for the image store metrics.
func imageStoreUsage(images *image.Store, dir string) func() (metrics.ImageStoreUsage, bool) {
	return func() (metrics.ImageStoreUsage, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		u, err := images.Usage(ctx)
		if err != nil {
			return metrics.ImageStoreUsage{}, false
		}
		out := metrics.ImageStoreUsage{Images: int64(u.Images), LayerBytes: u.LayerBytes, BlobBytes: u.BlobBytes}
		var st unix.Statfs_t
		if unix.Statfs(dir, &st) == nil {
			out.FSFree, out.FSSize = int64(st.Bavail)*st.Bsize, int64(st.Blocks)*st.Bsize
		}
		return out, true
	}
}
