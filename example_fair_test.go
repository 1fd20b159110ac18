package skiplock_test

import (
	"context"
	"fmt"

	"github.com/skiplock/skiplock"
)

// Make the queue "email" fair by tenant (the job's ConcurrencyKey): acme's backlog,
// enqueued first, no longer delays bolt's and carol's jobs — claims take the
// tenants' jobs in turn, from one rotation every client shares.
func ExampleClient_QueueSetFair() {
	ctx := context.Background()
	pool, schema := exampleDB()
	defer pool.Close()
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	defer client.Close()

	for _, tenant := range []string{"acme", "acme", "acme", "acme", "acme", "bolt", "bolt", "carol"} {
		client.Enqueue(ctx, SendEmail{To: "ops@" + tenant + ".example"},
			&skiplock.EnqueueOpts{Queue: "email", ConcurrencyKey: tenant})
	}
	client.QueueSetFair(ctx, "email", nil)

	keys, _ := client.FairKeys(ctx, "email", nil)
	for _, k := range keys {
		fmt.Printf("tenant %s: %d due\n", k.Key, k.Due)
	}
	// Workers (Config.Queues) claim the same way; a manual claim shows it in one step.
	jobs, _ := client.Manual().Claim(ctx, "email", 4)
	for _, j := range jobs {
		fmt.Println("claimed a job of", j.ConcurrencyKey)
	}
	// Output:
	// tenant acme: 5 due
	// tenant bolt: 2 due
	// tenant carol: 1 due
	// claimed a job of acme
	// claimed a job of bolt
	// claimed a job of carol
	// claimed a job of acme
}
