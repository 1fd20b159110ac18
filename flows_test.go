package skiplock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/skiplocktest"
)

// leafArgs is a flow child: it records N*2 as its output, or fails for good (Fail),
// or cancels itself (Cancel).
type leafArgs struct {
	N      int  `json:"n"`
	Fail   bool `json:"fail,omitempty"`
	Cancel bool `json:"cancel,omitempty"`
}

func (leafArgs) Kind() string { return "leaf" }

type parentArgs struct {
	Name string `json:"name"`
}

func (parentArgs) Kind() string { return "parent" }

// flowRig is a client whose "parent" handler records what Children returned, once
// per run.
type flowRig struct {
	*env
	mu   sync.Mutex
	runs map[string][][]skiplock.Child // parent id → Children seen by each run
}

func newFlowRig(t *testing.T, cfg skiplock.Config) *flowRig {
	t.Helper()
	r := &flowRig{runs: map[string][][]skiplock.Child{}}
	ws := skiplock.NewWorkers()
	if err := skiplock.AddWorker(ws, skiplock.WorkFunc[leafArgs](func(ctx context.Context, job *skiplock.Job, a leafArgs) error {
		switch {
		case a.Fail:
			return skiplock.Permanent(errors.New("leaf failed"))
		case a.Cancel:
			return skiplock.Cancel(errors.New("leaf cancelled"))
		}
		return job.SetOutput(map[string]int{"double": a.N * 2})
	}), &skiplock.WorkerOpts{MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	if err := skiplock.AddWorker(ws, skiplock.WorkFunc[parentArgs](func(ctx context.Context, job *skiplock.Job, a parentArgs) error {
		client, ok := skiplock.ClientFromContext(ctx)
		if !ok {
			return errors.New("no client in the handler's context")
		}
		kids, err := client.Children(ctx, job.ID)
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.runs[job.ID] = append(r.runs[job.ID], kids)
		r.mu.Unlock()
		return job.SetOutput(map[string]int{"children": len(kids)})
	}), nil); err != nil {
		t.Fatal(err)
	}
	cfg.Workers = ws
	if cfg.Queues == nil {
		cfg.Queues = map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 4}}
	}
	r.env = newEnv(t, cfg)
	return r
}

func (r *flowRig) state(id string) skiplock.JobState {
	r.t.Helper()
	j, err := r.client.JobGet(r.ctx, id)
	r.must(err)
	return j.State
}

func leaf(n int, opts ...func(*leafArgs)) skiplock.Flow {
	a := leafArgs{N: n}
	for _, o := range opts {
		o(&a)
	}
	return skiplock.Flow{Args: a}
}

func failing(a *leafArgs)    { a.Fail = true }
func cancelling(a *leafArgs) { a.Cancel = true }

// The parent waits while its children run, then runs once and reads every output.
func TestFlowParentRunsAfterChildrenAndReadsOutputs(t *testing.T) {
	t.Parallel()
	r := newFlowRig(t, skiplock.Config{})
	res, err := r.client.EnqueueFlow(r.ctx, skiplock.Flow{Args: parentArgs{Name: "root"},
		Children: []skiplock.Flow{leaf(1), leaf(2), leaf(3)}})
	r.must(err)
	if got := r.state(res.ID); got != skiplock.StateWaiting {
		t.Fatalf("parent after enqueue: %s, want waiting", got)
	}
	if len(res.Children) != 3 {
		t.Fatalf("result %+v", res)
	}
	d := skiplocktest.Drain(r.ctx, t, r.client)
	if d.Succeeded != 4 {
		t.Fatalf("drain: %s", d)
	}
	if last := d.Events[len(d.Events)-1]; last.Job.ID != res.ID {
		t.Fatalf("the parent did not run last: %s ran last", last.Job.Kind)
	}
	runs := r.runs[res.ID]
	if len(runs) != 1 || len(runs[0]) != 3 {
		t.Fatalf("parent runs %v", runs)
	}
	for i, c := range runs[0] {
		out, err := skiplock.ChildOutput[struct{ Double int }](c)
		r.must(err)
		if c.State != skiplock.StateSucceeded || c.ID != res.Children[i].ID || out.Double != 2*(i+1) {
			t.Fatalf("child %d as the parent saw it: %+v", i, c)
		}
	}
}

