package main

import (
	"context"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

// runChanges reviews and applies what a session changed in its workspace.
func runChanges(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := newCLI(ctx, "changes", args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	defer c.close()
	const usage = "changes <session> [list] | diff PATH | apply [PATH...] | discard [PATH...]"
	if len(c.pos) < 1 {
		return usageError("%s", usage)
	}
	id, verb := c.pos[0], "list"
	var a []string
	if len(c.pos) > 1 {
		verb, a = c.pos[1], c.pos[2:]
	}
	sb := sandboxv1.NewSandboxServiceClient(c.conn)
	switch verb {
	case "list":
		resp, err := sb.ListChanges(c.ctx, &sandboxv1.ListChangesRequest{SessionId: id})
		if err != nil {
			return rpcError(err)
		}
		return c.table("KIND\tPATH\tSIZE", toMsgs(resp.GetChanges()), func(m proto.Message) string {
			ch := m.(*sandboxv1.Change)
			return fmt.Sprintf("%s\t%s\t%d", lower("CHANGE_KIND_", ch.GetKind().String()), ch.GetPath(), ch.GetSize())
		})
	case "diff":
		if len(a) != 1 {
			return usageError("%s", usage)
		}
		resp, err := sb.DiffFile(c.ctx, &sandboxv1.DiffFileRequest{SessionId: id, Path: a[0]})
		if err != nil {
			return rpcError(err)
		}
		if c.cf.output == "json" {
			return c.print(resp)
		}
		if resp.GetBinary() {
			fmt.Fprintf(stdout, "binary file %s %s\n", a[0], lower("CHANGE_KIND_", resp.GetChange().GetKind().String()))
			return nil
		}
		fmt.Fprint(stdout, resp.GetDiff())
		return nil
	case "apply":
		resp, err := sb.ApplyChanges(c.ctx, &sandboxv1.ApplyChangesRequest{SessionId: id, Paths: a})
		if err != nil {
			return rpcError(err)
		}
		if c.cf.output == "json" {
			return c.print(resp)
		}
		for _, p := range resp.GetApplied() {
			fmt.Fprintln(stdout, "applied", p)
		}
		for _, cf := range resp.GetConflicts() {
			fmt.Fprintln(stdout, "conflict", cf.GetPath(), cf.GetReason())
		}
		if len(resp.GetConflicts()) > 0 {
			return fmt.Errorf("%d conflicts left unapplied", len(resp.GetConflicts()))
		}
		return nil
	case "discard":
		resp, err := sb.DiscardChanges(c.ctx, &sandboxv1.DiscardChangesRequest{SessionId: id, Paths: a})
		if err != nil {
			return rpcError(err)
		}
		if c.cf.output == "json" {
			return c.print(resp)
		}
		for _, p := range resp.GetDiscarded() {
			fmt.Fprintln(stdout, "discarded", p)
		}
		return nil
	}
	return usageError("%s", usage)
}

// runSnapshots saves and restores a session's writable layer.
func runSnapshots(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := newCLI(ctx, "snapshots", args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	defer c.close()
	const usage = "snapshots <session> create | list | restore SNAPSHOT | delete SNAPSHOT"
	if len(c.pos) < 2 {
		return usageError("%s", usage)
	}
	id, verb, a := c.pos[0], c.pos[1], c.pos[2:]
	sb := sandboxv1.NewSandboxServiceClient(c.conn)
	row := func(m proto.Message) string {
		s := m.(*sandboxv1.Snapshot)
		return fmt.Sprintf("%s\t%s\t%d\t%.12s\t%s", s.GetSnapshotId(), s.GetSessionId(), s.GetSizeBytes(), s.GetSha256(), ago(s.GetCreateTime()))
	}
	const header = "ID\tSESSION\tBYTES\tSHA256\tAGE"
	switch {
	case verb == "create":
		if c.cf.output == "table" {
			fmt.Fprintf(stderr, "saving the writable layer of %s...\n", id)
		}
		resp, err := sb.CreateSnapshot(c.ctx, &sandboxv1.CreateSnapshotRequest{SessionId: id})
		if err != nil {
			return rpcError(err)
		}
		return c.table(header, []proto.Message{resp.GetSnapshot()}, row)
	case verb == "list":
		resp, err := sb.ListSnapshots(c.ctx, &sandboxv1.ListSnapshotsRequest{SessionId: id})
		if err != nil {
			return rpcError(err)
		}
		return c.table(header, toMsgs(resp.GetSnapshots()), row)
	case verb == "restore" && len(a) == 1:
		resp, err := sb.RestoreSnapshot(c.ctx, &sandboxv1.RestoreSnapshotRequest{SessionId: id, SnapshotId: a[0]})
		if err != nil {
			return rpcError(err)
		}
		return c.print(resp)
	case verb == "delete" && len(a) == 1:
		_, err := sb.DeleteSnapshot(c.ctx, &sandboxv1.DeleteSnapshotRequest{SessionId: id, SnapshotId: a[0]})
		return rpcError(err)
	}
	return usageError("%s", usage)
}
