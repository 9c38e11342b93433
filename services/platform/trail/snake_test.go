package trail

import "testing"

// A method's name becomes its event type's middle in snake case, an
// acronym kept as one word.
func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"PerformActions": "perform_actions",
		"Screenshot":     "screenshot",
		"ConnectVNC":     "connect_vnc",
		"GetURLInfo":     "get_url_info",
		"Exec":           "exec",
		"ReadFile2":      "read_file2",
	} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
}
