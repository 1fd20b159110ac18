package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/webhookpub"
)

// producer enqueues jobs at a steady rate, each in its own transaction together with
// an outbox event (when the scenario relays) and a chaos_enqueued row. One
// transaction in twenty is rolled back on purpose: its job and event must never
// appear.
type producer struct {
	pool   *pgxpool.Pool
	schema string
	client *skiplock.Client
	writer *outbox.Outbox // nil: no outbox events
	rng    *rand.Rand
	log    *slog.Logger
	// manualShare is the fraction of jobs sent to manualQueue (the zombie's loop).
	manualShare float64
	// keys > 0 spreads the jobs and their events over that many concurrency keys
	// (the Citus scenarios: the distribution column); 0 leaves them without one.
	keys int
	// open: each enqueue runs in a goroutine of its own (at most openInFlight at
	// once), so one that waits — for a key whose shard Citus is moving — holds up
	// only itself, as one request of an application would. rngMu then guards rng.
	open  bool
	rngMu sync.Mutex
	calls []enqueueCall // open: every committed enqueue's start and duration
	// began and ended bound run: the time the producer offered its rate.
	began, ended time.Time

	mu         sync.Mutex
	acked      []string    // job ids whose commit returned success
	ackedAt    []time.Time // when each successful commit returned
	rolledBack []string    // job and event ids of deliberate rollbacks
	ambiguous  int         // commits that failed: the job may or may not exist
	failed     int         // transactions that failed before commit
	failedWhy  []string    // the first distinct errors among them (maxFailedWhy)
}

func newProducer(pool *pgxpool.Pool, schema string, withOutbox bool, rng *rand.Rand, log *slog.Logger) (*producer, error) {
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("creating the producer's client: %w", err)
	}
	p := &producer{pool: pool, schema: schema, client: c, rng: rng, log: log}
	if withOutbox {
		if p.writer, err = outbox.New(c, outbox.Config{}); err != nil {
			return nil, fmt.Errorf("creating the outbox writer: %w", err)
		}
	}
	return p, nil
}

func (p *producer) queue() string {
	if p.manualShare > 0 && p.rng.Float64() < p.manualShare {
		return manualQueue
	}
	return skiplock.DefaultQueue
}

// payload draws a job: mostly short, some long enough to be caught mid-run by a
// kill, some deaf to their context, some failing their first attempt.
func (p *producer) payload() []byte {
	var jp jobPayload
	switch r := p.rng.Float64(); {
	case r < 0.10:
		jp.Ms = 200 + p.rng.IntN(600)
		jp.Stubborn = p.rng.IntN(3) == 0
	case r < 0.15:
		jp.Ms = 5 + p.rng.IntN(20)
		jp.FailFirst = true
	default:
		jp.Ms = 5 + p.rng.IntN(25)
	}
	b, _ := json.Marshal(jp)
	return b
}

// enqueueCall is one committed enqueue of an open producer: when it began and how
// long until its commit returned.
type enqueueCall struct {
	start time.Time
	took  time.Duration
}

// timed is when c began and how long it took (durationsIn).
func (c enqueueCall) timed() (time.Time, time.Duration) { return c.start, c.took }

// openInFlight bounds an open producer's enqueues in flight.
const openInFlight = 64

// enqueueWait bounds one enqueue transaction of a producer: closed, and open. The
// open producer's (the Citus rounds') waits longer. Its transactions queue behind a
// shard being moved (a whole move, up to a minute on a loaded machine), and on a
// saturated coordinator every statement is slow. Cut at 5 s, each cut transaction
// was followed by a new session on the coordinator and new connections from it to
// every worker node, which loaded the machine further, until nearly every enqueue was
// cut: CI's citus-rebalance round committed 9 jobs, none during or after its moves.
// The open producer's pool also cancels a statement cut short on the server instead
// of closing its connection (cancelOnTimeout). The in-flight bound is the back-pressure:
// while 64 wait, the ticks go by unsent.
func (p *producer) enqueueWait() time.Duration {
	if p.open {
		return 30 * time.Second
	}
	return 5 * time.Second
}

