package skiplock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/safetext"
	"github.com/skiplock/skiplock/internal/store"
)

// Manual is the low-level, fenced job lifecycle, for tools, tests and callers that
// run their own loop instead of starting the Client: claim due jobs under a lease,
// renew it, and finish each job with one statement conditional on its lease token.
// A started Client does all of this for you (and handler code never needs it: a
// handler returns nil, an error, Snooze, Cancel or Permanent). Every finishing
// method returns ErrLeaseLost when its write changed nothing: the lease expired and
// the job was taken over, or an operator cancelled it; write nothing more for it.
//
//	m := client.Manual()
//	jobs, err := m.Claim(ctx, "default", 10)
//	for _, job := range jobs {
//		// … work outside any transaction; m.Heartbeat(ctx, job) extends the lease …
//		if err := m.Complete(ctx, job); errors.Is(err, skiplock.ErrLeaseLost) {
//			// taken over: write nothing more for this job
//		}
//	}
type Manual struct{ c *Client }

// Manual returns the client's low-level lifecycle API (see Manual).
func (c *Client) Manual() *Manual { return &Manual{c: c} }

// LeaseDuration is how long Claim and Heartbeat lease a job for from the database's
// now (Config.LeaseDuration): a worker renews its jobs well within it (a third is
// the client's own default heartbeat interval).
func (m *Manual) LeaseDuration() time.Duration { return m.c.cfg.LeaseDuration }

// Claim leases up to limit due jobs of queue to this client (worker id Config.ID) for
// Config.LeaseDuration, each under a fresh lease token. A context made with
// ContextWithJob for one of them carries the client too (ClientFromContext). Jobs come back in claim order:
// priority (high first), then run_at, then id. Two claimers never receive the same job.
// Limits apply (LimitSet): Claim leaves pending the jobs they hold back. From a fair
// queue (QueueSetFair) Claim takes the jobs of the queue's keys in turn, from the
// queue's one rotation, and returns them in that order.
// On the Citus layout (docs/citus.md) Claim takes the due jobs of up to 8 of the
// queue's keys in turn, from where the client's last claim of the queue stopped, each
// key's in claim order; limits there are refused (ErrNotOnCitus).
func (m *Manual) Claim(ctx context.Context, queue string, limit int) ([]*Job, error) {
	return m.claim(ctx, queue, limit, 0)
}

// ClaimAhead is Claim for a caller that claims ahead of its executors, as the HTTP
// gateway does for requests not yet arrived: of the jobs it returns, the last ahead in
// claim order are written claimed (StateClaimed), not running, until Start records
// that they were handed to a handler (docs/state_machine.md, "Claimed and running").
// ahead 0 is Claim; ahead ≥ limit claims every job ahead.
func (m *Manual) ClaimAhead(ctx context.Context, queue string, limit, ahead int) ([]*Job, error) {
	if ahead < 0 {
		return nil, invalid("ahead", "must not be negative")
	}
	return m.claim(ctx, queue, limit, min(ahead, max(limit, 0)))
}

// Start records that jobs claimed ahead (ClaimAhead) were handed to their handlers:
// they read running from now on. It renews their leases as Heartbeat does, in one
// statement, and returns the jobs whose lease was lost; a job another transaction has
// locked (its outcome being written) is skipped, neither started nor lost. Starting a
// job that already reads running only renews its lease.
func (m *Manual) Start(ctx context.Context, jobs ...*Job) (lost []*Job, err error) {
	return m.renew(ctx, jobs, true)
}

