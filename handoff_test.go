package skiplock_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
)

// handoffEnv is a schema with limits and jobs enqueued in order, each job's
// concurrency key given by keys (its payload names it: "job <i>").
type handoffEnv struct {
	*env
	m    *skiplock.Manual
	byID map[string]string // job id → "<key>#<i>"
}

func newHandoffEnv(t *testing.T, limits []skiplock.Limit, queue string, keys ...string) *handoffEnv {
	e := newEnv(t, skiplock.Config{LeaseDuration: 30 * time.Second})
	for _, l := range limits {
		e.must(e.client.LimitSet(e.ctx, l))
	}
	h := &handoffEnv{env: e, m: e.client.Manual(), byID: map[string]string{}}
	for i, k := range keys {
		id, err := e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: queue, ConcurrencyKey: k})
		e.must(err)
		h.byID[id.ID] = fmt.Sprintf("%s#%d", k, i)
	}
	return h
}

// names lists jobs as "<key>#<i>", with "<-<pred>" for a successor.
func (h *handoffEnv) names(jobs []*skiplock.Job, of []string) string {
	var out []string
	for i, j := range jobs {
		s := h.byID[j.ID]
		if of != nil && of[i] != "" {
			s += "<-" + h.byID[of[i]]
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func (h *handoffEnv) claim(queue string, n int, preds []*skiplock.Job, successorsOnly bool, want string) []*skiplock.Job {
	h.t.Helper()
	jobs, of, err := h.client.ClaimWithPredsForTest(h.ctx, queue, n, preds, successorsOnly)
	h.must(err)
	if got := h.names(jobs, of); got != want {
		h.t.Fatalf("claim of %s (successors only: %v) took [%s], want [%s]", queue, successorsOnly, got, want)
	}
	return jobs
}

func (h *handoffEnv) running(queue string) int64 {
	h.t.Helper()
	use, err := h.client.LimitUsages(h.ctx)
	h.must(err)
	for _, u := range use {
		if u.Limit.Queue == queue && u.Bucket == "" {
			return u.Holding
		}
	}
	h.t.Fatalf("no usage of queue %s: %+v", queue, use)
	return 0
}

// A successor holds no slot while its predecessor runs under the recorded lease, and
// takes the slot over when the predecessor's outcome is written; a predecessor offered
// under a stale token hands nothing on.
func TestHandoffSlotPassesToTheSuccessor(t *testing.T) {
	t.Parallel()
	h := newHandoffEnv(t, []skiplock.Limit{{Queue: "q", MaxRunning: 2}}, "q", "", "", "", "", "")
	first := h.claim("q", 10, nil, false, "#0 #1")
	if n := h.running("q"); n != 2 {
		t.Fatalf("running %d after the first claim, want 2", n)
	}
	// Only job #0 is offered: one successor, whichever claim takes it.
	succ := h.claim("q", 10, first[:1], true, "#2<-#0")
	h.claim("q", 10, first[:1], false, "") // #0 has its successor already
	if n := h.running("q"); n != 2 {
		t.Fatalf("running %d with a successor waiting, want 2 (the successor holds no slot yet)", n)
	}
	h.claim("q", 10, nil, false, "")
	h.must(h.m.Complete(h.ctx, first[0]))
	if n := h.running("q"); n != 2 {
		t.Fatalf("running %d after the predecessor completed, want 2 (its successor holds the slot)", n)
	}
	h.claim("q", 10, nil, false, "") // still no free slot
	stale := *first[1]
	stale.LeaseToken = "00000000-0000-0000-0000-000000000000"
	h.claim("q", 10, []*skiplock.Job{&stale}, true, "")
	h.claim("q", 10, []*skiplock.Job{first[1]}, false, "#3<-#1")
	h.must(h.m.Complete(h.ctx, succ[0]))
	h.claim("q", 10, nil, false, "#4") // #2's slot is free now: a plain limited claim takes it
	if n := h.running("q"); n != 2 {
		t.Fatalf("running %d at the end, want 2", n)
	}
	// A predecessor whose lease ran out holds no slot, and neither does the
	// successor's claim give it one back: #1 and #3 count once.
	h.clock.Advance(31 * time.Second)
	if n := h.running("q"); n != 0 {
		t.Fatalf("running %d after every lease expired, want 0", n)
	}
}

// A successor never jumps a job that waits for a slot the predecessor holds: under a
// queue limit with per-key limits, a job of another key ahead in claim order stops
// the handoff; behind it, it does not.
func TestHandoffKeepsClaimOrderAcrossSharedBuckets(t *testing.T) {
	t.Parallel()
	limits := []skiplock.Limit{{Queue: "q", MaxRunning: 2}, {Queue: "q", Key: skiplock.EachKey, MaxRunning: 1}}
	t.Run("same buckets first", func(t *testing.T) {
		t.Parallel()
		h := newHandoffEnv(t, limits, "q", "a", "b", "a", "c")
		run := h.claim("q", 10, nil, false, "a#0 b#1")
		h.claim("q", 10, run, false, "a#2<-a#0")
	})
	t.Run("another key first", func(t *testing.T) {
		t.Parallel()
		h := newHandoffEnv(t, limits, "q", "a", "b", "c", "a")
		run := h.claim("q", 10, nil, false, "a#0 b#1")
		// c#2 waits for a queue slot, and would take the one a#0 frees.
		h.claim("q", 10, run, false, "")
		h.claim("q", 10, run, true, "")
		h.must(h.m.Complete(h.ctx, run[0]))
		h.claim("q", 10, run[1:], false, "c#2")
	})
	t.Run("per-key limits alone", func(t *testing.T) {
		t.Parallel()
		h := newHandoffEnv(t, limits[1:], "q", "a", "b", "b", "a")
		run := h.claim("q", 10, nil, false, "a#0 b#1")
		h.claim("q", 10, run, true, "b#2<-b#1 a#3<-a#0")
	})
	t.Run("rate limits take no successors", func(t *testing.T) {
		t.Parallel()
		h := newHandoffEnv(t, []skiplock.Limit{{Queue: "q", MaxRunning: 1, Rate: 100, Per: time.Second}}, "q", "", "")
		run := h.claim("q", 10, nil, false, "#0")
		h.claim("q", 10, run, false, "")
		h.claim("q", 10, run, true, "")
	})
}

// Under a binding limit, slots pass from job to job on the workers (handoffs), and the
// jobs running at once in two clients never exceed the limit: a successor starts
// only after its predecessor's handler returned. Each client has exactly as many
// workers as the limit, without prefetch: successors need no worker of their own.
func TestHandoffUnderLoadKeepsTheLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Clock: realClock{}})
	e.must(e.client.LimitSet(e.ctx, skiplock.Limit{Queue: "h", MaxRunning: 4}))
	pk := newPeaks()
	var clients []*skiplock.Client
	for range 2 {
		ws := skiplock.NewWorkers()
		e.must(ws.AddHandler("k", func(ctx context.Context, j *skiplock.Job) error {
			pk.enter("")
			defer pk.leave("")
			select {
			case <-time.After(4 * time.Millisecond):
			case <-ctx.Done():
			}
			return nil
		}, nil))
		c := e.newClient(skiplock.Config{Workers: ws, Clock: realClock{},
			Queues: map[string]skiplock.QueueConfig{"h": {MaxWorkers: 4, MaxPrefetch: -1}}})
		clients = append(clients, c)
	}
	var ps []skiplock.EnqueueParams
	for range 300 {
		ps = append(ps, skiplock.EnqueueParams{Kind: "k", Payload: []byte(`{}`), Opts: skiplock.EnqueueOpts{Queue: "h"}})
	}
	_, err := e.client.EnqueueMany(e.ctx, ps)
	e.must(err)
	for _, c := range clients {
		startClient(t, c)
	}
	waitFor(t, 60*time.Second, "every job to succeed", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE status = 'succeeded'") == 300
	})
	var handoffs int64
	for _, c := range clients {
		handoffs += c.Counters().Handoffs
	}
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if pk.maxTotal > 4 {
		t.Fatalf("%d jobs ran at once under a limit of 4", pk.maxTotal)
	}
	if handoffs == 0 {
		t.Errorf("no slot was handed over under a binding limit")
	}
	if got := scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE attempts <> 1"); got != 0 {
		t.Errorf("%d jobs took other than one attempt", got)
	}
	t.Logf("%d of 300 jobs started by handoff; at most %d at once", handoffs, pk.maxTotal)
}

