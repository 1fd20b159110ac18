package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/amqppub"
	"github.com/skiplock/skiplock/outbox/webhookpub"
)

// ChildEnv names the environment variable that turns a re-executed binary into a
// chaos child process (a worker, a relay or a migrator); its value is the child's
// JSON spec. A binary that embeds the harness calls ChildMain when it is set, before
// anything else: tools/chaos does it first thing in main, the package's tests in
// TestMain.
const ChildEnv = "SKIPLOCK_CHAOS_CHILD"

// IsChild reports whether this process was started as a chaos child.
func IsChild() bool { return os.Getenv(ChildEnv) != "" }

// childSpec is what a child process runs.
type childSpec struct {
	Role    string     `json:"role"` // "worker", "relay" or "migrator"
	URL     string     `json:"url"`
	Schema  string     `json:"schema"`
	ID      string     `json:"id"`
	Worker  workerSpec `json:"worker"`
	Relay   relaySpec  `json:"relay"`
	Migrate []string   `json:"migrate,omitempty"` // schemas a migrator migrates, in order
}

// relaySpec configures a relay child.
type relaySpec struct {
	WebhookURL string        `json:"webhook_url,omitempty"`
	Secret     string        `json:"secret,omitempty"`
	AMQPURL    string        `json:"amqp_url,omitempty"`
	Queue      string        `json:"queue,omitempty"`
	Lease      time.Duration `json:"lease"`
	Poll       time.Duration `json:"poll"`
	Batch      int           `json:"batch"`
	// HoldAfter > 0 makes the relay stop between publish and mark after that many
	// successful publishes: it prints "hold <ids>" and waits to be killed.
	HoldAfter int `json:"hold_after,omitempty"`
	// ListenURL: the LISTEN connection's own (RelayConfig.ListenURL), behind PgBouncer.
	ListenURL string `json:"listen_url,omitempty"`
}

