package skiplocktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
)

// DrainTimeout bounds Drain when its context has no deadline.
const DrainTimeout = 30 * time.Second

// DrainResult is what Drain worked.
type DrainResult struct {
	// Events are the outcomes of the drained queues' jobs, in the order they were
	// written. Event.Job.State is the state each job was left in; Event.Err is what
	// its handler returned.
	Events []*skiplock.Event
	// Counts of Events by kind.
	Succeeded, Retried, Failed, Snoozed, Cancelled, LeaseLost int
}

// String summarises the counts: "2 succeeded, 1 retried".
func (r *DrainResult) String() string {
	var parts []string
	for _, c := range []struct {
		n    int
		kind skiplock.EventKind
	}{{r.Succeeded, skiplock.EventSucceeded}, {r.Retried, skiplock.EventRetried}, {r.Failed, skiplock.EventFailed},
		{r.Snoozed, skiplock.EventSnoozed}, {r.Cancelled, skiplock.EventCancelled}, {r.LeaseLost, skiplock.EventLeaseLost}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.kind))
		}
	}
	if len(parts) == 0 {
		return "no jobs worked"
	}
	return strings.Join(parts, ", ")
}

func (r *DrainResult) add(e *skiplock.Event) {
	r.Events = append(r.Events, e)
	switch e.Kind {
	case skiplock.EventSucceeded:
		r.Succeeded++
	case skiplock.EventRetried:
		r.Retried++
	case skiplock.EventFailed:
		r.Failed++
	case skiplock.EventSnoozed:
		r.Snoozed++
	case skiplock.EventCancelled:
		r.Cancelled++
	case skiplock.EventLeaseLost:
		r.LeaseLost++
	}
}

// Drain works the due jobs of queues (every queue when none is given) with the
// client's registered workers until none is due, and returns their outcomes. Jobs
// that become due meanwhile are worked too: one a handler enqueues, one snoozed for
// 0. A job retried or snoozed into the future is left pending (with a FakeClock,
// advance it and Drain again).
//
// Drain starts the client (Config.Queues must name the queues to drain), waits until
// no job of those queues is due or running on it, and stops it: so it runs the
// production path — middleware, timeouts, retry policies, fenced outcomes — and
// handlers run on the client's goroutines, not the test's. The client must not be
// started already. Drain fails the test (t.Fatalf) if jobs are still due when ctx
// ends (DrainTimeout when ctx has no deadline), listing them.
func Drain(ctx context.Context, t testing.TB, client *skiplock.Client, queues ...string) *DrainResult {
	t.Helper()
	if client == nil {
		t.Fatalf("skiplocktest: Drain: client is nil")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DrainTimeout)
		defer cancel()
	}
	events, unsubscribe := client.Subscribe()
	defer unsubscribe()
	dropped := client.Counters().EventsDropped
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		if errors.Is(err, skiplock.ErrClientStarted) {
			t.Fatalf("skiplocktest: Drain starts and stops the client itself, and it is already started: Stop it first (or wait for its outcomes with Client.Subscribe)")
		}
		t.Fatalf("skiplocktest: Drain: starting the client: %v", err)
	}
	stopped := false
	defer func() { // also when a Fatalf ends the test's goroutine
		if !stopped {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			client.StopAndCancel(sctx)
		}
	}()

	res := &DrainResult{}
	take := func(e *skiplock.Event) {
		if len(queues) == 0 || slices.Contains(queues, e.Job.Queue) {
			res.add(e)
		}
	}
	takeArrived := func() {
		for {
			select {
			case e := <-events:
				take(e)
			default:
				return
			}
		}
	}
	var now *time.Time
	for {
		if clock := client.Clock(); clock != nil {
			n := clock.Now()
			now = &n
		}
		busy, err := busyJobs(ctx, client.Pool(), client.Schema(), queues, now, client.ID(), 1)
		if err != nil && ctx.Err() == nil {
			t.Fatalf("skiplocktest: Drain: reading the queues: %v", err)
		}
		if err == nil && len(busy) == 0 {
			break
		}
		select {
		case e := <-events:
			take(e)
			takeArrived() // before looking again
		case <-ctx.Done():
			t.Fatalf("%s", stillBusy(ctx, client, queues, now))
		}
	}

	// Every claimed job's outcome is written and its event emitted before Stop returns.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DrainTimeout)
	defer cancel()
	err := client.Stop(sctx)
	stopped = true
	if err != nil {
		t.Fatalf("skiplocktest: Drain: stopping the client: %v", err)
	}
	takeArrived()
	if n := client.Counters().EventsDropped - dropped; n > 0 {
		t.Errorf("skiplocktest: Drain: the client dropped %d outcome event(s) while draining (a subscriber fell behind); the result misses them", n)
	}
	return res
}

// stillBusy describes what Drain was still waiting for when ctx ended.
func stillBusy(ctx context.Context, client *skiplock.Client, queues []string, now *time.Time) string {
	var b strings.Builder
	what := "every queue"
	if len(queues) > 0 {
		what = fmt.Sprintf("queue(s) %s", strings.Join(queues, ", "))
	}
	fmt.Fprintf(&b, "skiplocktest: Drain: %v with work left in %s of schema %q", context.Cause(ctx), what, client.Schema())
	qctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	busy, err := busyJobs(qctx, client.Pool(), client.Schema(), queues, now, client.ID(), listLimit+1)
	if err != nil {
		fmt.Fprintf(&b, " (listing them failed: %v)", err)
		return b.String()
	}
	b.WriteString("; due, or running on this client:")
	for i, j := range busy {
		if i == listLimit {
			b.WriteString("\n  … and more")
			break
		}
		b.WriteString("\n  " + j.Kind + " " + describeJob(j))
	}
	b.WriteString("\nA due job the client does not take belongs to a queue missing from its Config.Queues; a job that stays running is a handler that does not return.")
	return b.String()
}
