package metrics

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"
)

var natsConnEvents = counter("deskgrid.nats.connection.events", "",
	"changes of this process's NATS connection, by event: disconnected, reconnected, closed")

// NATSConnectionOptions are the nats.Connect options that count the
// connection's changes into deskgrid_nats_connection_events_total{event}.
// A disconnected without a reconnected soon after means events are not
// published and history does not ingest; reconnects that keep climbing mean
// a flapping path to the NATS cluster. Each handler keeps what log is
// given, so a role still says why (log may be nil).
func NATSConnectionOptions(log *slog.Logger) []nats.Option {
	count := func(event string) {
		natsConnEvents.Add(context.Background(), 1, attrs("event", event))
	}
	// Zero the series so they exist from the first scrape.
	for _, e := range []string{"disconnected", "reconnected", "closed"} {
		natsConnEvents.Add(context.Background(), 0, attrs("event", e))
	}
	return []nats.Option{
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			count("disconnected")
			if log != nil && err != nil {
				log.Warn("nats disconnected", "url", nc.ConnectedUrlRedacted(), "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			count("reconnected")
			if log != nil {
				log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
			}
		}),
		nats.ClosedHandler(func(*nats.Conn) { count("closed") }),
	}
}
