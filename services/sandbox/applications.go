package sandbox

import (
	"bufio"
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

// applicationsDir holds the desktop entries of an image (and of the node,
// for a sandbox on the node's own programs).
const applicationsDir = "usr/share/applications"

// Bounds of reading desktop entries.
const (
	maxApplications = 1000
	maxEntryBytes   = 64 << 10
	maxLaunchArgs   = 64
	maxLaunchArg    = 4096
)

// applications reads the desktop entries shown in menus, by name. An
// image's are read beneath its root (os.Root: a link a session planted
// cannot lead out).
func (s *Service) applications(b *box) ([]*sandboxv1.Application, error) {
	rootDir := "/"
	if b.img != nil {
		rootDir = b.merged()
	}
	root, err := os.OpenRoot(rootDir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	ents, err := fs.ReadDir(root.FS(), applicationsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*sandboxv1.Application
	for _, e := range ents {
		if len(out) >= maxApplications {
			break
		}
		if !strings.HasSuffix(e.Name(), ".desktop") || !e.Type().IsRegular() {
			continue
		}
		f, err := root.Open(path.Join(applicationsDir, e.Name()))
		if err != nil {
			continue
		}
		a, ok := parseDesktopEntry(f)
		f.Close()
		if !ok {
			continue
		}
		a.Id = strings.TrimSuffix(e.Name(), ".desktop")
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return strings.ToLower(out[i].GetName()) < strings.ToLower(out[j].GetName()) })
	return out, nil
}

// parseDesktopEntry reads the [Desktop Entry] group of an application
// shown in menus.
func parseDesktopEntry(f fs.File) (*sandboxv1.Application, bool) {
	a := &sandboxv1.Application{}
	sc := bufio.NewScanner(&limited{f: f, n: maxEntryBytes})
	in := false
	typ, hidden := "", false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			in = line == "[Desktop Entry]"
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !in || !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "Type":
			typ = v
		case "Name":
			a.Name = v
		case "Comment":
			a.Comment = v
		case "Exec":
			a.Exec = v
		case "Categories":
			for c := range strings.SplitSeq(v, ";") {
				if c != "" {
					a.Categories = append(a.Categories, c)
				}
			}
		case "NoDisplay", "Hidden":
			hidden = hidden || v == "true"
		}
	}
	if sc.Err() != nil {
		return a, false
	}
	return a, typ == "Application" && !hidden && a.GetName() != "" && a.GetExec() != ""
}

type limited struct {
	f fs.File
	n int
}

func (l *limited) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("desktop entry too long")
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	n, err := l.f.Read(p)
	l.n -= n
	return n, err
}

// execArgv turns an entry's Exec line into argv (the Desktop Entry
// Specification's quoting), with its file and URL field codes given args
// and the others dropped.
func execArgv(exec string, args []string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(exec); i++ {
		c := exec[i]
		switch {
		case quoted && c == '\\' && i+1 < len(exec):
			i++
			cur.WriteByte(exec[i])
		case c == '"':
			quoted, inWord = !quoted, true
		case !quoted && (c == ' ' || c == '\t'):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		return nil, errors.New("unbalanced quotes in its Exec line")
	}
	if inWord {
		words = append(words, cur.String())
	}
	var argv []string
	used := false
	for _, w := range words {
		switch w {
		case "%f", "%u":
			if len(args) > 0 && !used {
				argv = append(argv, args[0])
				used = true
			}
			continue
		case "%F", "%U":
			if !used {
				argv = append(argv, args...)
				used = true
			}
			continue
		case "%i", "%c", "%k", "%d", "%D", "%n", "%N", "%v", "%m":
			continue
		}
		argv = append(argv, strings.ReplaceAll(w, "%%", "%"))
	}
	if len(argv) == 0 {
		return nil, errors.New("its Exec line is empty")
	}
	if len(args) > 0 && !used {
		return nil, errors.New("it takes no files or URLs")
	}
	return argv, nil
}

func (s *Service) listApplications(ctx context.Context, id string) ([]*sandboxv1.Application, error) {
	b, release, err := s.acquire(ctx, id)
	if err != nil {
		return nil, err
	}
	defer release()
	return s.applications(b)
}

func (s *Service) launchApplication(ctx context.Context, req *sandboxv1.LaunchApplicationRequest) (*sandboxv1.LaunchApplicationResponse, error) {
	want := strings.TrimSpace(req.GetApplication())
	switch {
	case want == "":
		return nil, invalidf("application is required: an id or a name ListApplications gives")
	case len(want) > 256:
		return nil, invalidf("application is %d bytes; at most 256", len(want))
	case req.GetLeaseToken() < 0:
		return nil, invalidf("lease_token %d is negative", req.GetLeaseToken())
	case len(req.GetArgs()) > maxLaunchArgs:
		return nil, invalidf("%d args; at most %d", len(req.GetArgs()), maxLaunchArgs)
	}
	for _, a := range req.GetArgs() {
		if len(a) > maxLaunchArg || a == "" || strings.ContainsRune(a, 0) {
			return nil, invalidf("an arg is empty, over %d bytes or holds a NUL", maxLaunchArg)
		}
	}
	b, release, err := s.acquire(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	apps, err := s.applications(b)
	release()
	if err != nil {
		return nil, err
	}
	var app *sandboxv1.Application
	for _, a := range apps {
		if a.GetId() == want {
			app = a
			break
		}
	}
	if app == nil {
		for _, a := range apps {
			if strings.EqualFold(a.GetName(), want) || strings.EqualFold(a.GetId(), want) {
				app = a
				break
			}
		}
	}
	if app == nil {
		return nil, failf(errNotFound, "session %q offers no application %q (ListApplications lists them)", req.GetSessionId(), want)
	}
	p, err := s.launch(ctx, req.GetSessionId(), req.GetLeaseToken(), app, req.GetArgs())
	if err != nil {
		return nil, err
	}
	return &sandboxv1.LaunchApplicationResponse{Application: app, Process: p}, nil
}

// launch starts app from its entry with args on the session's display.
func (s *Service) launch(ctx context.Context, sessionID string, leaseToken int64, app *sandboxv1.Application, args []string) (*sandboxv1.Process, error) {
	argv, err := execArgv(app.GetExec(), args)
	if err != nil {
		return nil, failf(errPrecondition, "application %q cannot be started: %v", app.GetId(), err)
	}
	// A launch is input: fenced by the input lease, as display actions are.
	var p *sandboxv1.Process
	err = s.asInput(ctx, sessionID, leaseToken, func() (err error) {
		p, err = s.startProcess(ctx, &sandboxv1.StartProcessRequest{SessionId: sessionID, Argv: argv})
		return err
	})
	return p, err
}
