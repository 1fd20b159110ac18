package skiplock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
)

// Limit the queue "email" to 5 jobs running at once across every client, and each
// tenant (the job's ConcurrencyKey) to 1 of them, except "acme", allowed 2. Limits live
// in the database, so every client enforces the same ones; a job over a limit stays
// pending, spending no attempt, until a slot frees.
func ExampleClient_LimitSet() {
	ctx := context.Background()
	pool, schema := exampleDB()
	defer pool.Close()
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	defer client.Close()

	client.LimitSet(ctx, skiplock.Limit{Queue: "email", MaxRunning: 5})
	client.LimitSet(ctx, skiplock.Limit{Queue: "email", Key: skiplock.EachKey, MaxRunning: 1})
	client.LimitSet(ctx, skiplock.Limit{Queue: "email", Key: "acme", MaxRunning: 2})
	limits, _ := client.LimitList(ctx)
	for _, l := range limits {
		fmt.Println("limit:", l)
	}

	for _, tenant := range []string{"acme", "acme", "acme", "bolt", "bolt"} {
		client.Enqueue(ctx, SendEmail{To: "ops@" + tenant + ".example"},
			&skiplock.EnqueueOpts{Queue: "email", ConcurrencyKey: tenant})
	}
	// Workers (Config.Queues) claim the same way; a manual claim shows it in one step.
	jobs, _ := client.Manual().Claim(ctx, "email", 10)
	fmt.Println("claimed", len(jobs), "of 5")

	use, _ := client.LimitUsages(ctx)
	for _, u := range use {
		fmt.Printf("%s, bucket %q: %d holding\n", u.Limit, u.Bucket, u.Holding)
	}
	// Output:
	// limit: queue email max-running 5
	// limit: queue email key * max-running 1
	// limit: queue email key acme max-running 2
	// claimed 3 of 5
	// queue email max-running 5, bucket "": 3 holding
	// queue email key * max-running 1, bucket "bolt": 1 holding
	// queue email key acme max-running 2, bucket "acme": 2 holding
}

// Limits declared in a Config are written (LimitSet) when the client starts; limits
// set elsewhere, by another service or the CLI, stay as they are.
func ExampleLimit() {
	cfg := skiplock.Config{Limits: []skiplock.Limit{
		{Kind: "sms", Rate: 100, Per: time.Second},                      // at most 100 starts in any second
		{Queue: "reports", Key: skiplock.EachKey, MaxRunning: 2},        // 2 at once per customer
		{Queue: "reports", MaxRunning: 10, Rate: 600, Per: time.Minute}, // and 10 in all, 600 a minute
	}}
	for _, l := range cfg.Limits {
		fmt.Println(l)
	}
	fmt.Println(skiplock.Limit{Queue: "reports", Rate: 5}.Validate())
	// Output:
	// kind sms rate 100/1s
	// queue reports key * max-running 2
	// queue reports max-running 10 rate 600/1m0s
	// skiplock: invalid per: 0s is outside 1ms..24h (the rate's window)
}
