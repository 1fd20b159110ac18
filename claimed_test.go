package skiplock_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
)

// A job a worker claimed but has not started (its prefetch, beyond the idle
// executors) reads as claimed, never as running: in Stats, in listings and in the
// job itself; once its handler runs, the worker writes its start within about a
// second, and it reads as running.
func TestPrefetchedJobsReadAsClaimedUntilTheyStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Clock: realClock{}})
	release := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{}), "c": make(chan struct{})}
	begun := make(chan string, 8)
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("k", func(ctx context.Context, j *skiplock.Job) error {
		if j.State != skiplock.StateRunning {
			t.Errorf("handler of %s sees state %s, want running", j.ConcurrencyKey, j.State)
		}
		begun <- j.ConcurrencyKey
		if ch := release[j.ConcurrencyKey]; ch != nil {
			select {
			case <-ch:
			case <-ctx.Done():
			}
		}
		return nil
	}, nil))
	// One worker with a prefetch: once it knows its jobs are short (the warm-up
	// job), a claim takes more jobs than it has idle executors.
	c := e.newClient(skiplock.Config{Workers: ws, Clock: realClock{}, PollInterval: 50 * time.Millisecond,
		Queues: map[string]skiplock.QueueConfig{"p": {MaxWorkers: 1, MaxPrefetch: 10, PrefetchWindow: time.Hour}}})
	startClient(t, c)
	enqueue := func(keys ...string) map[string]string {
		var ps []skiplock.EnqueueParams
		for i, k := range keys {
			ps = append(ps, skiplock.EnqueueParams{Kind: "k", Payload: []byte(`{}`),
				Opts: skiplock.EnqueueOpts{Queue: "p", ConcurrencyKey: k, Priority: 10 - i}})
		}
		res, err := e.client.EnqueueMany(e.ctx, ps)
		e.must(err)
		ids := map[string]string{}
		for i, r := range res {
			ids[keys[i]] = r.ID
		}
		return ids
	}
	enqueue("warm-up")
	if k := <-begun; k != "warm-up" {
		t.Fatalf("first handler ran %s", k)
	}
	waitFor(t, 30*time.Second, "the warm-up job to succeed", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE status = 'succeeded'") == 1
	})
	ids := enqueue("a", "b", "c") // one transaction: one claim takes all three
	if k := <-begun; k != "a" {
		t.Fatalf("handler ran %s first, want a", k)
	}
	waitFor(t, 30*time.Second, "b and c to be claimed", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE status = 'running'") == 3
	})

	// a runs; b and c wait in the worker's prefetch.
	check := func(wantRunning, wantClaimed []string) {
		t.Helper()
		s, err := e.client.Stats(e.ctx, &skiplock.StatsOpts{SamplePages: -1, RecentWindow: -1})
		e.must(err)
		q := s.Queue("p")
		if q.Running != int64(len(wantRunning)) || q.Claimed != int64(len(wantClaimed)) {
			t.Fatalf("stats: running %d, claimed %d; want %d, %d", q.Running, q.Claimed, len(wantRunning), len(wantClaimed))
		}
		for st, keys := range map[skiplock.JobState][]string{skiplock.StateRunning: wantRunning, skiplock.StateClaimed: wantClaimed} {
			listed, err := e.client.JobList(e.ctx, skiplock.ListParams{States: []skiplock.JobState{st}, Queue: "p"})
			e.must(err)
			page, err := e.client.JobPage(e.ctx, skiplock.PageParams{ListParams: skiplock.ListParams{States: []skiplock.JobState{st}}})
			e.must(err)
			if len(listed) != len(keys) || len(page.Jobs) != len(keys) {
				t.Fatalf("%d jobs listed and %d on the page as %s, want %d", len(listed), len(page.Jobs), st, len(keys))
			}
			for _, k := range keys {
				j, err := e.client.JobGet(e.ctx, ids[k])
				e.must(err)
				if j.State != st {
					t.Fatalf("job %s reads %s, want %s", k, j.State, st)
				}
			}
		}
	}
	check([]string{"a"}, []string{"b", "c"})
	// The docs' own SQL counts what they say.
	var running, claimed, holding int64
	e.must(e.pool.QueryRow(e.ctx, docSQL(t, e, "docs/state_machine.md", "### Claimed and running")+" AND queue = 'p'").Scan(&running, &claimed))
	e.must(e.pool.QueryRow(e.ctx, strings.ReplaceAll(docSQL(t, e, "docs/limits.md", "**A slot is held by a leased job.**"), "'email'", "'p'")).Scan(&holding))
	if running != 1 || claimed != 2 || holding != 3 {
		t.Fatalf("the docs' SQL counts %d running, %d claimed, %d holding slots; want 1, 2, 3", running, claimed, holding)
	}

	// a ends; b runs, still written claimed until the worker writes its start.
	close(release["a"])
	if k := <-begun; k != "b" {
		t.Fatalf("handler ran %s second, want b", k)
	}
	waitFor(t, 30*time.Second, "b's start to be written", func() bool {
		j, err := e.client.JobGet(e.ctx, ids["b"])
		e.must(err)
		return j.State == skiplock.StateRunning
	})
	check([]string{"b"}, []string{"c"})
	close(release["b"])
	close(release["c"])
	waitFor(t, 30*time.Second, "every job to succeed", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE status = 'succeeded'") == 4
	})
}

