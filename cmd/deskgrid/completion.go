package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// commands lists each command and its subcommands, for shell completion.
var commands = map[string][]string{
	"up": nil, "gc": nil, "serve": roles, "version": nil, "help": nil, "mcp": nil, "completion": {"bash", "zsh"},
	"sessions":   {"create", "list", "get", "delete", "watch", "suspend", "resume", "keepalive", "commit"},
	"images":     {"list", "pull", "import", "rm", "inspect", "build"},
	"screenshot": nil, "exec": nil, "shell": nil,
	"act":        nil,
	"a11y":       nil,
	"apps":       nil,
	"clipboard":  {"get", "set"},
	"files":      nil,
	"changes":    nil,
	"snapshots":  nil,
	"runs":       {"create", "get", "list", "cancel", "events", "send", "approve", "reject"},
	"history":    {"list", "search", "export", "import", "delete"},
	"recordings": {"start", "stop", "list", "get", "download"},
	"nodes":      {"list", "get", "drain", "undrain"},
	"tenants":    {"create", "list", "delete"},
	"keys":       {"create", "list", "revoke"},
}

func runCompletion(args []string, w io.Writer) error {
	if len(args) != 1 {
		return usageError("completion: want bash or zsh")
	}
	top := slices.Sorted(maps.Keys(commands))
	var cases strings.Builder
	for _, cmd := range top {
		if subs := commands[cmd]; len(subs) > 0 {
			fmt.Fprintf(&cases, "    %s) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", cmd, strings.Join(subs, " "))
		}
	}
	script := fmt.Sprintf(`# deskgrid completion; load with: source <(deskgrid completion bash)
_deskgrid() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W %q -- "$cur")); return
  fi
  if [ "$COMP_CWORD" -eq 2 ]; then
    case "${COMP_WORDS[1]}" in
%s    esac
  fi
}
complete -F _deskgrid deskgrid
`, strings.Join(top, " "), cases.String())
	switch args[0] {
	case "bash":
		_, err := io.WriteString(w, script)
		return err
	case "zsh":
		_, err := io.WriteString(w, "autoload -U +X bashcompinit && bashcompinit\n"+script)
		return err
	}
	return usageError("completion: want bash or zsh, not %q", args[0])
}
