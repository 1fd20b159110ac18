package skiplock_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
)

func (e *env) enqueueUnique(u *skiplock.UniqueOpts) skiplock.EnqueueResult {
	e.t.Helper()
	r, err := e.client.Enqueue(e.ctx, emailArgs{To: "a"}, &skiplock.EnqueueOpts{Unique: u})
	e.must(err)
	return r
}

// By default a unique key is held while its job is pending or running: a second
// enqueue meanwhile names the first job; once it finished, a new job may be enqueued.
func TestUniqueWhilePendingOrRunning(t *testing.T) {
	t.Parallel()
	eachLayout(t, func(t *testing.T, e *env) {
		u := &skiplock.UniqueOpts{Key: "sync-42"}
		first := e.enqueueUnique(u)
		if dup := e.enqueueUnique(u); !dup.Duplicate || dup.ID != first.ID {
			t.Fatalf("second enqueue while pending: %+v, want a duplicate of %s", dup, first.ID)
		}
		job := claimOne(e, e.client)
		if dup := e.enqueueUnique(u); !dup.Duplicate || dup.ID != first.ID {
			t.Fatalf("enqueue while running: %+v", dup)
		}
		e.must(e.client.Manual().Complete(e.ctx, job))
		next := e.enqueueUnique(u)
		if next.Duplicate || next.ID == first.ID {
			t.Fatalf("enqueue after the holder succeeded: %+v, want a new job", next)
		}
		// Another key, or another kind with the same key, is different work.
		if r := e.enqueueUnique(&skiplock.UniqueOpts{Key: "sync-43"}); r.Duplicate {
			t.Errorf("another key was a duplicate")
		}
		r, err := e.client.Enqueue(e.ctx, otherArgs{}, &skiplock.EnqueueOpts{Unique: u})
		e.must(err)
		if r.Duplicate {
			t.Errorf("another kind with the same key was a duplicate")
		}
	})
}

// "One per key until it succeeds": a failed job keeps holding its key; a retry by
// the operator keeps it too, and a success frees it.
func TestUniqueUntilSuccess(t *testing.T) {
	t.Parallel()
	eachLayout(t, func(t *testing.T, e *env) {
		u := &skiplock.UniqueOpts{Key: "charge-7", States: []skiplock.JobState{
			skiplock.StatePending, skiplock.StateRunning, skiplock.StateFailed, skiplock.StateCancelled}}
		first := e.enqueueUnique(u)
		job := claimOne(e, e.client)
		e.must(e.client.Manual().Fail(e.ctx, job, errors.New("card declined")))
		if dup := e.enqueueUnique(u); !dup.Duplicate || dup.ID != first.ID {
			t.Fatalf("enqueue after the holder failed: %+v, want a duplicate", dup)
		}
		_, err := e.client.JobRetry(e.ctx, first.ID)
		e.must(err)
		job = claimOne(e, e.client)
		e.must(e.client.Manual().Complete(e.ctx, job))
		if r := e.enqueueUnique(u); r.Duplicate {
			t.Fatalf("enqueue after the holder succeeded: %+v", r)
		}
	})
}

// Per period: at most one job per key per hour of the (injected) clock, whatever
// became of it.
func TestUniquePerPeriod(t *testing.T) {
	t.Parallel()
	eachLayout(t, func(t *testing.T, e *env) {
		u := &skiplock.UniqueOpts{Key: "digest", Period: time.Hour}
		e.clock.Set(t0.Truncate(time.Hour).Add(10 * time.Minute))
		first := e.enqueueUnique(u)
		job := claimOne(e, e.client)
		e.must(e.client.Manual().Complete(e.ctx, job))
		e.clock.Advance(40 * time.Minute) // same hour
		if dup := e.enqueueUnique(u); !dup.Duplicate || dup.ID != first.ID {
			t.Fatalf("second enqueue in the same hour: %+v", dup)
		}
		e.clock.Advance(20 * time.Minute) // the next hour
		if r := e.enqueueUnique(u); r.Duplicate {
			t.Fatalf("first enqueue of the next hour: %+v", r)
		}
	})
}

