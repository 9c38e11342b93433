package main

import (
	"flag"
	"strings"

	"github.com/deskgrid/deskgrid/services/sandbox"
)

// limitsConfig are the settings that bound what a tenant may make the
// servers do: a session's disk, and the addresses runs may send to.
type limitsConfig struct {
	SessionDiskBytes int64
	ProviderBaseURLs string
}

func limitFlags(fs *flag.FlagSet, c *limitsConfig) {
	fs.Int64Var(&c.SessionDiskBytes, "session-disk-bytes", sandbox.DefaultDiskBytes, "disk a session's writable layer may fill when its request names no disk_bytes (0: no limit)")
	fs.StringVar(&c.ProviderBaseURLs, "provider-base-urls", strings.Join(defaultProviderBaseURLs, ","), "comma-separated base URLs a run may name for its provider (scheme://host[:port][/path], port * for any); the -*-base-url settings are allowed besides")
}