func (m *Manual) claim(ctx context.Context, queue string, limit, ahead int) ([]*Job, error) {
	c := m.c
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	if err := ident.ValidateQueue(queue); err != nil {
		return nil, invalid("queue", "%v", err)
	}
	if limit < 1 {
		return nil, invalid("limit", "must be at least 1")
	}
	qs, anyKind, err := c.store.LimitScopes(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("claiming jobs from queue %q: reading limits: %w", queue, wrapPgError(err))
	}
	fair, err := c.store.FairQueues(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("claiming jobs from queue %q: reading fair queues: %w", queue, wrapPgError(err))
	}
	dist, err := c.store.Distributed(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("claiming jobs from queue %q: %w", queue, wrapPgError(err))
	}
	p := store.ClaimParams{Queue: queue, WorkerID: c.cfg.ID, Limit: limit, Lease: c.cfg.LeaseDuration, Waiting: ahead}
	var rows []*store.Job
	limited := anyKind || slices.Contains(qs, queue)
	fairAt := slices.IndexFunc(fair, func(f store.FairQueue) bool { return f.Name == queue })
	switch {
	case dist && limited:
		return nil, c.citusLimitRefusal()
	case dist:
		// On the Citus layout every claim names one key: the claim walks the queue's
		// keys from where the client's last manual claim of it stopped.
		if fairAt >= 0 {
			if err := c.citusFairRefusal(ctx, fair[fairAt]); err != nil {
				return nil, err
			}
		}
		rows, _, err = c.store.ClaimCitus(ctx, c.pool, store.NowParam(c.cfg.Clock), p, c.store.CitusCursorOf(queue), nil)
	case fairAt >= 0:
		var res store.FairClaim
		res, err = c.store.ClaimFair(ctx, c.pool, store.NowParam(c.cfg.Clock), p, limited)
		rows = res.Jobs
	case limited:
		var res store.LimitedClaim
		res, err = c.store.ClaimLimited(ctx, c.pool, store.NowParam(c.cfg.Clock), p)
		rows = res.Jobs
	default:
		rows, err = c.store.Claim(ctx, c.pool, store.NowParam(c.cfg.Clock), p)
	}
	if err != nil {
		return nil, fmt.Errorf("claiming jobs from queue %q: %w", queue, wrapPgError(err))
	}
	jobs := make([]*Job, len(rows))
	for i, r := range rows {
		jobs[i] = c.claimed(r)
	}
	return jobs, nil
}

// Heartbeat renews the leases of jobs in one statement and returns the jobs whose
// lease was lost (expired, reclaimed or cancelled). It never changes a lease token. A
// job another transaction has locked (its completion being written, a CompleteTx
// transaction still open) is skipped, not waited for: it is neither renewed nor lost.
func (m *Manual) Heartbeat(ctx context.Context, jobs ...*Job) (lost []*Job, err error) {
	return m.renew(ctx, jobs, false)
}

// renew renews the leases of jobs; started also records that their handlers began.
func (m *Manual) renew(ctx context.Context, jobs []*Job, started bool) (lost []*Job, err error) {
	c := m.c
	if len(jobs) == 0 {
		return nil, nil
	}
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	for i, j := range jobs {
		if j == nil {
			return nil, invalid("jobs", "job %d is nil", i)
		}
	}
	if err := m.learnKeys(ctx, jobs); err != nil {
		return nil, err
	}
	leases := make([]store.Lease, len(jobs))
	for i, j := range jobs {
		leases[i] = j.lease()
	}
	var began []bool
	if started {
		began = make([]bool, len(leases))
		for i := range began {
			began[i] = true
		}
	}
	renewed, err := c.store.Heartbeat(ctx, c.pool, store.NowParam(c.cfg.Clock), leases, c.cfg.LeaseDuration, began)
	if err != nil {
		return nil, fmt.Errorf("renewing %d lease(s): %w", len(jobs), wrapPgError(err))
	}
	for _, j := range jobs {
		if _, held := renewed[j.ID]; !held {
			lost = append(lost, j)
		}
	}
	return lost, nil
}

// Complete marks a running job succeeded. ErrLeaseLost means nothing was written.
func (m *Manual) Complete(ctx context.Context, job *Job) error {
	_, err := m.finishOne(ctx, Finish{Job: job, Action: FinishComplete})
	return err
}

// Retry records cause and makes the job pending again after delay, or failed when
// its attempts are exhausted. A negative delay uses the kind's retry policy. It
// returns the state the job is now in.
func (m *Manual) Retry(ctx context.Context, job *Job, cause error, delay time.Duration) (JobState, error) {
	return m.finishOne(ctx, Finish{Job: job, Action: FinishRetry, Cause: cause, Delay: delay})
}

// Fail marks a running job failed now, whatever attempts remain.
func (m *Manual) Fail(ctx context.Context, job *Job, cause error) error {
	_, err := m.finishOne(ctx, Finish{Job: job, Action: FinishFail, Cause: cause})
	return err
}

// Snooze makes a running job pending again at now+d and gives back the attempt its
// claim counted.
func (m *Manual) Snooze(ctx context.Context, job *Job, d time.Duration) error {
	_, err := m.finishOne(ctx, Finish{Job: job, Action: FinishSnooze, Delay: d})
	return err
}