// ChildOutput decodes a child's output into the type asked for, and names the child
// when it has none (it failed) or one of another shape.
func TestChildOutputDecodesOrNamesTheChild(t *testing.T) {
	t.Parallel()
	r := newFlowRig(t, skiplock.Config{})
	res, err := r.client.EnqueueFlow(r.ctx, skiplock.Flow{Args: parentArgs{Name: "root"}, OnChildFailure: skiplock.FailureContinue,
		Children: []skiplock.Flow{leaf(21), leaf(2, failing)}})
	r.must(err)
	skiplocktest.Drain(r.ctx, t, r.client)
	runs := r.runs[res.ID]
	if len(runs) != 1 || len(runs[0]) != 2 {
		t.Fatalf("parent runs %v", runs)
	}
	ok, failed := runs[0][0], runs[0][1]

	type double struct{ Double int }
	if got, err := skiplock.ChildOutput[double](ok); err != nil || got.Double != 42 {
		t.Errorf("ChildOutput of a succeeded child = %+v, %v; want 42", got, err)
	}
	if got, err := skiplock.ChildOutput[map[string]int](ok); err != nil || got["double"] != 42 {
		t.Errorf("ChildOutput as a map = %v, %v", got, err)
	}

	_, err = skiplock.ChildOutput[double](failed)
	var coe *skiplock.ChildOutputError
	if !errors.Is(err, skiplock.ErrNoOutput) || !errors.As(err, &coe) || coe.ID != failed.ID ||
		coe.State != skiplock.StateFailed || coe.Kind != "leaf" || coe.Type != "skiplock_test.double" {
		t.Errorf("ChildOutput of a failed child: %v (%+v); want ErrNoOutput naming child %s", err, coe, failed.ID)
	}

	got, err := skiplock.ChildOutput[struct{ Double string }](ok)
	var typeErr *json.UnmarshalTypeError
	if !errors.As(err, &typeErr) || !errors.As(err, &coe) || coe.ID != ok.ID || errors.Is(err, skiplock.ErrNoOutput) || got.Double != "" {
		t.Errorf("ChildOutput into the wrong shape = %+v, %v; want a JSON type error naming child %s", got, err, ok.ID)
	}
	if msg := fmt.Sprint(err); !strings.Contains(msg, ok.ID) || !strings.Contains(msg, "leaf") || !strings.Contains(msg, "string") {
		t.Errorf("the error %q does not name the child and the mismatch", msg)
	}
	if msg := fmt.Sprint(skiplock.ChildOutput[double](failed)); !strings.Contains(msg, failed.ID+" (leaf, failed) has no output") {
		t.Errorf("the error %q does not say which child has no output", msg)
	}
	if _, err := skiplock.ChildOutput[double](skiplock.Child{}); !errors.Is(err, skiplock.ErrNoOutput) {
		t.Errorf("ChildOutput of a zero Child = %v, want ErrNoOutput", err)
	}
}

