package metrics_test

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"github.com/deskgrid/deskgrid/services/platform/metrics"
	"github.com/deskgrid/deskgrid/services/platform/metrics/metricstest"
)

// histCount adds the observation counts of histogram name's points whose
// attributes include want.
func histCount(t *testing.T, name string, want ...attribute.KeyValue) uint64 {
	t.Helper()
	return metricstest.HistCount(t, reader, name, want...)
}

// Every call of a client with the hook is timed, by command and outcome.
func TestRedisHook(t *testing.T) {
	url := os.Getenv("DESKGRID_TEST_REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	rdb.AddHook(metrics.RedisHook{})
	ctx := context.Background()
	const name = "deskgrid.redis.call.duration"
	cmd := func(c string) attribute.KeyValue { return attribute.String("command", c) }
	outcome := func(o string) attribute.KeyValue { return attribute.String("outcome", o) }
	before := map[string]uint64{
		"get ok": histCount(t, name, cmd("get"), outcome("ok")), "other error": histCount(t, name, cmd("other"), outcome("error")),
		"pipeline ok": histCount(t, name, cmd("pipeline"), outcome("ok")), "get cancelled": histCount(t, name, cmd("get"), outcome("cancelled")),
	}
	key := "dgtest:metrics:" + t.Name()
	if err := rdb.Get(ctx, key).Err(); err != redis.Nil {
		t.Fatalf("get of a missing key: %v", err)
	}
	if err := rdb.Do(ctx, "NO-SUCH-COMMAND").Err(); err == nil {
		t.Fatal("an unknown command did not fail")
	}
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, "1", 0)
		p.Del(ctx, key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_ = rdb.Get(cctx, key).Err()
	for what, c := range map[string]uint64{
		"get ok": histCount(t, name, cmd("get"), outcome("ok")), "other error": histCount(t, name, cmd("other"), outcome("error")),
		"pipeline ok": histCount(t, name, cmd("pipeline"), outcome("ok")), "get cancelled": histCount(t, name, cmd("get"), outcome("cancelled")),
	} {
		if c-before[what] != 1 {
			t.Errorf("%s: counted %d calls, want 1", what, c-before[what])
		}
	}
}
