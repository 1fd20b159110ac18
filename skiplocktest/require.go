package skiplocktest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
)

// RequireOpts narrow the jobs RequireEnqueued, RequireManyEnqueued and
// RequireNotEnqueued match. The zero value (or nil) matches every job of the kind,
// in any state.
type RequireOpts[T skiplock.JobArgs] struct {
	// Schema to read. Default: the client's schema (DefaultSchema without a client).
	Schema string
	// Queue, when set, is the queue the job must be in.
	Queue string
	// Priority, when set, is the priority the job must have: Priority: new(5).
	Priority *int
	// States, when set, are the states the job may be in. Default: any state (a
	// started client may have worked the job already).
	States []skiplock.JobState
	// ScheduledAfter and ScheduledBefore, when set, bound the job's run_at
	// (inclusive): the window a delayed or scheduled job must fall in.
	ScheduledAfter, ScheduledBefore time.Time
	// MaxAttempts, when positive, is the job's max_attempts.
	MaxAttempts int
	// DeduplicationKey, when set, is the job's deduplication key.
	DeduplicationKey string
	// Where, when set, must return true for the job's args (its payload decoded into T).
	Where func(args T) bool
	// Count is, for RequireManyEnqueued, the exact number of jobs that must match.
	// Default: at least one. RequireEnqueued always requires exactly one, and
	// RequireNotEnqueued none.
	Count int
}

// EnqueuedJob is a job found in the database with its payload decoded.
type EnqueuedJob[T skiplock.JobArgs] struct {
	Job  *skiplock.Job
	Args T
}

// RequireEnqueued requires that exactly one job of T's kind matching opts is in the
// client's schema as seen through db — pass the transaction that enqueued it to see
// its uncommitted jobs; nil reads through client.Pool(). It returns the job, decoded.
// Otherwise it fails the test with t.Fatalf, listing the jobs of that kind it found
// and why each does not match.
func RequireEnqueued[T skiplock.JobArgs](t testing.TB, client *skiplock.Client, db skiplock.DB, opts *RequireOpts[T]) *EnqueuedJob[T] {
	t.Helper()
	if opts != nil && opts.Count != 0 && opts.Count != 1 {
		t.Fatalf("skiplocktest: RequireEnqueued requires exactly one job; use RequireManyEnqueued for Count %d", opts.Count)
	}
	found := require(t, "RequireEnqueued", client, db, opts, func(n int) bool { return n == 1 }, "exactly 1")
	return found[0]
}

// RequireManyEnqueued is RequireEnqueued for opts.Count jobs (at least one when
// Count is 0). It returns them in enqueue order.
func RequireManyEnqueued[T skiplock.JobArgs](t testing.TB, client *skiplock.Client, db skiplock.DB, opts *RequireOpts[T]) []*EnqueuedJob[T] {
	t.Helper()
	want, ok, desc := 0, func(n int) bool { return n >= 1 }, "at least 1"
	if opts != nil && opts.Count < 0 {
		t.Fatalf("skiplocktest: RequireManyEnqueued: Count %d is negative (use RequireNotEnqueued to require none)", opts.Count)
	}
	if opts != nil && opts.Count > 0 {
		want = opts.Count
		ok, desc = func(n int) bool { return n == want }, fmt.Sprintf("exactly %d", want)
	}
	return require(t, "RequireManyEnqueued", client, db, opts, ok, desc)
}

// RequireNotEnqueued requires that no job of T's kind matching opts is in the
// client's schema as seen through db (nil: client.Pool()). Otherwise it fails the test
// with t.Fatalf, listing the matching jobs.
func RequireNotEnqueued[T skiplock.JobArgs](t testing.TB, client *skiplock.Client, db skiplock.DB, opts *RequireOpts[T]) {
	t.Helper()
	require(t, "RequireNotEnqueued", client, db, opts, func(n int) bool { return n == 0 }, "no")
}

const (
	queryTimeout = 30 * time.Second
	listLimit    = 20 // jobs listed in a failure message
)

func require[T skiplock.JobArgs](t testing.TB, fn string, client *skiplock.Client, db skiplock.DB, opts *RequireOpts[T], ok func(int) bool, want string) []*EnqueuedJob[T] {
	t.Helper()
	if opts == nil {
		opts = &RequireOpts[T]{}
	}
	schema := opts.Schema
	switch {
	case schema != "":
	case client != nil:
		schema = client.Schema()
	default:
		schema = skiplock.DefaultSchema
	}
	if db == nil {
		if client == nil {
			t.Fatalf("skiplocktest: %s: no db and no client to read through", fn)
		}
		db = client.Pool()
	}
	kind := kindOf[T](t, fn)
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	jobs, err := jobsOfKind(ctx, db, schema, kind)
	if err != nil {
		t.Fatalf("skiplocktest: %s: reading jobs of kind %q in schema %q: %v", fn, kind, schema, err)
	}
	var (
		matched []*EnqueuedJob[T]
		reasons = make([]string, len(jobs))
	)
	for i, j := range jobs {
		var args T
		if err := json.Unmarshal(j.Payload, &args); err != nil {
			reasons[i] = fmt.Sprintf("payload does not decode into %T: %v", args, err)
			continue
		}
		if reasons[i] = opts.mismatch(j, args); reasons[i] == "" {
			matched = append(matched, &EnqueuedJob[T]{Job: j, Args: args})
		}
	}
	if ok(len(matched)) {
		return matched
	}

	var b strings.Builder
	fmt.Fprintf(&b, "skiplocktest: %s: want %s job(s) of kind %q%s; found %d", fn, want, kind, opts.describe(), len(matched))
	if len(jobs) == 0 {
		fmt.Fprintf(&b, ".\nNo job of kind %q is in schema %q", kind, schema)
		if kinds, err := kindCounts(ctx, db, schema); err == nil && len(kinds) > 0 {
			b.WriteString("; it holds:")
			for _, k := range kinds {
				fmt.Fprintf(&b, " %s (%d)", k.Kind, k.Count)
			}
		}
		b.WriteString(".\nJobs enqueued in a transaction that has not committed are seen only through that transaction: pass it as db.")
		t.Fatalf("%s", b.String())
	}
	fmt.Fprintf(&b, ".\nJobs of kind %q in schema %q (%d):", kind, schema, len(jobs))
	for i, j := range jobs {
		if i == listLimit {
			fmt.Fprintf(&b, "\n  … and %d more", len(jobs)-listLimit)
			break
		}
		b.WriteString("\n  ")
		b.WriteString(describeJob(j))
		if reasons[i] == "" {
			b.WriteString("\n      matches")
		} else {
			b.WriteString("\n      does not match: " + reasons[i])
		}
	}
	t.Fatalf("%s", b.String())
	return nil
}

