package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/jail"
)

// xauthInSandbox is where a session's X cookie appears inside its sandbox.
const xauthInSandbox = "/tmp/.Xauthority"

// execTimeout checks a requested timeout; zero means the default.
func (s *Service) execTimeout(req *sandboxv1.ExecRequest) (time.Duration, error) {
	if req.GetTimeout() == nil {
		return s.cfg.ExecTimeout, nil
	}
	if err := req.GetTimeout().CheckValid(); err != nil {
		return 0, invalidf("timeout: %v", err)
	}
	d := req.GetTimeout().AsDuration()
	switch {
	case d < 0:
		return 0, invalidf("timeout %s is negative", d)
	case d == 0:
		return s.cfg.ExecTimeout, nil
	case d > s.cfg.MaxExecTimeout:
		return 0, invalidf("timeout %s is over the limit of %s", d, s.cfg.MaxExecTimeout)
	}
	return d, nil
}

// execCwd checks a requested working directory's form: "" is the default,
// a relative path is below the session user's home, an absolute one is as
// the session's programs see it (see rootRel).
func execCwd(cwd string) (string, error) {
	if cwd == "" {
		return "", nil
	}
	clean, err := checkPath(cwd)
	if err != nil {
		return "", invalidf("cwd: %v", err)
	}
	return clean, nil
}

// Limits on what a command line may hold, below the kernel's (execve fails
// with E2BIG past MAX_ARG_STRLEN per argument and ARG_MAX in all): a caller
// over them gets InvalidArgument naming the limit, not an internal error.
const (
	maxArgs         = 4096
	maxArgBytes     = 128 << 10
	maxArgvBytes    = 1 << 20
	maxCommandBytes = 1 << 20
)

func validateArgv(argv []string) error {
	if len(argv) == 0 || argv[0] == "" {
		return invalidf("argv is required: the program and its arguments")
	}
	if len(argv) > maxArgs {
		return invalidf("argv has %d arguments; at most %d are allowed (pass long lists in a file)", len(argv), maxArgs)
	}
	total := 0
	for i, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return invalidf("argv contains a NUL byte")
		}
		if len(a) > maxArgBytes {
			return invalidf("argv[%d] is %d bytes; one argument may have at most %d (pass large data in a file or on stdin)", i, len(a), maxArgBytes)
		}
		total += len(a)
	}
	if total > maxArgvBytes {
		return invalidf("argv is %d bytes in all; at most %d are allowed (pass large data in a file)", total, maxArgvBytes)
	}
	return nil
}