// blockingClient runs queue "h" under a limit of 1 with a handler that blocks the
// job of key "first" until release is closed; it waits until that job runs and the
// other job waits for its slot as its successor.
func blockingClient(t *testing.T, e *env, release chan struct{}) (*skiplock.Client, *atomic.Int64) {
	e.must(e.client.LimitSet(e.ctx, skiplock.Limit{Queue: "h", MaxRunning: 1}))
	var ran atomic.Int64
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("k", func(ctx context.Context, j *skiplock.Job) error {
		ran.Add(1)
		if j.ConcurrencyKey == "first" {
			<-release
		}
		return nil
	}, nil))
	for i, key := range []string{"first", "second"} {
		_, err := e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "h", ConcurrencyKey: key, Priority: 10 - i})
		e.must(err)
	}
	c := e.newClient(skiplock.Config{Workers: ws, Clock: realClock{}, PollInterval: 50 * time.Millisecond,
		Queues: map[string]skiplock.QueueConfig{"h": {MaxWorkers: 2}}})
	e.must(c.Start(e.ctx))
	waitFor(t, 30*time.Second, "the second job to wait as the first one's successor", func() bool {
		return c.Counters().Handoffs == 1
	})
	return c, &ran
}

// A successor waits a bounded time for a predecessor that hangs, then goes back to
// pending with its attempt given back, and runs once the slot is free.
func TestHandoffGivesBackTheSuccessorOfAHungJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Clock: realClock{}})
	release := make(chan struct{})
	c, ran := blockingClient(t, e, release)
	t.Cleanup(func() { c.Stop(context.Background()) })
	second := func() (string, int64) {
		var st string
		var attempts int64
		e.must(e.pool.QueryRow(e.ctx, "SELECT status::text, attempts FROM "+e.q("jobs")+" WHERE concurrency_key = 'second'").Scan(&st, &attempts))
		return st, attempts
	}
	waitFor(t, 30*time.Second, "the waiting successor to be given back", func() bool {
		st, _ := second()
		return c.Counters().HandoffsReturned == 1 && st == "pending"
	})
	if st, attempts := second(); attempts != 0 || ran.Load() != 1 {
		t.Fatalf("given back as %s with %d attempts after %d handler runs; want pending, 0, 1", st, attempts, ran.Load())
	}
	close(release)
	waitFor(t, 30*time.Second, "the second job to run", func() bool {
		st, _ := second()
		return st == "succeeded"
	})
	if _, attempts := second(); attempts != 1 || c.Counters().Handoffs != 1 {
		t.Errorf("second job: %d attempts, %d handoffs; want 1 and 1 (a hung job takes no second successor)", attempts, c.Counters().Handoffs)
	}
}

// Stop gives a waiting successor back at once, as it does every job claimed but not
// started, while its predecessor still runs.
func TestHandoffStopGivesBackWaitingSuccessors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Clock: realClock{}})
	release := make(chan struct{})
	c, ran := blockingClient(t, e, release)
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(context.Background()) }()
	waitFor(t, 30*time.Second, "the successor to go back to pending", func() bool {
		return scalar[string](e, "SELECT status::text || '/' || attempts FROM "+e.q("jobs")+" WHERE concurrency_key = 'second'") == "pending/0"
	})
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while a handler still ran", err)
	default:
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if ran.Load() != 1 {
		t.Errorf("%d handler runs, want 1 (the successor must not start at Stop)", ran.Load())
	}
}
