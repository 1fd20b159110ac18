package chaos

// The failover scenarios' verdicts and figures (the checks listed in hawatch.go):
// the invariants read from the database, each component's and worker's time to
// resume, the pickup around each failover, the logs, and what asynchronous
// replication lost (verifyAsync).

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/ident"
)

// verifyHA checks and measures the round's failovers (the checks listed in hawatch.go).
func verifyHA(ctx context.Context, r *round, row *Row) error {
	w := r.ha
	w.stop()
	q := ident.Quote(r.schema)
	db := r.h.pool
	if len(w.failovers) == 0 {
		row.Violations = append(row.Violations, "no failover was completed")
	}
	var baseEnd time.Time
	if len(w.failovers) > 0 {
		baseEnd = w.failovers[0].start
	}
	pickups, err := r.pickups(ctx)
	if err != nil {
		return err
	}
	acks := func() []time.Time {
		r.prod.mu.Lock()
		defer r.prod.mu.Unlock()
		return append([]time.Time(nil), r.prod.ackedAt...)
	}()
	_, firstDeliveries := r.h.consumer.snapshot()
	sort.Slice(firstDeliveries, func(i, j int) bool { return firstDeliveries[i].Before(firstDeliveries[j]) })
	workerIDs := map[string]bool{}
	for _, p := range r.workers {
		workerIDs[p.name] = true
	}
	row.HA = append(row.HA, fmt.Sprintf("baseline pickup (jobs enqueued before the first failover): %s", pickupSummary(pickups, time.Time{}, baseEnd)))
	for i, f := range w.failovers {
		label := fmt.Sprintf("%s #%d (%s → %s)", f.kind, i+1, f.old, f.new)
		if f.promoted.IsZero() {
			row.Violations = append(row.Violations, label+": the new primary was never seen writable")
			continue
		}
		if f.tries == 0 {
			row.Violations = append(row.Violations, label+": the old primary was never probed with a write")
		}
		after := 0
		for _, t := range f.accepted {
			if t.After(f.promoted) {
				after++
			}
		}
		if after > 0 {
			row.Violations = append(row.Violations, fmt.Sprintf("%s: the old primary accepted %d skiplock writes begun after the standby's promotion", label, after))
		}
		r.note("%s: old primary probed %d times (every 50 ms until it was a standby again); %d writes accepted before the promotion, %d after",
			label, f.tries, len(f.accepted)-after, after)
		// The old primary's watcher also writes: a commit of its begun after the
		// promotion that returned is a split brain (writableAfter).
		w.mu.Lock()
		n, from, to := writableAfter(w.writable[f.old], f.promoted, f.healthy.Add(2*time.Second))
		w.mu.Unlock()
		if n > 0 {
			row.Violations = append(row.Violations, fmt.Sprintf("%s: both nodes took writes: the old primary returned %d of its watcher's commits begun after the promotion (from +%s to +%s)",
				label, n, secs(from.Sub(f.start)), secs(to.Sub(f.start))))
		}
		// The window without a writable primary: from the old primary's first failed
		// check to the new one's first writable one. None when the new primary was
		// writable before the old one was seen failing: /readyz is then judged over no
		// window, rather than over one in which the old primary still answered (which
		// counted its correct "ready" as a violation — one CI run's 51 of 51).
		lost := f.noPrimarySince()
		w.mu.Lock()
		readyDuring, probedDuring := 0, 0
		for _, p := range w.probes["readyz"] {
			if !p.start.Before(lost) && !p.end.After(f.promoted) {
				probedDuring++
				if p.ok {
					readyDuring++
				}
			}
		}
		w.mu.Unlock()
		if readyDuring > 0 {
			row.Violations = append(row.Violations, fmt.Sprintf("%s: /readyz said ready %d times of %d while no node was a writable primary", label, readyDuring, probedDuring))
		}
		parts := []string{
			fmt.Sprintf("no writable primary for %s (primary lost +%s, standby writable +%s)", secs(f.promoted.Sub(lost)), secs(lost.Sub(f.start)), secs(f.promoted.Sub(f.start))),
			"producer " + resumeAfter(acks, f),
			"relay " + resumeAfter(firstDeliveries, f),
			"workers " + r.workersResume(ctx, workerIDs, f),
		}
		for _, name := range componentNames {
			parts = append(parts, name+" "+w.componentResume(name, f))
		}
		row.HA = append(row.HA, label+": "+strings.Join(parts, "; "))
		row.HA = append(row.HA, fmt.Sprintf("%s: pickup of jobs enqueued from 1 s before it until it ended: %s; /readyz not ready in all %d probes while no primary",
			label, pickupSummary(pickups, f.start.Add(-time.Second), f.healthy), probedDuring))
	}

	// Leases held at a failover are reclaimed, once (the token changes), and only
	// after they expired.
	var reclaims, early int64
	if err := db.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE at < old_lease_until) FROM "+q+".chaos_transitions WHERE reclaim").Scan(&reclaims, &early); err != nil {
		return fmt.Errorf("reading reclaims: %w", err)
	}
	r.note("%d expired leases reclaimed", reclaims)
	if early > 0 {
		row.Violations = append(row.Violations, fmt.Sprintf("%d leases were reclaimed before they expired", early))
	}

	// The periodic schedule: each fire time once, none missed.
	var fires, twice, missed int64
	var first, last *time.Time
	err = db.QueryRow(ctx, `WITH f AS (
  SELECT (metadata->>$2)::timestamptz AS t, count(*) AS n FROM `+q+`.jobs WHERE kind = $1 GROUP BY 1)
SELECT count(*), count(*) FILTER (WHERE n > 1), min(t), max(t),
  coalesce((SELECT count(*) FROM generate_series((SELECT min(t) FROM f), (SELECT max(t) FROM f), interval '1 second') AS g(t)
            WHERE NOT EXISTS (SELECT 1 FROM f WHERE f.t = g.t)), 0)
FROM f`, tickKind, skiplock.MetaFireTime).Scan(&fires, &twice, &first, &last, &missed)
	if err != nil {
		return fmt.Errorf("reading the periodic fires: %w", err)
	}
	r.note("periodic %s: %d fire times, %d fired twice, %d missed", tickSchedule, fires, twice, missed)
	if fires == 0 {
		row.Violations = append(row.Violations, "the periodic schedule never fired")
	}
	if twice > 0 {
		row.Violations = append(row.Violations, fmt.Sprintf("%d fire times of the periodic schedule fired twice", twice))
	}
	if missed > 0 {
		row.Violations = append(row.Violations, fmt.Sprintf("%d fire times of the periodic schedule never fired", missed))
	}
	r.checkLogsOnce(row, len(w.failovers))
	return nil
}

