package main

import (
	"flag"
	"fmt"
	"io"
	"net/url"

	"github.com/deskgrid/deskgrid/services/platform/config"
)

// secretFlags hold secrets. A value on the command line is readable by every
// user of the machine (ps, /proc/<pid>/cmdline); the environment variable of
// the same name is not.
var secretFlags = []string{"internal-token", "viewer-keys", "secret-key", "anthropic-api-key", "openai-api-key", "gemini-api-key"}

// urlFlags hold a secret only when their URL carries a password.
var urlFlags = []string{"postgres-url", "redis-url", "nats-url"}

// warnSecretFlags tells, at start, which secrets came from the command line
// and the environment variable to use instead.
func warnSecretFlags(w io.Writer, fs *flag.FlagSet, args []string) {
	set := config.SetOnCommandLine(fs, args)
	warn := func(name string) {
		fmt.Fprintf(w, "warning: -%s was given on the command line, where any user of this machine can read it (ps, /proc); set %s in the environment instead\n", name, config.EnvName(name))
	}
	for _, name := range secretFlags {
		if set[name] && fs.Lookup(name).Value.String() != "" {
			warn(name)
		}
	}
	for _, name := range urlFlags {
		if !set[name] {
			continue
		}
		if u, err := url.Parse(fs.Lookup(name).Value.String()); err == nil && u.User != nil {
			if _, has := u.User.Password(); has {
				warn(name)
			}
		}
	}
}
