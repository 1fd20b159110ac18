package skiplock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
)

// peaks tracks, in process, how many handlers run at once per key and in total.
type peaks struct {
	mu              sync.Mutex
	now, max        map[string]int
	total, maxTotal int
}

func newPeaks() *peaks { return &peaks{now: map[string]int{}, max: map[string]int{}} }

func (p *peaks) enter(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now[key]++
	p.max[key] = max(p.max[key], p.now[key])
	p.total++
	p.maxTotal = max(p.maxTotal, p.total)
}

func (p *peaks) leave(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now[key]--
	p.total--
}

// Concurrency limits hold across clients: three clients with four workers each never
// run more than the queue's limit together, nor more than a key's limit for a key,
// and an override replaces the per-key default. Handlers run inside their job's slot
// (claim to durable outcome), so an in-process count above a limit would mean the
// database let too many jobs hold slots.
func TestLimitsHoldAcrossClients(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Clock: realClock{}})
	for _, l := range []skiplock.Limit{
		{Queue: "lim", MaxRunning: 5},
		{Queue: "lim", Key: skiplock.EachKey, MaxRunning: 2},
		{Queue: "lim", Key: "big", MaxRunning: 3},
	} {
		e.must(e.client.LimitSet(e.ctx, l))
	}
	pk := newPeaks()
	var done atomic.Int64
	for range 3 {
		ws := skiplock.NewWorkers()
		e.must(ws.AddHandler("k", func(ctx context.Context, j *skiplock.Job) error {
			pk.enter(j.ConcurrencyKey)
			defer pk.leave(j.ConcurrencyKey)
			select { // a few milliseconds of work
			case <-time.After(3 * time.Millisecond):
			case <-ctx.Done():
			}
			done.Add(1)
			return nil
		}, nil))
		startClient(t, e.newClient(skiplock.Config{Workers: ws, Clock: realClock{},
			Queues: map[string]skiplock.QueueConfig{"lim": {MaxWorkers: 4}}}))
	}
	var ps []skiplock.EnqueueParams
	for i := range 150 {
		key := []string{"a", "big", "", "c"}[i%4]
		ps = append(ps, skiplock.EnqueueParams{Kind: "k", Payload: []byte(`{}`),
			Opts: skiplock.EnqueueOpts{Queue: "lim", ConcurrencyKey: key}})
	}
	_, err := e.client.EnqueueMany(e.ctx, ps)
	e.must(err)
	waitFor(t, 60*time.Second, "every job to succeed", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE status = 'succeeded'") == 150
	})
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if pk.maxTotal > 5 || pk.max["a"] > 2 || pk.max["c"] > 2 || pk.max["big"] > 3 {
		t.Fatalf("a limit was exceeded: total %d, per key %v", pk.maxTotal, pk.max)
	}
	if pk.maxTotal < 3 {
		t.Errorf("at most %d jobs ran at once: the limits admitted less than they allow", pk.maxTotal)
	}
	if got := scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE attempts <> 1"); got != 0 || done.Load() != 150 {
		t.Errorf("%d jobs took other than one attempt, %d handler runs for 150 jobs (a held-back job spent an attempt?)", got, done.Load())
	}
}

// One saturated key does not block the others: the head of the queue is a long
// backlog of one key whose running job waits for the other keys' jobs, so they can
// only run if the claim looks past that backlog.
func TestLimitsNoHeadOfLineBlocking(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Clock: realClock{}})
	e.must(e.client.LimitSet(e.ctx, skiplock.Limit{Queue: "hol", Key: skiplock.EachKey, MaxRunning: 1}))
	coldDone := make(chan struct{})
	var cold atomic.Int64
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("k", func(ctx context.Context, j *skiplock.Job) error {
		if j.ConcurrencyKey == "hot" {
			select {
			case <-coldDone:
			case <-ctx.Done():
			}
			return nil
		}
		if cold.Add(1) == 5 {
			close(coldDone)
		}
		return nil
	}, nil))
	var ps []skiplock.EnqueueParams
	for range 500 {
		ps = append(ps, skiplock.EnqueueParams{Kind: "k", Payload: []byte(`{}`),
			Opts: skiplock.EnqueueOpts{Queue: "hol", ConcurrencyKey: "hot", Priority: 10}})
	}
	for _, k := range []string{"c1", "c2", "c3", "c4", "c5"} {
		ps = append(ps, skiplock.EnqueueParams{Kind: "k", Payload: []byte(`{}`),
			Opts: skiplock.EnqueueOpts{Queue: "hol", ConcurrencyKey: k}})
	}
	_, err := e.client.EnqueueMany(e.ctx, ps)
	e.must(err)
	startClient(t, e.newClient(skiplock.Config{Workers: ws, Clock: realClock{},
		Queues: map[string]skiplock.QueueConfig{"hol": {MaxWorkers: 6}}}))
	select {
	case <-coldDone:
	case <-time.After(30 * time.Second):
		t.Fatalf("only %d of the 5 other keys' jobs ran behind a saturated key's backlog", cold.Load())
	}
}