func TestFlowFailurePolicies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy skiplock.FailurePolicy
		// want: the parent's state, the states of [ok, failed, cancelled, later]
		parent   skiplock.JobState
		later    skiplock.JobState
		children int // Children the parent's run saw (-1: no run)
	}{
		{skiplock.FailureFail, skiplock.StateFailed, skiplock.StateCancelled, -1},
		{skiplock.FailureContinue, skiplock.StateSucceeded, skiplock.StateSucceeded, 4},
		{skiplock.FailureIgnore, skiplock.StateSucceeded, skiplock.StateSucceeded, 2},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			t.Parallel()
			r := newFlowRig(t, skiplock.Config{})
			later := leaf(4)
			later.Opts.Delay = time.Hour // still pending when its siblings fail
			res, err := r.client.EnqueueFlow(r.ctx, skiplock.Flow{Args: parentArgs{}, OnChildFailure: tc.policy,
				Children: []skiplock.Flow{leaf(1), leaf(2, failing), leaf(3, cancelling), later}})
			r.must(err)
			skiplocktest.Drain(r.ctx, t, r.client)
			r.clock.Advance(2 * time.Hour)
			skiplocktest.Drain(r.ctx, t, r.client)
			if got := r.state(res.ID); got != tc.parent {
				t.Fatalf("parent: %s, want %s", got, tc.parent)
			}
			if got := r.state(res.Children[3].ID); got != tc.later {
				t.Fatalf("the child due later: %s, want %s", got, tc.later)
			}
			runs := r.runs[res.ID]
			switch {
			case tc.children < 0 && len(runs) != 0:
				t.Fatalf("parent ran %d times, want never", len(runs))
			case tc.children >= 0 && (len(runs) != 1 || len(runs[0]) != tc.children):
				t.Fatalf("parent runs %v, want one seeing %d children", runs, tc.children)
			}
			if tc.policy == skiplock.FailureContinue {
				if st := runs[0][1].State; st != skiplock.StateFailed || runs[0][1].LastError == "" {
					t.Fatalf("the failed child as the parent saw it: %+v", runs[0][1])
				}
			}
		})
	}
}

// Cancelling a parent mid-flow cancels the pending and waiting jobs below it; a
// running child finishes, and the parent never runs.
func TestFlowCancelParentMidFlow(t *testing.T) {
	t.Parallel()
	r := newFlowRig(t, skiplock.Config{})
	res, err := r.client.EnqueueFlow(r.ctx, skiplock.Flow{Args: parentArgs{Name: "root"}, Children: []skiplock.Flow{
		{Args: parentArgs{Name: "mid"}, Children: []skiplock.Flow{leaf(1), leaf(2)}},
		leaf(3), leaf(4),
	}})
	r.must(err)
	m := r.client.Manual()
	running, err := m.Claim(r.ctx, skiplock.DefaultQueue, 1)
	r.must(err)
	if len(running) != 1 {
		t.Fatalf("claimed %d", len(running))
	}
	if _, err := r.client.JobCancel(r.ctx, res.ID, "changed my mind"); err != nil {
		t.Fatal(err)
	}
	if got := r.state(res.ID); got != skiplock.StateCancelled {
		t.Fatalf("root: %s", got)
	}
	ids := []string{res.Children[0].ID, res.Children[0].Children[0].ID, res.Children[0].Children[1].ID, res.Children[1].ID, res.Children[2].ID}
	for _, id := range ids {
		want := skiplock.StateCancelled
		if id == running[0].ID {
			want = skiplock.StateRunning
		}
		if got := r.state(id); got != want {
			t.Fatalf("job %s after the root's cancellation: %s, want %s", id, got, want)
		}
	}
	r.must(m.Complete(r.ctx, running[0]))
	skiplocktest.Drain(r.ctx, t, r.client)
	if len(r.runs) != 0 {
		t.Fatalf("a cancelled parent ran: %v", r.runs)
	}
	if _, err := r.client.JobCancel(r.ctx, res.ID, ""); !errors.Is(err, skiplock.ErrJobState) {
		t.Fatalf("cancelling twice: %v", err)
	}
}

