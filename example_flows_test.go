package skiplock_test

import (
	"context"
	"fmt"

	"github.com/skiplock/skiplock"
)

type Resize struct {
	Width int `json:"width"`
}

func (Resize) Kind() string { return "resize" }

type Publish struct {
	Album string `json:"album"`
}

func (Publish) Kind() string { return "publish" }

// A flow: the parent waits until each child has finished, then runs and reads their
// outputs. The whole tree is inserted in one statement (here in its own transaction;
// EnqueueFlowTx takes the caller's).
func ExampleClient_EnqueueFlow() {
	ctx := context.Background()
	pool, schema := exampleDB()
	defer pool.Close()
	done := make(chan struct{})
	workers := skiplock.NewWorkers()
	skiplock.AddWorker(workers, skiplock.WorkFunc[Resize](func(ctx context.Context, job *skiplock.Job, a Resize) error {
		return job.SetOutput(map[string]string{"url": fmt.Sprintf("https://cdn.example/%d.jpg", a.Width)})
	}), nil)
	skiplock.AddWorker(workers, skiplock.WorkFunc[Publish](func(ctx context.Context, job *skiplock.Job, a Publish) error {
		client, _ := skiplock.ClientFromContext(ctx) // the client running this handler
		children, err := client.Children(ctx, job.ID)
		if err != nil {
			return err
		}
		for _, c := range children {
			out, err := skiplock.ChildOutput[struct{ URL string }](c) // ErrNoOutput if it recorded none
			if err != nil {
				return err
			}
			fmt.Println(a.Album, "has", out.URL, "("+c.State+")")
		}
		close(done)
		return nil
	}), nil)
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Workers: workers,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 2}}})
	defer client.Close()

	res, _ := client.EnqueueFlow(ctx, skiplock.Flow{
		Args:           Publish{Album: "holidays"},
		OnChildFailure: skiplock.FailureFail, // the default: a child that fails for good fails the album
		Children:       []skiplock.Flow{{Args: Resize{Width: 320}}, {Args: Resize{Width: 1280}}},
	})
	parent, _ := client.JobGet(ctx, res.ID)
	fmt.Println("parent:", parent.State)
	client.Start(ctx)
	<-done
	client.Stop(ctx) // waits for the parent's outcome to be written
	parent, _ = client.JobGet(ctx, res.ID)
	fmt.Println("parent:", parent.State)
	// Output:
	// parent: waiting
	// holidays has https://cdn.example/320.jpg (succeeded)
	// holidays has https://cdn.example/1280.jpg (succeeded)
	// parent: succeeded
}

// A batch: members are added while it is open, from any number of transactions; once
// it is sealed and every member has finished, its callback runs exactly once and is
// told the counts.
func ExampleClient_BatchOpen() {
	ctx := context.Background()
	pool, schema := exampleDB()
	defer pool.Close()
	done := make(chan struct{})
	workers := skiplock.NewWorkers()
	skiplock.AddWorker(workers, skiplock.WorkFunc[Resize](func(ctx context.Context, job *skiplock.Job, a Resize) error {
		if a.Width == 0 {
			return skiplock.Permanent(fmt.Errorf("no width"))
		}
		return nil
	}), nil)
	workers.AddHandler("import_done", func(ctx context.Context, job *skiplock.Job) error {
		r, _ := skiplock.BatchResultOf(job)
		fmt.Printf("import done: %d of %d succeeded, %d failed\n", r.Succeeded, r.Total, r.Failed)
		close(done)
		return nil
	}, nil)
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Workers: workers,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 2}}})
	defer client.Close()

	id, _ := client.BatchOpen(ctx, skiplock.Batch{Description: "nightly import",
		OnComplete: &skiplock.EnqueueParams{Kind: "import_done", Payload: []byte(`{}`)}})
	client.BatchAdd(ctx, id, []skiplock.EnqueueParams{{Args: Resize{Width: 320}}, {Args: Resize{Width: 640}}})
	client.Start(ctx) // members run while the batch is still open
	client.BatchAdd(ctx, id, []skiplock.EnqueueParams{{Args: Resize{}}})
	client.BatchSeal(ctx, id)
	<-done
	client.Stop(ctx)
	// Output:
	// import done: 2 of 3 succeeded, 1 failed
}
