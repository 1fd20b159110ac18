package engine

import (
	"sync"
	"testing"

	"github.com/skiplock/skiplock/internal/store"
)

func testFlight(st state) *flight {
	f := newFlight(&store.Job{ID: "j"}, nil, nil)
	f.st.Store(int32(st))
	return f
}

// Every transition from every state: the machine allows exactly the moves its
// diagram draws, and a refused move leaves the state as it was.
func TestFlightTransitions(t *testing.T) {
	t.Parallel()
	all := []state{queued, running, returned, released, stranded, lost}
	type move struct {
		name string
		do   func(f *flight) bool
		// to maps the states the move leaves from to the state it leads to.
		to map[state]state
	}
	moves := []move{
		{"start", (*flight).start, map[state]state{queued: running}},
		{"finishRun", (*flight).finishRun, map[state]state{running: returned}},
		{"lose", func(f *flight) bool { before := f.state(); f.lose(); return f.state() != before },
			map[state]state{queued: stranded, running: lost}},
		{"handBack", (*flight).handBack, map[state]state{queued: released, stranded: released}},
	}
	for _, m := range moves {
		for _, from := range all {
			f := testFlight(from)
			ok := m.do(f)
			want, allowed := m.to[from]
			if !allowed {
				want = from
			}
			if ok != allowed || f.state() != want {
				t.Errorf("%s from %s: moved %v to %s; want moved %v to %s", m.name, from, ok, f.state(), allowed, want)
			}
		}
	}
}

// lose says whether the handler runs and must be cancelled: only a running job's.
func TestLoseReportsARunningHandler(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		from state
		want bool
	}{{queued, false}, {running, true}, {returned, false}, {released, false}, {stranded, false}, {lost, false}} {
		if got := testFlight(tc.from).lose(); got != tc.want {
			t.Errorf("lose from %s: cancel %v, want %v", tc.from, got, tc.want)
		}
	}
}

// The heartbeater renews a lease while the job waits, runs or goes back unstarted,
// and stops once the handler returned or the lease is lost.
func TestRenewable(t *testing.T) {
	t.Parallel()
	want := map[state]bool{queued: true, running: true, released: true, returned: false, stranded: false, lost: false}
	for st, w := range want {
		if got := testFlight(st).renewable(); got != w {
			t.Errorf("renewable in %s = %v, want %v", st, got, w)
		}
	}
}

// A heartbeat that finds the lease lost races the executor starting the job and its
// handler returning: whichever order, exactly one side acts — the handler never runs
// after a loss it could have seen, a lost run's outcome is dropped, and a cancel is
// asked for exactly when the handler ran when the loss was recorded.
func TestLoseRacesStartAndReturn(t *testing.T) {
	t.Parallel()
	for i := 0; i < 2000; i++ {
		f := testFlight(queued)
		var wg sync.WaitGroup
		var ran, returnedOK, cancel bool
		wg.Add(2)
		go func() {
			defer wg.Done()
			if ran = f.start(); ran {
				returnedOK = f.finishRun()
			}
		}()
		go func() { defer wg.Done(); cancel = f.lose() }()
		wg.Wait()
		switch end := f.state(); {
		case !ran:
			if end != stranded || cancel {
				t.Fatalf("run %d: lost before start: state %s, cancel %v; want stranded, no cancel", i, end, cancel)
			}
		case returnedOK:
			if end != returned || cancel {
				t.Fatalf("run %d: returned before the loss: state %s, cancel %v; want returned, no cancel", i, end, cancel)
			}
		default:
			if end != lost || !cancel {
				t.Fatalf("run %d: lost while running: state %s, cancel %v; want lost, cancel", i, end, cancel)
			}
		}
	}
}

func TestStateNames(t *testing.T) {
	t.Parallel()
	if queued.String() != "queued" || lost.String() != "lost" || state(99).String() != "invalid" {
		t.Fatalf("state names: %s %s %s", queued, lost, state(99))
	}
}
