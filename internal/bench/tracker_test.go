package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// The tracker's exactly-once check fails on a job run twice, on a job never run,
// and on a job id it cannot read; it passes when each job ran once.
func TestTrackerCatchesARepeatedOrMissingRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	// An empty jobs table, verified as DeleteOnSuccess (no succeeded rows wanted):
	// the table passes, so the tracker's counts alone decide.
	schema := pgtest.Schema(t)
	ids := []string{"01a2351e-45cd-7e41-9cb2-9d486ab22a0f", "01a2351e-45cd-7e41-9cb2-9d486ab22a10", "01a2351e-45cd-7e41-9cb2-9d486ab22aff"}
	run := func(tr *tracker, id string) {
		if err := tr.handler()(ctx, &skiplock.Job{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	verify := func(tr *tracker, n int) error {
		_, err := tr.verify(ctx, pool, schema, n, true) // deleted: no succeeded rows expected
		return err
	}

	tr := newTracker(3)
	for _, id := range ids {
		run(tr, id)
	}
	if err := verify(tr, 3); err != nil {
		t.Fatalf("each job once: %v", err)
	}
	run(tr, ids[1])
	if err := verify(tr, 3); err == nil || !strings.Contains(err.Error(), "1 jobs ran more than once") {
		t.Fatalf("a job run twice: %v", err)
	}
	tr = newTracker(3)
	run(tr, ids[0])
	run(tr, ids[2])
	if err := verify(tr, 3); err == nil || !strings.Contains(err.Error(), "2 distinct jobs ran, want 3") {
		t.Fatalf("a job never run: %v", err)
	}
	tr = newTracker(1)
	run(tr, "not-a-uuid")
	if err := verify(tr, 1); err == nil || !strings.Contains(err.Error(), "not a UUID") {
		t.Fatalf("an unreadable id: %v", err)
	}
	if k, ok := uuidKey(ids[2]); !ok || k[0] != 0x01 || k[15] != 0xff {
		t.Fatalf("uuidKey(%s) = %x, %v", ids[2], k, ok)
	}
}
