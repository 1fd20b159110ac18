package skiplock

import (
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/engine"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/maint"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/store"
)

// Client enqueues jobs, administers them, and — with Queues configured and Start
// called — works them. It is safe for concurrent use.
type Client struct {
	pool     *pgxpool.Pool
	cfg      Config
	store    *store.Store
	workers  *Workers
	log      *slog.Logger
	failures *failures
	maint    *maint.Runner
	// retentionSvc is the retention service of the client's started runs and of
	// RunRetention alike, built once so that its floors carry from run to run.
	retentionSvc  *maint.Retention
	retentionOnce sync.Once
	channel       string
	metrics       counters

	coalescer *engine.Coalescer // which NOTIFY each enqueue carries
	// listenConn is Config.ListenURL's configuration, or nil (the pool's).
	listenConn *pgx.ConnConfig

	events eventHub

	rt *engine.Engine // set while started
	// citus: the schema has the Citus layout (set by Start, under mu).
	citus bool
	mu    sync.Mutex
}

// NewClient returns a client on pool. It does not touch the database; run the
// migrations first (skiplock migrate up, or Migrate).
func NewClient(pool *pgxpool.Pool, cfg Config) (*Client, error) {
	if pool == nil {
		return nil, invalid("pool", "must not be nil")
	}
	full, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	st, err := store.New(full.Schema)
	if err != nil {
		return nil, invalid("schema", "%v", err)
	}
	var listenConn *pgx.ConnConfig
	if full.ListenURL != "" {
		if listenConn, err = pgx.ParseConfig(full.ListenURL); err != nil {
			return nil, invalid("Config.ListenURL", "%v", err) // pgx leaves the password out
		}
	}
	c := &Client{
		pool: pool, cfg: full, store: st, workers: full.Workers, log: full.Logger,
		channel: Channel(full.Schema), failures: newFailures(full.Logger), listenConn: listenConn,
	}
	c.coalescer = engine.NewCoalescer(full.NotifyCoalesce, c.channel, st, pool, full.Logger)
	c.maint = c.newRunner()
	return c, nil
}

// Channel returns the NOTIFY channel of a schema's job queue.
func Channel(schema string) string { return ident.Channel(schema, "jobs") }

// Schema returns the client's schema name.
func (c *Client) Schema() string { return c.cfg.Schema }

// ID returns the client's worker id.
func (c *Client) ID() string { return c.cfg.ID }

// MaxPayloadBytes returns the payload limit the client enforces at enqueue (the
// outbox applies the same to events).
func (c *Client) MaxPayloadBytes() int { return c.cfg.MaxPayloadBytes }

// ConfiguredQueues returns the names of the queues the client works (Config.Queues),
// sorted.
func (c *Client) ConfiguredQueues() []string {
	return slices.Sorted(maps.Keys(c.cfg.Queues))
}

// Clock returns the client's clock; nil means the database's now().
func (c *Client) Clock() Clock { return c.cfg.Clock }

// Pool returns the client's pool.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

// Close waits for background notifications. Call it when done with a client that
// was never started (Stop does it for a started client).
func (c *Client) Close() { c.coalescer.Wait() }

// ErrNotMigrated is matched by errors from a database whose schema lacks skiplock's
// tables: run `skiplock migrate up` (or Migrate) first.
var ErrNotMigrated = errors.New("skiplock: schema not migrated (is the schema name right? if so, run `skiplock migrate up`)")

// ErrSchemaNewer is returned by Start when the schema was migrated by a newer
// skiplock than this build: upgrade the build (or point it at another schema).
var ErrSchemaNewer = errors.New("skiplock: schema is newer than this skiplock")

// wrapPgError turns PostgreSQL errors a caller can act on into typed errors.
func wrapPgError(err error) error {
	return pgerr.Wrap(err, func(reason string) error { return invalid("payload", "%s", reason) }, ErrNotMigrated)
}