// run enqueues rate jobs per second until ctx ends.
func (p *producer) run(ctx context.Context, rate int) {
	t := time.NewTicker(time.Second / time.Duration(rate))
	defer t.Stop()
	var wg sync.WaitGroup
	sem := make(chan struct{}, openInFlight)
	p.mu.Lock()
	p.began = wallNow()
	p.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			p.client.Close()
			p.mu.Lock()
			p.ended = wallNow()
			p.mu.Unlock()
			return
		case <-t.C:
		}
		p.rngMu.Lock()
		rollback := p.rng.IntN(20) == 0
		p.rngMu.Unlock()
		if !p.open {
			p.enqueueOne(ctx, rollback)
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			start := wallNow()
			if p.enqueueOne(ctx, rollback) {
				p.mu.Lock()
				p.calls = append(p.calls, enqueueCall{start: start, took: time.Since(start)})
				p.mu.Unlock()
			}
		})
	}
}

// enqueueOne enqueues one job (and its event) in a transaction, and reports whether
// it committed.
func (p *producer) enqueueOne(ctx context.Context, rollback bool) bool {
	// Not cancelled by the end of the round: a commit cut short by our own stop would
	// be counted as an outcome the faults made ambiguous.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.enqueueWait())
	defer cancel()
	tx, err := p.pool.Begin(tctx)
	if err != nil {
		p.fail(err)
		return false
	}
	defer tx.Rollback(context.Background())
	p.rngMu.Lock()
	var key string
	if p.keys > 0 {
		key = fmt.Sprintf("t%02d", p.rng.IntN(p.keys))
	}
	payload, queue := p.payload(), p.queue()
	p.rngMu.Unlock()
	res, err := p.client.EnqueueRawTx(tctx, tx, jobKind, payload, &skiplock.EnqueueOpts{Queue: queue, ConcurrencyKey: key})
	if err != nil {
		p.fail(err)
		return false
	}
	var eventID *string
	if p.writer != nil {
		id, err := p.writer.Write(tctx, tx, outbox.Event{AggregateType: "chaos_job", AggregateID: res.ID, EventType: "chaos.enqueued",
			Payload: []byte(`{"job":"` + res.ID + `"}`), MaxAttempts: outbox.MaxMaxAttempts, ConcurrencyKey: key})
		if err != nil {
			p.fail(err)
			return false
		}
		eventID = &id
	}
	if _, err := tx.Exec(tctx, "INSERT INTO "+ident.Quote(p.schema)+".chaos_enqueued (job_id, event_id, concurrency_key) VALUES ($1, $2, $3)", res.ID, eventID, key); err != nil {
		p.fail(err)
		return false
	}
	if rollback {
		if err := tx.Rollback(tctx); err == nil {
			p.mu.Lock()
			p.rolledBack = append(p.rolledBack, res.ID)
			if eventID != nil {
				p.rolledBack = append(p.rolledBack, *eventID)
			}
			p.mu.Unlock()
		}
		return false
	}
	return p.commit(tctx, tx, res.ID)
}

// maxFailedWhy is how many distinct errors of failed transactions a round's notes
// show.
const maxFailedWhy = 3

func (p *producer) fail(err error) {
	p.mu.Lock()
	p.failed++
	if msg := err.Error(); len(p.failedWhy) < maxFailedWhy && !slices.Contains(p.failedWhy, msg) {
		p.failedWhy = append(p.failedWhy, msg)
	}
	p.mu.Unlock()
	p.log.Debug("chaos producer: enqueue failed", "error", err)
}

// failures returns the first distinct errors of the transactions that failed.
func (p *producer) failures() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.failedWhy...)
}

// openFloor is the least share of the jobs an open producer offered (its rate over
// the time it ran) that must commit: below it the round's load did not run, and a
// round that checks its invariants on a handful of jobs proves little. CI's Citus
// rounds passed with 58 and 9 jobs of the ~1,000 and ~900 offered, before the open
// producer stopped cutting its transactions at 5 s (enqueueWait).
const openFloor = 0.25

// floorShortfall says, for an open producer that offered rate jobs a second, how
// many jobs committed and how many it offered, and whether fewer than openFloor of
// them committed.
func (p *producer) floorShortfall(rate int) (committed, offered int, short bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	committed = len(p.acked)
	offered = int(float64(rate) * p.ended.Sub(p.began).Seconds())
	return committed, offered, p.open && float64(committed) < openFloor*float64(offered)
}

func (p *producer) results() (acked, rolledBack []string, ambiguous, failed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.acked...), append([]string(nil), p.rolledBack...), p.ambiguous, p.failed
}

