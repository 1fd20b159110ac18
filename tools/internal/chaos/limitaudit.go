package chaos

// The concurrency-limit audit: the slots every claim held, replayed from the
// trigger's record of transitions (audit.go). The rate limit's audit is in
// rateaudit.go.
//
// A claim holds a slot from its own time (the claim's attempted_at, read after its
// snapshot) until the earlier of its end (the time of the transition out of
// 'running'; the latest such time of its transaction, replaySlots) and the end of the
// lease it ended under: a job whose lease ran out frees its slot then, whether or
// not the reclaimer had run. A lease extended after it expired (a heartbeat racing
// the expiry, chaos_revivals) holds no slot from the expiry to the extension. A claim
// still open at the end of the round holds its slot until its lease ends. Both bounds
// of a slot are instants the database recorded; a claim that admitted a job saw
// every end recorded before it (the limited claims are serialised and an end's record
// precedes its commit), so a correct limiter never shows more overlapping slots than
// its limit.
//
// A successor's claim (a slot handed over on the worker, docs/limits.md) holds no
// slot while its predecessor runs under the token the claim recorded with a valid
// lease: its slot is its own claim's span less the spans of that claim of the
// predecessor.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/ident"
)

// slot is one claim's hold on its buckets, over [from, to).
type slot struct {
	job, token, key, worker string
	from, to                time.Time
	how                     string // how it ended: "succeeded", "pending", "lease expired", "open", …
	// predJob and predToken: the claim's predecessor, for a successor ("" if none).
	predJob, predToken string
}

// transition is one row of the record that limitSlots replays: a change of a job's
// status or token (chaos_transitions), or a lease extended after it expired (rev,
// chaos_revivals), with the job's state at the end of the round.
type transition struct {
	job, key, oldStatus, newStatus, token, worker string
	rev                                           bool
	claimedAt, oldLease, expiredAt                *time.Time
	at                                            time.Time
	// xact is the writing transaction (the row's xmin).
	xact int64
	// The claim's predecessor (slot_of, slot_token), for a successor.
	predJob, predToken string
	// The job's state when the round ended.
	jobStatus, jobToken string
	jobLease            *time.Time
}

// limitSlots replays the slots of every claim of queue.
func (r *round) limitSlots(ctx context.Context, queue string) (slots []slot, claims, revivals int, err error) {
	q := ident.Quote(r.schema)
	rows, err := r.h.pool.Query(ctx, `
SELECT x.job_id::text, j.concurrency_key, x.rev, x.old_status, x.new_status, coalesce(x.new_token::text, ''), coalesce(x.worker, ''),
       x.claimed_at, x.old_lease_until, x.at, x.expired_at, x.xact, j.status, coalesce(j.lease_token::text, ''), j.lease_until,
       coalesce(x.slot_of::text, ''), coalesce(x.slot_token::text, '')
FROM (
  SELECT seq, job_id, false AS rev, old_status, new_status, new_token, worker,
         CASE WHEN new_status = 'running' AND new_token IS DISTINCT FROM old_token THEN coalesce(claimed_at, at) END AS claimed_at,
         old_lease_until, at, NULL::timestamptz AS expired_at, xmin::text::bigint AS xact, slot_of, slot_token
  FROM `+q+`.chaos_transitions
  UNION ALL
  SELECT seq, job_id, true, 'running', 'running', token, NULL, NULL, NULL, at, expired_at, xmin::text::bigint, NULL, NULL
  FROM `+q+`.chaos_revivals
) x JOIN `+q+`.jobs j ON j.id = x.job_id
WHERE j.queue = $1
ORDER BY x.job_id, x.seq`, queue)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("reading the transitions of %s: %w", queue, err)
	}
	defer rows.Close()
	var trs []transition
	for rows.Next() {
		var t transition
		if err := rows.Scan(&t.job, &t.key, &t.rev, &t.oldStatus, &t.newStatus, &t.token, &t.worker, &t.claimedAt, &t.oldLease, &t.at,
			&t.expiredAt, &t.xact, &t.jobStatus, &t.jobToken, &t.jobLease, &t.predJob, &t.predToken); err != nil {
			return nil, 0, 0, err
		}
		trs = append(trs, t)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, 0, err
	}
	slots, claims, revivals = replaySlots(trs, wallNow())
	return slots, claims, revivals, nil
}

