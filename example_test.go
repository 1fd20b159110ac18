package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
)

type SendEmail struct {
	OrderID int    `json:"order_id"`
	To      string `json:"to"`
}

func (SendEmail) Kind() string { return "send_email" }

// Enqueue a job in the same transaction as the business change: it exists if and
// only if the transaction commits, and a repeated deduplication key inserts nothing.
func ExampleClient_EnqueueTx() {
	ctx := context.Background()
	pool, schema := exampleDB()
	defer pool.Close()
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	defer client.Close()
	pool.Exec(ctx, `CREATE TABLE `+schema+`.orders (id int PRIMARY KEY)`)

	tx, _ := pool.Begin(ctx)
	tx.Exec(ctx, `INSERT INTO `+schema+`.orders VALUES (42)`)
	first, _ := client.EnqueueTx(ctx, tx, SendEmail{OrderID: 42, To: "ana@example.com"},
		&skiplock.EnqueueOpts{DeduplicationKey: "order-42"})
	tx.Commit(ctx)

	again, _ := client.Enqueue(ctx, SendEmail{OrderID: 42}, &skiplock.EnqueueOpts{DeduplicationKey: "order-42"})
	fmt.Println("second enqueue is a duplicate:", again.Duplicate, "of the same job:", again.ID == first.ID)

	tx, _ = pool.Begin(ctx)
	client.EnqueueTx(ctx, tx, SendEmail{OrderID: 43}, nil)
	tx.Rollback(ctx)
	jobs, _ := client.JobList(ctx, skiplock.ListParams{})
	fmt.Println("jobs after a rolled-back enqueue:", len(jobs))
	// Output:
	// second enqueue is a duplicate: true of the same job: true
	// jobs after a rolled-back enqueue: 1
}

type SyncAccount struct {
	ID int `json:"id"`
}

func (SyncAccount) Kind() string { return "sync_account" }

// Unique jobs: at most one job per key while one is pending or running (the default
// States). An enqueue of the same key meanwhile inserts nothing and names the job that
// holds it; once that job has finished, the key is free for the next one.
func ExampleUniqueOpts() {
	ctx := context.Background()
	pool, schema := exampleDB()
	defer pool.Close()
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	defer client.Close()
	opts := &skiplock.EnqueueOpts{Unique: &skiplock.UniqueOpts{Key: "sync-account-42"}}

	first, _ := client.Enqueue(ctx, SyncAccount{ID: 42}, opts)
	again, _ := client.Enqueue(ctx, SyncAccount{ID: 42}, opts)
	fmt.Println("while pending: duplicate", again.Duplicate, "of the same job", again.ID == first.ID)

	jobs, _ := client.Manual().Claim(ctx, skiplock.DefaultQueue, 1) // a worker takes it…
	again, _ = client.Enqueue(ctx, SyncAccount{ID: 42}, opts)
	fmt.Println("while running: duplicate", again.Duplicate)
	client.Manual().Complete(ctx, jobs[0]) // …and it succeeds
	next, _ := client.Enqueue(ctx, SyncAccount{ID: 42}, opts)
	fmt.Println("once it succeeded: duplicate", next.Duplicate, "new job", next.ID != first.ID)
	// Output:
	// while pending: duplicate true of the same job true
	// while running: duplicate true
	// once it succeeded: duplicate false new job true
}

// A typed worker: the payload is decoded into the args type, whose Kind names the jobs
// it takes. Start works the queues; Stop waits for running jobs.
func ExampleAddWorker() {
	ctx := context.Background()
	pool, schema := exampleDB()
	defer pool.Close()

	done := make(chan string, 1)
	workers := skiplock.NewWorkers()
	skiplock.AddWorker(workers, skiplock.WorkFunc[SendEmail](func(ctx context.Context, job *skiplock.Job, args SendEmail) error {
		// Pass skiplock.IdempotencyKey(ctx) to the mail API so a retry cannot send twice.
		done <- fmt.Sprintf("email for order %d to %s (attempt %d)", args.OrderID, args.To, job.Attempt)
		return nil
	}), &skiplock.WorkerOpts{Timeout: time.Minute})

	client, _ := skiplock.NewClient(pool, skiplock.Config{
		Schema:  schema,
		Queues:  map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 10}},
		Workers: workers,
	})
	client.Start(ctx)
	defer client.Stop(ctx)

	client.Enqueue(ctx, SendEmail{OrderID: 7, To: "bo@example.com"}, nil)
	fmt.Println(<-done)
	// Output: email for order 7 to bo@example.com (attempt 1)
}

// Snooze puts a job back for later without spending an attempt: for example while a
// rate limit lasts.
func ExampleSnooze() {
	ctx := context.Background()
	pool, schema := exampleDB()
	defer pool.Close()

	workers := skiplock.NewWorkers()
	workers.AddHandler("poll_report", func(ctx context.Context, job *skiplock.Job) error {
		return skiplock.Snooze(10 * time.Minute) // the report is not ready yet
	}, nil)
	client, _ := skiplock.NewClient(pool, skiplock.Config{
		Schema: schema, Workers: workers,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 1}},
	})
	events, stop := client.Subscribe(skiplock.EventSnoozed)
	defer stop()
	client.Start(ctx)
	defer client.Stop(ctx)

	res, _ := client.EnqueueRawTx(ctx, pool, "poll_report", []byte(`{"report":"q3"}`), nil)
	<-events
	job, _ := client.JobGet(ctx, res.ID)
	fmt.Println(job.State, "attempts spent:", job.Attempt, "runs again in ~10m:", job.RunAt.After(time.Now().Add(9*time.Minute)))
	// Output: pending attempts spent: 0 runs again in ~10m: true
}

// A permanent error fails the job at once instead of retrying it; failed jobs keep
// their last error and can be retried by hand.
func ExamplePermanent() {
	ctx := context.Background()
	pool, schema := exampleDB()
	defer pool.Close()

	workers := skiplock.NewWorkers()
	workers.AddHandler("charge_card", func(ctx context.Context, job *skiplock.Job) error {
		return skiplock.Permanent(errors.New("card number is malformed"))
	}, nil)
	client, _ := skiplock.NewClient(pool, skiplock.Config{
		Schema: schema, Workers: workers,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 1}},
	})
	events, stop := client.Subscribe(skiplock.EventFailed)
	defer stop()
	client.Start(ctx)
	defer client.Stop(ctx)

	client.EnqueueRawTx(ctx, pool, "charge_card", []byte(`{"card":"x"}`), &skiplock.EnqueueOpts{MaxAttempts: 5})
	ev := <-events
	failed, _ := client.JobList(ctx, skiplock.ListParams{States: []skiplock.JobState{skiplock.StateFailed}})
	fmt.Println(ev.Job.Attempt, "attempt;", len(failed), "failed job:", failed[0].LastError)
	retried, _ := client.JobRetry(ctx, failed[0].ID)
	fmt.Println("after a manual retry:", retried.State)
	// Output:
	// 1 attempt; 1 failed job: card number is malformed
	// after a manual retry: pending
}
