package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/health"
	"github.com/skiplock/skiplock/internal/redact"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/amqppub"
	"github.com/skiplock/skiplock/outbox/kafkapub"
	"github.com/skiplock/skiplock/outbox/natspub"
	"github.com/skiplock/skiplock/outbox/webhookpub"
	"github.com/spf13/cobra"
)

type relayFlags struct {
	healthAddr  string
	to          string
	exchange    string
	routingKey  string
	topic       string
	subject     string
	secrets     []string
	endpoints   []string
	ordered     bool
	batch       int
	concurrency int
	lease       time.Duration
	poll        time.Duration
	pollOnly    bool
	listenURL   string
	every       time.Duration
}

// relaySchemes are the --to URL schemes newPublisher knows.
var relaySchemes = []string{"amqp", "amqps", "kafka", "nats", "http", "https"}

func newRelayCmd(db *dbFlags) *cobra.Command {
	var f relayFlags
	cmd := &cobra.Command{
		Use:   "relay --to <url> [flags]",
		Short: "publish outbox events to a broker or webhook (--to amqp://, kafka://, nats://, https://)",
		Long: `Run outbox relays until SIGINT or SIGTERM, then finish the batches in flight.

--to names where events go:
  amqp[s]://user:pass@host:5672/vhost   RabbitMQ; Destination is the routing key
  kafka://host:9092[,host2:9092]/topic   Kafka; Destination is the topic (default: the path)
  nats://host:4222                       NATS JetStream; Destination is the subject
  http[s]://host/path                    signed webhooks; events without Destination go here`,
		Args: noArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if f.healthAddr != "" {
				if _, err := listenHost(cmd, "health-addr", f.healthAddr); err != nil {
					return err
				}
			}
			// Environment defaults are read here, not shown in --help: they may hold
			// credentials.
			if f.to == "" {
				f.to = os.Getenv("SKIPLOCK_RELAY_TO")
			}
			if len(f.secrets) == 0 {
				if s := os.Getenv("SKIPLOCK_WEBHOOK_SECRET"); s != "" {
					f.secrets = []string{s}
				}
			}
			if f.to == "" {
				return usagef(cmd, "relay: no target: pass --to (or set SKIPLOCK_RELAY_TO) with a scheme of: %s", strings.Join(relaySchemes, ", "))
			}
			scheme, _, ok := strings.Cut(f.to, "://")
			if !ok || !slices.Contains(relaySchemes, strings.ToLower(scheme)) {
				return usagef(cmd, "relay: --to %q: the scheme must be one of: %s", redact.URL(f.to), strings.Join(relaySchemes, ", "))
			}
			if s := strings.ToLower(scheme); (s == "http" || s == "https") && len(f.secrets) == 0 {
				return usagef(cmd, "relay: webhooks are signed: pass --webhook-secret (or set SKIPLOCK_WEBHOOK_SECRET)")
			}
			if s := strings.ToLower(scheme); s == "kafka" {
				if seeds, _ := kafkaTarget(f.to); len(seeds) == 0 {
					return usagef(cmd, "relay: --to %q names no broker: want kafka://host:9092[,host2:9092]/topic", redact.URL(f.to))
				}
			}
			for _, e := range f.endpoints {
				if name, u, ok := strings.Cut(e, "="); !ok || name == "" || u == "" {
					return usagef(cmd, "relay: --webhook-endpoint %q: want name=URL", redact.URL(e))
				}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.to, "to", "", "`url` to publish to (default $SKIPLOCK_RELAY_TO); see above")
	fs.StringVar(&f.exchange, "exchange", "", "amqp: exchange to publish to (default: the default exchange)")
	fs.StringVar(&f.routingKey, "routing-key", "", "amqp: routing key for events without a Destination")
	fs.StringVar(&f.topic, "topic", "", "kafka: topic for events without a Destination (overrides the URL path)")
	fs.StringVar(&f.subject, "subject", "", "nats: subject for events without a Destination")
	fs.StringArrayVar(&f.secrets, "webhook-secret", nil, "webhook: signing `secret`, raw or whsec_<base64>; repeat while rotating (default $SKIPLOCK_WEBHOOK_SECRET)")
	fs.StringArrayVar(&f.endpoints, "webhook-endpoint", nil, "webhook: `name=URL`: where events whose Destination is name go; repeatable")
	fs.BoolVar(&f.ordered, "ordered", false, "publish each aggregate's events one at a time, in order (write them with outbox.Config.Ordered)")
	intFlag(cmd, &f.batch, "batch", 100, 1, 10000, "events per claim and per publish call, 1..10000")
	intFlag(cmd, &f.concurrency, "concurrency", 1, 1, math.MaxInt, "relay loops run at once, 1 or more")
	durationFlag(cmd, &f.lease, "lease", 30*time.Second, "how long a claim owns its events; bounds each publish (0: the default, 30s)")
	durationFlag(cmd, &f.poll, "poll", time.Second, "safety-net poll interval, jittered ±10% (0: the default, 1s)")
	fs.BoolVar(&f.pollOnly, "poll-only", false, "do not LISTEN (behind PgBouncer in transaction pooling mode)")
	fs.StringVar(&f.listenURL, "listen-url", "", "behind PgBouncer in transaction pooling mode: `url` of PostgreSQL itself for the LISTEN connection (for an HA pair: every node, target_session_attrs=read-write), instead of --poll-only")
	durationFlag(cmd, &f.every, "stats-every", 10*time.Second, "how often to log what was published (0: never)")
	fs.StringVar(&f.healthAddr, "health-addr", "", "also serve /healthz and /readyz (the database answers) on this address, e.g. :8081, for a container's probes (default: none)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		log := db.logger(cmd)
		pub, target, err := newPublisher(&f, log)
		if errors.Is(err, skiplock.ErrInvalid) {
			return invalidAsUsage(cmd, err) // a flag's value, refused by the adapter
		}
		if err != nil {
			return fmt.Errorf("relay: %w", err)
		}
		defer pub.Close()
		if flag := noDefaultDestination(&f); flag != "" {
			log.Warn("events without a Destination will be dead-lettered: give " + flag + " to publish them")
		}

		pool, err := db.pool(cmd, int32(f.concurrency+2))
		if err != nil {
			return err
		}
		defer pool.Close()
		schema := db.schemaName()
		c, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Logger: log})
		if err != nil {
			return err
		}
		defer c.Close()
		ob, err := outbox.New(c, outbox.Config{})
		if err != nil {
			return err
		}
		r, err := ob.NewRelay(pub, outbox.RelayConfig{
			BatchSize: f.batch, Concurrency: f.concurrency, LeaseDuration: f.lease,
			PollInterval: f.poll, PollOnly: f.pollOnly, ListenURL: f.listenURL, OrderedByAggregate: f.ordered, Logger: log,
		})
		if errors.Is(err, skiplock.ErrInvalid) {
			return invalidAsUsage(cmd, err)
		}
		if err != nil {
			return fmt.Errorf("relay: %w", err)
		}
		if f.healthAddr != "" {
			// /readyz also fails while the relay's own claims, publishes or marks
			// keep failing (Relay.Operations).
			bound, stop, err := serveHealth(ctx, c, f.healthAddr, health.Options{SkipQueues: true, Components: []health.Component{r}})
			if err != nil {
				return fmt.Errorf("relay: %w", err)
			}
			defer stop()
			fmt.Fprintf(cmd.ErrOrStderr(), "serving /healthz and /readyz on http://%s for schema %s\n", bound, schema)
		}
		if err := r.Start(ctx); err != nil {
			return fmt.Errorf("relay: %w", err)
		}
		log.Info("relay started", "schema", schema, "to", target, "ordered", f.ordered, "batch", f.batch, "concurrency", f.concurrency)
		logStats(ctx, r, f.every, log)           // until ctx ends, which begins the relay's graceful stop
		err = r.Stop(context.WithoutCancel(ctx)) // waits for that stop (bounded by the relay's StopTimeout)
		s := r.Stats()
		log.Info("relay stopped", "published", s.Published, "retried", s.Retried, "dead", s.Dead, "released", s.Released,
			"lease_lost", s.LeaseLost)
		return err
	}
	return cmd
}