// mismatch says why j (with its decoded args) does not match, or "".
func (o *RequireOpts[T]) mismatch(j *skiplock.Job, args T) string {
	var why []string
	if o.Queue != "" && j.Queue != o.Queue {
		why = append(why, fmt.Sprintf("queue is %q, want %q", j.Queue, o.Queue))
	}
	if o.Priority != nil && j.Priority != *o.Priority {
		why = append(why, fmt.Sprintf("priority is %d, want %d", j.Priority, *o.Priority))
	}
	if len(o.States) > 0 && !slices.Contains(o.States, j.State) {
		why = append(why, fmt.Sprintf("state is %s, want %s", j.State, joinStates(o.States)))
	}
	if !o.ScheduledAfter.IsZero() && j.RunAt.Before(o.ScheduledAfter) {
		why = append(why, fmt.Sprintf("run_at %s is before %s", stamp(j.RunAt), stamp(o.ScheduledAfter)))
	}
	if !o.ScheduledBefore.IsZero() && j.RunAt.After(o.ScheduledBefore) {
		why = append(why, fmt.Sprintf("run_at %s is after %s", stamp(j.RunAt), stamp(o.ScheduledBefore)))
	}
	if o.MaxAttempts > 0 && j.MaxAttempts != o.MaxAttempts {
		why = append(why, fmt.Sprintf("max_attempts is %d, want %d", j.MaxAttempts, o.MaxAttempts))
	}
	if o.DeduplicationKey != "" && j.DeduplicationKey != o.DeduplicationKey {
		why = append(why, fmt.Sprintf("deduplication key is %q, want %q", j.DeduplicationKey, o.DeduplicationKey))
	}
	if len(why) == 0 && o.Where != nil && !o.Where(args) {
		why = append(why, "Where returned false")
	}
	return strings.Join(why, "; ")
}

// describe renders the filters for a failure message.
func (o *RequireOpts[T]) describe() string {
	var f []string
	if o.Queue != "" {
		f = append(f, fmt.Sprintf("queue %q", o.Queue))
	}
	if o.Priority != nil {
		f = append(f, fmt.Sprintf("priority %d", *o.Priority))
	}
	if len(o.States) > 0 {
		f = append(f, "state "+joinStates(o.States))
	}
	if !o.ScheduledAfter.IsZero() {
		f = append(f, "run_at ≥ "+stamp(o.ScheduledAfter))
	}
	if !o.ScheduledBefore.IsZero() {
		f = append(f, "run_at ≤ "+stamp(o.ScheduledBefore))
	}
	if o.MaxAttempts > 0 {
		f = append(f, fmt.Sprintf("max_attempts %d", o.MaxAttempts))
	}
	if o.DeduplicationKey != "" {
		f = append(f, fmt.Sprintf("deduplication key %q", o.DeduplicationKey))
	}
	if o.Where != nil {
		f = append(f, "Where(args) true")
	}
	if len(f) == 0 {
		return ""
	}
	return " with " + strings.Join(f, ", ")
}

func joinStates(states []skiplock.JobState) string {
	s := make([]string, len(states))
	for i, st := range states {
		s[i] = string(st)
	}
	return strings.Join(s, " or ")
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.999999Z") }

// describeJob renders one job on one line for a failure message.
func describeJob(j *skiplock.Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s queue=%s priority=%d state=%s run_at=%s attempt=%d/%d", j.ID, j.Queue, j.Priority, j.State,
		stamp(j.RunAt), j.Attempt, j.MaxAttempts)
	if j.DeduplicationKey != "" {
		fmt.Fprintf(&b, " dedup=%q", j.DeduplicationKey)
	}
	fmt.Fprintf(&b, " payload=%s", clip(string(j.Payload), 200))
	if j.LastError != "" {
		fmt.Fprintf(&b, " last_error=%q", clip(j.LastError, 200))
	}
	return b.String()
}

// clip cuts s to at most n bytes, on a character boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// kindOf returns the kind T names, failing the test if T's Kind panics on the zero
// value (a Kind that reads a field of a nil pointer).
func kindOf[T skiplock.JobArgs](t testing.TB, fn string) (kind string) {
	t.Helper()
	var zero T
	func() {
		defer func() {
			if p := recover(); p != nil {
				kind = ""
				t.Errorf("skiplocktest: %s: %T.Kind() panicked on the zero value: %v", fn, zero, p)
			}
		}()
		kind = zero.Kind()
	}()
	if kind == "" {
		t.Fatalf("skiplocktest: %s: %T names no kind (Kind must return a constant, non-empty string)", fn, zero)
	}
	return kind
}