// noPrimarySince is when the window without a writable primary began: the old
// primary's first failed check, or the promotion (an empty window) when the new
// primary was seen writable first.
func (f *failoverRec) noPrimarySince() time.Time {
	if f.oldLost.IsZero() || f.oldLost.After(f.promoted) {
		return f.promoted
	}
	return f.oldLost
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// resumeAfter says when, from the failover's start, the first of times at or after
// the promotion was.
func resumeAfter(times []time.Time, f *failoverRec) string {
	i := sort.Search(len(times), func(i int) bool { return !times[i].Before(f.promoted) })
	if i == len(times) {
		return "never"
	}
	return "+" + secs(times[i].Sub(f.start))
}

// workersResume is when the last of the round's worker processes completed its first
// job after the promotion, from the failover's start.
func (r *round) workersResume(ctx context.Context, ids map[string]bool, f *failoverRec) string {
	rows, err := r.h.pool.Query(ctx, "SELECT worker, min(at) FROM "+ident.Quote(r.schema)+".chaos_transitions WHERE new_status = 'succeeded' AND at >= $1 AND worker IS NOT NULL GROUP BY worker", f.promoted)
	if err != nil {
		return "unknown: " + err.Error()
	}
	defer rows.Close()
	var last time.Time
	n := 0
	for rows.Next() {
		var worker string
		var at time.Time
		if rows.Scan(&worker, &at) != nil || !ids[worker] {
			continue
		}
		n++
		if at.After(last) {
			last = at
		}
	}
	if n == 0 {
		return "never"
	}
	return fmt.Sprintf("+%s (the last of %d)", secs(last.Sub(f.start)), n)
}

// componentResume is when a probed component answered again after its last failed
// probe of the failover, from the failover's start; "unaffected" if none failed. A
// failure is the failover's when the probe began before the promotion had been
// writable for failoverSlack; later ones (a read slow under load) are counted apart.
func (w *haRun) componentResume(name string, f *failoverRec) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	ps := w.probes[name]
	lastFail, later := -1, 0
	for i, p := range ps {
		if p.start.Before(f.start) || p.ok {
			continue
		}
		if p.start.After(f.healthy.Add(2 * time.Second)) {
			break
		}
		if p.start.After(f.promoted.Add(failoverSlack)) {
			later++
			continue
		}
		lastFail = i
	}
	if lastFail < 0 {
		return "unaffected"
	}
	for _, p := range ps[lastFail+1:] {
		if p.ok {
			s := "+" + secs(p.end.Sub(f.start))
			if later > 0 {
				s += fmt.Sprintf(" (%d failed probes later)", later)
			}
			return s
		}
	}
	return "never"
}

