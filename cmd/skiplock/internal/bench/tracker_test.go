package bench

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// The tracker's exactly-once check fails on a job run twice, on a job never run, on
// a payload without an index and on an index outside the run's jobs; it passes when
// each job, measured or warm-up, ran once.
func TestTrackerCatchesARepeatedOrMissingRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	// An empty jobs table, verified as DeleteOnSuccess (no succeeded rows wanted):
	// the table passes, so the tracker's counts alone decide.
	schema := pgtest.Schema(t)
	run := func(tr *tracker, payload string) {
		if err := tr.handler()(ctx, &skiplock.Job{Payload: json.RawMessage(payload)}); err != nil {
			t.Fatal(err)
		}
	}
	job := func(i int) string {
		b, err := json.Marshal(noop{I: i})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	verify := func(tr *tracker, n int) error {
		_, err := tr.verify(ctx, pool, schema, n, true) // deleted: no succeeded rows expected
		return err
	}

	// Two measured jobs (0, 1) and one warm-up job (-1, the last slot); one payload
	// as jsonb returns it.
	tr := newTracker(3)
	for _, p := range []string{job(0), `{"i": 1}`, job(-1)} {
		run(tr, p)
	}
	if err := verify(tr, 3); err != nil {
		t.Fatalf("each job once: %v", err)
	}
	run(tr, job(1))
	if err := verify(tr, 3); err == nil || !strings.Contains(err.Error(), "1 jobs ran more than once") {
		t.Fatalf("a job run twice: %v", err)
	}
	tr = newTracker(3)
	run(tr, job(0))
	run(tr, job(-1))
	if err := verify(tr, 3); err == nil || !strings.Contains(err.Error(), "2 distinct jobs ran, want 3") {
		t.Fatalf("a job never run: %v", err)
	}
	for _, bad := range []string{`{"i":3}`, `{"i":-4}`, `{"i":"1"}`, `{"j":1}`, `{}`, ``, `{"i":1,"x":2}`, `{"i":  1}`} {
		tr = newTracker(3)
		run(tr, bad)
		if err := verify(tr, 3); err == nil || !strings.Contains(err.Error(), "1 handler runs had a payload without an index") {
			t.Fatalf("payload %q: %v", bad, err)
		}
	}
}