// logStats logs the relay's progress every interval while anything changed.
func logStats(ctx context.Context, r *outbox.Relay, every time.Duration, log *slog.Logger) {
	if every <= 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var last outbox.RelayStats
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s := r.Stats()
		if s == last {
			continue
		}
		log.Info("relay progress",
			"published", s.Published-last.Published, "retried", s.Retried-last.Retried, "dead", s.Dead-last.Dead,
			"lease_lost", s.LeaseLost-last.LeaseLost, "errors", s.Errors-last.Errors,
			"rate_per_s", fmt.Sprintf("%.1f", float64(s.Published-last.Published)/every.Seconds()),
			"published_total", s.Published)
		last = s
	}
}

// newPublisher builds the adapter the --to URL's scheme names. The second result
// describes the target without credentials, for logs.
func newPublisher(f *relayFlags, log *slog.Logger) (outbox.Publisher, string, error) {
	if f.to == "" {
		return nil, "", errors.New("no target: pass --to (amqp://, kafka://, nats:// or http(s)://)")
	}
	scheme, _, ok := strings.Cut(f.to, "://")
	if !ok {
		return nil, "", fmt.Errorf("--to %q has no scheme; want amqp://, kafka://, nats:// or http(s)://", redact.URL(f.to))
	}
	switch strings.ToLower(scheme) {
	case "amqp", "amqps":
		p, err := amqppub.New(amqppub.Config{URL: f.to, Exchange: f.exchange, DefaultRoutingKey: f.routingKey, Logger: log})
		return p, redact.URL(f.to), err
	case "kafka":
		seeds, topic := kafkaTarget(f.to)
		if f.topic != "" {
			topic = f.topic
		}
		p, err := kafkapub.New(kafkapub.Config{SeedBrokers: seeds, DefaultTopic: topic, Logger: log})
		return p, redact.URL("kafka://" + strings.Join(seeds, ",") + "/" + topic), err
	case "nats":
		p, err := natspub.New(natspub.Config{URL: f.to, DefaultSubject: f.subject, Logger: log})
		return p, redact.URL(f.to), err
	case "http", "https":
		endpoints := map[string]string{}
		for _, e := range f.endpoints {
			name, u, ok := strings.Cut(e, "=")
			if !ok || name == "" || u == "" {
				return nil, "", fmt.Errorf("--webhook-endpoint %q: want name=URL", redact.URL(e))
			}
			endpoints[name] = u
		}
		if len(f.secrets) == 0 {
			return nil, "", errors.New("webhooks are signed: pass --webhook-secret (or set SKIPLOCK_WEBHOOK_SECRET)")
		}
		p, err := webhookpub.New(webhookpub.Config{DefaultURL: f.to, Endpoints: endpoints, Secrets: f.secrets, Logger: log})
		return p, redact.URL(f.to), err
	}
	return nil, "", fmt.Errorf("--to scheme %q is not supported; want amqp, amqps, kafka, nats, http or https", scheme)
}

// kafkaTarget reads a kafka://host:9092[,host2:9092]/topic URL: its seed brokers and
// its topic (empty without a path).
func kafkaTarget(to string) (seeds []string, topic string) {
	_, rest, _ := strings.Cut(to, "://")
	brokers, topic, _ := strings.Cut(rest, "/")
	for _, b := range strings.Split(brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			seeds = append(seeds, b)
		}
	}
	return seeds, topic
}

// noDefaultDestination names the flag that gives events without a Destination
// somewhere to go, when the --to scheme needs one and it is not given: the adapter
// dead-letters such events. Webhooks send them to the --to URL.
func noDefaultDestination(f *relayFlags) string {
	scheme, _, _ := strings.Cut(f.to, "://")
	switch strings.ToLower(scheme) {
	case "amqp", "amqps":
		if f.routingKey == "" {
			return "--routing-key"
		}
	case "nats":
		if f.subject == "" {
			return "--subject"
		}
	case "kafka":
		if _, topic := kafkaTarget(f.to); topic == "" && f.topic == "" {
			return "--topic (or a /topic path in --to)"
		}
	}
	return ""
}