// Cancel moves a running job this worker holds to 'cancelled'.
func (m *Manual) Cancel(ctx context.Context, job *Job, cause error) error {
	_, err := m.finishOne(ctx, Finish{Job: job, Action: FinishCancel, Cause: cause})
	return err
}

// Handle rebuilds a claimed job from its id and lease token, for a claim made
// elsewhere — a worker in another process or language that holds the pair, as the
// HTTP gateway's workers do (package gateway) — so that Heartbeat, Complete, Fail,
// Snooze, Cancel and FinishMany can renew or finish it. It reads nothing: every
// write stays fenced by the token, so a stale or made-up pair writes nothing and
// returns ErrLeaseLost. Both must be UUIDs (ErrInvalid otherwise).
//
// The handle knows only its ID and LeaseToken (and the client, for
// ClientFromContext): Retry with a negative delay, which needs the job's kind and
// attempt for the retry policy, refuses it; read the job with Client.JobGet for that.
//
// On the Citus layout every write names the job's concurrency key, which a handle
// does not carry: its first heartbeat or finish looks the key up by id (one read of
// every shard per call, for all the handles it writes), then writes as a claimed
// job's would.
func (m *Manual) Handle(id, leaseToken string) (*Job, error) {
	if !isUUID(id) {
		return nil, invalid("id", "%q is not a job id (a UUID)", id)
	}
	if !isUUID(leaseToken) {
		return nil, invalid("lease_token", "%q is not a lease token (a UUID)", leaseToken)
	}
	return &Job{ID: id, LeaseToken: leaseToken, State: StateRunning, client: m.c, keyUnknown: true}, nil
}

