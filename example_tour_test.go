package skiplock_test

import (
	"context"
	"fmt"

	"github.com/skiplock/skiplock"
)

// The package's main flow: a worker for a job type, a started client, a job enqueued in
// the same transaction as the business change, and Stop, which lets the running job
// finish and record its outcome.
func Example() {
	ctx := context.Background()
	pool, schema := exampleDB() // an application: pgxpool.New and skiplock.Migrate
	defer pool.Close()
	pool.Exec(ctx, `CREATE TABLE `+schema+`.orders (id int PRIMARY KEY)`)

	mailed := make(chan string, 1)
	workers := skiplock.NewWorkers()
	skiplock.AddWorker(workers, skiplock.WorkFunc[SendEmail](func(ctx context.Context, job *skiplock.Job, a SendEmail) error {
		mailed <- fmt.Sprintf("mailed order %d to %s", a.OrderID, a.To)
		return nil // an error would retry the job with backoff
	}), nil)
	client, _ := skiplock.NewClient(pool, skiplock.Config{
		Schema:  schema,
		Queues:  map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 10}},
		Workers: workers,
	})
	defer client.Close()
	if err := client.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}

	tx, _ := pool.Begin(ctx)
	tx.Exec(ctx, `INSERT INTO `+schema+`.orders VALUES (42)`)
	res, _ := client.EnqueueTx(ctx, tx, SendEmail{OrderID: 42, To: "ana@example.com"}, nil)
	tx.Commit(ctx) // the order and its job exist from here on, together

	fmt.Println(<-mailed)
	client.Stop(ctx)
	job, _ := client.JobGet(ctx, res.ID)
	fmt.Println("job:", job.State, "after", job.Attempt, "attempt")
	// Output:
	// mailed order 42 to ana@example.com
	// job: succeeded after 1 attempt
}
