package auth

import (
	"strings"
)

// Policy says which scope each gRPC method needs, and which methods are
// open to anyone.
type Policy struct {
	methods map[string]Scope
	open    []string // full-method prefixes
}

// NewPolicy returns a policy with an explicit table (full method name, as
// "/deskgrid.session.v1.SessionService/GetSession", to scope); methods not
// in it are judged by their verb (see InferScope). Health checks and
// reflection are open.
func NewPolicy(methods map[string]Scope) *Policy {
	m := make(map[string]Scope, len(methods))
	for k, v := range methods {
		m[k] = v
	}
	return &Policy{methods: m, open: []string{
		"/grpc.health.v1.Health/",
		"/grpc.reflection.v1.ServerReflection/",
		"/grpc.reflection.v1alpha.ServerReflection/",
	}}
}

// DefaultPolicy is the table for deskgrid's own services.
func DefaultPolicy() *Policy { return NewPolicy(DefaultMethodScopes()) }

// Required returns the scope fullMethod needs, or open = true when it
// needs no credentials at all.
func (p *Policy) Required(fullMethod string) (scope Scope, open bool) {
	for _, prefix := range p.open {
		if strings.HasPrefix(fullMethod, prefix) {
			return "", true
		}
	}
	if s, ok := p.methods[fullMethod]; ok {
		return s, false
	}
	return InferScope(fullMethod), false
}

// InferScope is the rule for a method missing from the table: a name
// starting with a reading verb (Get, List, Watch, ...) needs read,
// anything else write.
func InferScope(fullMethod string) Scope {
	name := fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
	for _, v := range []string{"Get", "List", "Watch", "Stream", "Search", "Export", "Read", "Stat", "Diff", "Download", "Screenshot"} {
		if strings.HasPrefix(name, v) {
			return ScopeRead
		}
	}
	return ScopeWrite
}

// DefaultMethodScopes lists every deskgrid RPC. The node-level calls that
// create, list across tenants, freeze or delete displays and sandboxes are
// made by the session service with the internal token, so from a user
// they need admin; so do node drains.
func DefaultMethodScopes() map[string]Scope {
	const (
		session = "/deskgrid.session.v1.SessionService/"
		node    = "/deskgrid.session.v1.NodeService/"
		display = "/deskgrid.display.v1.DisplayService/"
		sandbox = "/deskgrid.sandbox.v1.SandboxService/"
		agent   = "/deskgrid.agent.v1.AgentService/"
		history = "/deskgrid.history.v1.HistoryService/"
		image   = "/deskgrid.image.v1.ImageService/"
	)
	r, w, a := ScopeRead, ScopeWrite, ScopeAdmin
	return map[string]Scope{
		session + "CreateSession":    w,
		session + "GetSession":       r,
		session + "ListSessions":     r,
		session + "DeleteSession":    w,
		session + "WatchSession":     r,
		session + "SuspendSession":   w,
		session + "ResumeSession":    w,
		session + "KeepaliveSession": w,
		session + "CommitSession":    w,

		node + "ListNodes":   r,
		node + "GetNode":     r,
		node + "DrainNode":   a,
		node + "UndrainNode": a,
		// Tags are per tenant: a pull onto every node acts for the caller.
		node + "PullImageOnNodes": w,

		display + "CreateDisplay":  a,
		display + "GetDisplay":     r,
		display + "ListDisplays":   a,
		display + "DeleteDisplay":  a,
		display + "Screenshot":     r,
		display + "PerformActions": w,
		display + "ConnectVNC":     a, // the gateway's, after a viewer token
		display + "ResizeDisplay":  w,
		display + "GetClipboard":   r,
		display + "SetClipboard":   w,
		display + "ListWindows":    r,
		display + "ActivateWindow": w,
		display + "CloseWindow":    w,
		display + "MoveWindow":     w,
		display + "SetWindowState": w,
		display + "StartRecording": w,
		display + "StopRecording":  w,

		sandbox + "CreateSandbox":        a,
		sandbox + "CommitSandbox":        a,
		sandbox + "GetSandbox":           r,
		sandbox + "ListSandboxes":        a,
		sandbox + "DeleteSandbox":        a,
		sandbox + "Exec":                 w,
		sandbox + "ReadFile":             r,
		sandbox + "WriteFile":            w,
		sandbox + "ListFiles":            r,
		sandbox + "StartProcess":         w,
		sandbox + "StopProcess":          w,
		sandbox + "ListProcesses":        r,
		sandbox + "GetAccessibilityTree": r,
		sandbox + "ActOnAccessible":      w,
		sandbox + "ListApplications":     r,
		sandbox + "LaunchApplication":    w,
		sandbox + "Open":                 w,
		sandbox + "FreezeSandbox":        a,
		sandbox + "ThawSandbox":          a,
		sandbox + "ListChanges":          r,
		sandbox + "DiffFile":             r,
		sandbox + "ApplyChanges":         w,
		sandbox + "DiscardChanges":       w,
		sandbox + "CreateSnapshot":       w,
		sandbox + "ListSnapshots":        r,
		sandbox + "RestoreSnapshot":      w,
		sandbox + "DeleteSnapshot":       w,
		sandbox + "RunShell":             w,
		sandbox + "RestartShell":         w,
		sandbox + "UploadFile":           w,
		sandbox + "DownloadFile":         r,
		sandbox + "StatFile":             r,
		sandbox + "MakeDirectory":        w,
		sandbox + "MoveFile":             w,
		sandbox + "DeleteFile":           w,

		agent + "CreateRun":         w,
		agent + "GetRun":            r,
		agent + "ListRuns":          r,
		agent + "CancelRun":         w,
		agent + "StreamRunEvents":   r,
		agent + "SendMessage":       w,
		agent + "ApproveStep":       w,
		agent + "RejectStep":        w,
		agent + "AcquireInputLease": w,
		agent + "GetInputLease":     r,
		agent + "RenewInputLease":   w,
		agent + "ReleaseInputLease": w,

		history + "ListSessionHistory":   r,
		history + "ListRunEntries":       r,
		history + "GetRunTranscript":     r,
		history + "SearchHistory":        r,
		history + "ExportSessionHistory": r,
		history + "ImportSessionHistory": w,
		history + "DeleteSessionHistory": w,
		history + "GetBlob":              r,
		history + "ListRecordings":       r,
		history + "GetRecording":         r,
		history + "DownloadRecording":    r,

		image + "ListImages":     r,
		image + "GetImage":       r,
		image + "PullImage":      w,
		image + "ImportImage":    w,
		image + "DeleteImage":    w,
		image + "SetImagePublic": a, // a public tag is seen by every tenant
		image + "GetImageUsage":  a, // the node's store: every tenant's images and bytes
	}
}