// 16 concurrent enqueuers of the same key, in single enqueues and in batches that
// repeat the key, insert exactly one job, and every duplicate names it.
func TestUniqueRaceFree(t *testing.T) {
	t.Parallel()
	eachLayout(t, func(t *testing.T, e *env) {
		u := &skiplock.UniqueOpts{Key: "race"}
		var wg sync.WaitGroup
		ids := make(chan skiplock.EnqueueResult, 16*5)
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if g%2 == 0 {
					r, err := e.client.Enqueue(e.ctx, emailArgs{To: "a"}, &skiplock.EnqueueOpts{Unique: u})
					if err != nil {
						t.Error(err)
						return
					}
					ids <- r
					return
				}
				batch := make([]skiplock.EnqueueParams, 4)
				for i := range batch {
					batch[i] = skiplock.EnqueueParams{Args: emailArgs{To: "a"}, Opts: skiplock.EnqueueOpts{Unique: u}}
				}
				rs, err := e.client.EnqueueMany(e.ctx, batch)
				if err != nil {
					t.Error(err)
					return
				}
				for _, r := range rs {
					ids <- r
				}
			}()
		}
		wg.Wait()
		close(ids)
		inserted, holder := 0, ""
		var all []skiplock.EnqueueResult
		for r := range ids {
			all = append(all, r)
			if !r.Duplicate {
				inserted++
				holder = r.ID
			}
		}
		if inserted != 1 {
			t.Fatalf("%d jobs inserted for one unique key, want 1", inserted)
		}
		for _, r := range all {
			if r.ID != holder {
				t.Fatalf("a duplicate names %q, want the holder %s", r.ID, holder)
			}
		}
		if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")); n != 1 {
			t.Fatalf("%d jobs in the table", n)
		}
	})
}

// ByArgs: equal arguments are the same work, different ones are not.
func TestUniqueByArgs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	u := &skiplock.UniqueOpts{ByArgs: true}
	a, err := e.client.Enqueue(e.ctx, emailArgs{To: "a"}, &skiplock.EnqueueOpts{Unique: u})
	e.must(err)
	a2, err := e.client.Enqueue(e.ctx, emailArgs{To: "a"}, &skiplock.EnqueueOpts{Unique: u})
	e.must(err)
	b, err := e.client.Enqueue(e.ctx, emailArgs{To: "b"}, &skiplock.EnqueueOpts{Unique: u})
	e.must(err)
	if !a2.Duplicate || a2.ID != a.ID || b.Duplicate {
		t.Fatalf("by args: %+v %+v %+v", a, a2, b)
	}
}

// Bad unique options are refused, naming the problem, and write nothing.
func TestUniqueBadOptions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	for name, opts := range map[string]skiplock.EnqueueOpts{
		"no key":         {Unique: &skiplock.UniqueOpts{}},
		"with dedup key": {Unique: &skiplock.UniqueOpts{Key: "k"}, DeduplicationKey: "d"},
		"short period":   {Unique: &skiplock.UniqueOpts{Key: "k", Period: time.Millisecond}},
		"unknown state":  {Unique: &skiplock.UniqueOpts{Key: "k", States: []skiplock.JobState{"done"}}},
		"no pending":     {Unique: &skiplock.UniqueOpts{Key: "k", States: []skiplock.JobState{skiplock.StateRunning}}},
		"NUL key":        {Unique: &skiplock.UniqueOpts{Key: "a\x00"}},
	} {
		if _, err := e.client.Enqueue(e.ctx, emailArgs{}, &opts); !errors.Is(err, skiplock.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")); n != 0 {
		t.Errorf("bad options wrote %d jobs", n)
	}
}