// docSQL is the first sql block after marker in the doc file, its statement's final
// semicolon dropped and the skiplock schema replaced by the test's.
func docSQL(t *testing.T, e *env, file, marker string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	e.must(err)
	doc := string(b)
	i := strings.Index(doc, marker)
	if i < 0 {
		t.Fatalf("%s: no %q", file, marker)
	}
	_, block, ok := strings.Cut(doc[i:], "```sql\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatalf("%s: no sql block after %q", file, marker)
	}
	return strings.ReplaceAll(strings.TrimSuffix(strings.TrimSpace(block), ";"), "skiplock.jobs", e.q("jobs"))
}

// Manual.ClaimAhead writes the last ahead jobs claimed, not running; Start makes them
// read running, renews their leases and reports a job whose lease is gone as lost.
func TestManualClaimAheadReadsClaimedUntilStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	var ps []skiplock.EnqueueParams
	for i := 0; i < 4; i++ {
		ps = append(ps, skiplock.EnqueueParams{Kind: "k", Payload: []byte(`{}`), Opts: skiplock.EnqueueOpts{Priority: 10 - i}})
	}
	_, err := e.client.EnqueueMany(e.ctx, ps)
	e.must(err)
	m := e.client.Manual()
	if _, err := m.ClaimAhead(e.ctx, "default", 2, -1); !errors.Is(err, skiplock.ErrInvalid) {
		t.Fatalf("ClaimAhead with ahead -1: %v, want ErrInvalid", err)
	}
	jobs, err := m.ClaimAhead(e.ctx, "default", 3, 2)
	e.must(err)
	if len(jobs) != 3 {
		t.Fatalf("claimed %d jobs, want 3", len(jobs))
	}
	state := func(id string) skiplock.JobState {
		j, err := e.client.JobGet(e.ctx, id)
		e.must(err)
		return j.State
	}
	for i, want := range []skiplock.JobState{skiplock.StateRunning, skiplock.StateClaimed, skiplock.StateClaimed} {
		if jobs[i].State != want || state(jobs[i].ID) != want {
			t.Fatalf("job %d (claim order): returned %s, stored %s, want %s", i, jobs[i].State, state(jobs[i].ID), want)
		}
	}
	// The third is cancelled by an operator before it is handed out: Start loses it.
	_, err = e.client.JobCancel(e.ctx, jobs[2].ID, "operator")
	e.must(err)
	lost, err := m.Start(e.ctx, jobs[1], jobs[2])
	e.must(err)
	if len(lost) != 1 || lost[0] != jobs[2] {
		t.Fatalf("Start lost %v, want only the cancelled job", lost)
	}
	if s := state(jobs[1].ID); s != skiplock.StateRunning {
		t.Fatalf("a started job reads %s, want running", s)
	}
	// ahead ≥ limit: every job claimed ahead.
	rest, err := m.ClaimAhead(e.ctx, "default", 1, 5)
	e.must(err)
	if len(rest) != 1 || rest[0].State != skiplock.StateClaimed {
		t.Fatalf("ClaimAhead(1, 5): %+v", rest)
	}
	e.must(m.Complete(e.ctx, rest[0])) // a job claimed ahead finishes like any other
}
