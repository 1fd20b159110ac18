package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
)

// The demo's sample app: a shop that writes an order, the job that emails its
// customer and an outbox event in one transaction; workers that send the emails
// (with deliberate transient and permanent failures); and live figures.

type demoEmail struct {
	OrderID  int64  `json:"order_id"`
	Customer string `json:"customer"`
}

func (demoEmail) Kind() string { return "send_order_email" }

type demoStats struct {
	orders, emailsSent, smtpErrors atomic.Int64
}

// demoApp runs the demo in schema for d (0: until ctx ends). The duration counts
// from the end of the setup (the schema check, the migrations, the orders table, the
// client's and the relay's start), so a slow setup cannot use up a short run and fail
// it. The client and the relay are stopped explicitly when the run ends; ending ctx
// (Ctrl-C) ends the run at any point.
func demoApp(ctx context.Context, d time.Duration, pool *pgxpool.Pool, schema string, stdout, stderr io.Writer) error {
	if err := demoSchemaIsOwn(ctx, pool, schema); err != nil {
		return err
	}
	if _, err := skiplock.Migrate(ctx, pool, schema); err != nil {
		return err
	}
	orders := pgx.Identifier{schema, "demo_orders"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+orders+` (
		id bigserial PRIMARY KEY, customer text NOT NULL, total_cents int NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("creating the demo's orders table: %w", err)
	}
	var st demoStats
	workers := skiplock.NewWorkers()
	err := skiplock.AddWorker(workers, skiplock.WorkFunc[demoEmail](func(ctx context.Context, job *skiplock.Job, e demoEmail) error {
		// a mail API call: 1–10ms, sometimes a timeout, rarely a bad address
		select {
		case <-time.After(time.Duration(1+rand.IntN(10)) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		switch r := rand.Float64(); {
		case strings.HasSuffix(e.Customer, "@invalid"):
			return skiplock.Permanent(fmt.Errorf("mailbox %s does not exist", e.Customer))
		case r < 0.08:
			st.smtpErrors.Add(1)
			return errors.New("smtp: timeout talking to mail relay")
		}
		st.emailsSent.Add(1)
		return nil
	}), &skiplock.WorkerOpts{Timeout: 10 * time.Second, RetryPolicy: skiplock.ExponentialBackoff{Base: 200 * time.Millisecond, Max: 3 * time.Second}})
	if err != nil {
		return err
	}
	client, err := skiplock.NewClient(pool, skiplock.Config{
		Schema:  schema,
		Queues:  map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 50}},
		Workers: workers,
		// No customer gets more than two emails in flight at once, across every
		// worker (docs/limits.md); EnqueueTx below keys each email by its customer.
		Limits: []skiplock.Limit{{Queue: skiplock.DefaultQueue, Key: skiplock.EachKey, MaxRunning: 2}},
	})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	outbox, err := startDemoOutbox(ctx, client)
	if err != nil {
		return err
	}
	// A Python worker beside the Go ones, when Python and psycopg are there.
	py, pyErr := startDemoPython(ctx, pool.Config().ConnString(), schema)
	if pyErr != nil {
		fmt.Fprintf(stdout, "demo: no Python worker (%s); the Go workers run alone\n", firstLine(pyErr))
	}
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}

	shopDone := make(chan error, 1)
	go func() { shopDone <- demoShop(ctx, pool, client, outbox, orders, py != nil, &st) }()

	if py != nil {
		fmt.Fprintf(stdout, "demo: a shop writes orders (+ an email job, a receipt job and an outbox event, one transaction each); %d Go email workers; "+
			"a Python worker (clients/python, pid %d) renders the receipts from queue %q; Ctrl-C to stop\n\n", 50, py.cmd.Process.Pid, demoReceiptQueue)
	} else {
		fmt.Fprintf(stdout, "demo: a shop writes orders (+ an email job + an outbox event, one transaction each); %d email workers; Ctrl-C to stop\n\n", 50)
	}
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	start := time.Now()
	var lastDone int64
	for running := true; running; {
		select {
		case <-ctx.Done():
			running = false
		case <-ticker.C:
			s, err := client.Stats(context.WithoutCancel(ctx), nil)
			if err != nil {
				fmt.Fprintln(stderr, "demo: stats:", err)
				continue
			}
			var q skiplock.QueueStats
			for _, x := range s.Queues {
				if x.Queue == skiplock.DefaultQueue {
					q = x
				}
			}
			done := s.Process.Succeeded + s.Process.Failed
			var pyLine string
			if py != nil {
				if rendered, waiting, retried, err := demoPyFigures(context.WithoutCancel(ctx), pool, schema); err == nil {
					pyLine = fmt.Sprintf(" │ python: receipts %6d waiting %4d retried %3d", rendered, waiting, retried)
				}
			}
			fmt.Fprintf(stdout, "%5.0fs  orders %6d │ jobs: pending %4d running %3d succeeded %6d retried %4d failed %3d │ %5d jobs/s │ oldest due %6s │ %s%s\n",
				time.Since(start).Seconds(), st.orders.Load(), q.Pending, q.Running, q.Succeeded, s.Process.Retried, q.Failed,
				done-lastDone, q.OldestDueAge.Round(time.Millisecond), outbox.line(), pyLine)
			lastDone = done
		}
	}
	fmt.Fprintln(stdout, "\ndemo: stopping — waiting for running jobs to finish and the last events to be published…")
	if err := <-shopDone; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintln(stderr, "demo: shop:", err)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if py != nil {
		py.stop(10 * time.Second)
	}
	if err := client.Stop(stopCtx); err != nil {
		return err
	}
	outbox.drain(st.orders.Load(), 3*time.Second)
	outbox.stop()
	c := client.Counters()
	var pending int64
	pool.QueryRow(stopCtx, `SELECT count(*) FROM `+pgx.Identifier{schema, "jobs"}.Sanitize()+` WHERE status = 'pending'`).Scan(&pending)
	fmt.Fprintf(stdout, "demo: %d orders; %d emails sent, %d transient SMTP errors retried, %d permanently failed, %d waiting for a retry\n",
		st.orders.Load(), c.Succeeded, c.Retried, c.Failed, pending)
	fmt.Fprintf(stdout, "demo: %s\n", outbox.summary())
	if py != nil {
		rendered, waiting, retried, err := demoPyFigures(stopCtx, pool, schema)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "demo: Python worker: %d receipts rendered, %d renders retried, %d receipts waiting\n", rendered, retried, waiting)
	}
	return nil
}

// demoSchemaIsOwn refuses a schema that holds jobs or outbox events the demo did not
// write: its workers would fail jobs of kinds they do not know (no worker registered)
// and its relay would publish the events to the demo's receiver. A schema that does
// not exist yet, or holds only the demo's own rows from an earlier run, is fine.
func demoSchemaIsOwn(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	jobs, outboxT := pgx.Identifier{schema, "jobs"}.Sanitize(), pgx.Identifier{schema, "outbox"}.Sanitize()
	var hasJobs, hasOutbox bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`, jobs, outboxT).Scan(&hasJobs, &hasOutbox); err != nil {
		return fmt.Errorf("checking the demo's schema %q: %w", schema, err)
	}
	var foreign []string
	if hasJobs {
		rows, err := pool.Query(ctx, `SELECT DISTINCT kind FROM `+jobs+` WHERE kind <> ALL($1) ORDER BY kind LIMIT 5`,
			[]string{demoEmail{}.Kind(), demoReceipt{}.Kind()})
		if err != nil {
			return fmt.Errorf("checking the demo's schema %q: %w", schema, err)
		}
		kinds, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("checking the demo's schema %q: %w", schema, err)
		}
		if len(kinds) > 0 {
			foreign = append(foreign, "jobs of kind "+strings.Join(kinds, ", "))
		}
	}
	if hasOutbox {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+outboxT+` WHERE event_type <> $1 LIMIT 1) x`, demoEventType).Scan(&n); err != nil {
			return fmt.Errorf("checking the demo's schema %q: %w", schema, err)
		}
		if n > 0 {
			foreign = append(foreign, "outbox events of other types")
		}
	}
	if len(foreign) > 0 {
		return fmt.Errorf("demo: schema %q holds %s that the demo did not write; its workers would fail them "+
			"and its relay would publish them. Run the demo in a schema of its own (the default is %s; --schema names another) "+
			"or on a throwaway cluster (no --database-url or DATABASE_URL)", schema, strings.Join(foreign, " and "), demoSchema)
	}
	return nil
}