// A zombie's fenced completion changes nothing, so it cannot release the parent; the
// attempt that took over releases it, once.
func TestFlowZombieChildCannotReleaseParent(t *testing.T) {
	t.Parallel()
	r := newFlowRig(t, skiplock.Config{LeaseDuration: time.Minute})
	res, err := r.client.EnqueueFlow(r.ctx, skiplock.Flow{Args: parentArgs{}, Children: []skiplock.Flow{leaf(1)}})
	r.must(err)
	m := r.client.Manual()
	zombie, err := m.Claim(r.ctx, skiplock.DefaultQueue, 1)
	r.must(err)
	r.clock.Advance(2 * time.Minute)
	_, err = m.Reclaim(r.ctx)
	r.must(err)
	r.clock.Advance(time.Hour) // past the retry delay
	live, err := m.Claim(r.ctx, skiplock.DefaultQueue, 1)
	r.must(err)
	if err := m.Complete(r.ctx, zombie[0]); !errors.Is(err, skiplock.ErrLeaseLost) {
		t.Fatalf("zombie's completion: %v", err)
	}
	if got := r.state(res.ID); got != skiplock.StateWaiting {
		t.Fatalf("parent after the zombie's completion: %s", got)
	}
	r.must(m.Complete(r.ctx, live[0]))
	if got := r.state(res.ID); got != skiplock.StatePending {
		t.Fatalf("parent after the live completion: %s", got)
	}
	skiplocktest.Drain(r.ctx, t, r.client)
	if len(r.runs[res.ID]) != 1 {
		t.Fatalf("parent ran %d times", len(r.runs[res.ID]))
	}
}

// DeleteOnSuccess keeps children (their parent reads them); retention keeps children
// of a parent that has not finished.
func TestFlowChildrenSurviveDeleteOnSuccessAndRetention(t *testing.T) {
	t.Parallel()
	r := newFlowRig(t, skiplock.Config{DeleteOnSuccess: true,
		Retention: skiplock.RetentionConfig{Succeeded: time.Hour, Failed: time.Hour, Cancelled: time.Hour}})
	slow := leaf(2)
	slow.Opts.Delay = 48 * time.Hour
	res, err := r.client.EnqueueFlow(r.ctx, skiplock.Flow{Args: parentArgs{}, Children: []skiplock.Flow{leaf(1), slow}})
	r.must(err)
	plain, err := r.client.Enqueue(r.ctx, leafArgs{N: 9}, nil)
	r.must(err)
	skiplocktest.Drain(r.ctx, t, r.client)
	if _, err := r.client.JobGet(r.ctx, plain.ID); !errors.Is(err, skiplock.ErrNotFound) {
		t.Fatalf("a job outside any flow was not deleted on success: %v", err)
	}
	r.clock.Advance(24 * time.Hour)
	_, err = r.client.RunMaintenanceOnceForTest(r.ctx, "retention")
	r.must(err)
	if got := r.state(res.Children[0].ID); got != skiplock.StateSucceeded {
		t.Fatalf("finished child of a waiting parent: %s", got)
	}
	r.clock.Advance(25 * time.Hour)
	skiplocktest.Drain(r.ctx, t, r.client)
	if runs := r.runs[res.ID]; len(runs) != 1 || len(runs[0]) != 2 || runs[0][0].Output == nil {
		t.Fatalf("parent runs %+v", runs)
	}
}