// replaySlots replays the slots of the claims in trs (ordered by job, then by the
// order of its transitions), with each successor's slot less its predecessor's
// (handedOver). A claim still open when the round ended (at now) holds its slot
// until its lease ends.
//
// The ends one transaction writes take effect together, at its commit: no claim can
// see some of them and not the others. Each is therefore replayed at the latest
// trigger time of its transaction, not its own. The difference matters to a chain
// of handed-over slots whose outcomes commit in one batch: the completer writes its
// rows in id order, and when a successor's row comes first, its own successor would
// otherwise seem to hold a slot while the head of the chain still held it, for the
// microseconds between the two rows.
func replaySlots(trs []transition, now time.Time) (slots []slot, claims, revivals int) {
	endOf := map[int64]time.Time{}
	for _, t := range trs {
		if !t.rev && t.oldStatus == "running" && t.at.After(endOf[t.xact]) {
			endOf[t.xact] = t.at
		}
	}
	var cur *slot
	var last *transition
	closeOpen := func() { // a claim still open when the round ended: until its lease ends
		if cur != nil {
			if last.jobStatus == "running" && last.jobToken == cur.token && last.jobLease != nil {
				cur.to = *last.jobLease
			} else {
				cur.to = now
			}
			cur.how = "open"
			slots = append(slots, *cur)
			cur = nil
		}
	}
	for i := range trs {
		t := &trs[i]
		if last != nil && t.job != last.job {
			closeOpen()
		}
		last = t
		if t.rev {
			revivals++
			if cur != nil {
				end := cur.from
				if t.expiredAt != nil && t.expiredAt.After(end) {
					end = *t.expiredAt
				}
				whole := *cur
				whole.to, whole.how = end, "lease expired, then extended"
				slots = append(slots, whole)
				cur.from = t.at
			}
			continue
		}
		if t.oldStatus == "running" && cur != nil {
			at := endOf[t.xact]
			cur.to, cur.how = at, t.newStatus
			if t.oldLease != nil && t.oldLease.Before(at) {
				cur.to, cur.how = *t.oldLease, "lease expired, then "+t.newStatus
			}
			slots = append(slots, *cur)
			cur = nil
		}
		if t.newStatus == "running" && t.claimedAt != nil {
			claims++
			cur = &slot{job: t.job, token: t.token, key: t.key, worker: t.worker, from: *t.claimedAt, predJob: t.predJob, predToken: t.predToken}
		}
	}
	closeOpen()
	return handedOver(slots), claims, revivals
}

// handedOver returns slots with each successor's spans less its predecessor's: the
// predecessor's spans under the token the successor's claim recorded (a lease
// extended after it expired makes several).
func handedOver(slots []slot) []slot {
	type claim struct{ job, token string }
	spans := map[claim][]slot{}
	for _, s := range slots {
		spans[claim{s.job, s.token}] = append(spans[claim{s.job, s.token}], s)
	}
	var out []slot
	for _, s := range slots {
		if s.predToken == "" {
			out = append(out, s)
			continue
		}
		rest := []slot{s}
		for _, p := range spans[claim{s.predJob, s.predToken}] {
			var next []slot
			for _, r := range rest {
				next = append(next, subtract(r, p.from, p.to)...)
			}
			rest = next
		}
		out = append(out, rest...)
	}
	return out
}

// subtract returns what is left of s outside [from, to): none, one or two slots.
func subtract(s slot, from, to time.Time) []slot {
	if !to.After(s.from) || !from.Before(s.to) {
		return []slot{s}
	}
	var out []slot
	if from.After(s.from) {
		before := s
		before.to, before.how = from, "handed over while its predecessor held the slot"
		out = append(out, before)
	}
	if to.Before(s.to) {
		after := s
		after.from = to
		out = append(out, after)
	}
	return out
}

// bucketPeak is the most slots of one bucket held at once.
type bucketPeak struct {
	bucket string // "" for the queue as a whole, else the concurrency key
	limit  int
	max    int
	at     time.Time   // the first instant max was reached
	over   []overLimit // the first instants above the limit (at most maxEvidence)
	overN  int         // how many instants were above it
	// full and span: how long the bucket held its limit (or more), and from its first
	// slot's start to its last slot's end.
	full, span time.Duration
}

// overLimit is an instant at which a bucket held more slots than its limit.
type overLimit struct {
	at    time.Time
	n     int
	slots []slot
}

// maxEvidence bounds the instants above a limit kept, per bucket, with their slots.
const maxEvidence = 20

