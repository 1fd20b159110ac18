package gateway_test

import (
	"context"
	"slices"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/gateway"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestCitusClaimAndFinish runs the gateway on a real Citus cluster
// (SKIPLOCK_TEST_CITUS_URL): a worker claims jobs of three concurrency keys over HTTP,
// renews one and finishes them by id and lease token — one by its own route, two in
// one POST /v1/complete — and each write lands on its key's node (the handle learns
// the job's key first, Manual.Handle); a stale token is answered lost.
func TestCitusClaimAndFinish(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.CitusSchema(t)
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e := startEnv(t, c, gateway.Options{Tokens: []gateway.Token{{Worker: "any", Token: workerToken}}})
	var ids []string
	for _, k := range []string{"acme", "globex", "initech"} {
		ids = append(ids, e.enqueue("default", "email", `{}`, &skiplock.EnqueueOpts{ConcurrencyKey: k}))
	}
	var cr gateway.ClaimResponse
	e.post("/v1/claim", gateway.ClaimRequest{Queue: "default", Limit: 3}, &cr)
	if len(cr.Jobs) != 3 {
		t.Fatalf("claimed %d jobs, want 3", len(cr.Jobs))
	}
	tokens := map[string]string{}
	for _, j := range cr.Jobs {
		tokens[j.ID] = j.LeaseToken
	}
	var hb gateway.HeartbeatResponse
	e.post("/v1/jobs/"+ids[0]+"/heartbeat", gateway.LeaseRequest{LeaseToken: tokens[ids[0]]}, &hb)
	const stale = "018f0000-0000-7000-8000-000000000001"
	e.refused("POST", "/v1/jobs/"+ids[0]+"/complete", workerToken, gateway.CompleteRequest{LeaseToken: stale}, 409, gateway.CodeLeaseLost, "lease_token")
	var fr gateway.FinishResponse
	e.post("/v1/jobs/"+ids[0]+"/complete", gateway.CompleteRequest{LeaseToken: tokens[ids[0]]}, &fr)
	if fr.State != skiplock.StateSucceeded {
		t.Fatalf("complete: %+v", fr)
	}
	var res gateway.CompleteManyResponse
	e.post("/v1/complete", gateway.CompleteManyRequest{Jobs: []gateway.JobCompletion{
		{ID: ids[1], LeaseToken: tokens[ids[1]]}, {ID: ids[2], LeaseToken: tokens[ids[2]]},
	}}, &res)
	if !slices.Equal(res.Succeeded, ids[1:]) || len(res.Lost) != 0 {
		t.Fatalf("complete many: %+v, want %v succeeded", res, ids[1:])
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM "`+schema+`".jobs WHERE status = 'succeeded' AND attempts = 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("%d jobs succeeded at their first attempt, want 3", n)
	}
}
