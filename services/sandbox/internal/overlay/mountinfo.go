package overlay

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Mount is one line of /proc/self/mountinfo.
type Mount struct {
	Point  string
	FSType string
	Source string
}

// Mounts lists the mounts at or beneath dir, deepest first so that they can
// be unmounted in order.
func Mounts(dir string) ([]Mount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return parseMountinfo(data, dir), nil
}

// IsMounted reports whether path is a mount point.
func IsMounted(path string) (bool, error) {
	ms, err := Mounts(path)
	if err != nil {
		return false, err
	}
	clean := filepath.Clean(path)
	for _, m := range ms {
		if m.Point == clean {
			return true, nil
		}
	}
	return false, nil
}

func parseMountinfo(data []byte, dir string) []Mount {
	dir = filepath.Clean(dir)
	var out []Mount
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// id parent major:minor root point options [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+2 >= len(fields) {
			continue
		}
		point := unescapeOctal(fields[4])
		if point != dir && !strings.HasPrefix(point, dir+"/") {
			continue
		}
		out = append(out, Mount{Point: point, FSType: fields[sep+1], Source: unescapeOctal(fields[sep+2])})
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].Point) > len(out[j].Point) })
	return out
}

// unescapeOctal undoes the kernel's \ooo escaping of space, tab, newline and
// backslash in mountinfo.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