// peaks sweeps the slots of each bucket (the queue, and each key with the limit
// limitOf gives it) and returns, per bucket, the most held at once and the instants
// (a claim's start) at which it held more than its limit, with the slots then held.
// Slots are half-open: one ending at the very instant another begins does not
// overlap it.
func peaks(slots []slot, queueLimit int, limitOf func(key string) int) map[string]*bucketPeak {
	type event struct {
		at    time.Time
		delta int
		i     int
	}
	byBucket := map[string][]event{}
	for i, s := range slots {
		if !s.to.After(s.from) {
			continue
		}
		buckets := []string{""}
		if s.key != "" {
			buckets = append(buckets, s.key)
		}
		for _, b := range buckets {
			byBucket[b] = append(byBucket[b], event{s.from, +1, i}, event{s.to, -1, i})
		}
	}
	out := map[string]*bucketPeak{}
	for b, evs := range byBucket {
		sort.Slice(evs, func(i, j int) bool {
			if !evs[i].at.Equal(evs[j].at) {
				return evs[i].at.Before(evs[j].at)
			}
			return evs[i].delta < evs[j].delta // ends first
		})
		p := &bucketPeak{bucket: b, limit: queueLimit}
		if b != "" {
			p.limit = limitOf(b)
		}
		held := map[int]bool{}
		var since time.Time // when the bucket last became full
		p.span = evs[len(evs)-1].at.Sub(evs[0].at)
		for _, e := range evs {
			if e.delta < 0 {
				if len(held) == p.limit {
					p.full += e.at.Sub(since)
				}
				delete(held, e.i)
				continue
			}
			held[e.i] = true
			if len(held) == p.limit {
				since = e.at
			}
			if len(held) > p.max {
				p.max, p.at = len(held), e.at
			}
			if len(held) <= p.limit {
				continue
			}
			if p.overN++; len(p.over) < maxEvidence {
				o := overLimit{at: e.at, n: len(held)}
				for i := range held {
					o.slots = append(o.slots, slots[i])
				}
				sort.Slice(o.slots, func(i, j int) bool { return o.slots[i].from.Before(o.slots[j].from) })
				p.over = append(p.over, o)
			}
		}
		out[b] = p
	}
	return out
}

const tsLayout = "15:04:05.000000"

// fullShare says how much of its span the bucket spent at its limit.
func (p *bucketPeak) fullShare() string {
	if p.span <= 0 {
		return "never"
	}
	return fmt.Sprintf("%.0f%% of %s", 100*p.full.Seconds()/p.span.Seconds(), p.span.Round(time.Second))
}

func (o overLimit) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d slots held at %s:", o.n, o.at.Format(tsLayout))
	for _, s := range o.slots {
		fmt.Fprintf(&b, " [job %s token %s key %q by %s, claimed %s, until %s (%s)]", s.job, s.token, s.key, s.worker,
			s.from.Format(tsLayout), s.to.Format(tsLayout), s.how)
	}
	return b.String()
}

// flow records a flow-control figure in the row (the report prints them).
func flow(row *Row, format string, args ...any) {
	row.Flow = append(row.Flow, fmt.Sprintf(format, args...))
}

func limitOfKey(key string) int {
	if key == vipKey {
		return limVIPMax
	}
	return limKeyMax
}

// verifyLimits audits the slots of lim: no bucket above its limit at any instant,
// the hot key's and the queue's limits reached (else nothing was proven), and every
// job of the queue succeeded.
func verifyLimits(ctx context.Context, r *round, row *Row) error {
	slots, claims, revivals, err := r.limitSlots(ctx, limQueue)
	if err != nil {
		return err
	}
	ps := peaks(slots, limQueueMax, limitOfKey)
	get := func(b string, limit int) *bucketPeak {
		if p := ps[b]; p != nil {
			return p
		}
		return &bucketPeak{bucket: b, limit: limit}
	}
	queue, hot, vip := get("", limQueueMax), get(hotKey, limKeyMax), get(vipKey, limVIPMax)
	var others, othersAt, keys int
	for b, p := range ps {
		if b == "" || b == hotKey || b == vipKey {
			continue
		}
		keys++
		others = max(others, p.max)
		if p.max == p.limit {
			othersAt++
		}
	}
	expired := 0
	successors := map[string]bool{}
	for _, s := range slots {
		if strings.HasPrefix(s.how, "lease expired") {
			expired++
		}
		if s.predToken != "" {
			successors[s.token] = true
		}
	}
	flow(row, "queue %s: max %d of %d (full %s); hot key: max %d of %d (full %s); override key %s: max %d of %d; other keys: max %d of %d (%d of %d keys reached it)",
		limQueue, queue.max, queue.limit, queue.fullShare(), hot.max, hot.limit, hot.fullShare(), vipKey, vip.max, vip.limit, others, limKeyMax, othersAt, keys)
	flow(row, "audited %d slots of %d claims (%d handed over by a predecessor): %d ended by lease expiry, %d leases extended after expiry",
		len(slots), claims, len(successors), expired, revivals)
	r.reportOverLimit(ctx, row, ps)
	if hot.max < hot.limit {
		row.Violations = append(row.Violations, fmt.Sprintf("the hot key's limit never bound (max %d of %d): the round proves nothing", hot.max, hot.limit))
	}
	if queue.max < queue.limit {
		row.Violations = append(row.Violations, fmt.Sprintf("the queue's limit never bound (max %d of %d): the round proves nothing", queue.max, queue.limit))
	}
	if vip.max <= limKeyMax {
		r.note("the override key never ran more than the default allows (max %d): the override was not exercised", vip.max)
	}
	r.checkAllSucceeded(ctx, row, limQueue)
	return nil
}

