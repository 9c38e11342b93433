package metrics_test

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"github.com/deskgrid/deskgrid/services/platform/metrics"
	"github.com/deskgrid/deskgrid/services/platform/natsembed"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

// Every connection a Redis client opens is counted, and a refused one as
// an error, so reconnects show.
func TestRedisDialsAreCounted(t *testing.T) {
	url := os.Getenv("DESKGRID_TEST_REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	const name = "deskgrid.redis.dials"
	ok, failed := attribute.String("outcome", "ok"), attribute.String("outcome", "error")
	okBefore, failedBefore := sum(t, name, ok), sum(t, name, failed)

	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	rdb.AddHook(metrics.RedisHook{})
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The server drops the client's connections: the next call dials again.
	if err := rdb.Do(ctx, "CLIENT", "KILL", "SKIPME", "no", "TYPE", "normal").Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // the first call may fail on the killed connection
		if err = rdb.Ping(ctx).Err(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	rdb.Close()
	if d := sum(t, name, ok) - okBefore; d < 2 {
		t.Errorf("counted %d successful dials, want at least 2 (the first and the reconnect)", d)
	}

	// Nothing listens on the address: each dial fails and is counted.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	bad := redis.NewClient(&redis.Options{Addr: dead, MaxRetries: -1, DialTimeout: time.Second})
	bad.AddHook(metrics.RedisHook{})
	defer bad.Close()
	if err := bad.Ping(ctx).Err(); err == nil {
		t.Fatal("a ping of a closed port answered")
	}
	if d := sum(t, name, failed) - failedBefore; d < 1 {
		t.Errorf("counted %d failed dials, want at least 1", d)
	}
}

// A NATS connection whose server goes away and comes back counts one
// disconnect and one reconnect, and its close.
func TestNATSConnectionEventsAreCounted(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()
	store := t.TempDir()
	srv, err := natsembed.Start(natsembed.Options{Port: port, StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	const name = "deskgrid.nats.connection.events"
	ev := func(e string) attribute.KeyValue { return attribute.String("event", e) }
	before := map[string]int64{}
	for _, e := range []string{"disconnected", "reconnected", "closed"} {
		before[e] = sum(t, name, ev(e))
	}
	opts := append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, metrics.NATSConnectionOptions(nil)...)
	nc, err := nats.Connect(srv.URL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	testkit.Eventually(t, 10*time.Second, func() bool { return sum(t, name, ev("disconnected")) > before["disconnected"] }, "no disconnect was counted")
	srv, err = natsembed.Start(natsembed.Options{Port: port, StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	testkit.Eventually(t, 10*time.Second, func() bool { return sum(t, name, ev("reconnected")) > before["reconnected"] }, "no reconnect was counted")
	nc.Close()
	testkit.Eventually(t, 10*time.Second, func() bool { return sum(t, name, ev("closed")) > before["closed"] }, "the close was not counted")
	if d := sum(t, name, ev("disconnected")) - before["disconnected"]; d > 2 {
		t.Errorf("counted %d disconnects for one server restart and one close", d)
	}
}