// exec runs a command in a session's sandbox, sending its output to send.
func (s *Service) exec(ctx context.Context, req *sandboxv1.ExecRequest, send func(*sandboxv1.ExecResponse) error) (*sandboxv1.ExecExit, error) {
	if err := validateSessionID(req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := validateArgv(req.GetArgv()); err != nil {
		return nil, err
	}
	if err := jail.ValidateEnv(req.GetEnv()); err != nil {
		return nil, invalidf("%v", err)
	}
	timeout, err := s.execTimeout(req)
	if err != nil {
		return nil, err
	}
	cwd, err := execCwd(req.GetCwd())
	if err != nil {
		return nil, err
	}
	b, release, err := s.acquire(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	defer release()
	if b.isFrozen() {
		return nil, failf(errFrozen, "session %q's sandbox is frozen; thaw it (resume the session) first", b.id)
	}

	spec, err := s.jailSpec(ctx, b, req.GetArgv(), req.GetEnv(), cwd, req.GetCwd(), req.GetAsRoot())
	if err != nil {
		return nil, err
	}
	spec.Stdin = req.GetStdin()

	// The command ends with the call, on timeout, or when the sandbox is deleted.
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(b.kill, func() { cancel(errors.New("sandbox deleted")) })
	defer stop()

	exit, err := jail.Run(runCtx, spec, timeout, s.cfg.ExecChunkBytes, func(stream jail.Stream, p []byte) error {
		out := &sandboxv1.ExecResponse{}
		if stream == jail.Stdout {
			out.Output = &sandboxv1.ExecResponse_Stdout{Stdout: p}
		} else {
			out.Output = &sandboxv1.ExecResponse_Stderr{Stderr: p}
		}
		return send(out)
	})
	if err != nil {
		switch {
		case b.kill.Err() != nil:
			return nil, failf(errInterrupted, "session %q's sandbox was deleted while the command ran", b.id)
		case ctx.Err() != nil:
			return nil, ctx.Err() // the caller went away; nothing to report
		case errors.Is(err, jail.ErrNoBwrap):
			return nil, failf(errMissingProgram, "this node cannot run commands: %s is not installed (Debian package bubblewrap)", s.cfg.BwrapPath)
		case errors.Is(err, jail.ErrNoSlirp):
			return nil, failf(errMissingProgram, "this node cannot give sandboxes network: %s is not installed (Debian package slirp4netns)", s.cfg.SlirpPath)
		}
		return nil, err
	}
	return &sandboxv1.ExecExit{ExitCode: int32(exit.Code), Signal: exit.Signal, TimedOut: exit.TimedOut}, nil
}

// jailSpec is how a command runs in b: its home, accounts, display and
// cgroup. cwd is from execCwd ("" for the default); asked is what the
// caller wrote.
func (s *Service) jailSpec(ctx context.Context, b *box, argv, extraEnv []string, cwd, asked string, asRoot bool) (jail.Spec, error) {
	if b.img != nil {
		return s.containerSpec(ctx, b, argv, extraEnv, cwd, asked, asRoot)
	}
	if asRoot {
		return jail.Spec{}, failf(errPrecondition, "session %q runs no image: only a session from an image has a user namespace of its own to be root in", b.id)
	}
	wd := jail.Home
	if cwd != "" {
		real, err := s.resolveCwd(b, cwd, asked)
		if err != nil {
			return jail.Spec{}, err
		}
		wd = path.Join(jail.Home, real)
	}

	spec := jail.Spec{
		Bwrap:    s.cfg.BwrapPath,
		HomeDir:  b.merged(),
		Argv:     argv,
		Cwd:      wd,
		Etc:      s.cfg.Etc,
		Hostname: "sandbox",
		Binds: []jail.Bind{
			{Src: filepath.Join(s.etcDir, "passwd"), Dest: "/etc/passwd"},
			{Src: filepath.Join(s.etcDir, "group"), Dest: "/etc/group"},
		},
	}
	var env []string
	if s.display != nil {
		if disp, xauth, ok := s.display(b.id); ok {
			sock, n, err := jail.HostSocket(s.cfg.X11SocketDir, disp)
			if err != nil {
				return jail.Spec{}, err
			}
			if _, err := waitXSocket(ctx, b.id, disp, sock); err != nil {
				return jail.Spec{}, err
			}
			if xauth != "" {
				if _, err := os.Stat(xauth); err != nil {
					return jail.Spec{}, failf(errPrecondition, "session %q's X authority file is missing: %v", b.id, err)
				}
			}
			spec.Binds = append(spec.Binds, jail.Bind{Src: sock, Dest: "/tmp/.X11-unix/X" + n, Writable: true})
			env = append(env, "DISPLAY=:"+n)
			if xauth != "" {
				spec.Binds = append(spec.Binds, jail.Bind{Src: xauth, Dest: xauthInSandbox})
				env = append(env, "XAUTHORITY="+xauthInSandbox)
			}
		}
	}
	spec.Env = append(env, extraEnv...)
	if b.cg != nil {
		spec.Place = b.cg.Command
	}
	spec.Seccomp = s.seccomp
	if b.network {
		// Looked up per command: the host's addresses can change.
		deny, err := jail.HostAddrs()
		if err != nil {
			return jail.Spec{}, err
		}
		spec.Network = &jail.Network{Slirp: s.cfg.SlirpPath, Hardened: true, Deny: deny}
	}
	return spec, nil

}

// containerSpec is how a command runs in a sandbox that runs its image: a
// `runc exec` as the image's user, in the asked working directory or else
// the image's (else the user's home), with the session's display.
func (s *Service) containerSpec(ctx context.Context, b *box, argv, extraEnv []string, cwd, asked string, asRoot bool) (jail.Spec, error) {
	uid, gid, err := imageUser(b.merged(), b.img.Config.User)
	if err != nil {
		return jail.Spec{}, failf(errPrecondition, "session %q: %v", b.id, err)
	}
	wd := b.img.Config.WorkingDir
	if wd == "" {
		wd = b.home()
	}
	if cwd != "" {
		real, err := s.resolveCwd(b, cwd, asked)
		if err != nil {
			return jail.Spec{}, err
		}
		wd = path.Join("/", real)
	}
	runAs := fmt.Sprintf("%d:%d", uid, gid)
	if asRoot {
		// Root of the session's own user namespace: the range's first host
		// id, never the host's root.
		runAs = "0:0"
	}
	spec := jail.Spec{
		Argv:      argv,
		Cwd:       wd,
		Container: &jail.Container{Runtime: s.runtime(), ID: b.cid, User: runAs},
	}
	var env []string
	if s.display != nil {
		if disp, xauth, ok := s.display(b.id); ok {
			sock, n, err := jail.HostSocket(s.cfg.X11SocketDir, disp)
			if err != nil {
				return jail.Spec{}, err
			}
			st, err := waitXSocket(ctx, b.id, disp, sock)
			if err != nil {
				return jail.Spec{}, err
			}
			// The cookie stays the image user's, also for a command as root:
			// the user's programs read it again for every new connection.
			if env, err = s.shareDisplay(b, sock, st, n, xauth, uid, gid); err != nil {
				return jail.Spec{}, err
			}
			s.awaitA11yBus(ctx, b, argv)
		}
	}
	spec.Env = append(env, extraEnv...)
	return spec, nil
}

// resolveCwd resolves a working directory (from execCwd) to where it really
// lies relative to the sandbox's root directory: it must exist there and be
// a directory. In what a session's container mounts over its root
// filesystem (/tmp, /run...), which only the container sees, the container
// looks for it.
func (s *Service) resolveCwd(b *box, cwd, asked string) (string, error) {
	rel, err := b.rootRel("cwd", cwd)
	if err != nil {
		return "", err
	}
	r, err := s.root(b)
	if err != nil {
		return "", err
	}
	if b.img != nil {
		if real := resolveExisting(r, rel); mountAt(real) != "" {
			return real, nil
		}
	}
	real, err := r.Resolve(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", invalidf("cwd %q does not exist in the sandbox", asked)
		}
		return "", err
	}
	if st, err := os.Stat(filepath.Join(b.merged(), real)); err != nil || !st.IsDir() {
		return "", invalidf("cwd %q is not a directory", asked)
	}
	return real, nil
}
