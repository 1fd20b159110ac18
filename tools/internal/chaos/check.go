package chaos

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skiplock/skiplock/internal/ident"
)

// Row is one scenario's result (summed over its rounds in a soak).
type Row struct {
	Scenario      string
	Runs          int
	Jobs          int64
	Events        int64
	Lost          int64
	DoubleSuccess int64
	StaleWrites   int64
	Duplicates    int64 // deliveries beyond the first of an event
	// Recovery is the worst time, over the scenario's faults, from a fault's end until
	// throughput was back to half its pre-fault rate; negative when it never was.
	Recovery   time.Duration
	Faults     int
	Skipped    string
	Violations []string
	Notes      []string
	// Flow holds the flow-control scenarios' figures: the most slots each limit's
	// bucket held at once beside the limit, the busiest rate window.
	Flow []string
	// Pickup holds the mvcc-pin scenario's windows (a header line, one line per
	// window) and, last, its summary.
	Pickup []string
	// HA holds the failover scenarios' figures (hawatch.go): per failover, when each
	// component worked again, and the pickup latency around it.
	HA []string
}

func (r *Row) ok() bool { return len(r.Violations) == 0 }

func (r *Row) progressLine(p params) string {
	status := "ok"
	switch {
	case r.Skipped != "":
		status = "skipped: " + r.Skipped
	case !r.ok():
		status = "FAIL: " + strings.Join(r.Violations, "; ")
	}
	var flow string
	if len(r.Flow) > 0 {
		flow = " [" + strings.Join(r.Flow, "; ") + "]"
	}
	if len(r.Pickup) > 0 {
		flow += " [" + r.Pickup[len(r.Pickup)-1] + "]"
	}
	return fmt.Sprintf("chaos: %-18s jobs=%d events=%d faults=%d lost=%d double=%d stale=%d dup=%d recovery=%s phase=%s%s %s",
		r.Scenario, r.Jobs, r.Events, r.Faults, r.Lost, r.DoubleSuccess, r.StaleWrites, r.Duplicates, fmtRecovery(r.Recovery), p.faultPhase, flow, status)
}

// Report is the outcome of a chaos run.
type Report struct {
	Seed    uint64
	Soak    bool
	Elapsed time.Duration
	Rows    []*Row // in first-run order, one per scenario
	LogDir  string // children's logs, kept when something failed
}

func (rep *Report) add(r *Row) {
	for _, have := range rep.Rows {
		if have.Scenario != r.Scenario {
			continue
		}
		if have.Skipped != "" && r.Skipped == "" {
			have.Skipped = ""
		}
		have.Runs += r.Runs
		have.Jobs += r.Jobs
		have.Events += r.Events
		have.Lost += r.Lost
		have.DoubleSuccess += r.DoubleSuccess
		have.StaleWrites += r.StaleWrites
		have.Duplicates += r.Duplicates
		have.Faults += r.Faults
		if r.Recovery < 0 || (have.Recovery >= 0 && r.Recovery > have.Recovery) {
			have.Recovery = r.Recovery
		}
		have.Violations = append(have.Violations, r.Violations...)
		have.Notes = append(have.Notes, r.Notes...)
		have.Flow = append(have.Flow, r.Flow...)
		have.Pickup = append(have.Pickup, r.Pickup...)
		have.HA = append(have.HA, r.HA...)
		return
	}
	rep.Rows = append(rep.Rows, r)
}

// OK reports whether every invariant held in every round.
func (rep *Report) OK() bool {
	for _, r := range rep.Rows {
		if !r.ok() {
			return false
		}
	}
	return true
}

func fmtRecovery(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f", d.Seconds())
}

