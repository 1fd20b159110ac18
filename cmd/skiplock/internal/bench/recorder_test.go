package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/skiplock/skiplock"
)

// The recorder W6 and W10 share: a warm-up run closes warmDone once all warm-up jobs
// ran; only a measured job's first run (as first reports it) counts towards done and
// allDone; a run without an index is refused as permanent and kept, as is one with
// an index past the measured jobs.
func TestRecorderCountsFirstRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var r recorder
	r.init(2, 1)
	runs := map[int]int{}
	first := func(i int) bool { runs[i]++; return runs[i] == 1 }
	run := func(payload string) error {
		return r.run(ctx, &skiplock.Job{ID: payload, Payload: json.RawMessage(payload)}, "WX", first)
	}
	closed := func(c chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	job := func(i int) string { return fmt.Sprintf(`{"i":%d}`, i) }

	if closed(r.warmDone) || closed(r.allDone) {
		t.Fatal("a fresh recorder is done")
	}
	if err := run(job(-1)); err != nil || !closed(r.warmDone) || r.done() != 0 {
		t.Fatalf("the warm-up job: %v, warm done %v, done %d", err, closed(r.warmDone), r.done())
	}
	for _, p := range []string{job(0), job(0)} {
		if err := run(p); err != nil {
			t.Fatal(err)
		}
	}
	if r.done() != 1 || closed(r.allDone) || runs[0] != 2 {
		t.Fatalf("job 0 run twice: done %d, all done %v, runs %d; want 1, false, 2", r.done(), closed(r.allDone), runs[0])
	}
	if err := run(job(2)); err != nil || len(r.bad) != 1 || runs[2] != 0 {
		t.Fatalf("an index past the measured jobs: %v, bad %v, first called %d times", err, r.bad, runs[2])
	}
	var perm *skiplock.PermanentError
	if err := run(`{}`); !errors.As(err, &perm) || len(r.bad) != 2 {
		t.Fatalf("a payload without an index: %v, bad %v; want a permanent error and the run kept", err, r.bad)
	}
	if err := run(job(1)); err != nil || r.done() != 2 || !closed(r.allDone) {
		t.Fatalf("the last measured job: %v, done %d, all done %v", err, r.done(), closed(r.allDone))
	}
}
