package history

import (
	"encoding/json"
	"strconv"
	"strings"

	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
)

// addUsage adds a usage entry's counts to u. protojson writes int64 as
// strings; a Struct payload holds numbers: both are read.
func addUsage(u *historyv1.RunUsage, data string) {
	var obj map[string]any
	dec := json.NewDecoder(strings.NewReader(data))
	dec.UseNumber()
	if dec.Decode(&obj) != nil {
		return
	}
	if v, ok := obj["value"].(map[string]any); ok && obj["@type"] == "type.googleapis.com/google.protobuf.Struct" {
		obj = v
	}
	n := func(k string) int64 {
		switch v := obj[k].(type) {
		case string:
			i, _ := strconv.ParseInt(v, 10, 64)
			return i
		case json.Number:
			if i, err := v.Int64(); err == nil {
				return i
			}
			f, _ := v.Float64()
			return int64(f)
		}
		return 0
	}
	u.InputTokens += n("inputTokens")
	u.OutputTokens += n("outputTokens")
	u.CacheReadTokens += n("cacheReadTokens")
	u.CacheWriteTokens += n("cacheWriteTokens")
	u.Calls++
}
