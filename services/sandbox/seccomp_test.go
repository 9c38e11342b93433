package sandbox

import (
	"strings"
	"testing"
)

func TestSeccompFilter(t *testing.T) {
	probe := map[string]string{
		"userns": "unshare -U true && echo allowed",
		"ptrace": `python3 -c "import ctypes; libc = ctypes.CDLL(None, use_errno=True); print(libc.ptrace(0, 0, 0, 0), ctypes.get_errno())"`,
		"thread": `python3 -c "import threading; t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()"`,
	}
	run := func(t *testing.T, noSeccomp bool) map[string]execResult {
		cfg := testConfig(t)
		cfg.NoSeccomp = noSeccomp
		h := newHarness(t, cfg, Deps{})
		h.create(t, "sc", "")
		out := map[string]execResult{}
		for name, script := range probe {
			out[name] = h.mustExec(t, "sc", "sh", "-c", script)
		}
		return out
	}
	on := run(t, false)
	if r := on["userns"]; r.exit.GetExitCode() == 0 || !strings.Contains(r.stderr, "Operation not permitted") {
		t.Errorf("new user namespace under the filter: %+v", r)
	}
	if r := on["ptrace"]; r.stdout != "-1 1\n" {
		t.Errorf("ptrace under the filter: %+v", r)
	}
	// clone3 is refused with ENOSYS, so libc falls back to clone.
	if r := on["thread"]; r.stdout != "thread\n" {
		t.Errorf("threads under the filter: %+v", r)
	}
	// The same probe without the filter shows what it stops.
	if r := run(t, true)["userns"]; r.stdout != "allowed\n" {
		t.Errorf("new user namespace without the filter: %+v (the comparison is void)", r)
	}
}
