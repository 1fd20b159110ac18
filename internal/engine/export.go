package engine

import (
	"context"

	"github.com/skiplock/skiplock/internal/store"
)

// FlushForTest writes one batch of outcomes through the completer as a started
// engine would — outs[i] for the job claimed as rows[i], whose Hooks.Adopt value is
// jobs[i] — and reports each job through Hooks.Done. ambiguous says an earlier
// attempt at the batch may have committed. For the public package's tests: the
// engine must not have been started.
func (e *Engine) FlushForTest(rows []*store.Job, jobs []any, outs []store.Outcome, ambiguous bool) {
	e.bgCtx, e.stopBg = context.WithCancel(context.Background())
	defer e.stopBg()
	p := newProducer("", Queue{})
	batch := make([]*flight, len(rows))
	for i, row := range rows {
		f := newFlight(row, jobs[i], p)
		f.st.Store(int32(returned))
		f.outcome, f.ambiguous = outs[i], ambiguous
		batch[i] = f
		e.inflight[row.ID] = f
		e.jobsWG.Add(1)
	}
	e.flush(batch)
}
