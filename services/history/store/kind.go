package store

import (
	"strings"
)

// Kind is what an entry records; the values are those of historyv1.EntryKind.
type Kind int16

const (
	KindUnspecified Kind = iota
	KindLifecycle
	KindMessage
	KindToolCall
	KindToolResult
	KindScreenshot
	KindUsage
	KindOther
)

// Event types the history gives a kind, without their version suffix.
const (
	TypeMessage         = "agent.message"
	TypeToolCall        = "agent.tool_call"
	TypeToolResult      = "agent.tool_result"
	TypeScreenshot      = "agent.screenshot"
	TypeUsage           = "agent.usage"
	TypeRunStateChanged = "agent.run_state_changed"
	// TrailPrefix starts the calls made on a session's desktop and sandbox
	// ("trail.perform_actions.v1"); they are tool calls, but for
	// screenshots.
	TrailPrefix     = "trail."
	TrailScreenshot = "trail.screenshot"
)

// KindOf derives an entry's kind from its event type, whatever the type's
// version: "agent.message.v1" and "agent.message.v2" are both messages.
func KindOf(typ string) Kind {
	base := typ
	if i := strings.LastIndexByte(typ, '.'); i >= 0 && isVersion(typ[i+1:]) {
		base = typ[:i]
	}
	switch {
	case base == TypeMessage:
		return KindMessage
	case base == TypeToolCall:
		return KindToolCall
	case base == TypeToolResult:
		return KindToolResult
	case base == TypeScreenshot, base == TrailScreenshot:
		return KindScreenshot
	case base == TypeUsage:
		return KindUsage
	case strings.HasPrefix(base, TrailPrefix):
		return KindToolCall
	case base == TypeRunStateChanged, strings.HasPrefix(base, "session."):
		return KindLifecycle
	default:
		return KindOther
	}
}

// isVersion reports whether s is "v" and digits.
func isVersion(s string) bool {
	if len(s) < 2 || s[0] != 'v' {
		return false
	}
	for _, c := range s[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
