package skiplock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/uuidv7"
)

// This file holds flows: a parent job that runs once its children have finished and
// reads their outputs (docs/flows.md).

// Limits of a flow.
const (
	MaxFlowJobs  = 100_000 // jobs in one flow, the parent included
	MaxFlowDepth = 32      // levels below the top-most parent
)

// FailurePolicy says what a parent does when one of its children fails for good
// (failed, or cancelled). Its value is the one word stored (jobs.flow_policy), shown
// (FlowTree, `skiplock flows show`, the dashboard) and named by the constant:
// Failure<Word>.
type FailurePolicy string

// The failure policies. The zero value means FailureFail.
const (
	// FailureFail ("fail") fails the parent as soon as a child fails for good, and
	// cancels its children that have not started; children already running finish.
	FailureFail FailurePolicy = "fail"
	// FailureContinue ("continue") runs the parent once every child has finished,
	// whatever became of them: Children shows the failures.
	FailureContinue FailurePolicy = "continue"
	// FailureIgnore ("ignore") runs the parent once every child has finished, and
	// Children leaves the failed and cancelled ones out.
	FailureIgnore FailurePolicy = "ignore"
)

// FailurePolicies lists the valid failure policies.
var FailurePolicies = []FailurePolicy{FailureFail, FailureContinue, FailureIgnore}

// Flow is a job with children. The job is inserted waiting (StateWaiting) and becomes
// pending once each of its children has finished; children are ordinary jobs with
// their own EnqueueOpts, and may have children of their own.
type Flow struct {
	// The job, as in EnqueueParams: Args, or Kind and Payload.
	Args    JobArgs
	Kind    string
	Payload []byte
	Opts    EnqueueOpts
	// OnChildFailure is this job's policy for its children. Default FailureFail.
	OnChildFailure FailurePolicy
	// Children run before the job. A job without children is inserted pending.
	Children []Flow
}

// FlowResult mirrors a Flow with the ids of its jobs.
type FlowResult struct {
	ID       string       `json:"id"`
	Children []FlowResult `json:"children,omitempty"`
}

// EnqueueFlow inserts a flow in its own transaction on the client's pool, as
// EnqueueFlowTx does in the caller's.
func (c *Client) EnqueueFlow(ctx context.Context, f Flow) (*FlowResult, error) {
	return c.EnqueueFlowTx(ctx, c.pool, f)
}

// EnqueueFlowTx inserts a flow — the job, its children and theirs — in one statement
// in tx (any DB): the flow exists iff tx commits. Every job is validated as EnqueueTx
// validates it (and passes through Config.EnqueueHooks); DeduplicationKey and Unique
// are refused in a flow (a job skipped as a duplicate could never be waited for).
// Either every job is valid and the flow is written, or nothing is.
func (c *Client) EnqueueFlowTx(ctx context.Context, tx DB, f Flow) (*FlowResult, error) {
	if err := checkDB(ctx, tx); err != nil {
		return nil, err
	}
	b := flowBuilder{c: c, ctx: ctx, stamp: hostclock.Now()}
	res, err := b.add(&f, nil, 0)
	if err != nil {
		return nil, err
	}
	if err := c.insertNodes(ctx, tx, b.nodes, b.queues); err != nil {
		return nil, fmt.Errorf("enqueueing a flow of %d job(s): %w", len(b.nodes), err)
	}
	return res, nil
}

// insertNodes inserts validated nodes in one statement: COPY when it can (as
// EnqueueManyTx does), else one INSERT.
func (c *Client) insertNodes(ctx context.Context, tx DB, nodes []store.FlowNode, queues []string) error {
	if copier, ok := tx.(store.Copier); ok && store.CanCopy(tx) && len(nodes) >= copyThreshold {
		if ok, err := c.copyNodes(ctx, copier, tx, nodes, queues); ok || err != nil {
			return err
		}
	}
	n, err := c.store.InsertFlow(ctx, tx, store.NowParam(c.cfg.Clock), nodes, c.coalescer.Tx(queues))
	if err != nil {
		return wrapPgError(err)
	}
	if int(n) != len(nodes) {
		return fmt.Errorf("inserted %d of %d jobs", n, len(nodes))
	}
	c.metrics.inserted.Add(n)
	return nil
}