// consumer receives published events (webhooks over HTTP, or AMQP deliveries) and
// processes each through outbox.Inbox: the claim and the effect (a chaos_consumed
// row) commit together, so a redelivered event is skipped. It counts deliveries it
// acknowledged, per event id, and when they arrived.
type consumer struct {
	pool   *pgxpool.Pool
	secret string
	log    *slog.Logger
	srv    *http.Server
	url    string

	mu        sync.Mutex
	schema    string
	delivered map[string]int
	firstAt   []time.Time // first delivery of each event, for recovery times
}

func startConsumer(pool *pgxpool.Pool, secret string, log *slog.Logger) (*consumer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("consumer: listening: %w", err)
	}
	c := &consumer{pool: pool, secret: secret, log: log, url: "http://" + ln.Addr().String() + "/events", delivered: map[string]int{}}
	c.srv = &http.Server{Handler: http.HandlerFunc(c.serveHTTP), ReadHeaderTimeout: 5 * time.Second}
	go c.srv.Serve(ln)
	return c, nil
}

func (c *consumer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.srv.Shutdown(ctx)
}

// reset points the consumer at a new round's schema (in the database pool reaches)
// and forgets the old counts.
func (c *consumer) reset(pool *pgxpool.Pool, schema string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pool, c.schema = pool, schema
	c.delivered = map[string]int{}
	c.firstAt = nil
}

func (c *consumer) snapshot() (map[string]int, []time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.delivered))
	for k, v := range c.delivered {
		m[k] = v
	}
	return m, append([]time.Time(nil), c.firstAt...)
}

func (c *consumer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "reading body", http.StatusBadRequest)
		return
	}
	if err := webhookpub.Verify([]string{c.secret}, r.Header, body, 10*time.Minute); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	id := r.Header.Get(webhookpub.HeaderID)
	if err := c.process(r.Context(), id); err != nil {
		c.log.Debug("chaos consumer: processing failed; the relay will retry", "event_id", id, "error", err)
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// process handles one delivery: Inbox claim and effect in one transaction. It
// counts the delivery once the transaction committed.
func (c *consumer) process(ctx context.Context, id string) error {
	c.mu.Lock()
	pool, schema := c.pool, c.schema
	c.mu.Unlock()
	if schema == "" {
		return errors.New("no round is running")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// A client only records its configuration: one per delivery costs nothing.
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	if err != nil {
		return err
	}
	defer client.Close()
	ob, err := outbox.New(client, outbox.Config{})
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		first, err := ob.Inbox().Claim(ctx, tx, "chaos", id)
		if err != nil || !first {
			return err
		}
		_, err = tx.Exec(ctx, "INSERT INTO "+ident.Quote(schema)+".chaos_consumed (event_id) VALUES ($1)", id)
		return err
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.schema == schema {
		if c.delivered[id] == 0 {
			c.firstAt = append(c.firstAt, wallNow())
		}
		c.delivered[id]++
	}
	c.mu.Unlock()
	return nil
}

// consumeAMQP consumes queue on the broker at url until ctx ends, reconnecting
// while the broker is down. Messages are acknowledged after their transaction
// commits; a failed one is requeued.
func (c *consumer) consumeAMQP(ctx context.Context, url, queue string) {
	for ctx.Err() == nil {
		err := c.consumeOnce(ctx, url, queue)
		if ctx.Err() != nil {
			return
		}
		c.log.Debug("chaos consumer: AMQP session ended; reconnecting", "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (c *consumer) consumeOnce(ctx context.Context, url, queue string) error {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		return err
	}
	if err := ch.Qos(50, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	for d := range deliveries {
		if err := c.process(ctx, d.MessageId); err != nil {
			d.Nack(false, true)
			continue
		}
		d.Ack(false)
	}
	return errors.New("delivery channel closed")
}

// declareQueue creates the durable queue the relays publish to.
func declareQueue(url, queue string) error {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return fmt.Errorf("connecting to RabbitMQ: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("opening an AMQP channel: %w", err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declaring queue %s: %w", queue, err)
	}
	return nil
}

// commit commits tx, whose jobs are ids: acknowledged when the commit returns, and
// counted as ambiguous when it fails (the commit may have happened). It reports
// whether the commit returned success.
func (p *producer) commit(ctx context.Context, tx pgx.Tx, ids ...string) bool {
	if err := tx.Commit(ctx); err != nil {
		p.mu.Lock()
		p.ambiguous++
		p.mu.Unlock()
		return false
	}
	p.mu.Lock()
	p.acked = append(p.acked, ids...)
	p.ackedAt = append(p.ackedAt, wallNow())
	p.mu.Unlock()
	return true
}
