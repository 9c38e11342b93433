// Command check-modules checks that the modules of go.work agree:
//
//   - each module resolves every dependency it requires (in a tidy go.mod,
//     every module that gives its packages or tests a package), on its own
//     (GOWORK=off, `go list -m all`), to the same version as every other
//     module of the workspace, so a module built or tested alone runs the
//     code the workspace build runs. Modules that are only in a graph and
//     give no package (old go.mod files of dependencies' dependencies) are
//     never compiled, and tidy drops any requirement that would align them;
//     they are not compared;
//   - no module keeps a replace line for a module its graph does not hold.
//
// `go mod tidy -diff` per module (make lint) proves each go.mod tidy; this
// proves them consistent. Fix a disagreement by requiring the newer version in
// the module that lags (`go get dep@version`, then `go mod tidy`).
//
//	GOWORK=off go run scripts/check-modules.go   (from the repository root)
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
)

type module struct {
	Path    string
	Version string
	Main    bool
	Replace *module
}

func goJSON(dir string, args ...string) *json.Decoder {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if args[0] == "work" {
		wd, _ := os.Getwd()
		cmd.Env = append(os.Environ(), "GOWORK="+wd+"/go.work")
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "check-modules: %s: go %s: %v\n", dir, strings.Join(args, " "), err)
		os.Exit(2)
	}
	return json.NewDecoder(bytes.NewReader(out))
}

func main() {
	var work struct{ Use []struct{ DiskPath string } }
	if err := goJSON(".", "work", "edit", "-json").Decode(&work); err != nil {
		fmt.Fprintln(os.Stderr, "check-modules: go.work:", err)
		os.Exit(2)
	}
	if len(work.Use) == 0 {
		fmt.Fprintln(os.Stderr, "check-modules: no modules in go.work")
		os.Exit(2)
	}
	local := map[string]bool{}                // module paths of the workspace
	users := map[string]map[string][]string{} // dependency -> version -> modules
	failed := false
	for _, u := range work.Use {
		dir := strings.TrimPrefix(u.DiskPath, "./")
		var gomod struct {
			Module  struct{ Path string }
			Require []module
			Replace []struct{ Old module }
		}
		if err := goJSON(dir, "mod", "edit", "-json").Decode(&gomod); err != nil {
			fmt.Fprintf(os.Stderr, "check-modules: %s/go.mod: %v\n", dir, err)
			os.Exit(2)
		}
		local[gomod.Module.Path] = true
		required := map[string]bool{}
		for _, r := range gomod.Require {
			required[r.Path] = true
		}
		graph := map[string]bool{}
		dec := goJSON(dir, "list", "-m", "-json", "all")
		for {
			var m module
			if err := dec.Decode(&m); err == io.EOF {
				break
			} else if err != nil {
				fmt.Fprintf(os.Stderr, "check-modules: %s: %v\n", dir, err)
				os.Exit(2)
			}
			graph[m.Path] = true
			if m.Main || !required[m.Path] {
				continue
			}
			v := m.Version
			if r := m.Replace; r != nil {
				v = "=> " + r.Path
				if r.Version != "" {
					v += "@" + r.Version
				}
			}
			if users[m.Path] == nil {
				users[m.Path] = map[string][]string{}
			}
			users[m.Path][v] = append(users[m.Path][v], dir)
		}
		for _, r := range gomod.Replace {
			if !graph[r.Old.Path] {
				fmt.Printf("%s: replace %s, which its module graph does not hold\n", dir, r.Old.Path)
				failed = true
			}
		}
	}
	var deps []string
	for p := range users {
		if !local[p] && len(users[p]) > 1 {
			deps = append(deps, p)
		}
	}
	sort.Strings(deps)
	for _, p := range deps {
		fmt.Println(p)
		var vs []string
		for v := range users[p] {
			vs = append(vs, v)
		}
		sort.Strings(vs)
		for _, v := range vs {
			fmt.Printf("\t%s: %s\n", v, strings.Join(users[p][v], " "))
		}
	}
	if len(deps) > 0 {
		fmt.Printf("check-modules: %d dependencies resolve to more than one version across the modules of go.work\n", len(deps))
		failed = true
	}
	if failed {
		os.Exit(1)
	}
}