// demoShop writes orders at a steady rate with bursts, each in one transaction with
// its email job, its receipt job (when receipts: the Python worker runs) and outbox
// event.
func demoShop(ctx context.Context, pool *pgxpool.Pool, client *skiplock.Client, ob *demoOutbox, orders string, receipts bool, st *demoStats) error {
	for i := 0; ; i++ {
		wait := 4 * time.Millisecond
		if i%1000 > 900 { // a burst
			wait = 0
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		customer := fmt.Sprintf("customer%d@example.com", rand.IntN(5000))
		if rand.IntN(100) == 0 {
			customer = fmt.Sprintf("customer%d@invalid", i)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		var id int64
		err = tx.QueryRow(ctx, `INSERT INTO `+orders+` (customer, total_cents) VALUES ($1, $2) RETURNING id`, customer, 100+rand.IntN(10000)).Scan(&id)
		if err == nil {
			_, err = client.EnqueueTx(ctx, tx, demoEmail{OrderID: id, Customer: customer},
				&skiplock.EnqueueOpts{DeduplicationKey: fmt.Sprintf("order-%d", id), ConcurrencyKey: customer})
		}
		if err == nil && receipts {
			err = enqueueReceipt(ctx, client, tx, id)
		}
		if err == nil {
			err = ob.write(ctx, tx, id, customer)
		}
		if err == nil {
			err = tx.Commit(ctx)
		} else {
			tx.Rollback(context.WithoutCancel(ctx))
		}
		if err != nil {
			return err
		}
		st.orders.Add(1)
	}
}