// A rate limit is an exact sliding window (its period plus RateStartSlack: see
// TestRateLimitHoldsOnHandlerStarts), and a concurrency slot is freed by its lease
// running out even before the reclaimer runs (fake clock, manual claims).
func TestLimitsRateWindowAndLeaseExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{LeaseDuration: 30 * time.Second})
	m := e.client.Manual()
	e.must(e.client.LimitSet(e.ctx, skiplock.Limit{Queue: "r", Rate: 10, Per: time.Minute}))
	e.must(e.client.LimitSet(e.ctx, skiplock.Limit{Queue: "c", MaxRunning: 2}))
	for range 35 {
		_, err := e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "r"})
		e.must(err)
	}
	for range 5 {
		_, err := e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "c"})
		e.must(err)
	}
	claim := func(queue string, want int) []*skiplock.Job {
		t.Helper()
		jobs, err := m.Claim(e.ctx, queue, 25)
		e.must(err)
		if len(jobs) != want {
			t.Fatalf("at %s claimed %d of queue %s, want %d", e.clock.Now().Sub(t0), len(jobs), queue, want)
		}
		return jobs
	}
	claim("r", 10)
	claim("r", 0)
	e.clock.Advance(30 * time.Second)
	claim("r", 0)
	e.clock.Advance(30*time.Second + skiplock.RateStartSlack - time.Microsecond)
	claim("r", 0) // the first ten started 1µs less than a minute and the slack ago
	e.clock.Advance(time.Microsecond)
	claim("r", 10)
	use, err := e.client.LimitUsages(e.ctx)
	e.must(err)
	if len(use) != 2 || use[1].Limit.Queue != "r" || use[1].Started != 10 || use[0].Limit.Queue != "c" {
		t.Errorf("usage: %+v", use)
	}

	windows := func() int64 { return scalar[int64](e, "SELECT count(*) FROM "+e.q("limit_windows")) }
	_, err = e.client.RunMaintenanceOnceForTest(e.ctx, "limit-sweeper")
	e.must(err)
	if n := windows(); n != 1 {
		t.Fatalf("the sweeper left %d rate windows while one holds starts, want 1", n)
	}

	first := claim("c", 2)
	claim("c", 0)
	e.must(m.Complete(e.ctx, first[0]))
	claim("c", 1)
	e.clock.Advance(31 * time.Second) // both leases expired; the reclaimer has not run
	claim("c", 2)
	e.clock.Advance(time.Minute) // the newest start left its window
	_, err = e.client.RunMaintenanceOnceForTest(e.ctx, "limit-sweeper")
	e.must(err)
	if n := windows(); n != 0 {
		t.Errorf("the sweeper left %d idle rate windows", n)
	}
}

