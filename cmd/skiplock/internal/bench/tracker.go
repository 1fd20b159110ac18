package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
)

// noop is the benchmark job.
type noop struct {
	I int `json:"i"`
}

func (noop) Kind() string { return "noop" }

// tracker counts handler runs per job to verify exactly-once success. It is the
// harness's own work inside every measured handler, so it is kept cheap: a job is
// known by the index its payload carries (noop.I, unique per job), counted in a slot
// of one array with an atomic add. Keyed by id instead, in 64 locked maps of
// 16-byte keys, the count was the handler's whole cost: a million random keys missed
// the cache on every run (0.94 s of the process's CPU in W7, "The harness's own
// exactly-once check" in docs/benchmarks-archive.md). Measured jobs carry 0, 1, …; warm-up
// jobs −1, −2, …, counted from the array's end. A payload the tracker cannot read, or
// an index outside the array, is counted as bad and fails verify; two jobs sharing a
// slot leave one slot at two runs and another at none, which fails it too.
type tracker struct {
	seen []atomic.Int32
	runs atomic.Int64
	bad  atomic.Int64 // payloads without a readable index in range
}

func newTracker(n int) *tracker { return &tracker{seen: make([]atomic.Int32, n)} }

// noopIndex reads noop.I from a job's payload: {"i":N} as encoding/json writes it, or
// {"i": N} as jsonb returns it.
func noopIndex(payload []byte) (int, bool) {
	const prefix = `{"i":`
	if len(payload) < len(prefix)+2 || string(payload[:len(prefix)]) != prefix || payload[len(payload)-1] != '}' {
		return 0, false
	}
	digits := payload[len(prefix) : len(payload)-1]
	if len(digits) > 0 && digits[0] == ' ' {
		digits = digits[1:]
	}
	i, err := strconv.Atoi(string(digits))
	return i, err == nil
}

// slot is the array index of a job whose payload carries index i.
func (t *tracker) slot(i int) (int, bool) {
	if i < 0 {
		i += len(t.seen)
	}
	return i, i >= 0 && i < len(t.seen)
}

func (t *tracker) handler() skiplock.HandlerFunc {
	return func(ctx context.Context, job *skiplock.Job) error {
		t.count(job.Payload)
		return nil
	}
}

// count records one run of the job whose payload is given.
func (t *tracker) count(payload []byte) {
	t.runs.Add(1)
	i, ok := noopIndex(payload)
	if ok {
		i, ok = t.slot(i)
	}
	if !ok {
		t.bad.Add(1)
		return
	}
	t.seen[i].Add(1)
}

// verify checks every job of schema succeeded exactly once (or was deleted on
// success, when deleted is true).
func (t *tracker) verify(ctx context.Context, pool *pgxpool.Pool, schema string, n int, deleted bool) (string, error) {
	var succeeded, other int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status <> 'succeeded') FROM "`+schema+`".jobs`).Scan(&succeeded, &other); err != nil {
		return "", err
	}
	dup, distinct := 0, 0
	for i := range t.seen {
		switch c := t.seen[i].Load(); {
		case c > 1:
			dup++
			distinct++
		case c == 1:
			distinct++
		}
	}
	switch {
	case t.bad.Load() > 0:
		return "", fmt.Errorf("%d handler runs had a payload without an index of this run's jobs", t.bad.Load())
	case dup > 0:
		return "", fmt.Errorf("%d jobs ran more than once", dup)
	case distinct != n:
		return "", fmt.Errorf("%d distinct jobs ran, want %d", distinct, n)
	case other != 0:
		return "", fmt.Errorf("%d jobs did not succeed", other)
	case !deleted && succeeded != int64(n):
		return "", fmt.Errorf("%d jobs succeeded, want %d", succeeded, n)
	case deleted && succeeded != 0:
		return "", fmt.Errorf("%d succeeded rows left with DeleteOnSuccess", succeeded)
	}
	if deleted {
		return fmt.Sprintf("ok: %d jobs ran once each, all deleted on success", n), nil
	}
	return fmt.Sprintf("ok: %d jobs succeeded, each ran exactly once", n), nil
}