// reportOverLimit adds a violation for each bucket that held more than its limit
// (the first instant's slots as evidence; at most five buckets in the row), and
// writes every kept instant with the transitions of the jobs involved, and of the
// predecessors their slots came from, to a file in the log directory, which a
// failed run keeps.
func (r *round) reportOverLimit(ctx context.Context, row *Row, ps map[string]*bucketPeak) {
	names := make([]string, 0, len(ps))
	for b, p := range ps {
		if p.overN > 0 {
			names = append(names, b)
		}
	}
	if len(names) == 0 {
		return
	}
	sort.Strings(names)
	path := filepath.Join(r.h.logDir, r.schema+"-limit-audit.txt")
	var file strings.Builder
	jobs := map[string]bool{}
	for i, b := range names {
		p := ps[b]
		name := "queue " + limQueue
		if b != "" {
			name = fmt.Sprintf("key %q", b)
		}
		fmt.Fprintf(&file, "%s (limit %d): above the limit at %d instants, at most %d held\n", name, p.limit, p.overN, p.max)
		for _, o := range p.over {
			fmt.Fprintf(&file, "  %s\n", o)
			for _, s := range o.slots {
				jobs[s.job] = true
			}
		}
		switch {
		case i < 5:
			row.Violations = append(row.Violations, fmt.Sprintf("limit exceeded: %s (limit %d) at %d instants, at most %d held; first: %s (all in %s)",
				name, p.limit, p.overN, p.max, p.over[0], path))
		case i == 5:
			row.Violations = append(row.Violations, fmt.Sprintf("limit exceeded in %d more buckets (see %s)", len(names)-5, path))
		}
	}
	ids := make([]string, 0, len(jobs))
	for id := range jobs {
		ids = append(ids, id)
	}
	// The predecessors a successor's slot came from (slot_of), a few links back, are
	// part of the evidence: an instant's count depends on their spans.
	file.WriteString("\ntransitions of those jobs and of their predecessors (chaos_transitions and chaos_revivals, in order; committed is the\n" +
		"transaction's commit time, track_commit_timestamp):\n")
	q := ident.Quote(r.schema)
	rows, err := r.h.pool.Query(ctx, `WITH RECURSIVE involved(id, depth) AS (
  SELECT x::uuid, 0 FROM unnest($1::text[]) AS x
  UNION
  SELECT t.slot_of, i.depth + 1 FROM involved i JOIN `+q+`.chaos_transitions t ON t.job_id = i.id
  WHERE t.slot_of IS NOT NULL AND i.depth < 4
)
SELECT line FROM (
  SELECT job_id, seq, format('%s seq %s %s->%s token %s->%s by %s at %s committed %s claimed_at %s old_lease_until %s slot_of %s slot_token %s',
    job_id, seq, old_status, new_status, old_token, new_token, worker, at, pg_xact_commit_timestamp(xmin), claimed_at, old_lease_until,
    slot_of, slot_token) AS line
  FROM `+q+`.chaos_transitions WHERE job_id IN (SELECT id FROM involved)
  UNION ALL
  SELECT job_id, seq, format('%s seq %s lease of token %s extended after it expired at %s, to %s, at %s committed %s',
    job_id, seq, token, expired_at, lease_until, at, pg_xact_commit_timestamp(xmin))
  FROM `+q+`.chaos_revivals WHERE job_id IN (SELECT id FROM involved)
) x ORDER BY job_id, seq`, ids)
	if err == nil {
		for rows.Next() {
			var line string
			if rows.Scan(&line) == nil {
				file.WriteString("  " + line + "\n")
			}
		}
		rows.Close()
		err = rows.Err()
	}
	if err == nil {
		err = os.WriteFile(path, []byte(file.String()), 0o644)
	}
	if err != nil {
		r.note("writing the limit audit's evidence: %v", err)
	}
}

// checkAllSucceeded adds a violation for each job of queue that did not succeed.
func (r *round) checkAllSucceeded(ctx context.Context, row *Row, queue string) {
	var total, notOK int64
	err := r.h.pool.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE status <> 'succeeded') FROM "+ident.Quote(r.schema)+".jobs WHERE queue = $1",
		queue).Scan(&total, &notOK)
	switch {
	case err != nil:
		row.Violations = append(row.Violations, fmt.Sprintf("checking the jobs of %s: %v", queue, err))
	case total == 0:
		row.Violations = append(row.Violations, "no job of "+queue+" was enqueued")
	case notOK > 0:
		row.Violations = append(row.Violations, fmt.Sprintf("%d of %d jobs of %s did not succeed", notOK, total, queue))
	}
}