// The limited claim's check that no limit binds (which takes the head as it is)
// agrees with its ranking on every kind of bucket: a kind's per-key limit and its
// override and a kind's wide limit, which count the kind's jobs in every queue, and
// a queue's per-key limit, which counts every kind's jobs of the key. In each claim
// below, a check that counted less than that would admit one job too many.
func TestLimitsEveryKindOfBucket(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{LeaseDuration: time.Minute})
	m := e.client.Manual()
	for _, l := range []skiplock.Limit{
		{Kind: "mail", Key: skiplock.EachKey, MaxRunning: 1},
		{Kind: "mail", Key: "vip", MaxRunning: 2},
		{Kind: "news", MaxRunning: 2},
		{Queue: "q3", Key: skiplock.EachKey, MaxRunning: 2},
	} {
		e.must(e.client.LimitSet(e.ctx, l))
	}
	enqueue := func(queue, kind string, keys ...string) {
		t.Helper()
		for _, k := range keys {
			_, err := e.client.EnqueueRaw(e.ctx, kind, []byte(`{}`), &skiplock.EnqueueOpts{Queue: queue, ConcurrencyKey: k})
			e.must(err)
		}
	}
	claim := func(queue string, want ...string) {
		t.Helper()
		jobs, err := m.Claim(e.ctx, queue, 25)
		e.must(err)
		var got []string
		for _, j := range jobs {
			got = append(got, j.Kind+"/"+j.ConcurrencyKey)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("claim of queue %s took %v, want %v", queue, got, want)
		}
	}
	enqueue("q1", "mail", "x", "y")
	claim("q1", "mail/x", "mail/y") // fits every bucket
	enqueue("q2", "mail", "x", "vip", "vip")
	claim("q2", "mail/vip", "mail/vip") // x runs in q1; vip's override allows two
	enqueue("q1", "news", "", "")
	claim("q1", "news/", "news/")
	enqueue("q4", "news", "")
	claim("q4") // both of the kind's slots are held in q1
	enqueue("q3", "push", "k")
	claim("q3", "push/k")
	enqueue("q3", "sms", "k", "k")
	claim("q3", "sms/k") // the key's other slot is push's
}

// A client whose view of the limits is stale (a limit written without its NOTIFY)
// still takes nothing a limit may govern: the plain claim refuses a limited queue,
// and every queue while a kind limit exists.
func TestPlainClaimLeavesLimitedJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	for _, q := range []string{"free", "lq"} {
		_, err := e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: q})
		e.must(err)
	}
	_, err := e.client.EnqueueRaw(e.ctx, "sms", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "free"})
	e.must(err)
	_, err = e.pool.Exec(e.ctx, "INSERT INTO "+e.q("limits")+" (scope, target, max_running) VALUES ('queue', 'lq', 5), ('kind', 'sms', 5)")
	e.must(err)
	claimed := func(queue string) int64 {
		var n int64
		rows, err := e.pool.Query(e.ctx, e.client.ClaimSQLForTest(), t0, queue, "w", int64(time.Minute/time.Microsecond), 10, nil, nil, int64(0), 10)
		e.must(err)
		for rows.Next() {
			n++
		}
		e.must(rows.Err())
		return n
	}
	if n := claimed("lq"); n != 0 {
		t.Errorf("the plain claim took %d jobs of a limited queue", n)
	}
	if n := claimed("free"); n != 0 {
		t.Errorf("the plain claim took %d jobs while a kind limit exists (it may govern any queue)", n)
	}
	_, err = e.pool.Exec(e.ctx, "DELETE FROM "+e.q("limits")+" WHERE scope = 'kind'")
	e.must(err)
	if n := claimed("free"); n != 2 {
		t.Errorf("the plain claim took %d jobs of an unlimited queue, want 2", n)
	}
}