// failoverSlack is how long after the new primary took writes a component's failure
// still counts as the failover's.
const failoverSlack = 10 * time.Second

type pickup struct {
	enqueued time.Time
	wait     time.Duration
}

// pickups returns, for each job of the producer's queue (not the limited queue, whose
// jobs wait behind its limits by design), when its business row was written and how
// long until its first claim.
func (r *round) pickups(ctx context.Context) ([]pickup, error) {
	q := ident.Quote(r.auditSchema())
	rows, err := r.h.pool.Query(ctx, `SELECT e.at, min(t.claimed_at) - e.at FROM `+q+`.chaos_enqueued e
JOIN `+q+`.jobs j ON j.id = e.job_id AND j.queue = $1
JOIN `+q+`.chaos_transitions t ON t.job_id = e.job_id AND t.claimed_at IS NOT NULL
GROUP BY e.job_id, e.at ORDER BY e.at`, skiplock.DefaultQueue)
	if err != nil {
		return nil, fmt.Errorf("reading pickups: %w", err)
	}
	defer rows.Close()
	var out []pickup
	for rows.Next() {
		var p pickup
		if err := rows.Scan(&p.enqueued, &p.wait); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// pickupSummary is the p50, p99 and max pickup of the jobs enqueued in [from, to).
func pickupSummary(ps []pickup, from, to time.Time) string {
	ws := durationsIn(ps, from, to, func(p pickup) (time.Time, time.Duration) { return p.enqueued, p.wait })
	if len(ws) == 0 {
		return "no jobs"
	}
	return fmt.Sprintf("%d jobs, %s", len(ws), durationSummary(ws))
}

// durationsIn returns the durations of the xs that began in [from, to); timed reads
// an x's start and duration.
func durationsIn[T any](xs []T, from, to time.Time, timed func(T) (time.Time, time.Duration)) []time.Duration {
	var ds []time.Duration
	for _, x := range xs {
		if at, d := timed(x); !at.Before(from) && at.Before(to) {
			ds = append(ds, d)
		}
	}
	return ds
}

// durationSummary is the p50, p99 and max of ds (not empty), which it sorts.
func durationSummary(ds []time.Duration) string {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
	return fmt.Sprintf("p50 %s, p99 %s, max %s", ms(at(0.50)), ms(at(0.99)), ms(ds[len(ds)-1]))
}

var (
	warnLine = regexp.MustCompile(`level=WARN msg="([^"]*)"`)
	// outageLine matches the lines an outage makes a process write — an operation
	// failing and recovering (internal/failures), the listener's loss and return —
	// which must come once per outage, not once per retry. Other warnings are about
	// one job each (a lease lost, a claim undone) and are counted, not judged.
	outageLine = regexp.MustCompile(` (failed|recovered)$|^notify: listener `)
)

// maxTransientOutages is how many outages beyond the failovers' own a process may log
// in a failover round, each lost and then recovered: on a loaded machine a statement
// can time out and succeed on its retry (one CI run: a worker's heartbeat timed out 9 s
// before the failover and 8 s after it, each recovered within 60 ms, three outages
// logged once each over one failover). A line per retry is judged apart: the loss
// logged again before its recovery.
const maxTransientOutages = 3

// outageOf names the operation an outage line is about, and whether the line is its
// loss (false: its recovery); ok is false for other lines.
func outageOf(msg string) (op string, lost, ok bool) {
	switch {
	case strings.HasSuffix(msg, " failed"):
		return strings.TrimSuffix(msg, " failed"), true, true
	case strings.HasSuffix(msg, " recovered"):
		return strings.TrimSuffix(msg, " recovered"), false, true
	case strings.HasPrefix(msg, "notify: listener "):
		return "notify: listener", !strings.Contains(msg, "reconnected"), true
	}
	return "", false, false
}

// maxRelapseLines bounds the recoveries per failover a process may log after its
// outage relapsed: a failover flaps a few times (one CI run: a claim recovered, relapsed
// twice within RelapseWindow, and logged three recoveries); a line per retry would be
// dozens.
const maxRelapseLines = 5

// checkLogsOnce reads the round's worker and relay logs: an outage is logged once per
// process and operation (its loss, its recovery), not once per retry. A failover
// may cut a process off twice (the old primary's drain, then its shutdown), so each
// such line may appear twice per failover, and maxTransientOutages more; a line per
// retry would be dozens, and a loss logged again before its recovery is one.
func (r *round) checkLogsOnce(row *Row, failovers int) {
	r.mu.Lock()
	procs := append(append([]*proc(nil), r.workers...), r.relays...)
	r.mu.Unlock()
	worst, worstMsg, worstProc := 0, "", ""
	perJob := map[string]int{}
	for _, p := range procs {
		f, err := os.Open(filepath.Join(r.h.logDir, p.name+".log"))
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(f)
		f.Close()
		counts, relapses, repeats := map[string]int{}, map[string]int{}, map[string]int{}
		open := map[string]bool{} // an outage's loss logged and its recovery not yet
		for _, ln := range strings.Split(string(b), "\n") {
			m := warnLine.FindStringSubmatch(ln)
			if m == nil {
				continue
			}
			// A recovery of an outage that relapsed (internal/failures.RelapseWindow:
			// a flapping failover) says so, and is a later word on the same outage:
			// counted apart, with its own bound.
			if outageLine.MatchString(m[1]) && strings.Contains(ln, " relapses=") {
				relapses[m[1]]++
				continue
			}
			counts[m[1]]++
			if op, lost, ok := outageOf(m[1]); ok {
				if lost && open[op] {
					repeats[m[1]]++ // lost again before it recovered: a line per retry
				}
				open[op] = lost
			}
		}
		for msg, n := range counts {
			if !outageLine.MatchString(msg) {
				perJob[msg] += n
				continue
			}
			if n > worst {
				worst, worstMsg, worstProc = n, msg, p.name
			}
			if repeats[msg] > 0 || n > 2*max(failovers, 1)+maxTransientOutages {
				row.Violations = append(row.Violations, fmt.Sprintf("%s logged %q %d times over %d failovers: once per retry, not once per outage", p.name, msg, n, failovers))
			}
		}
		for msg, n := range relapses {
			r.note("logs: %s logged %q %d more times after a relapse (the same outage, relapses=N)", p.name, msg, n)
			if n > maxRelapseLines*max(failovers, 1) {
				row.Violations = append(row.Violations, fmt.Sprintf("%s logged %q %d times after relapses over %d failovers: a line per flap", p.name, msg, n, failovers))
			}
		}
	}
	if worst > 0 {
		r.note("logs: the most repeated outage line was %q, %d times in %s, over %d failovers", worstMsg, worst, worstProc, failovers)
	}
	for msg, n := range perJob {
		r.note("logs: %d per-job warnings %q", n, msg)
	}
}

// verifyAsync is verifyHA, then the measure of what the lost primary took with it:
// the acknowledged commits missing at the end, when each was acknowledged before the
// kill, and that each is missing whole (no job, no event without its business row).
func verifyAsync(ctx context.Context, r *round, row *Row) error {
	if err := verifyHA(ctx, r, row); err != nil {
		return err
	}
	q := ident.Quote(r.schema)
	db := r.h.pool
	r.prod.mu.Lock()
	acked := append([]string(nil), r.prod.acked...)
	ackedAt := append([]time.Time(nil), r.prod.ackedAt...)
	r.prod.mu.Unlock()
	rows, err := db.Query(ctx, "SELECT a.id::text FROM unnest($1::text[]) WITH ORDINALITY AS a(id, n) WHERE NOT EXISTS (SELECT 1 FROM "+q+".chaos_enqueued e WHERE e.job_id = a.id::uuid) ORDER BY a.n", acked)
	if err != nil {
		return fmt.Errorf("reading lost commits: %w", err)
	}
	lost := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		lost[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var lostIDs []string
	var earliest, latest time.Duration
	// sinceKill is t from the start of the kill nearest to it.
	sinceKill := func(t time.Time) time.Duration {
		var best time.Duration
		for i, f := range r.ha.failovers {
			if d := t.Sub(f.start); i == 0 || d.Abs() < best.Abs() {
				best = d
			}
		}
		return best
	}
	for i, id := range acked {
		if !lost[id] || i >= len(ackedAt) {
			continue
		}
		lostIDs = append(lostIDs, id)
		d := sinceKill(ackedAt[i])
		if len(lostIDs) == 1 || d < earliest {
			earliest = d
		}
		if len(lostIDs) == 1 || d > latest {
			latest = d
		}
	}
	var halfJobs, halfEvents, orphanEvents int64
	err = db.QueryRow(ctx, `SELECT
  (SELECT count(*) FROM `+q+`.jobs WHERE id::text = ANY($1)),
  (SELECT count(*) FROM `+q+`.outbox WHERE aggregate_id = ANY($1)),
  (SELECT count(*) FROM `+q+`.outbox o WHERE NOT EXISTS (SELECT 1 FROM `+q+`.chaos_enqueued e WHERE e.event_id = o.id))`, lostIDs).Scan(&halfJobs, &halfEvents, &orphanEvents)
	if err != nil {
		return fmt.Errorf("checking that lost commits are lost whole: %w", err)
	}
	if halfJobs > 0 || halfEvents > 0 || orphanEvents > 0 {
		row.Violations = append(row.Violations, fmt.Sprintf("lost only in part: %d jobs and %d events of lost commits remain; %d events have no business row", halfJobs, halfEvents, orphanEvents))
	}
	rpo := fmt.Sprintf("asynchronous replication, primary lost: %d of %d acknowledged commits lost (%d jobs/s)", len(lostIDs), len(acked), r.p.rate)
	if len(lostIDs) > 0 {
		rpo += fmt.Sprintf(", acknowledged from %+.2fs to %+.2fs of their kill's start (the SIGKILL lands after `ha.sh kill` has asked the monitor which node is primary)",
			earliest.Seconds(), latest.Seconds())
	}
	row.HA = append(row.HA, rpo+fmt.Sprintf("; lost whole: %d of their jobs and %d of their events remain, %d events without a business row", halfJobs, halfEvents, orphanEvents))
	return nil
}
