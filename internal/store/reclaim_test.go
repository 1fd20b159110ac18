package store

import (
	"context"
	"testing"
	"time"
)

// expiredScan runs the expired-lease listing under EXPLAIN (ANALYZE, BUFFERS) and
// returns the buffers its scan of jobs read and the leases it listed.
func expiredScan(t *testing.T, ctx context.Context, s *Store, db DBTX, floor *time.Time) (blocks float64, listed int) {
	t.Helper()
	explainPlan(t, ctx, db, func(n map[string]any) {
		if n["Index Name"] == "jobs_expired_lease_idx" {
			blocks += nodeBlocks(n)
			listed = int(n["Actual Rows"].(float64))
		}
	}, s.reclaim.expired.sql, nil, 1000, Now(floor))
	return blocks, listed
}

// While a snapshot held open elsewhere stops vacuum, the leases index keeps an entry
// for every job that ran since; a listing from the head reads them all, one from a
// floor only those after it, and still finds the expired lease above the floor.
func TestExpiredFloorUnderPinnedSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := storeWithJobs(t, 3000)
	pinSnapshot(t, ctx, s, pool)
	// Every job runs under a lease that ended over the last hour, and finishes.
	for _, q := range []string{
		`UPDATE ` + s.Table("jobs") + ` SET status = 'running', lease_token = gen_random_uuid(), attempts = 1,
  lease_until = now() - interval '1 hour' + random() * interval '59 minutes'`,
		`UPDATE ` + s.Table("jobs") + ` SET status = 'succeeded', lease_token = NULL, lease_until = NULL`,
		// One live job whose lease ended 5 s ago.
		`INSERT INTO ` + s.Table("jobs") + ` (kind, payload, status, lease_token, lease_until, attempts)
VALUES ('k', '{}', 'running', gen_random_uuid(), now() - interval '5 seconds', 1)`,
		`ANALYZE ` + s.Table("jobs"),
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var dbNow time.Time
	if err := pool.QueryRow(ctx, "SELECT now()").Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	fromHead, listed := expiredScan(t, ctx, s, pool, nil)
	if listed != 1 {
		t.Fatalf("from the head: listed %d leases, want the live one", listed)
	}
	below := dbNow.Add(-30 * time.Second)
	fromFloor, listed := expiredScan(t, ctx, s, pool, &below)
	if listed != 1 {
		t.Fatalf("from a floor 30 s back: listed %d leases, want the live one", listed)
	}
	t.Logf("buffers read listing expired leases after 3,000 finished jobs under a pinned snapshot: from the head %.0f, from a floor %.0f", fromHead, fromFloor)
	if fromHead < 1000 || fromFloor*20 > fromHead {
		t.Fatalf("from the head %.0f buffers, from the floor %.0f: want the floor's at most a twentieth", fromHead, fromFloor)
	}
	above := dbNow.Add(-time.Second)
	if _, listed := expiredScan(t, ctx, s, pool, &above); listed != 0 {
		t.Fatalf("from a floor after the live lease's end: listed %d leases, want none", listed)
	}
}
