// Package config fills a flag set from DESKGRID_* environment variables and
// command-line flags, flags winning over the environment.
package config

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// EnvPrefix starts every environment variable deskgrid reads.
const EnvPrefix = "DESKGRID_"

// EnvName is the environment variable for a flag: "grpc-addr" -> "DESKGRID_GRPC_ADDR".
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(flagName))
}

// Parse sets every flag of fs that has a DESKGRID_* variable in env, then
// parses args. lookup is os.LookupEnv when nil. A bad value names both the
// variable and the flag.
func Parse(fs *flag.FlagSet, args []string, lookup func(string) (string, bool)) error {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil {
			return
		}
		name := EnvName(f.Name)
		if v, ok := lookup(name); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q (flag -%s): %w", name, v, f.Name, serr)
			}
		}
	})
	if err != nil {
		return err
	}
	return fs.Parse(args)
}

// SetOnCommandLine names the flags of fs that args set (not those the
// environment set), parsed by the flag package's own rules.
func SetOnCommandLine(fs *flag.FlagSet, args []string) map[string]bool {
	probe := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	probe.SetOutput(io.Discard)
	probe.Usage = func() {}
	set := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		b, _ := f.Value.(interface{ IsBoolFlag() bool })
		probe.Var(&recorder{name: f.Name, set: set, bool: b != nil && b.IsBoolFlag()}, f.Name, "")
	})
	_ = probe.Parse(args)
	return set
}

type recorder struct {
	name string
	set  map[string]bool
	bool bool
}

func (r *recorder) String() string   { return "" }
func (r *recorder) IsBoolFlag() bool { return r.bool }
func (r *recorder) Set(string) error { r.set[r.name] = true; return nil }