// ChildMain runs the child role described by ChildEnv until SIGTERM and returns
// the process's exit code. Children print protocol lines on stdout ("ready",
// "holding n", "hold id,id,…") and log on stderr.
func ChildMain() int {
	var spec childSpec
	if err := json.Unmarshal([]byte(os.Getenv(ChildEnv)), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "chaos child: bad spec:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("child", spec.ID)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var err error
	switch spec.Role {
	case "worker":
		err = runWorkerChild(ctx, spec, log)
	case "relay":
		err = runRelayChild(ctx, spec, log)
	case "migrator":
		err = runMigratorChild(ctx, spec)
	default:
		err = fmt.Errorf("unknown role %q", spec.Role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos child %s: %v\n", spec.ID, err)
		return 1
	}
	return 0
}

var stdoutMu sync.Mutex

// say prints one protocol line for the harness.
func say(line string) {
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	fmt.Println(line)
}

// childPool opens a small pool named after the child, so the harness can find (and
// terminate) its backends by application_name.
func childPool(ctx context.Context, url, appName string, maxConns int32) (*pgxpool.Pool, error) {
	return openPool(ctx, url, appName, maxConns, sessionWait)
}

// sessionWait bounds a new session's start-up for the children and the harness's
// pools on the Citus coordinator: on a loaded 2-core machine a coordinator took more
// than 5 s to accept one, during a rebalance's first move too (a worker child exited
// before "ready"; the harness's statements failed their four tries).
const sessionWait = 15 * time.Second

// openPool opens a pool of at most maxConns connections named appName, each connect
// bounded by connectTimeout, with opts applied to its configuration.
func openPool(ctx context.Context, url, appName string, maxConns int32, connectTimeout time.Duration, opts ...func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parsing database URL: %w", err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.ConnectTimeout = connectTimeout
	cfg.ConnConfig.RuntimeParams["application_name"] = appName
	for _, o := range opts {
		o(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening pool: %w", err)
	}
	return pool, nil
}

func runWorkerChild(ctx context.Context, spec childSpec, log *slog.Logger) error {
	pool, err := childPool(ctx, spec.URL, "chaos-"+spec.ID, 8)
	if err != nil {
		return err
	}
	defer pool.Close()
	w, err := newWorker(pool, spec.Schema, spec.ID, spec.Worker, nil, log)
	if err != nil {
		return err
	}
	if err := w.start(ctx); err != nil {
		return err
	}
	var manual sync.WaitGroup
	if spec.Worker.Manual {
		manual.Go(func() { w.manualLoop(ctx, spec.Worker.Poll, say) })
	}
	say("ready")
	<-ctx.Done()
	manual.Wait()
	w.stop(3 * time.Second)
	return nil
}

// holdingPublisher wraps a Publisher; after HoldAfter successful publishes it
// announces the batch and blocks forever, between publish and mark, until the
// harness kills the process.
type holdingPublisher struct {
	outbox.Publisher
	holdAfter int
	published atomic.Int64
}

func (p *holdingPublisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := p.Publisher.Publish(ctx, msgs)
	if p.holdAfter <= 0 {
		return errs
	}
	var ok []string
	for i, err := range errs {
		if err == nil {
			ok = append(ok, msgs[i].ID)
		}
	}
	if len(ok) > 0 && p.published.Add(1) == int64(p.holdAfter) {
		say("hold " + strings.Join(ok, ","))
		select {} // until SIGKILL: the marks never run
	}
	return errs
}

func runRelayChild(ctx context.Context, spec childSpec, log *slog.Logger) error {
	var (
		pub outbox.Publisher
		err error
	)
	if spec.Relay.AMQPURL != "" {
		pub, err = amqppub.New(amqppub.Config{URL: spec.Relay.AMQPURL, DefaultRoutingKey: spec.Relay.Queue, Timeout: 5 * time.Second, Logger: log})
	} else {
		pub, err = webhookpub.New(webhookpub.Config{DefaultURL: spec.Relay.WebhookURL, Secrets: []string{spec.Relay.Secret}, Timeout: 5 * time.Second, Logger: log})
	}
	if err != nil {
		return fmt.Errorf("creating publisher: %w", err)
	}
	defer pub.Close()
	pool, err := childPool(ctx, spec.URL, "chaos-"+spec.ID, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: spec.Schema, Logger: log})
	if err != nil {
		return err
	}
	defer client.Close()
	ob, err := outbox.New(client, outbox.Config{})
	if err != nil {
		return err
	}
	r, err := ob.NewRelay(&holdingPublisher{Publisher: pub, holdAfter: spec.Relay.HoldAfter}, outbox.RelayConfig{
		BatchSize: spec.Relay.Batch, LeaseDuration: spec.Relay.Lease, PollInterval: spec.Relay.Poll, ListenURL: spec.Relay.ListenURL,
		RetryPolicy: skiplock.ExponentialBackoff{Base: 100 * time.Millisecond, Max: time.Second}, Logger: log,
	})
	if err != nil {
		return fmt.Errorf("creating relay: %w", err)
	}
	if err := r.Start(ctx); err != nil {
		return err
	}
	say("ready")
	<-ctx.Done()
	return r.Stop(context.WithoutCancel(ctx)) // waits for the graceful stop ending ctx began
}

func runMigratorChild(ctx context.Context, spec childSpec) error {
	pool, err := childPool(ctx, spec.URL, "chaos-"+spec.ID, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	for _, schema := range spec.Migrate {
		applied, err := skiplock.Migrate(ctx, pool, schema)
		if err != nil {
			return fmt.Errorf("migrating %s: %w", schema, err)
		}
		say(fmt.Sprintf("migrated %s %v", schema, applied))
	}
	return nil
}

// cancelOnTimeout makes a pool's statements that outlive their context end by a
// cancel request, as psql's Ctrl-C does, rather than by closing the connection
// (pgx's default): the server ends the statement, the transaction rolls back on the
// same session, and the session goes back to the pool. Only a server that does not
// answer the cancel within the delay loses its connection. The Citus producer's
// pool uses it: each new coordinator session opens connections to every worker node.
func cancelOnTimeout(cfg *pgxpool.Config) {
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, CancelRequestDelay: 0, DeadlineDelay: 5 * time.Second}
	}
}
