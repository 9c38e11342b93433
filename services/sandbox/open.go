package sandbox

import (
	"bytes"
	"context"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/jail"
)

// maxOpenTarget bounds what Open takes, as a launch's args are bounded.
const maxOpenTarget = maxLaunchArg

// schemePrefix is how a URL starts; a file whose name looks so is opened
// as "./name".
var schemePrefix = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// defaultFor finds, inside the session and as its user, what the desktop
// would open a target with: GIO (the image's gio, as its file manager
// and GTK programs use it) reads the file's content type from its name
// and content and the default application for that type from the
// session's mimeapps.list and desktop entries. xdg-open is not used: on
// a desktop without a desktop environment it needs file(1) to type a
// file and hands anything it cannot type to the web browser.
// The script's exit codes: 10 no such path, 11 no content type, 12 no gio.
const defaultFor = `t=$1
[ "$2" != file ] || [ -e "$t" ] || exit 10
command -v gio >/dev/null 2>&1 || exit 12
case $2 in
file)
	ct=$(gio info -a standard::content-type "$t" 2>/dev/null | sed -n 's/^ *standard::content-type: //p')
	[ -n "$ct" ] || exit 11 ;;
*) ct=x-scheme-handler/$2 ;;
esac
printf '%s\n' "$ct"
gio mime "$ct" 2>/dev/null
true`

// openTarget is what Open was asked to open: a path or a web URL.
type openTarget struct {
	path string // a path of the API (as rootRel takes it), for a file
	url  string // an http(s) URL
}

func parseOpenTarget(t string) (openTarget, error) {
	switch {
	case strings.TrimSpace(t) == "":
		return openTarget{}, invalidf("target is required: a path in the session or an http, https or file URL")
	case len(t) > maxOpenTarget:
		return openTarget{}, invalidf("target is %d bytes; at most %d", len(t), maxOpenTarget)
	case strings.ContainsAny(t, "\x00\n\r"):
		return openTarget{}, invalidf("target holds a NUL or a line break")
	}
	if !schemePrefix.MatchString(t) {
		return openTarget{path: t}, nil
	}
	u, err := url.Parse(t)
	if err != nil {
		return openTarget{}, invalidf("target %q is not a URL: %v", t, err)
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		if u.Host == "" {
			return openTarget{}, invalidf("URL %q names no host", t)
		}
		return openTarget{url: t}, nil
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return openTarget{}, invalidf("file URL %q names host %q; only the session's own files open", t, u.Host)
		}
		if !strings.HasPrefix(u.Path, "/") {
			return openTarget{}, invalidf("file URL %q has no absolute path", t)
		}
		return openTarget{path: u.Path}, nil
	}
	return openTarget{}, invalidf("URL scheme %q cannot be opened: give a path, or an http, https or file URL (a file whose name has a colon opens as ./name)", u.Scheme)
}

func (s *Service) open(ctx context.Context, req *sandboxv1.OpenRequest) (*sandboxv1.OpenResponse, error) {
	if req.GetLeaseToken() < 0 {
		return nil, invalidf("lease_token %d is negative", req.GetLeaseToken())
	}
	tg, err := parseOpenTarget(req.GetTarget())
	if err != nil {
		return nil, err
	}
	if err := validateSessionID(req.GetSessionId()); err != nil {
		return nil, err
	}
	b, release, err := s.acquire(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	target, kind := tg.url, ""
	if tg.url != "" {
		kind = strings.ToLower(tg.url[:strings.IndexByte(tg.url, ':')])
	} else {
		rel, err := b.rootRel("path", tg.path)
		if err != nil {
			release()
			return nil, err
		}
		base := "/"
		if b.img == nil {
			base = jail.Home
		}
		target, kind = path.Join(base, rel), "file"
	}
	apps, err := s.applications(b)
	release()
	if err != nil {
		return nil, err
	}

	var out, errOut bytes.Buffer
	exit, err := s.exec(ctx, &sandboxv1.ExecRequest{
		SessionId: req.GetSessionId(),
		Argv:      []string{"sh", "-c", defaultFor, "sh", target, kind},
		Env:       []string{"LC_ALL=C.UTF-8", "LANGUAGE=", "GIO_USE_VFS=local"},
		Timeout:   durationpb.New(min(30*time.Second, s.cfg.MaxExecTimeout)),
	}, func(r *sandboxv1.ExecResponse) error {
		if len(r.GetStdout()) > 0 && out.Len() < 64<<10 {
			out.Write(r.GetStdout())
		}
		if len(r.GetStderr()) > 0 && errOut.Len() < 4<<10 {
			errOut.Write(r.GetStderr())
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch {
	case exit.GetExitCode() == 10:
		return nil, failf(errNotFound, "session %q has no file %s", req.GetSessionId(), target)
	case exit.GetExitCode() == 11:
		return nil, failf(errPrecondition, "the type of %s in session %q cannot be told", target, req.GetSessionId())
	case exit.GetExitCode() == 12:
		return nil, failf(errPrecondition, "session %q's image has no gio (Debian package libglib2.0-bin) to find the application that opens %s", req.GetSessionId(), target)
	case exit.GetExitCode() != 0 || exit.GetTimedOut() || exit.GetSignal() != "":
		return nil, failf(errPrecondition, "finding the application that opens %s in session %q failed (exit %d%s): %s", target, req.GetSessionId(), exit.GetExitCode(), exit.GetSignal(), strings.TrimSpace(errOut.String()))
	}
	contentType, desktopID := parseDefaultFor(out.String())
	if desktopID == "" {
		return nil, failf(errPrecondition, "no application of session %q opens %s (%s)", req.GetSessionId(), target, contentType)
	}
	var app *sandboxv1.Application
	for _, a := range apps {
		if a.GetId() == desktopID {
			app = a
			break
		}
	}
	if app == nil {
		return nil, failf(errPrecondition, "%s (%s) would open with %s, which is not an application session %q offers (ListApplications lists them)", target, contentType, desktopID, req.GetSessionId())
	}
	p, err := s.launch(ctx, req.GetSessionId(), req.GetLeaseToken(), app, []string{target})
	if err != nil {
		return nil, err
	}
	return &sandboxv1.OpenResponse{Application: app, Process: p, Target: target, ContentType: contentType}, nil
}

// parseDefaultFor reads defaultFor's output: the content type, then what
// `gio mime TYPE` says ("Default application for “TYPE”: ID.desktop",
// untranslated as the script runs it).
func parseDefaultFor(out string) (contentType, desktopID string) {
	lines := strings.Split(out, "\n")
	contentType = strings.TrimSpace(lines[0])
	for _, l := range lines[1:] {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "Default application for ") {
			continue
		}
		if i := strings.LastIndex(l, ": "); i >= 0 && strings.HasSuffix(l, ".desktop") {
			return contentType, strings.TrimSuffix(l[i+2:], ".desktop")
		}
	}
	return contentType, ""
}
