package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/auth/keystore"
	"github.com/deskgrid/deskgrid/services/platform/config"
)

// openKeyStore opens the key store the servers use: -postgres-url when set,
// else auth.db in -data-dir. These commands run where the store is reachable
// (the deskgrid machine, or anywhere that reaches PostgreSQL).
func openKeyStore(ctx context.Context, name string, args []string, stderr io.Writer, define func(*flag.FlagSet)) (*keystore.Store, []string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", defaultDataDir(), "deskgrid's data dir (its auth.db)")
	pg := fs.String("postgres-url", "", "PostgreSQL of a cluster's key store")
	if define != nil {
		define(fs)
	}
	var pos []string
	for {
		if err := config.Parse(fs, args, nil); err != nil {
			return nil, nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	dsn := *pg
	fresh := false
	if dsn == "" {
		dsn = *dataDir + "/auth.db"
		_, err := os.Stat(dsn)
		fresh = errors.Is(err, os.ErrNotExist)
	}
	ks, err := keystore.Open(ctx, dsn, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("key store %s: %w", dsn, err)
	}
	if fresh {
		// Most likely the wrong data dir: a running deskgrid never sees it.
		fmt.Fprintf(stderr, "deskgrid: no deskgrid has used the data dir %s yet: made a new key store there (give a running deskgrid's with -data-dir or DESKGRID_DATA_DIR)\n", *dataDir)
	}
	return ks, pos, nil
}

// runTenants creates, lists and deletes tenants.
func runTenants(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError("tenants: want create <id> [name], list or delete <id>")
	}
	sub := args[0]
	var force bool
	ks, pos, err := openKeyStore(ctx, "tenants "+sub, args[1:], stderr, func(fs *flag.FlagSet) {
		if sub == "delete" {
			fs.BoolVar(&force, "force", false, "delete even while the tenant has active keys (they are revoked)")
		}
	})
	if err != nil {
		return err
	}
	defer ks.Close()
	switch {
	case sub == "create" && (len(pos) == 1 || len(pos) == 2):
		name := pos[0]
		if len(pos) == 2 {
			name = pos[1]
		}
		t, err := ks.CreateTenant(ctx, pos[0], name)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "tenant %s created\n", t.ID)
		return nil
	case sub == "list" && len(pos) == 0:
		ts, err := ks.ListTenants(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tCREATED")
		for _, t := range ts {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", t.ID, t.Name, t.CreateTime.Format(time.RFC3339))
		}
		return tw.Flush()
	case sub == "delete" && len(pos) == 1:
		if err := ks.DeleteTenant(ctx, pos[0], force); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "tenant %s deleted\n", pos[0])
		return nil
	}
	return usageError("tenants: want create <id> [name], list or delete <id>")
}

// runKeys creates, lists and revokes API keys.
func runKeys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError("keys: want create, list or revoke <key-id>")
	}
	sub := args[0]
	var tenant, scopes, name string
	var ttl time.Duration
	ks, pos, err := openKeyStore(ctx, "keys "+sub, args[1:], stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&tenant, "tenant", keystore.DefaultTenant, "the tenant the key acts for")
		if sub == "create" {
			fs.StringVar(&scopes, "scopes", "read,write", "read, write and/or admin")
			fs.StringVar(&name, "name", "", "a name to recognise the key by")
			fs.DurationVar(&ttl, "ttl", 0, "the key expires after this long (0: never)")
		}
	})
	if err != nil {
		return err
	}
	defer ks.Close()
	switch {
	case sub == "create" && len(pos) == 0:
		sc, err := auth.ParseScopes(scopes)
		if err != nil {
			return usageError("-scopes: %v", err)
		}
		var expire time.Time
		if ttl > 0 {
			expire = time.Now().Add(ttl)
		}
		k, plain, err := ks.CreateKey(ctx, tenant, sc, name, expire)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "key %s for tenant %s (%s); it is shown only now:\n", k.ID, k.Tenant, k.Scopes)
		fmt.Fprintln(stdout, plain)
		return nil
	case sub == "list" && len(pos) == 0:
		keys, err := ks.ListKeys(ctx, tenant)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTENANT\tNAME\tSCOPES\tACTIVE\tLAST USED")
		for _, k := range keys {
			used := "-"
			if !k.LastUsedTime.IsZero() {
				used = k.LastUsedTime.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\n", k.ID, k.Tenant, k.Name, k.Scopes, k.Active(time.Now()), used)
		}
		return tw.Flush()
	case sub == "revoke" && len(pos) == 1:
		if err := ks.RevokeKey(ctx, pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "key %s revoked\n", pos[0])
		return nil
	}
	return usageError("keys: want create, list or revoke <key-id>")
}