// copyNodes writes nodes with COPY, with their lane marks (as copyInsert writes a
// batch), when none has a sequence key (whose lock COPY cannot take) and their
// schedule can be expressed as column values; ok is false when they do not qualify.
func (c *Client) copyNodes(ctx context.Context, copier store.Copier, tx DB, nodes []store.FlowNode, queues []string) (ok bool, err error) {
	for i := range nodes {
		if nodes[i].SequenceKey != nil {
			return false, nil
		}
	}
	now := store.NowParam(c.cfg.Clock)
	withRunAt, ok := copySchedule(now, len(nodes), func(i int) *store.InsertParams { return &nodes[i].InsertParams })
	if !ok {
		return false, nil // relative delays need the database's now(): use the statement
	}
	return true, c.copyLaned(ctx, copier, tx, queues, c.coalescer.Tx(queues), len(nodes), func(cp store.Copier, marks store.LaneMarks) error {
		return c.store.CopyFlow(ctx, cp, nodes, withRunAt, now, marks)
	})
}

// flowBuilder validates a flow and flattens it into store nodes, parents first.
type flowBuilder struct {
	c      *Client
	ctx    context.Context
	stamp  time.Time
	nodes  []store.FlowNode
	queues []string
	seen   map[string]bool
}

func (b *flowBuilder) add(f *Flow, parent *[16]byte, depth int) (*FlowResult, error) {
	if depth > MaxFlowDepth {
		return nil, invalid("flow", "deeper than %d levels", MaxFlowDepth)
	}
	if len(b.nodes) >= MaxFlowJobs {
		return nil, invalid("flow", "more than %d jobs", MaxFlowJobs)
	}
	policy := f.OnChildFailure
	if policy == "" {
		policy = FailureFail
	}
	if !slices.Contains(FailurePolicies, policy) {
		return nil, invalid("on_child_failure", "unknown policy %q (valid: %s)", string(f.OnChildFailure), words(FailurePolicies))
	}
	node, err := b.c.memberParams(b.ctx, EnqueueParams{Args: f.Args, Kind: f.Kind, Payload: f.Payload, Opts: f.Opts}, len(b.nodes))
	if err != nil {
		return nil, err
	}
	node.ID, node.ParentID = uuidv7.New(b.stamp, uint32(len(b.nodes))), parent
	if len(f.Children) > 0 {
		p, open := string(policy), len(f.Children)
		node.Waiting, node.Policy, node.Open = true, &p, &open
	}
	b.nodes = append(b.nodes, node)
	b.queue(node.Queue)
	res := &FlowResult{ID: uuidv7.String(node.ID)}
	id := node.ID
	for i := range f.Children {
		child, err := b.add(&f.Children[i], &id, depth+1)
		if err != nil {
			return nil, err
		}
		res.Children = append(res.Children, *child)
	}
	return res, nil
}

func (b *flowBuilder) queue(q string) {
	if b.seen == nil {
		b.seen = map[string]bool{}
	}
	if !b.seen[q] {
		b.seen[q] = true
		b.queues = append(b.queues, q)
	}
}

// memberParams validates job i of a flow or a batch as EnqueueTx would (hooks
// included) and turns it into a store node.
func (c *Client) memberParams(ctx context.Context, jp EnqueueParams, i int) (store.FlowNode, error) {
	for _, h := range c.cfg.EnqueueHooks {
		if err := h(ctx, &jp); err != nil {
			return store.FlowNode{}, fmt.Errorf("job %d: enqueue hook: %w", i, err)
		}
	}
	p, err := c.insertParams(&jp)
	if err != nil {
		return store.FlowNode{}, fmt.Errorf("job %d: %w", i, err)
	}
	if p.DedupKey != nil || p.UniqueKey != nil {
		return store.FlowNode{}, fmt.Errorf("job %d: %w", i,
			invalid("deduplication_key", "DeduplicationKey and Unique cannot be used in a flow or a batch"))
	}
	return store.FlowNode{InsertParams: p}, nil
}

