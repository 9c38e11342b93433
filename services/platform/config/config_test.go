package config

import (
	"flag"
	"io"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		wantAddr string
		wantTTL  time.Duration
		wantErr  bool
	}{
		{name: "defaults", wantAddr: ":9090", wantTTL: time.Hour},
		{name: "env", env: map[string]string{"DESKGRID_GRPC_ADDR": ":1", "DESKGRID_DEFAULT_TTL": "5m"}, wantAddr: ":1", wantTTL: 5 * time.Minute},
		{name: "flag beats env", env: map[string]string{"DESKGRID_GRPC_ADDR": ":1"}, args: []string{"-grpc-addr", ":2"}, wantAddr: ":2", wantTTL: time.Hour},
		{name: "bad env value", env: map[string]string{"DESKGRID_DEFAULT_TTL": "soon"}, wantErr: true},
		{name: "bad flag", args: []string{"-nope"}, wantErr: true},
		{name: "unrelated env ignored", env: map[string]string{"DESKGRID_OTHER": "x"}, wantAddr: ":9090", wantTTL: time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			addr := fs.String("grpc-addr", ":9090", "")
			ttl := fs.Duration("default-ttl", time.Hour, "")
			err := Parse(fs, tt.args, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if *addr != tt.wantAddr || *ttl != tt.wantTTL {
				t.Fatalf("got addr %q ttl %v, want %q %v", *addr, *ttl, tt.wantAddr, tt.wantTTL)
			}
		})
	}
}

func TestEnvName(t *testing.T) {
	if got := EnvName("node-max-sessions"); got != "DESKGRID_NODE_MAX_SESSIONS" {
		t.Fatalf("EnvName = %q", got)
	}
}

func TestSetOnCommandLine(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("internal-token", "", "")
	fs.String("secret-key", "", "")
	fs.Bool("auth", false, "")
	fs.String("log-level", "", "")
	env := map[string]string{"DESKGRID_SECRET_KEY": "from-env"}
	args := []string{"-auth", "--internal-token=abc", "-log-level", "debug", "rest"}
	if err := Parse(fs, args, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	got := SetOnCommandLine(fs, args)
	want := map[string]bool{"auth": true, "internal-token": true, "log-level": true}
	if len(got) != len(want) {
		t.Fatalf("set on the command line: %v, want %v", got, want)
	}
	for k := range want {
		if !got[k] {
			t.Fatalf("set on the command line: %v, want %v", got, want)
		}
	}
}
