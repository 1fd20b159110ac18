package skiplock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/skiplocktest"
)

// A batch of 10,000 jobs added from 4 transactions while 3 clients already work the
// committed ones, sealed while the last transaction is still open: the completion
// callback runs exactly once, after every member finished, with the right counts,
// and the failure callback exactly once.
func TestBatchOf10000From4TransactionsFiresOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Clock: realClock{}})
	var (
		mu       sync.Mutex
		results  []skiplock.BatchResult
		finished atomic.Int64
		problem  atomic.Value
	)
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("member", func(ctx context.Context, job *skiplock.Job) error {
		var a struct{ N int }
		e.must(json.Unmarshal(job.Payload, &a))
		defer finished.Add(1)
		switch {
		case a.N%97 == 0:
			return skiplock.Permanent(errors.New("member failed"))
		case a.N%101 == 0:
			return skiplock.Cancel(errors.New("member cancelled"))
		}
		return nil
	}, nil))
	callback := func(ctx context.Context, job *skiplock.Job) error {
		res, ok := skiplock.BatchResultOf(job)
		if !ok {
			problem.CompareAndSwap(nil, "a callback without a batch result")
		}
		if res.Complete && finished.Load() < 10000 {
			problem.CompareAndSwap(nil, fmt.Sprintf("completion callback ran after %d members", finished.Load()))
		}
		mu.Lock()
		results = append(results, res)
		mu.Unlock()
		return nil
	}
	e.must(ws.AddHandler("batch_done", callback, nil))
	e.must(ws.AddHandler("batch_failed", callback, nil))
	for i := range 3 {
		startClient(t, e.newClient(skiplock.Config{ID: fmt.Sprintf("w%d", i), Workers: ws, Clock: realClock{},
			Queues:       map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 16}},
			PollInterval: 20 * time.Millisecond}))
	}

	id, err := e.client.BatchOpen(e.ctx, skiplock.Batch{Description: "import",
		OnComplete: &skiplock.EnqueueParams{Kind: "batch_done", Payload: []byte(`{}`)},
		OnFailure:  &skiplock.EnqueueParams{Kind: "batch_failed", Payload: []byte(`{}`)}})
	e.must(err)
	add := func(tx pgx.Tx, part int) {
		for chunk := range 5 {
			jobs := make([]skiplock.EnqueueParams, 500)
			for i := range jobs {
				n := part*2500 + chunk*500 + i + 1
				jobs[i] = skiplock.EnqueueParams{Kind: "member", Payload: []byte(fmt.Sprintf(`{"n":%d}`, n))}
			}
			_, err := e.client.BatchAddTx(e.ctx, tx, id, jobs)
			e.must(err)
		}
	}
	for part := range 3 {
		e.must(pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error { add(tx, part); return nil }))
	}
	last, err := e.pool.Begin(e.ctx)
	e.must(err)
	add(last, 3)
	sealed := make(chan error, 1)
	go func() { _, err := e.client.BatchSeal(context.Background(), id); sealed <- err }()
	waitFor(t, 30*time.Second, "the seal to wait for the open transaction", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%batch_seal%'") > 0
	})
	e.must(last.Commit(e.ctx))
	e.must(<-sealed)
	if _, err := e.client.BatchAdd(e.ctx, id, []skiplock.EnqueueParams{{Kind: "member", Payload: []byte(`{}`)}}); !errors.Is(err, skiplock.ErrBatchSealed) {
		t.Fatalf("adding to a sealed batch: %v", err)
	}
	waitFor(t, 3*time.Minute, "both callbacks to run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(results) >= 2
	})
	// Every job has finished; a callback released twice would be pending or running.
	waitFor(t, 30*time.Second, "every job to finish", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE status IN ('pending', 'running', 'waiting')") == 0
	})
	if p := problem.Load(); p != nil {
		t.Fatal(p)
	}
	failed, cancelled := 0, 0
	for n := 1; n <= 10000; n++ {
		switch {
		case n%97 == 0:
			failed++
		case n%101 == 0:
			cancelled++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var done, first int
	for _, r := range results {
		if r.BatchID != id {
			t.Fatalf("callback told of batch %s", r.BatchID)
		}
		if r.Complete {
			done++
			if r.Total != 10000 || r.Succeeded != 10000-failed-cancelled || r.Failed != failed || r.Cancelled != cancelled {
				t.Fatalf("completion counts %+v, want %d failed and %d cancelled of 10000", r, failed, cancelled)
			}
		} else {
			first++
		}
	}
	if done != 1 || first != 1 {
		t.Fatalf("completion callback ran %d times, failure callback %d times; want once each (%+v)", done, first, results)
	}
	info, err := e.client.BatchGet(e.ctx, id)
	e.must(err)
	if info.CompletedAt == nil || info.FailureAt == nil || info.Total != 10000 {
		t.Fatalf("batch %+v", info)
	}
}

// A batch sealed with no member fires at once; one whose members all succeed cancels
// its failure callback; the callback sees the counts through BatchResultOf.
func TestBatchLifecycle(t *testing.T) {
	t.Parallel()
	var (
		mu  sync.Mutex
		got []skiplock.BatchResult
	)
	ws := skiplock.NewWorkers()
	ws.AddHandler("member", func(context.Context, *skiplock.Job) error { return nil }, nil)
	ws.AddHandler("done", func(_ context.Context, job *skiplock.Job) error {
		r, ok := skiplock.BatchResultOf(job)
		if ok {
			mu.Lock()
			got = append(got, r)
			mu.Unlock()
		}
		return nil
	}, nil)
	e := newEnv(t, skiplock.Config{Workers: ws, Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 2}}})
	cb := &skiplock.EnqueueParams{Kind: "done", Payload: []byte(`{}`)}

	empty, err := e.client.BatchOpen(e.ctx, skiplock.Batch{OnComplete: cb})
	e.must(err)
	info, err := e.client.BatchSeal(e.ctx, empty)
	e.must(err)
	if info.Total != 0 || info.CompletedAt == nil {
		t.Fatalf("empty batch after seal: %+v", info)
	}

	id, err := e.client.BatchOpen(e.ctx, skiplock.Batch{Description: "two", OnComplete: cb,
		OnFailure: &skiplock.EnqueueParams{Kind: "done", Payload: []byte(`{}`)}})
	e.must(err)
	_, err = e.client.BatchAdd(e.ctx, id, []skiplock.EnqueueParams{{Kind: "member", Payload: []byte(`{}`)}, {Kind: "member", Payload: []byte(`{}`)}})
	e.must(err)
	skiplocktest.Drain(e.ctx, t, e.client)
	info, err = e.client.BatchGet(e.ctx, id)
	e.must(err)
	if info.CompletedAt != nil || info.Succeeded != 2 || info.Total != -1 {
		t.Fatalf("unsealed batch whose members finished: %+v", info)
	}
	_, err = e.client.BatchSeal(e.ctx, id)
	e.must(err)
	_, err = e.client.BatchSeal(e.ctx, id) // sealing twice is a no-op
	e.must(err)
	skiplocktest.Drain(e.ctx, t, e.client)
	if len(got) != 2 || !got[0].Complete || got[0].Total != 0 || got[1] != (skiplock.BatchResult{BatchID: id, Total: 2, Succeeded: 2, Complete: true}) {
		t.Fatalf("callbacks saw %+v", got)
	}
	info, err = e.client.BatchGet(e.ctx, id)
	e.must(err)
	failure, err := e.client.JobGet(e.ctx, info.OnFailure)
	e.must(err)
	if failure.State != skiplock.StateCancelled {
		t.Fatalf("failure callback of a batch without failures: %s", failure.State)
	}
	list, err := e.client.BatchList(e.ctx, skiplock.BatchListParams{})
	e.must(err)
	if len(list) != 2 || list[0].ID != id {
		t.Fatalf("list %+v", list)
	}
	members, err := e.client.BatchMembers(e.ctx, id)
	e.must(err)
	if members[skiplock.StateSucceeded] != 2 {
		t.Fatalf("members %v", members)
	}
	st, err := e.client.Stats(e.ctx, nil)
	e.must(err)
	if st.OpenBatches != 0 {
		t.Fatalf("open batches %d", st.OpenBatches)
	}
}

func TestBatchRefusesBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	id, err := e.client.BatchOpen(e.ctx, skiplock.Batch{})
	e.must(err)
	for name, err := range map[string]error{
		"callback kind": func() error {
			_, err := e.client.BatchOpen(e.ctx, skiplock.Batch{OnComplete: &skiplock.EnqueueParams{Payload: []byte(`{}`)}})
			return err
		}(),
		"batch id": func() error {
			_, err := e.client.BatchAdd(e.ctx, "x", []skiplock.EnqueueParams{{Kind: "k", Payload: []byte(`{}`)}})
			return err
		}(),
		"dedup": func() error {
			_, err := e.client.BatchAdd(e.ctx, id, []skiplock.EnqueueParams{{Kind: "k", Payload: []byte(`{}`), Opts: skiplock.EnqueueOpts{DeduplicationKey: "d"}}})
			return err
		}(),
		"payload": func() error {
			_, err := e.client.BatchAdd(e.ctx, id, []skiplock.EnqueueParams{{Kind: "k", Payload: []byte(`{`)}})
			return err
		}(),
		"seal id": e.client.BatchSealTx(e.ctx, e.pool, ""),
		"nil tx":  e.client.BatchSealTx(e.ctx, nil, id),
		"list":    func() error { _, err := e.client.BatchList(e.ctx, skiplock.BatchListParams{Limit: -1}); return err }(),
	} {
		if !errors.Is(err, skiplock.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	missing := "00000000-0000-7000-8000-000000000000"
	for name, err := range map[string]error{
		"adding to": func() error {
			_, err := e.client.BatchAdd(e.ctx, missing, []skiplock.EnqueueParams{{Kind: "k", Payload: []byte(`{}`)}})
			return err
		}(),
		"sealing": func() error { _, err := e.client.BatchSeal(e.ctx, missing); return err }(),
		"getting": func() error { _, err := e.client.BatchGet(e.ctx, missing); return err }(),
	} {
		// It matches ErrNotFound, and says that the batch, not a job, is missing.
		if !errors.Is(err, skiplock.ErrBatchNotFound) || !errors.Is(err, skiplock.ErrNotFound) ||
			!strings.Contains(err.Error(), "batch not found") || strings.Contains(err.Error(), "job") {
			t.Errorf("%s no batch: %v, want ErrBatchNotFound (an ErrNotFound) saying the batch is missing", name, err)
		}
	}
	if _, ok := skiplock.BatchResultOf(nil); ok {
		t.Error("BatchResultOf(nil) ok")
	}
	if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")); n != 0 {
		t.Fatalf("bad input wrote %d jobs", n)
	}
}

// A batch's description is stored under the one text policy: a NUL or invalid UTF-8
// shows as U+FFFD, as in a job's last error.
func TestBatchDescriptionIsStorableText(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	id, err := e.client.BatchOpen(e.ctx, skiplock.Batch{Description: "import\x00\xff of May"})
	e.must(err)
	info, err := e.client.BatchGet(e.ctx, id)
	e.must(err)
	if want := "import\uFFFD\uFFFD of May"; info.Description != want {
		t.Errorf("description %q, want %q", info.Description, want)
	}
}