func TestFlowRefusesBadInput(t *testing.T) {
	t.Parallel()
	r := newFlowRig(t, skiplock.Config{})
	deep := skiplock.Flow{Args: leafArgs{}}
	for range skiplock.MaxFlowDepth + 1 {
		deep = skiplock.Flow{Args: parentArgs{}, Children: []skiplock.Flow{deep}}
	}
	for name, f := range map[string]skiplock.Flow{
		"policy":  {Args: parentArgs{}, OnChildFailure: "sometimes", Children: []skiplock.Flow{leaf(1)}},
		"dedup":   {Args: parentArgs{}, Children: []skiplock.Flow{{Args: leafArgs{}, Opts: skiplock.EnqueueOpts{DeduplicationKey: "k"}}}},
		"unique":  {Args: parentArgs{}, Children: []skiplock.Flow{{Args: leafArgs{}, Opts: skiplock.EnqueueOpts{Unique: &skiplock.UniqueOpts{Key: "k"}}}}},
		"kind":    {Args: parentArgs{}, Children: []skiplock.Flow{{Payload: []byte(`{}`)}}},
		"payload": {Kind: "x", Payload: []byte(`{`)},
		"queue":   {Args: parentArgs{}, Children: []skiplock.Flow{{Args: leafArgs{}, Opts: skiplock.EnqueueOpts{Queue: "no spaces"}}}},
		"deep":    deep,
		"empty":   {},
	} {
		if _, err := r.client.EnqueueFlow(r.ctx, f); !errors.Is(err, skiplock.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	if _, err := r.client.EnqueueFlowTx(nil, r.pool, skiplock.Flow{Args: leafArgs{}}); !errors.Is(err, skiplock.ErrInvalid) {
		t.Errorf("nil ctx: %v", err)
	}
	if _, err := r.client.EnqueueFlowTx(r.ctx, nil, skiplock.Flow{Args: leafArgs{}}); !errors.Is(err, skiplock.ErrInvalid) {
		t.Errorf("nil tx: %v", err)
	}
	for _, id := range []string{"", "nope"} {
		if _, err := r.client.Children(r.ctx, id); !errors.Is(err, skiplock.ErrInvalid) {
			t.Errorf("Children(%q): %v", id, err)
		}
		if _, _, err := r.client.FlowTree(r.ctx, id); !errors.Is(err, skiplock.ErrInvalid) {
			t.Errorf("FlowTree(%q): %v", id, err)
		}
	}
	if _, err := r.client.Children(r.ctx, "00000000-0000-7000-8000-000000000000"); !errors.Is(err, skiplock.ErrNotFound) {
		t.Errorf("Children of no job: %v", err)
	}
	if n := scalar[int64](r.env, "SELECT count(*) FROM "+r.q("jobs")); n != 0 {
		t.Fatalf("bad input wrote %d jobs", n)
	}
}

func TestFlowTreeAndStats(t *testing.T) {
	t.Parallel()
	r := newFlowRig(t, skiplock.Config{})
	res, err := r.client.EnqueueFlow(r.ctx, skiplock.Flow{Args: parentArgs{Name: "root"}, OnChildFailure: skiplock.FailureContinue,
		Children: []skiplock.Flow{{Args: parentArgs{Name: "mid"}, Children: []skiplock.Flow{leaf(1), leaf(2)}}, leaf(3)}})
	r.must(err)
	root, truncated, err := r.client.FlowTree(r.ctx, res.Children[0].Children[1].ID) // from a leaf
	r.must(err)
	if truncated || root.ID != res.ID || root.State != skiplock.StateWaiting || root.Policy != skiplock.FailureContinue ||
		root.OpenChildren != 2 || len(root.Children) != 2 || len(root.Children[0].Children) != 2 {
		t.Fatalf("tree %+v", root)
	}
	st, err := r.client.Stats(r.ctx, nil)
	r.must(err)
	if st.Waiting != 2 {
		t.Fatalf("Stats.Waiting = %d, want 2", st.Waiting)
	}
}

// A flow's jobs keep their concurrency key (limits govern children like any job), by
// the one-statement insert of a small flow and by the COPY of a large one.
func TestFlowJobsKeepTheirConcurrencyKey(t *testing.T) {
	t.Parallel()
	r := newFlowRig(t, skiplock.Config{})
	for _, n := range []int{2, 100} {
		f := skiplock.Flow{Args: parentArgs{Name: "root"}, Opts: skiplock.EnqueueOpts{ConcurrencyKey: "tenant-root"}}
		for i := range n {
			c := leaf(i)
			c.Opts.ConcurrencyKey = "tenant-" + strconv.Itoa(i%3)
			f.Children = append(f.Children, c)
		}
		res, err := r.client.EnqueueFlow(r.ctx, f)
		r.must(err)
		root, err := r.client.JobGet(r.ctx, res.ID)
		r.must(err)
		last, err := r.client.JobGet(r.ctx, res.Children[n-1].ID)
		r.must(err)
		if root.ConcurrencyKey != "tenant-root" || last.ConcurrencyKey != "tenant-"+strconv.Itoa((n-1)%3) {
			t.Errorf("flow of %d: keys %q and %q", n, root.ConcurrencyKey, last.ConcurrencyKey)
		}
	}
}

// flowChaosEnv runs a 3-level tree of 1,000 jobs (a root, 9 parents of 110 leaves
// each) on 3 clients with random transient failures, after a worker process holding
// some leaves was SIGKILLed: each parent runs exactly once, after all its children,
// and sees every child's output.
func TestFlowTreeOf1000UnderFailuresAndSIGKILL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Clock: realClock{}})
	const mids, leaves = 9, 110
	root := skiplock.Flow{Kind: "fparent", Payload: []byte(`{}`)}
	for m := range mids {
		mid := skiplock.Flow{Kind: "fparent", Payload: []byte(`{}`)}
		for l := range leaves {
			// "crashy": the kind the doomed child process claims and never finishes.
			mid.Children = append(mid.Children, skiplock.Flow{Kind: "crashy", Payload: []byte(fmt.Sprintf(`{"n":%d}`, m*leaves+l)),
				Opts: skiplock.EnqueueOpts{MaxAttempts: 1000}})
		}
		root.Children = append(root.Children, mid)
	}
	res, err := e.client.EnqueueFlow(e.ctx, root)
	e.must(err)
	if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")); n != 1+mids+mids*leaves {
		t.Fatalf("%d jobs", n)
	}

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childWorkerEnv+"=1", "SKIPLOCK_TEST_CHILD_URL="+pgtest.URL(t), "SKIPLOCK_TEST_CHILD_SCHEMA="+e.schema)
	child.Stderr = os.Stderr
	e.must(child.Start())
	defer child.Process.Kill()
	waitFor(t, 30*time.Second, "the doomed worker to hold some leaves", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE status = 'running' AND worker_id = 'doomed-child'") > 0
	})
	e.must(child.Process.Signal(syscall.SIGKILL))
	child.Wait()

	var (
		mu      sync.Mutex
		runs    = map[string]int{}
		problem atomic.Value
		clients []*skiplock.Client
	)
	fail := func(format string, args ...any) { problem.CompareAndSwap(nil, fmt.Sprintf(format, args...)) }
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("crashy", func(ctx context.Context, job *skiplock.Job) error {
		if rand.IntN(10) == 0 {
			return errors.New("transient failure")
		}
		var a struct{ N int }
		if err := json.Unmarshal(job.Payload, &a); err != nil {
			return err
		}
		return job.SetOutput(map[string]int{"n": a.N})
	}, &skiplock.WorkerOpts{MaxAttempts: 1000}))
	e.must(ws.AddHandler("fparent", func(ctx context.Context, job *skiplock.Job) error {
		mu.Lock()
		runs[job.ID]++
		mu.Unlock()
		kids, err := clients[0].Children(ctx, job.ID)
		if err != nil {
			return err
		}
		sum := 0
		for _, k := range kids {
			var out struct{ N, Sum int }
			if k.State != skiplock.StateSucceeded || json.Unmarshal(k.Output, &out) != nil {
				fail("parent %s ran while child %s was %s (output %s)", job.ID, k.ID, k.State, k.Output)
			}
			sum += out.N + out.Sum
		}
		return job.SetOutput(map[string]int{"sum": sum, "children": len(kids)})
	}, nil))
	for i := range 3 {
		c := e.newClient(skiplock.Config{ID: fmt.Sprintf("survivor-%d", i), Workers: ws, Clock: realClock{},
			Queues:          map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 8}},
			ReclaimInterval: 100 * time.Millisecond, PollInterval: 20 * time.Millisecond,
			RetryPolicy: skiplock.ExponentialBackoff{Base: time.Millisecond, Max: 5 * time.Millisecond}})
		clients = append(clients, c)
	}
	for _, c := range clients {
		startClient(t, c)
	}
	waitFor(t, 3*time.Minute, "the root to succeed", func() bool {
		var st string
		e.must(e.pool.QueryRow(e.ctx, "SELECT status FROM "+e.q("jobs")+" WHERE id = $1", res.ID).Scan(&st))
		return st == "succeeded" || st == "failed"
	})
	if p := problem.Load(); p != nil {
		t.Fatal(p)
	}
	j, err := e.client.JobGet(e.ctx, res.ID)
	e.must(err)
	var out struct{ Sum, Children int }
	e.must(json.Unmarshal(j.Output, &out))
	n := mids * leaves
	if out.Children != mids || out.Sum != n*(n-1)/2 {
		t.Fatalf("root output %s: want %d children and the sum of every leaf's output %d", j.Output, mids, n*(n-1)/2)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 1+mids {
		t.Fatalf("%d parents ran, want %d", len(runs), 1+mids)
	}
	for id, k := range runs {
		if k != 1 {
			t.Fatalf("parent %s ran %d times", id, k)
		}
	}
	reclaimed := scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE attempt_history::text LIKE '%lease_expired%'")
	if reclaimed == 0 {
		t.Fatal("no leaf was reclaimed from the killed worker")
	}
	t.Logf("%d jobs; %d leaves reclaimed from the killed worker; every parent ran once, after its children", 1+mids+n, reclaimed)
}