// Limits refuse bad input with a typed error naming the field, and round-trip.
func TestLimitsBadInputAndList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	for _, l := range []skiplock.Limit{
		{},
		{Queue: "a", Kind: "b", MaxRunning: 1},
		{Queue: "bad name", MaxRunning: 1},
		{Queue: "a"},
		{Queue: "a", MaxRunning: -1},
		{Queue: "a", MaxRunning: skiplock.MaxLimit + 1},
		{Queue: "a", Rate: 5},
		{Queue: "a", Rate: 5, Per: time.Microsecond},
		{Queue: "a", MaxRunning: 1, Per: time.Second},
		{Queue: "a", Key: "bad\x00key", MaxRunning: 1},
	} {
		if err := e.client.LimitSet(e.ctx, l); !errors.Is(err, skiplock.ErrInvalid) {
			t.Errorf("LimitSet(%+v) = %v, want ErrInvalid", l, err)
		}
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	if err := e.client.LimitSet(nil, skiplock.Limit{Queue: "a", MaxRunning: 1}); !errors.Is(err, skiplock.ErrInvalid) {
		t.Errorf("nil ctx: %v", err)
	}
	_, err := e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{ConcurrencyKey: skiplock.EachKey})
	if !errors.Is(err, skiplock.ErrInvalid) {
		t.Errorf("enqueue with ConcurrencyKey %q: %v", skiplock.EachKey, err)
	}
	if _, err := skiplock.NewClient(e.pool, skiplock.Config{Limits: []skiplock.Limit{{Queue: "a"}}}); !errors.Is(err, skiplock.ErrInvalid) {
		t.Errorf("Config.Limits with a bad limit: %v", err)
	}
	if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("limits")); n != 0 {
		t.Fatalf("refused limits wrote %d rows", n)
	}
	want := []skiplock.Limit{
		{Queue: "mail", MaxRunning: 3, Rate: 100, Per: time.Second},
		{Queue: "mail", Key: skiplock.EachKey, MaxRunning: 1},
		{Kind: "sms", Rate: 10, Per: time.Minute},
	}
	for _, l := range want {
		e.must(e.client.LimitSet(e.ctx, l))
	}
	e.must(e.client.LimitSet(e.ctx, skiplock.Limit{Queue: "mail", MaxRunning: 3, Rate: 100, Per: time.Second})) // replaces
	got, err := e.client.LimitList(e.ctx)
	e.must(err)
	if len(got) != len(want) {
		t.Fatalf("LimitList = %+v", got)
	}
	for i := range want {
		got[i].UpdatedAt = time.Time{}
		if got[i] != want[i] {
			t.Errorf("LimitList[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	ok, err := e.client.LimitDelete(e.ctx, skiplock.Limit{Kind: "sms"})
	e.must(err)
	again, err := e.client.LimitDelete(e.ctx, skiplock.Limit{Kind: "sms"})
	e.must(err)
	if !ok || again {
		t.Errorf("LimitDelete: first %v, second %v", ok, again)
	}
}

// A rate limit holds on handler starts, not only on claims: in no window of the
// limit's period did more handlers start than its rate, over a run whose handlers
// take uneven times (so that a claimed job waits for a worker a varying while), with
// prefetch on. Before, a batch claimed a period after the previous one started its
// handlers sooner after its claim than the previous batch's last one had, and up to
// twice the rate started within one period.
func TestRateLimitHoldsOnHandlerStarts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	const (
		rate = 4
		per  = 400 * time.Millisecond
		jobs = 36
	)
	e.must(e.client.LimitSet(e.ctx, skiplock.Limit{Queue: "rated", Rate: rate, Per: per}))
	var mu sync.Mutex
	var starts []time.Time
	done := make(chan struct{}, jobs)
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("k", func(ctx context.Context, job *skiplock.Job) error {
		mu.Lock()
		starts = append(starts, time.Now())
		n := len(starts)
		mu.Unlock()
		// Uneven work: every third handler holds its worker for a while, so the jobs
		// claimed behind it wait locally.
		if n%3 == 0 {
			select {
			case <-time.After(60 * time.Millisecond):
			case <-ctx.Done():
			}
		}
		done <- struct{}{}
		return nil
	}, nil))
	c := e.newClient(skiplock.Config{Workers: ws, Clock: realClock{}, PollInterval: 50 * time.Millisecond,
		Queues: map[string]skiplock.QueueConfig{"rated": {MaxWorkers: 2, MaxPrefetch: 8, PrefetchWindow: time.Second}}})
	for range jobs {
		_, err := c.EnqueueRaw(e.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "rated"})
		e.must(err)
	}
	startClient(t, c)
	for i := 0; i < jobs; i++ {
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatalf("%d of %d jobs ran", i, jobs)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	worst, at := 0, 0
	for i := range starts {
		n := 0
		for j := i; j < len(starts) && starts[j].Sub(starts[i]) < per; j++ {
			n++
		}
		if n > worst {
			worst, at = n, i
		}
	}
	if worst > rate {
		t.Errorf("%d handlers started within %s from start %d (rate %d per %s); starts: %v",
			worst, per, at, rate, per, offsets(starts))
	}
	waitFor(t, 30*time.Second, "every job's success to be written", func() bool { return c.Counters().Succeeded == jobs })
}

// offsets lists each time's distance from the first, for a failure message.
func offsets(ts []time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(ts[0]).Round(time.Millisecond)
	}
	return out
}