// learnKeys gives the handles among jobs (Manual.Handle) their concurrency keys on
// the Citus layout, where a heartbeat or a finish names the key: one lookup for all
// of them. A handle whose job is not found keeps the key "" and its write then finds
// no lease (ErrLeaseLost), as a made-up pair does on one node. Nothing is read on a
// single-node schema.
func (m *Manual) learnKeys(ctx context.Context, jobs []*Job) error {
	c := m.c
	var ids []string
	for _, j := range jobs {
		if j != nil && j.keyUnknown {
			ids = append(ids, j.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	dist, err := c.store.Distributed(ctx, c.pool)
	if err != nil {
		return fmt.Errorf("looking up the keys of %d job handle(s): %w", len(ids), wrapPgError(err))
	}
	if !dist {
		return nil
	}
	keys, err := c.store.CitusJobKeys(ctx, c.pool, ids)
	if err != nil {
		return fmt.Errorf("looking up the keys of %d job handle(s): %w", len(ids), wrapPgError(err))
	}
	for _, j := range jobs {
		if j != nil && j.keyUnknown {
			if k, ok := keys[j.ID]; ok {
				j.ConcurrencyKey, j.keyUnknown = k, false
			}
		}
	}
	return nil
}

// FinishAction is what FinishMany does with a job: the verbs of Complete, Retry,
// Fail, Snooze and Cancel.
type FinishAction string

// The finishing actions.
const (
	FinishComplete FinishAction = "complete" // succeeded, with the output SetOutput recorded
	FinishRetry    FinishAction = "retry"    // pending after Delay (negative: the kind's retry policy), or failed when attempts are exhausted
	FinishFail     FinishAction = "fail"     // failed now, whatever attempts remain
	FinishSnooze   FinishAction = "snooze"   // pending at now+Delay, the attempt given back
	FinishCancel   FinishAction = "cancel"   // cancelled
)

// Finish is one write of FinishMany.
type Finish struct {
	Job    *Job
	Action FinishAction
	// Cause is recorded as the attempt's error by FinishRetry, FinishFail and
	// FinishCancel (through the text policy: valid UTF-8, no NUL, at most 16 KiB).
	Cause error
	// Delay is FinishRetry's wait (negative: the kind's retry policy) and
	// FinishSnooze's; clamped to [0, MaxSchedule].
	Delay time.Duration
}

// FinishMany writes finishes in one statement, each as Complete, Retry, Fail, Snooze
// or Cancel would write it alone (and fenced the same way), for a caller that
// finishes many jobs at once. It returns, in the order given, the state each job is
// now in, or "" for a job whose lease was lost: nothing was written for it, and
// that is not an error. An invalid finish — a nil job, an unknown action, the same
// claim (id and token) given twice — fails the call with ErrInvalid before anything
// is written.
func (m *Manual) FinishMany(ctx context.Context, finishes []Finish) ([]JobState, error) {
	c := m.c
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	if len(finishes) == 0 {
		return nil, nil
	}
	handles := make([]*Job, len(finishes))
	for i, f := range finishes {
		handles[i] = f.Job
	}
	if err := m.learnKeys(ctx, handles); err != nil {
		return nil, err
	}
	outs := make([]store.Outcome, len(finishes))
	seen := make(map[store.Lease]int, len(finishes))
	for i, f := range finishes {
		o, err := c.outcomeOf(f)
		if err != nil {
			if len(finishes) > 1 {
				err = fmt.Errorf("finish %d: %w", i, err)
			}
			return nil, err
		}
		if j, dup := seen[o.Lease]; dup {
			return nil, invalid("finishes", "finishes %d and %d are for the same claim of job %s", j, i, o.ID)
		}
		seen[o.Lease] = i
		outs[i] = o
	}
	res, err := c.writeOutcomes(ctx, c.pool, outs)
	if err != nil {
		if len(outs) == 1 {
			return nil, fmt.Errorf("finishing job %s (%s): %w", outs[0].ID, outs[0].Action, wrapPgError(err))
		}
		return nil, fmt.Errorf("finishing %d jobs: %w", len(outs), wrapPgError(err))
	}
	states := make([]JobState, len(outs))
	for i, o := range outs {
		st, ok := res[o.Lease]
		if !ok {
			c.metrics.leaseLost.Add(1)
			continue
		}
		c.count(o.Action, st)
		states[i] = JobState(st)
	}
	return states, nil
}

// finishOne is FinishMany of one finish, its lost lease an ErrLeaseLost.
func (m *Manual) finishOne(ctx context.Context, f Finish) (JobState, error) {
	states, err := m.FinishMany(ctx, []Finish{f})
	if err != nil {
		return "", err
	}
	if states[0] == "" {
		return "", fmt.Errorf("finishing job %s (%s): %w", f.Job.ID, f.Action, ErrLeaseLost)
	}
	return states[0], nil
}

// outcomeOf checks one finish and turns it into the outcome the store writes.
func (c *Client) outcomeOf(f Finish) (store.Outcome, error) {
	job := f.Job
	if job == nil {
		return store.Outcome{}, invalid("job", "must not be nil")
	}
	o := store.Outcome{Lease: job.lease()}
	switch f.Action {
	case FinishComplete:
		o.Action, o.Output = store.ActionComplete, job.output
	case FinishRetry:
		o.Action, o.Error = store.ActionRetry, safetext.Error(f.Cause)
		if f.Delay < 0 {
			if job.Attempt < 1 {
				return store.Outcome{}, invalid("delay", "job %s knows no attempt (a Manual.Handle): its retry policy cannot be applied; give a delay of 0 or more, or read the job with JobGet", job.ID)
			}
			f.Delay = c.retryPolicy(job.Kind).Delay(job.Attempt)
		}
	case FinishFail:
		o.Action, o.Error = store.ActionFail, safetext.Error(f.Cause)
	case FinishSnooze:
		o.Action = store.ActionSnooze
	case FinishCancel:
		o.Action, o.Error = store.ActionCancel, safetext.Error(f.Cause)
	default:
		return store.Outcome{}, invalid("action", "unknown finishing action %q (complete, retry, fail, snooze or cancel)", f.Action)
	}
	o.Delay = clampDelay(f.Delay)
	return o, nil
}

// Reclaim returns every job whose lease has expired to the queue after its kind's
// retry delay (so a job that crashes its worker backs off like any failure), or fails
// it when its attempts are exhausted. Safe to run from several processes: each
// update is fenced by the lease token and by the lease still being expired.
func (m *Manual) Reclaim(ctx context.Context) (ReclaimResult, error) {
	c := m.c
	if ctx == nil {
		return ReclaimResult{}, invalid("ctx", "must not be nil")
	}
	res, err := c.reclaimer().Reclaim(ctx, c.pool)
	return ReclaimResult(res), wrapPgError(err)
}
