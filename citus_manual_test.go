package skiplock_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/skiplock/skiplock"
)

// TestCitusManual: on the 3-node cluster Client.Manual claims by key — each claim
// takes the due jobs of several keys in turn, from where the client's last claim of
// the queue stopped, so a key with a backlog does not keep the others waiting — and
// its heartbeats and finishes (complete, retry, claimed-ahead then started) name the
// job's key. Two claimers racing over every job never receive the same one. A limit
// in the schema is refused by name.
func TestCitusManual(t *testing.T) {
	t.Parallel()
	e := newCitusEnv(t, skiplock.Config{})
	m := e.client.Manual()
	var params []skiplock.EnqueueParams
	for n := range 40 {
		params = append(params, skiplock.EnqueueParams{Args: orderPlaced{Order: n}, Opts: skiplock.EnqueueOpts{ConcurrencyKey: "big"}})
	}
	for _, k := range []string{"acme", "globex", "initech"} {
		params = append(params, skiplock.EnqueueParams{Args: orderPlaced{Order: -1}, Opts: skiplock.EnqueueOpts{ConcurrencyKey: k}})
	}
	_, err := e.client.EnqueueManyTx(e.ctx, e.pool, params)
	e.must(err)

	// One claim of 8 reaches every key with work: the backlog's key takes what the
	// others leave.
	jobs, err := m.Claim(e.ctx, skiplock.DefaultQueue, 8)
	e.must(err)
	keys := map[string]int{}
	for _, j := range jobs {
		keys[j.ConcurrencyKey]++
	}
	if len(jobs) != 8 || keys["acme"] != 1 || keys["globex"] != 1 || keys["initech"] != 1 || keys["big"] != 5 {
		t.Fatalf("a claim of 8: %v; want the one job of each quiet key and 5 of big", keys)
	}
	lost, err := m.Heartbeat(e.ctx, jobs...)
	e.must(err)
	if len(lost) != 0 {
		t.Fatalf("heartbeat lost %d leases", len(lost))
	}
	for i, j := range jobs {
		if i == 0 {
			st, err := m.Retry(e.ctx, j, errors.New("once more"), 0)
			if err != nil || st != skiplock.StatePending {
				t.Fatalf("retry of %s (key %q): %s, %v", j.ID, j.ConcurrencyKey, st, err)
			}
			continue
		}
		if err := m.Complete(e.ctx, j); err != nil {
			t.Fatalf("complete of %s (key %q): %v", j.ID, j.ConcurrencyKey, err)
		}
	}
	// Claimed ahead, then started: the ahead jobs read claimed until Start.
	ahead, err := m.ClaimAhead(e.ctx, skiplock.DefaultQueue, 4, 4)
	e.must(err)
	if len(ahead) != 4 {
		t.Fatalf("claim ahead: %d jobs, want 4", len(ahead))
	}
	for _, j := range ahead {
		if j.State != skiplock.StateClaimed {
			t.Fatalf("a job claimed ahead reads %s, want claimed", j.State)
		}
	}
	lost, err = m.Start(e.ctx, ahead...)
	e.must(err)
	if len(lost) != 0 {
		t.Fatalf("start lost %d leases", len(lost))
	}
	for _, j := range ahead {
		e.must(m.Complete(e.ctx, j))
	}

	// Two claimers (another client's Manual too) race over what is left: each job once.
	other := e.newClient(skiplock.Config{ID: "other"}).Manual()
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for _, mm := range []*skiplock.Manual{m, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := mm.Claim(e.ctx, skiplock.DefaultQueue, 3)
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				for _, j := range got {
					mu.Lock()
					seen[j.ID]++
					mu.Unlock()
					if err := mm.Complete(e.ctx, j); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	for id, n := range seen {
		if n != 1 {
			t.Errorf("job %s claimed %d times", id, n)
		}
	}
	// 43 jobs: 7 completed and 1 retried from the first claim, 4 ahead, the rest
	// (the retried one among them) here.
	if len(seen) != 43-7-4 {
		t.Errorf("the racing claimers took %d jobs, want %d", len(seen), 43-7-4)
	}
	if st := citusJobStates(t, e.pool, e.schema); st["succeeded:1"] != 42 || st["succeeded:2"] != 1 {
		t.Fatalf("job states %v; want 42 succeeded at the first attempt, the retried one at its second", st)
	}

	e.must(execErr(e, `INSERT INTO `+e.q("limits")+` (scope, target, max_running) VALUES ('kind', 'order_placed', 2)`))
	if _, err := m.Claim(e.ctx, skiplock.DefaultQueue, 1); !errors.Is(err, skiplock.ErrNotOnCitus) || !strings.Contains(err.Error(), "limits") {
		t.Fatalf("a manual claim with a limit in the schema: %v; want ErrNotOnCitus naming limits", err)
	}
}

// TestCitusManualHandle: on the cluster a job rebuilt from its id and lease token
// alone (Manual.Handle, as the HTTP gateway's workers hold it) learns its key before
// its heartbeat and finish, which name the key: its writes land, fenced by the token
// as a claimed job's are. A wrong token writes nothing (ErrLeaseLost), and neither
// does an id no job has. Without the lookup every handle's write would find no lease
// under the key "" and return ErrLeaseLost.
func TestCitusManualHandle(t *testing.T) {
	t.Parallel()
	e := newCitusEnv(t, skiplock.Config{})
	m := e.client.Manual()
	var params []skiplock.EnqueueParams
	for n, k := range []string{"acme", "globex", "initech", "acme", "globex", "initech"} {
		params = append(params, skiplock.EnqueueParams{Args: orderPlaced{Order: n}, Opts: skiplock.EnqueueOpts{ConcurrencyKey: k}})
	}
	_, err := e.client.EnqueueManyTx(e.ctx, e.pool, params)
	e.must(err)
	claimed, err := m.Claim(e.ctx, skiplock.DefaultQueue, 6)
	e.must(err)
	if len(claimed) != 6 {
		t.Fatalf("claimed %d jobs, want 6", len(claimed))
	}
	handles := make([]*skiplock.Job, len(claimed))
	for i, j := range claimed {
		h, err := m.Handle(j.ID, j.LeaseToken)
		e.must(err)
		handles[i] = h
	}
	lost, err := m.Heartbeat(e.ctx, handles...)
	e.must(err)
	if len(lost) != 0 {
		t.Fatalf("a heartbeat of 6 handles lost %d leases", len(lost))
	}
	// A wrong token on a real job, and a job that does not exist: nothing written.
	stale, err := m.Handle(claimed[0].ID, "00000000-0000-4000-8000-000000000001")
	e.must(err)
	if err := m.Complete(e.ctx, stale); !errors.Is(err, skiplock.ErrLeaseLost) {
		t.Fatalf("a handle's complete with a wrong token: %v; want ErrLeaseLost", err)
	}
	ghost, err := m.Handle("00000000-0000-4000-8000-000000000002", claimed[0].LeaseToken)
	e.must(err)
	if err := m.Complete(e.ctx, ghost); !errors.Is(err, skiplock.ErrLeaseLost) {
		t.Fatalf("a handle's complete of no job: %v; want ErrLeaseLost", err)
	}
	// Two finished one by one, four in one FinishMany over the three keys.
	e.must(m.Complete(e.ctx, handles[0]))
	e.must(m.Fail(e.ctx, handles[1], errors.New("no")))
	var fs []skiplock.Finish
	for _, h := range handles[2:] {
		fs = append(fs, skiplock.Finish{Job: h, Action: skiplock.FinishComplete})
	}
	states, err := m.FinishMany(e.ctx, fs)
	e.must(err)
	for i, st := range states {
		if st != skiplock.StateSucceeded {
			t.Fatalf("FinishMany of handle %d: %q, want succeeded", i+2, st)
		}
	}
	if st := citusJobStates(t, e.pool, e.schema); st["succeeded:1"] != 5 || st["failed:1"] != 1 {
		t.Fatalf("job states %v; want 5 succeeded and 1 failed, each at its first attempt", st)
	}
}