// One vocabulary for failure policies: each constant is named Failure<Word> after the
// word it stands for, FailurePolicies lists every one, and that word is what the
// database stores, FlowTree reports and an unknown policy's error offers.
func TestFailurePolicyNamesAreTheWordsStoredAndShown(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "flows.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]string{} // constant name → its word
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "FailurePolicy" {
				continue
			}
			for i, name := range vs.Names {
				word, err := strconv.Unquote(vs.Values[i].(*ast.BasicLit).Value)
				if err != nil {
					t.Fatal(err)
				}
				declared[name.Name] = word
			}
		}
	}
	if len(declared) != len(skiplock.FailurePolicies) {
		t.Errorf("flows.go declares %d FailurePolicy constants %v; FailurePolicies lists %v", len(declared), declared, skiplock.FailurePolicies)
	}
	for name, word := range declared {
		if want := "Failure" + strings.ToUpper(word[:1]) + word[1:]; name != want {
			t.Errorf("the policy %q is named %s: name it %s, so code, database, CLI and dashboard use one word", word, name, want)
		}
		if !slices.Contains(skiplock.FailurePolicies, skiplock.FailurePolicy(word)) {
			t.Errorf("FailurePolicies lacks %s", name)
		}
	}

	e := newEnv(t, skiplock.Config{})
	for _, p := range skiplock.FailurePolicies {
		res, err := e.client.EnqueueFlow(e.ctx, skiplock.Flow{Args: parentArgs{Name: string(p)}, OnChildFailure: p, Children: []skiplock.Flow{leaf(1)}})
		e.must(err)
		var stored string
		e.must(e.pool.QueryRow(e.ctx, "SELECT flow_policy FROM "+e.q("jobs")+" WHERE id = $1", res.ID).Scan(&stored))
		root, _, err := e.client.FlowTree(e.ctx, res.ID)
		e.must(err)
		if stored != string(p) || root.Policy != p {
			t.Errorf("policy %q: stored %q, FlowTree shows %q", p, stored, root.Policy)
		}
	}
	_, err = e.client.EnqueueFlow(e.ctx, skiplock.Flow{Args: parentArgs{}, OnChildFailure: "FailureContinue", Children: []skiplock.Flow{leaf(1)}})
	if !errors.Is(err, skiplock.ErrInvalid) || !strings.Contains(err.Error(), "(valid: fail, continue, ignore)") {
		t.Errorf("an unknown policy: %v", err)
	}
}
