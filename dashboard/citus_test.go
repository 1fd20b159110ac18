package dashboard_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/dashboard"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/outbox"
)

// TestCitusJobPages serves the dashboard on a schema with the Citus layout (a real
// cluster: SKIPLOCK_TEST_CITUS_URL): the overview (stats and throughput), a job's page,
// its transaction's page, an outbox event's page, and the actions on a job by id —
// cancel, retry, run now — and an event's requeue. Their reads and writes name no key:
// each runs on every shard, planned with its values (a generic plan is refused there).
func TestCitusJobPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := pgtest.CitusSchema(t)
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	must(t, err)
	t.Cleanup(c.Close)
	ob, err := outbox.New(c, outbox.Config{})
	must(t, err)
	tx, err := pool.Begin(ctx)
	must(t, err)
	res, err := c.EnqueueRawTx(ctx, tx, "send_email", []byte(`{"to":"ana@example.com"}`), &skiplock.EnqueueOpts{ConcurrencyKey: "acme"})
	must(t, err)
	ev, err := ob.Write(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "42", EventType: "order.paid", Payload: []byte(`{}`), ConcurrencyKey: "acme"})
	must(t, err)
	must(t, tx.Commit(ctx))
	j, err := c.JobGet(ctx, res.ID)
	must(t, err)

	h, err := dashboard.New(c, ob, dashboard.Options{Authorize: allowAll})
	must(t, err)
	b := serve(t, h, "", false)
	for path, id := range map[string]string{"/": "", "/jobs/" + res.ID: "job-detail", "/outbox/" + ev: "",
		"/tx/" + strconv.FormatInt(j.TxID, 10): "", "/outbox?state=pending": "", "/queues": "", "/schedules": "",
		"/batches": "", "/flows": "", "/limits": "", "/fair": "", "/jobs?queue=default&state=pending": ""} {
		r := b.get(path)
		wantStatus(t, path, r, http.StatusOK)
		if id != "" && testids(r.body, id) != 1 {
			t.Errorf("%s: no %s on the page", path, id)
		}
	}
	state := func(want skiplock.JobState) {
		t.Helper()
		j, err := c.JobGet(ctx, res.ID)
		must(t, err)
		if j.State != want {
			t.Fatalf("the job is %s, want %s", j.State, want)
		}
	}
	wantStatus(t, "run now", b.act("/jobs/"+res.ID+"/run_now", nil), http.StatusSeeOther)
	wantStatus(t, "cancel", b.act("/jobs/"+res.ID+"/cancel", nil), http.StatusSeeOther)
	state(skiplock.StateCancelled)
	wantStatus(t, "retry", b.act("/jobs/"+res.ID+"/retry", nil), http.StatusSeeOther)
	state(skiplock.StatePending)
	wantStatus(t, "retry of a pending job", b.act("/jobs/"+res.ID+"/retry", nil), http.StatusConflict)

	if _, err := pool.Exec(ctx, `UPDATE "`+schema+`".outbox SET dead_at = now() WHERE id = $1 AND concurrency_key = 'acme'`, ev); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "requeue", b.act("/outbox/"+ev+"/requeue", nil), http.StatusSeeOther)
	rec, err := ob.Admin().Get(ctx, pool, ev)
	must(t, err)
	if rec.DeadAt != nil {
		t.Fatalf("the requeued event is still dead: %+v", rec)
	}
}
