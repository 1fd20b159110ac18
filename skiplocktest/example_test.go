package skiplocktest_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/skiplocktest"
)

// The application under test: signing up writes the user and enqueues the welcome
// email in the same transaction; the worker sends it through a Mailer.

type WelcomeEmail struct {
	UserID int    `json:"user_id"`
	To     string `json:"to"`
}

func (WelcomeEmail) Kind() string { return "welcome_email" }

func SignUp(ctx context.Context, client *skiplock.Client, tx pgx.Tx, userID int, email string) error {
	// … INSERT INTO users …
	_, err := client.EnqueueTx(ctx, tx, WelcomeEmail{UserID: userID, To: email},
		&skiplock.EnqueueOpts{Queue: "email", DeduplicationKey: fmt.Sprintf("welcome-%d", userID)})
	return err
}

type Mailer interface {
	Send(ctx context.Context, idempotencyKey, to, body string) error
}

type WelcomeWorker struct{ Mailer Mailer }

func (w WelcomeWorker) Work(ctx context.Context, job *skiplock.Job, a WelcomeEmail) error {
	return w.Mailer.Send(ctx, job.IdempotencyKey(), a.To, fmt.Sprintf("Welcome, user %d!", a.UserID))
}

// fakeMailer records what it was asked to send.
type fakeMailer struct{ sent []string }

func (m *fakeMailer) Send(_ context.Context, _, to, body string) error {
	m.sent = append(m.sent, to+": "+body)
	return nil
}

// Testing an enqueue and its handler. In a test file the body below is a Test
// function's: t is its *testing.T, and the file's TestMain calls skiplocktest.Main(m)
// (a throwaway PostgreSQL for the test binary, or $SKIPLOCK_TEST_DATABASE_URL).
func Example() {
	t := newExampleTB() // stands in for the test's *testing.T
	defer t.end()
	ctx := context.Background()

	mailer := &fakeMailer{}
	workers := skiplock.NewWorkers()
	skiplock.AddWorker(workers, WelcomeWorker{Mailer: mailer}, nil)
	// A client in a fresh, migrated schema of the test's own; stopped at the test's end.
	client := skiplocktest.NewClient(t, skiplock.Config{Workers: workers,
		Queues: map[string]skiplock.QueueConfig{"email": {MaxWorkers: 1}}})

	// The enqueue, seen through the transaction before it commits.
	tx, _ := client.Pool().Begin(ctx)
	defer tx.Rollback(ctx)
	SignUp(ctx, client, tx, 42, "ana@example.com")
	job := skiplocktest.RequireEnqueued(t, client, tx, &skiplocktest.RequireOpts[WelcomeEmail]{
		Queue: "email",
		Where: func(a WelcomeEmail) bool { return a.UserID == 42 },
	})
	fmt.Println("enqueued:", job.Args.To, job.Job.DeduplicationKey)

	// The handler alone, on args, synchronously.
	err := skiplocktest.Work(ctx, t, WelcomeWorker{Mailer: mailer}, WelcomeEmail{UserID: 7, To: "bo@example.com"}, nil)
	fmt.Println("worked:", err, mailer.sent)

	// End to end: commit, then work every due job of the queue with the client's workers.
	tx.Commit(ctx)
	res := skiplocktest.Drain(ctx, t, client, "email")
	fmt.Println("drained:", res, mailer.sent[1:])
	skiplocktest.RequireEnqueued(t, client, nil, &skiplocktest.RequireOpts[WelcomeEmail]{
		States: []skiplock.JobState{skiplock.StateSucceeded},
	})
	// Output:
	// enqueued: ana@example.com welcome-42
	// worked: <nil> [bo@example.com: Welcome, user 7!]
	// drained: 1 succeeded [ana@example.com: Welcome, user 42!]
}
