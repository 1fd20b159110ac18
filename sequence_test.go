package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

type seqArgs struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

func (seqArgs) Kind() string { return "seq" }

func (e *env) enqueueSeq(key string, n int, skipFailed bool) string {
	e.t.Helper()
	r, err := e.client.Enqueue(e.ctx, seqArgs{Key: key, N: n},
		&skiplock.EnqueueOpts{Sequence: &skiplock.SequenceOpts{Key: key, SkipFailed: skipFailed}})
	e.must(err)
	return r.ID
}

func claimedIDs(e *env) []string {
	e.t.Helper()
	jobs, err := e.client.Manual().Claim(e.ctx, skiplock.DefaultQueue, 100)
	e.must(err)
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	sort.Strings(ids)
	return ids
}

// Only the head of each sequence is claimable; it stays the head through a failure
// (until an operator retries or cancels it) unless it was enqueued with SkipFailed.
func TestSequenceHeadOnly(t *testing.T) {
	t.Parallel()
	eachLayout(t, func(t *testing.T, e *env) {
		a1, a2, a3 := e.enqueueSeq("a", 1, false), e.enqueueSeq("a", 2, false), e.enqueueSeq("a", 3, true)
		a4 := e.enqueueSeq("a", 4, false)
		b1 := e.enqueueSeq("b", 1, false)
		plain, err := e.client.Enqueue(e.ctx, emailArgs{}, nil)
		e.must(err)
		want := []string{a1, b1, plain.ID}
		sort.Strings(want)
		if got := claimedIDs(e); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("first claim %v, want the heads and the job without a sequence %v", got, want)
		}
		finish := func(id string, f func(j *skiplock.Job) error) {
			t.Helper()
			j, err := e.client.JobGet(e.ctx, id)
			e.must(err)
			e.must(f(j))
		}
		finish(a1, func(j *skiplock.Job) error { return e.client.Manual().Complete(e.ctx, j) })
		if got := claimedIDs(e); fmt.Sprint(got) != fmt.Sprint([]string{a2}) {
			t.Fatalf("after a1 succeeded: %v, want a2", got)
		}
		finish(a2, func(j *skiplock.Job) error { return e.client.Manual().Fail(e.ctx, j, errors.New("bad")) })
		if got := claimedIDs(e); len(got) != 0 {
			t.Fatalf("a failed head blocks its sequence, but %v was claimed", got)
		}
		s, err := e.client.Stats(e.ctx, nil)
		e.must(err)
		if n := s.Queue("default").BlockedSequences; n != 1 {
			t.Errorf("Stats shows %d blocked sequences, want 1", n)
		}
		_, err = e.client.JobRetry(e.ctx, a2)
		e.must(err)
		if got := claimedIDs(e); fmt.Sprint(got) != fmt.Sprint([]string{a2}) {
			t.Fatalf("after the retry: %v, want a2 again", got)
		}
		finish(a2, func(j *skiplock.Job) error { return e.client.Manual().Complete(e.ctx, j) })
		if got := claimedIDs(e); fmt.Sprint(got) != fmt.Sprint([]string{a3}) {
			t.Fatalf("after a2 succeeded: %v, want a3", got)
		}
		finish(a3, func(j *skiplock.Job) error { return e.client.Manual().Fail(e.ctx, j, errors.New("skippable")) })
		if got := claimedIDs(e); fmt.Sprint(got) != fmt.Sprint([]string{a4}) {
			t.Fatalf("a failed SkipFailed job lets the sequence go on: %v, want a4", got)
		}
	})
}

// 20 sequences of 100 jobs on 3 clients with random failures, after a worker holding
// some sequences' heads was SIGKILLed: per sequence, no two runs overlap, and the
// jobs succeed in enqueue order. (The issue asks for 500 per key; set
// SKIPLOCK_MEASURE=1 for that size.)
func TestSequencesNeverOverlap(t *testing.T) {
	t.Parallel()
	perKey := 100
	if os.Getenv("SKIPLOCK_MEASURE") != "" {
		perKey = 500
	}
	const keys = 20
	e := newEnv(t, skiplock.Config{Clock: realClock{}})
	params := make([]skiplock.EnqueueParams, 0, keys*perKey)
	for n := range perKey {
		for k := range keys {
			key := fmt.Sprintf("k%02d", k)
			params = append(params, skiplock.EnqueueParams{Args: seqArgs{Key: key, N: n},
				Opts: skiplock.EnqueueOpts{Sequence: &skiplock.SequenceOpts{Key: key}}})
		}
	}
	for i := 0; i < len(params); i += 1000 {
		_, err := e.client.EnqueueMany(e.ctx, params[i:min(i+1000, len(params))])
		e.must(err)
	}

	// A worker that takes some heads and is killed holding them.
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childWorkerEnv+"=1", "SKIPLOCK_TEST_CHILD_URL="+pgtest.URL(t), "SKIPLOCK_TEST_CHILD_SCHEMA="+e.schema)
	child.Stderr = os.Stderr
	e.must(child.Start())
	defer child.Process.Kill()
	waitFor(t, 30*time.Second, "the doomed worker to hold some heads", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE status = 'running' AND worker_id = 'doomed-child'") > 0
	})
	e.must(child.Process.Signal(syscall.SIGKILL))
	child.Wait()

	type run struct {
		n          int
		start, end time.Time
		ok         bool
	}
	var mu sync.Mutex
	runs := map[string][]run{}
	ws := skiplock.NewWorkers()
	e.must(skiplock.AddWorker(ws, skiplock.WorkFunc[seqArgs](func(ctx context.Context, job *skiplock.Job, a seqArgs) error {
		r := run{n: a.N, start: time.Now()}
		var err error
		if rand.IntN(10) == 0 {
			err = errors.New("random failure")
		}
		r.end, r.ok = time.Now(), err == nil
		mu.Lock()
		runs[a.Key] = append(runs[a.Key], r)
		mu.Unlock()
		return err
	}), &skiplock.WorkerOpts{MaxAttempts: 1000}))
	for i := range 3 {
		c := e.newClient(skiplock.Config{ID: fmt.Sprintf("survivor-%d", i), Workers: ws, Clock: realClock{},
			Queues:          map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 8}},
			ReclaimInterval: 100 * time.Millisecond, PollInterval: 20 * time.Millisecond,
			RetryPolicy: skiplock.ExponentialBackoff{Base: time.Millisecond, Max: 5 * time.Millisecond}})
		startClient(t, c)
	}
	waitFor(t, 3*time.Minute, "every sequence to finish", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE status = 'succeeded'") == int64(keys*perKey)
	})
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for key, rs := range runs {
		sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
		next := 0 // the job of the sequence expected to succeed next
		for i, r := range rs {
			total++
			if i > 0 && r.start.Before(rs[i-1].end) {
				t.Fatalf("sequence %s: run of job %d started before the run of job %d ended", key, r.n, rs[i-1].n)
			}
			if r.n != next {
				t.Fatalf("sequence %s: job %d ran while job %d had not succeeded", key, r.n, next)
			}
			if r.ok {
				next++
			}
		}
		if next != perKey {
			t.Fatalf("sequence %s: %d jobs succeeded in order, want %d", key, next, perKey)
		}
	}
	t.Logf("%d sequences × %d jobs: %d runs (%d retries), no overlap, all in order", keys, perKey, total, total-keys*perKey)
}