// Child is one child of a flow's parent, as the parent's handler reads it.
type Child struct {
	ID    string   `json:"id"`
	Kind  string   `json:"kind"`
	Queue string   `json:"queue"`
	State JobState `json:"state"`
	// Output is what the child's handler recorded with SetOutput (succeeded only);
	// ChildOutput decodes it.
	Output json.RawMessage `json:"output,omitempty"`
	// LastError is the child's last error (failed, cancelled, or retried).
	LastError string `json:"last_error,omitempty"`
	Attempt   int    `json:"attempt"`
}

// ErrNoOutput is matched (errors.Is) by ChildOutput's error for a child that recorded
// no output: it has not succeeded (failed, cancelled), or its handler never called
// SetOutput.
var ErrNoOutput = errors.New("skiplock: child has no output")

// ChildOutputError is ChildOutput's error: which child, and why its output is not a
// T — Err matches ErrNoOutput when there is none, else it is the JSON decoding error
// (a *json.UnmarshalTypeError for a value of the wrong shape, say).
type ChildOutputError struct {
	ID    string   // the child's id
	Kind  string   // the child's kind
	State JobState // the child's state
	Type  string   // the Go type asked for
	Err   error
}

func (e *ChildOutputError) Error() string {
	if errors.Is(e.Err, ErrNoOutput) {
		return fmt.Sprintf("skiplock: child %s (%s, %s) has no output to decode as %s", e.ID, e.Kind, e.State, e.Type)
	}
	return fmt.Sprintf("skiplock: decoding the output of child %s (%s, %s) as %s: %v", e.ID, e.Kind, e.State, e.Type, e.Err)
}

// Unwrap gives ErrNoOutput or the decoding error.
func (e *ChildOutputError) Unwrap() error { return e.Err }

// ChildOutput decodes the output child recorded (SetOutput) into a T, as a parent's
// handler reads its children:
//
//	children, err := client.Children(ctx, job.ID)
//	for _, c := range children {
//		thumb, err := skiplock.ChildOutput[Thumbnail](c)
//		…
//	}
//
// It decodes as encoding/json does (fields the output has and T lacks are ignored). The
// error is a *ChildOutputError naming the child: one matching ErrNoOutput when the
// child recorded no output, else the decoding error of an output of the wrong shape.
func ChildOutput[T any](child Child) (T, error) {
	var v T
	if len(child.Output) == 0 {
		return v, &ChildOutputError{ID: child.ID, Kind: child.Kind, State: child.State, Type: reflect.TypeFor[T]().String(), Err: ErrNoOutput}
	}
	if err := json.Unmarshal(child.Output, &v); err != nil {
		var zero T
		return zero, &ChildOutputError{ID: child.ID, Kind: child.Kind, State: child.State, Type: reflect.TypeFor[T]().String(), Err: err}
	}
	return v, nil
}

// MaxChildren bounds what Children returns.
const MaxChildren = MaxFlowJobs

