// Package skiplocktest helps users test code built on skiplock.
//
// A database per test binary and a schema per test:
//
//	func TestMain(m *testing.M) { skiplocktest.Main(m) } // a throwaway PostgreSQL, or $SKIPLOCK_TEST_DATABASE_URL
//
//	func TestSignup(t *testing.T) {
//		t.Parallel()
//		client := skiplocktest.NewClient(t, skiplock.Config{}) // on Pool(t), in a fresh migrated Schema(t)
//		…
//	}
//
// Assertions on what was enqueued, read through the caller's DB (a transaction that
// has not committed yet included), with filters on queue, priority, state, schedule
// and the decoded args; a failure lists the jobs of that kind that are enqueued:
//
//	job := skiplocktest.RequireEnqueued(t, client, tx, &skiplocktest.RequireOpts[SendEmail]{Queue: "mail"})
//	skiplocktest.RequireNotEnqueued[SendEmail](t, client, tx, nil)
//
// Running handlers: Work runs a worker once on args, synchronously, with a Job built
// the way a client builds one (attempt 1, the JSON round trip of the args, the job in
// the context); WorkJob runs it on a job read from the database; Drain starts a client
// and works every due job of its queues with the registered workers until none is
// due, then returns the outcomes.
//
// FakeClock drives lease expiry, retries and retention without sleeping.
package skiplocktest
