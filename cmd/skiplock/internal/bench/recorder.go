package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
)

// recorder is the bookkeeping W6's and W10's handlers share: it tells warm-up jobs
// (negative indexes) from measured ones, closes warmDone once every warm-up job has
// run and allDone once every measured job has first run, keeps the ids of runs it
// cannot place, and hands every run to the exactly-once tracker. A workload's
// recorder embeds it beside its samples, which mu guards too.
type recorder struct {
	mu        sync.Mutex
	total     int // measured jobs
	measured  int // first handler runs of measured jobs
	warm      int // warm-up jobs, one per enqueuing connection
	warmRuns  int // handler runs of warm-up jobs
	warmDone  chan struct{}
	allDone   chan struct{}
	bad       []string // handler anomalies: undecodable payloads, indexes out of range
	tr        *tracker // exactly-once check by job index and the table's final states
	trHandler skiplock.HandlerFunc
}

// init readies r for total measured and warm warm-up jobs.
func (r *recorder) init(total, warm int) {
	r.total, r.warm = total, warm
	r.warmDone, r.allDone = make(chan struct{}), make(chan struct{})
	r.tr = newTracker(total + warm)
	r.trHandler = r.tr.handler()
}

// run is a handler's body after its first line has read the clock. For measured job
// i it calls first under mu, which records the run in the workload's sample and
// says whether it was the job's first.
func (r *recorder) run(ctx context.Context, job *skiplock.Job, workload string, first func(i int) bool) error {
	i, ok := noopIndex(job.Payload) // the tracker's reader of the same payload
	if !ok {
		r.mu.Lock()
		r.bad = append(r.bad, job.ID)
		r.mu.Unlock()
		return skiplock.Permanent(fmt.Errorf("%s: payload %q carries no job index", workload, job.Payload))
	}
	r.mu.Lock()
	switch {
	case i < 0:
		r.warmRuns++
		if r.warmRuns == r.warm {
			close(r.warmDone)
		}
	case i < r.total:
		if first(i) {
			r.measured++
			if r.measured == r.total {
				close(r.allDone)
			}
		}
	default:
		r.bad = append(r.bad, job.ID)
	}
	r.mu.Unlock()
	return r.trHandler(ctx, job)
}

// done is how many measured jobs have run (the progress bar's count).
func (r *recorder) done() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return int64(r.measured)
}

// warmUp enqueues one job on each of the enqueuing pool's r.warm connections (so
// every connection is open and has the insert prepared) and waits until the working
// client has run them all (so its claim path is warm too).
func (r *recorder) warmUp(ctx context.Context, workload string, app *skiplock.Client, pool *pgxpool.Pool) error {
	if err := enqueueOnEachConn(ctx, workload, app, pool, r.warm); err != nil {
		return err
	}
	select {
	case <-r.warmDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		r.mu.Lock()
		defer r.mu.Unlock()
		return fmt.Errorf("%s: warm-up: %d of %d jobs ran", workload, r.warmRuns, r.warm)
	}
}