// WriteTable prints the report: one line per scenario, then violations and notes.
func (rep *Report) WriteTable(w io.Writer) {
	kind := "short profile"
	if rep.Soak {
		kind = "soak"
	}
	fmt.Fprintf(w, "skiplock chaos (%s), seed %d, %s\n\n", kind, rep.Seed, rep.Elapsed.Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\truns\tfaults\tjobs\tevents\tlost\tdouble success\tstale writes\tduplicates delivered\trecovery s\tresult\t")
	for _, r := range rep.Rows {
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\tskipped: %s\t\n", r.Scenario, r.Skipped)
			continue
		}
		result := "ok"
		if !r.ok() {
			result = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t\n", r.Scenario, r.Runs, r.Faults, r.Jobs, r.Events, r.Lost,
			r.DoubleSuccess, r.StaleWrites, r.Duplicates, fmtRecovery(r.Recovery), result)
	}
	tw.Flush()
	for _, r := range rep.Rows {
		for _, v := range r.Violations {
			fmt.Fprintf(w, "\nVIOLATION %s: %s", r.Scenario, v)
		}
	}
	var flows []string
	for _, r := range rep.Rows {
		for _, f := range r.Flow {
			flows = append(flows, r.Scenario+": "+f)
		}
	}
	if len(flows) > 0 {
		fmt.Fprintln(w, "\n\nflow control (most held at once vs limit):")
		for _, f := range flows {
			fmt.Fprintln(w, "  "+f)
		}
	}
	for _, r := range rep.Rows {
		if len(r.Pickup) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n\npickup latency per window, %s (run_at → the handler's first write):\n", r.Scenario)
		for _, l := range r.Pickup {
			fmt.Fprintln(w, "  "+l)
		}
	}
	for _, r := range rep.Rows {
		if len(r.HA) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n\nfailovers, %s (times from each failover's start; pickup: business row written → first claim):\n", r.Scenario)
		for _, l := range r.HA {
			fmt.Fprintln(w, "  "+l)
		}
	}
	var notes []string
	for _, r := range rep.Rows {
		seen := map[string]bool{}
		for _, n := range r.Notes {
			if !seen[n] {
				seen[n] = true
				notes = append(notes, r.Scenario+": "+n)
			}
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w, "\n\nnotes:")
		for _, n := range notes {
			fmt.Fprintln(w, "  "+n)
		}
	}
	if rep.LogDir != "" {
		fmt.Fprintf(w, "\nlogs (child processes; HA cluster: ha-*): %s\n", rep.LogDir)
	}
	if rep.OK() {
		fmt.Fprintln(w, "\nall invariants held")
	} else {
		// Repeated last, shortened: a CI log often keeps only its tail.
		fmt.Fprintln(w)
		for _, r := range rep.Rows {
			for _, v := range r.Violations {
				if rs := []rune(v); len(rs) > 300 {
					v = string(rs[:300]) + "…"
				}
				fmt.Fprintf(w, "violated in %s: %s\n", r.Scenario, v)
			}
		}
		fmt.Fprintf(w, "INVARIANTS VIOLATED; replay with --seed %d\n", rep.Seed)
	}
}

// check computes the round's row from the database and the harness's own records.
func (r *round) check(ctx context.Context, baselineFrom, faultsFrom time.Time) (*Row, error) {
	row := &Row{Scenario: r.s.name, Runs: 1}
	q := ident.Quote(r.auditSchema())
	db := r.h.pool
	one := func(what, sql string, args ...any) int64 {
		var n int64
		if err := db.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			row.Violations = append(row.Violations, fmt.Sprintf("checking %s: %v", what, err))
		}
		return n
	}
	acked, rolledBack, ambiguous, failedTx := r.prod.results()
	for _, p := range r.probes { // the failover scenarios' writes to the old primary
		a, _, _, _ := p.results()
		acked = append(acked, a...)
	}
	row.Jobs = one("jobs", "SELECT count(*) FROM "+q+".chaos_enqueued")
	row.Faults = len(r.faults)

	// lost: acknowledged commits that are gone, committed jobs that vanished or are
	// stuck, rolled-back work that exists.
	missingAcked := one("acknowledged commits", "SELECT count(*) FROM unnest($1::uuid[]) AS a(id) WHERE NOT EXISTS (SELECT 1 FROM "+q+".chaos_enqueued e WHERE e.job_id = a.id)", acked)
	vanished := one("vanished jobs", "SELECT count(*) FROM "+q+".chaos_enqueued e WHERE NOT EXISTS (SELECT 1 FROM "+q+".jobs j WHERE j.id = e.job_id)")
	stuck := one("stuck jobs", `SELECT count(*) FROM `+q+`.chaos_enqueued e JOIN `+q+`.jobs j ON j.id = e.job_id
WHERE NOT (j.status IN ('succeeded', 'failed', 'cancelled')
           OR (j.status = 'running' AND j.lease_until > now())
           OR (j.status = 'pending' AND j.run_at > now()))`)
	phantom := one("rolled-back jobs", "SELECT count(*) FROM "+q+".jobs WHERE id::text = ANY($1)", rolledBack) +
		one("rolled-back events", "SELECT count(*) FROM "+q+".outbox WHERE id::text = ANY($1)", rolledBack)
	unmarked := one("extra jobs", "SELECT count(*) FROM "+q+".jobs j WHERE j.kind <> $1 AND NOT EXISTS (SELECT 1 FROM "+q+".chaos_enqueued e WHERE e.job_id = j.id)", tickKind)
	row.Lost = missingAcked + vanished + stuck
	if r.s.async {
		// Asynchronous replication loses what the standby had not received: measured
		// (and checked to be lost whole) by verifyAsync, not a violation.
		row.Lost -= missingAcked
	} else if missingAcked > 0 {
		row.Violations = append(row.Violations, fmt.Sprintf("%d acknowledged commits are missing (durability)", missingAcked))
	}
	if vanished > 0 {
		row.Violations = append(row.Violations, fmt.Sprintf("%d committed jobs vanished", vanished))
	}
	if stuck > 0 {
		row.Violations = append(row.Violations, fmt.Sprintf("%d jobs neither finished nor correctly pending/running at the end", stuck))
	}
	if phantom > 0 || unmarked > 0 {
		row.Violations = append(row.Violations, fmt.Sprintf("exists without commit: %d rolled-back rows exist, %d jobs without their transaction's marker", phantom, unmarked))
	}
	if failedN := one("failed jobs", "SELECT count(*) FROM "+q+".jobs WHERE status = 'failed'"); failedN > 0 {
		r.note("%d jobs failed (attempts exhausted)", failedN)
	}
	if ambiguous > 0 || failedTx > 0 {
		r.note("producer: %d commits with an ambiguous outcome, %d transactions failed before commit (faults hit the producer too)", ambiguous, failedTx)
		if why := r.prod.failures(); len(why) > 0 {
			r.note("producer: the first errors: %s", strings.Join(why, " | "))
		}
	}
	if committed, offered, short := r.prod.floorShortfall(r.p.rate); short {
		row.Violations = append(row.Violations, fmt.Sprintf("the producer committed %d jobs, fewer than %.0f%% of the %d it offered: the round's load did not run (%d transactions failed before commit; first errors: %s)",
			committed, openFloor*100, offered, failedTx, strings.Join(r.prod.failures(), " | ")))
	}

	// double success and stale writes, from the trigger's audit.
	row.DoubleSuccess = one("double success", "SELECT count(*) FROM (SELECT job_id FROM "+q+".chaos_transitions WHERE new_status = 'succeeded' GROUP BY job_id HAVING count(*) > 1) AS d")
	if row.DoubleSuccess > 0 {
		row.Violations = append(row.Violations, fmt.Sprintf("%d jobs succeeded twice: %s", row.DoubleSuccess,
			r.sample(ctx, "SELECT job_id::text FROM "+q+".chaos_transitions WHERE new_status = 'succeeded' GROUP BY job_id HAVING count(*) > 1 LIMIT 3")))
	}
	staleTrig := one("stale transitions", "SELECT count(*) FROM "+q+".chaos_transitions WHERE stale")
	if staleTrig > 0 {
		row.Violations = append(row.Violations, fmt.Sprintf("%d transitions out of running with a token that is not the latest claim's: %s", staleTrig,
			r.sample(ctx, "SELECT format('job %s %s->%s old_token %s latest %s by %s', job_id, old_status, new_status, old_token, latest_claim, app) FROM "+q+".chaos_transitions WHERE stale LIMIT 3")))
	}
	// The low-level Complete said ErrLeaseLost, yet a row changed under its token.
	lostButWritten := one("lease-lost completions that wrote", `SELECT count(*) FROM `+q+`.chaos_audit a
WHERE a.event = 'manual_lease_lost' AND EXISTS (SELECT 1 FROM `+q+`.chaos_transitions t
  WHERE t.job_id = a.job_id AND t.old_token = a.lease_token AND t.new_status = 'succeeded')`)
	if lostButWritten > 0 {
		row.Violations = append(row.Violations, fmt.Sprintf("%d Complete calls returned ErrLeaseLost but their write changed the row", lostButWritten))
	}
	// The library reported a success that the database does not hold.
	phantomAck := one("acknowledged successes", `SELECT count(*) FROM `+q+`.chaos_audit a
WHERE a.event IN ('ack_succeeded', 'manual_ok') AND NOT EXISTS (SELECT 1 FROM `+q+`.chaos_transitions t
  WHERE t.job_id = a.job_id AND t.old_token = a.lease_token AND t.new_status = 'succeeded')`)
	if phantomAck > 0 && r.s.async {
		r.note("%d successes acknowledged to workers were lost with the primary (asynchronous replication); their jobs ran again", phantomAck)
		phantomAck = 0
	}
	if phantomAck > 0 {
		row.Violations = append(row.Violations, fmt.Sprintf("%d successes were acknowledged to workers but no transition to succeeded holds their token: %s", phantomAck,
			r.sample(ctx, `SELECT format('job %s ack token %s; transitions [%s]; audit [%s]', a.job_id, a.lease_token,
  (SELECT string_agg(format('%s->%s old=%s new=%s att=%s by %s at %s', t.old_status, t.new_status, t.old_token, t.new_token, t.new_attempts, t.app, t.at), ', ' ORDER BY t.seq)
   FROM `+q+`.chaos_transitions t WHERE t.job_id = a.job_id),
  (SELECT string_agg(format('%s %s tok=%s at %s', b.event, b.worker, b.lease_token, b.at), ', ' ORDER BY b.seq)
   FROM `+q+`.chaos_audit b WHERE b.job_id = a.job_id))
FROM `+q+`.chaos_audit a
WHERE a.event IN ('ack_succeeded', 'manual_ok') AND NOT EXISTS (SELECT 1 FROM `+q+`.chaos_transitions t
  WHERE t.job_id = a.job_id AND t.old_token = a.lease_token AND t.new_status = 'succeeded')
LIMIT 3`)))
	}
	row.StaleWrites = staleTrig + lostButWritten + phantomAck
	if misreported := one("misreported outcomes", `SELECT count(*) FROM `+q+`.chaos_audit a
WHERE a.event = 'ack_lease_lost' AND EXISTS (SELECT 1 FROM `+q+`.chaos_transitions t
  WHERE t.job_id = a.job_id AND t.old_token = a.lease_token AND t.new_status IN ('succeeded', 'failed', 'cancelled'))`); misreported > 0 {
		r.note("%d outcomes were written but reported to the worker as lease_lost (a completion batch retried after an ambiguous failure)", misreported)
	}
	if r.s.zombie {
		var late, rejected, changed int64
		err := db.QueryRow(ctx, `WITH late AS (
  SELECT a.job_id, a.lease_token FROM `+q+`.chaos_audit a
  WHERE a.event IN ('manual_ok', 'manual_lease_lost', 'manual_error')
    AND EXISTS (SELECT 1 FROM `+q+`.chaos_transitions t WHERE t.job_id = a.job_id AND t.old_token = a.lease_token AND t.new_status = 'pending'))
SELECT (SELECT count(*) FROM late),
       (SELECT count(*) FROM `+q+`.chaos_audit a JOIN late USING (job_id, lease_token) WHERE a.event = 'manual_lease_lost'),
       (SELECT count(*) FROM `+q+`.chaos_transitions t JOIN late l ON l.job_id = t.job_id AND l.lease_token = t.old_token WHERE t.new_status = 'succeeded')`).Scan(&late, &rejected, &changed)
		if err != nil {
			row.Violations = append(row.Violations, "checking the zombie: "+err.Error())
		}
		r.note("zombie: %d late completions after its leases were reclaimed, %d rejected with ErrLeaseLost, %d rows changed", late, rejected, changed)
		if changed > 0 {
			row.Violations = append(row.Violations, fmt.Sprintf("the zombie's late completions changed %d rows", changed))
		}
		if late == 0 {
			r.note("zombie: no completion arrived after a reclaim this round (timing); the fencing check was not exercised")
		}
	}

	// The outbox: every committed event delivered and processed exactly once.
	if r.s.outbox {
		delivered, firsts := r.h.consumer.snapshot()
		rows, err := db.Query(ctx, "SELECT e.event_id::text, (SELECT count(*) FROM "+q+".chaos_consumed c WHERE c.event_id = e.event_id::text) FROM "+q+".chaos_enqueued e WHERE e.event_id IS NOT NULL")
		if err != nil {
			return nil, fmt.Errorf("reading committed events: %w", err)
		}
		committed := map[string]bool{}
		var undelivered, doubleProcessed int64
		for rows.Next() {
			var id string
			var consumed int64
			if err := rows.Scan(&id, &consumed); err != nil {
				rows.Close()
				return nil, err
			}
			committed[id] = true
			if delivered[id] == 0 {
				undelivered++
			}
			if consumed > 1 {
				doubleProcessed++
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		row.Events = int64(len(committed))
		row.Lost += undelivered
		if undelivered > 0 {
			row.Violations = append(row.Violations, fmt.Sprintf("%d committed events were never delivered", undelivered))
		}
		if doubleProcessed > 0 {
			row.Violations = append(row.Violations, fmt.Sprintf("%d events were processed twice despite the inbox", doubleProcessed))
		}
		var unexpected, strangers []string
		for id, n := range delivered {
			if !committed[id] {
				strangers = append(strangers, id)
			}
			if n > 1 {
				row.Duplicates += int64(n - 1)
				if !r.s.relayFaults || (r.s.holdOnly && !r.holdIDs[id]) {
					unexpected = append(unexpected, id)
				}
			}
		}
		if len(strangers) > 0 && r.s.async {
			r.note("%d events were delivered, then lost with the primary (asynchronous replication): the consumer saw what the database no longer holds", len(strangers))
			strangers = nil
		}
		if len(strangers) > 0 {
			row.Violations = append(row.Violations, fmt.Sprintf("%d delivered events were never committed: %s", len(strangers), first3(strangers)))
		}
		if len(unexpected) > 0 {
			row.Violations = append(row.Violations, fmt.Sprintf("%d events delivered more than once outside any publish/mark crash window: %s", len(unexpected), first3(unexpected)))
		}
		if len(r.holdIDs) > 0 {
			var redelivered int
			for id := range r.holdIDs {
				if delivered[id] > 1 {
					redelivered++
				}
			}
			r.note("%d events were in batches killed between publish and mark; %d of them were delivered again", len(r.holdIDs), redelivered)
		}
		if r.s.recoverOn == "events" {
			row.Recovery = r.recovery(firsts, baselineFrom, faultsFrom)
		}
	}
	if r.s.recoverOn == "jobs" {
		rows, err := db.Query(ctx, "SELECT at FROM "+q+".chaos_transitions WHERE new_status = 'succeeded'")
		if err != nil {
			return nil, fmt.Errorf("reading completion times: %w", err)
		}
		var times []time.Time
		for rows.Next() {
			var at time.Time
			if err := rows.Scan(&at); err != nil {
				rows.Close()
				return nil, err
			}
			times = append(times, at)
		}
		rows.Close()
		row.Recovery = r.recovery(times, baselineFrom, faultsFrom)
	}
	if r.s.verify != nil {
		if err := r.s.verify(ctx, r, row); err != nil {
			return nil, err
		}
	}
	row.Notes = r.notes
	return row, nil
}

func first3(ids []string) string {
	sort.Strings(ids)
	if len(ids) > 3 {
		ids = ids[:3]
	}
	return strings.Join(ids, ", ")
}

func (r *round) sample(ctx context.Context, sql string) string {
	rows, err := r.h.pool.Query(ctx, sql)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if rows.Scan(&s) == nil {
			out = append(out, s)
		}
	}
	return strings.Join(out, "; ")
}

// recovery returns the worst, over the round's faults, of the time from a fault's
// end until a one-second window held at least half the pre-fault rate of events
// (completions or first deliveries); -1 if throughput never came back.
func (r *round) recovery(times []time.Time, baselineFrom, faultsFrom time.Time) time.Duration {
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	count := func(from, to time.Time) int {
		lo := sort.Search(len(times), func(i int) bool { return !times[i].Before(from) })
		hi := sort.Search(len(times), func(i int) bool { return !times[i].Before(to) })
		return hi - lo
	}
	base := float64(count(baselineFrom, faultsFrom)) / faultsFrom.Sub(baselineFrom).Seconds()
	if base <= 0 {
		r.note("no baseline throughput before the faults; recovery not measured")
		return 0
	}
	need := int(base*0.5 + 0.5)
	var worst time.Duration
	var end time.Time
	if len(times) > 0 {
		end = times[len(times)-1]
	}
	for _, f := range r.faults {
		rec := time.Duration(-1)
		for t := f.cleared.Add(-time.Second); !t.After(end); t = t.Add(50 * time.Millisecond) {
			if count(t, t.Add(time.Second)) >= need {
				rec = max(t.Add(time.Second).Sub(f.cleared), 0)
				break
			}
		}
		if rec < 0 {
			return -1
		}
		worst = max(worst, rec)
	}
	return worst
}