// Children returns the children of the job parentID, oldest first, with their states
// and outputs: what a parent's handler reads (call it with job.ID; ClientFromContext
// gives the client, ChildOutput decodes an output). Under the
// FailureIgnore policy the failed and cancelled children are left out. A child that
// was deleted (JobDelete) is missing. ErrNotFound if no job has the id.
func (c *Client) Children(ctx context.Context, parentID string) ([]Child, error) {
	if err := checkAdmin(ctx, parentID); err != nil {
		return nil, err
	}
	rows, err := c.store.Children(ctx, c.pool, parentID, MaxChildren)
	if err != nil {
		return nil, fmt.Errorf("reading the children of job %s: %w", parentID, wrapPgError(err))
	}
	if len(rows) == 0 {
		if _, err := c.JobGet(ctx, parentID); err != nil {
			return nil, err
		}
	}
	out := make([]Child, len(rows))
	for i, r := range rows {
		out[i] = Child{ID: r.ID, Kind: r.Kind, Queue: r.Queue, State: JobState(r.Status), Output: r.Output, Attempt: r.Attempts}
		if r.LastError != nil {
			out[i].LastError = *r.LastError
		}
	}
	return out, nil
}

// FlowNode is a job of a flow's tree, as FlowTree returns it.
type FlowNode struct {
	ID          string   `json:"id"`
	Kind        string   `json:"kind"`
	Queue       string   `json:"queue"`
	State       JobState `json:"state"`
	Attempt     int      `json:"attempt"`
	MaxAttempts int      `json:"max_attempts"`
	LastError   string   `json:"last_error,omitempty"`
	// Policy is a parent's FailurePolicy, and OpenChildren the number of its children
	// that have not finished; empty and 0 for a job without children.
	Policy       FailurePolicy `json:"policy,omitempty"`
	OpenChildren int           `json:"open_children,omitempty"`
	UpdatedAt    time.Time     `json:"updated_at"`
	Children     []*FlowNode   `json:"children,omitempty"`
}

// MaxFlowTree bounds the nodes FlowTree returns; Truncated tells when it cut.
const MaxFlowTree = 10_000

// FlowTree returns the tree of the flow the job id belongs to, from its top-most
// parent down (at most MaxFlowTree jobs, by level; truncated then reports true).
// ErrNotFound if no job has the id. A job outside any flow is a tree of one.
// ErrNotOnCitus on the Citus layout, which refuses flows (docs/citus.md): the tree's
// walk names no key, and Citus refuses such a recursive query.
func (c *Client) FlowTree(ctx context.Context, id string) (root *FlowNode, truncated bool, err error) {
	if err := checkAdmin(ctx, id); err != nil {
		return nil, false, err
	}
	if dist, err := c.store.Distributed(ctx, c.pool); err != nil {
		return nil, false, fmt.Errorf("reading the flow of job %s: %w", id, wrapPgError(err))
	} else if dist {
		return nil, false, c.notOnCitus("flow trees (FlowTree, skiplock flows show)", "the layout refuses flows, and the walk of a tree names no key")
	}
	rows, err := c.store.FlowTree(ctx, c.pool, id, MaxFlowTree+1)
	if err != nil {
		return nil, false, fmt.Errorf("reading the flow of job %s: %w", id, wrapPgError(err))
	}
	if len(rows) == 0 {
		return nil, false, fmt.Errorf("reading the flow of job %s: %w", id, ErrNotFound)
	}
	if len(rows) > MaxFlowTree {
		rows, truncated = rows[:MaxFlowTree], true
	}
	byID := make(map[string]*FlowNode, len(rows))
	for _, r := range rows {
		n := &FlowNode{ID: r.ID, Kind: r.Kind, Queue: r.Queue, State: JobState(r.Status), Attempt: r.Attempts,
			MaxAttempts: r.MaxAttempts, UpdatedAt: r.UpdatedAt}
		if r.LastError != nil {
			n.LastError = *r.LastError
		}
		if r.Policy != nil {
			n.Policy = FailurePolicy(*r.Policy)
		}
		if r.Open != nil {
			n.OpenChildren = *r.Open
		}
		byID[r.ID] = n
		if root == nil {
			root = n
			continue
		}
		if r.ParentID != nil {
			if p := byID[*r.ParentID]; p != nil {
				p.Children = append(p.Children, n)
			}
		}
	}
	if root == nil {
		return nil, false, errors.New("skiplock: empty flow tree")
	}
	return root, truncated, nil
}
