package store

// The fair claim run (fairclaim.go has its statements): ClaimFair sends the queue's
// lock and the claim in one round trip and rebuilds each job's place in the fair
// order from the walk the statement returns.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
)

// FairClaim is the outcome of ClaimFair.
type FairClaim struct {
	Jobs []*Job
	// More: the claim stopped for want of room, not of keys: keys it did not reach
	// may have due jobs, so a short claim does not mean the queue has none. (A claim
	// that took no job does not say.)
	More bool
	// Weights: by job, the weight of the job's key, or 0 for a job of the bypass lane.
	Weights []int
}

// ClaimFair is Claim for a fair queue (fairClaimSQL; limited: fairLimitedClaimSQL,
// for a queue some limit may govern). Rows come back in the fair order they were
// chosen in (fairOrder, fairOrderOf), not in claim order. p.After, p.Lag and p.Preds are not used.
func (s *Store) ClaimFair(ctx context.Context, db Batcher, now *time.Time, p ClaimParams, limited bool) (FairClaim, error) {
	var out FairClaim
	claim := s.fair.claim
	if limited {
		claim = s.fair.limitedClaim
	}
	pl := newPipeline(db, claim)
	pl.add(s.fair.lock, p.Queue)
	if limited {
		pl.add(s.limits.lock)
	}
	pl.add(claim, Now(now), p.Queue, p.WorkerID, micros(p.Lease), p.Limit, p.ready())
	br, err := pl.send(ctx)
	if err != nil {
		return out, err
	}
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return out, fmt.Errorf("fair lock: %w", err)
	}
	if limited {
		if _, err := br.Exec(); err != nil {
			return out, fmt.Errorf("limit lock: %w", err)
		}
	}
	rows, err := br.Query()
	// Each row's extras are scanned before the next row appends to ext, so a pointer
	// into its current backing array is safe.
	type extra struct {
		pos     int64
		weight  int
		more    bool
		express bool
	}
	var ext []extra
	// The unlimited claim's walk: its keys in order, and their weights when the
	// queue has any, sent with its first row only (NULL in the others, which scan
	// as nil: each row's are kept before the next row is scanned).
	var keys, rowKeys []string
	var weights, rowWeights []int32
	keep := func() {
		if rowKeys != nil {
			keys, weights = rowKeys, rowWeights
		}
	}
	jobs, err := collectJobRows(rows, err, func(d []any, j *Job) []any {
		ext = append(ext, extra{})
		x := &ext[len(ext)-1]
		d = append(d, &j.Unblocks)
		if limited {
			return append(d, &x.pos, &x.weight, &j.Rated, &x.more)
		}
		keep()
		return append(d, &x.express, &x.more, &rowKeys, &rowWeights)
	})
	if err != nil {
		return out, err
	}
	keep()
	// Jobs read before a failed commit were never claimed: none are returned with
	// the error (pipeline.end).
	if err := pl.end(br); err != nil {
		return FairClaim{}, err
	}
	for i := range jobs {
		out.More = out.More || ext[i].more
	}
	if !limited {
		fairOrderOf(jobs, keys, weights, func(i int) bool { return ext[i].express }, func(i int, pos int64, weight int) {
			ext[i].pos, ext[i].weight = pos, weight
		})
	}
	order := make(map[*Job]extra, len(jobs))
	for i, j := range jobs {
		order[j] = ext[i]
	}
	sortBatch(jobs, func(a, b *Job) int { return cmp.Compare(order[a].pos, order[b].pos) })
	out.Jobs = jobs
	out.Weights = make([]int, len(jobs))
	for i, j := range jobs {
		out.Weights[i] = order[j].weight
	}
	return out, nil
}

// fairOrderOf is the fair order of the jobs an unlimited fair claim took, rebuilt
// from the keys its walk visited, in order, and their weights (none: each weighs 1):
// it calls set with each job's place (by its index in jobs) and its key's weight (0
// for a job of the express lane, express). The statement returns the walk once
// rather than each job's place in the fair order: that took a map by job, built and
// read in the statement, which cost a claim of 1,000 jobs about as much as the order
// of its candidates (docs/fairness.md, "Fourth pass").
//
// The statement sends the walk with the row of its first job in fair order. Should
// that job not have been taken after all (an operator cancelled it, or a claim of
// another path took it first: stillPending), no row carries it, and
// each job's key counts as first in the walk and of weight 1: the jobs still come
// round by round, each round in claim order.
func fairOrderOf(jobs []*Job, keys []string, weights []int32, express func(i int) bool, set func(i int, pos int64, weight int)) {
	at := make(map[string]int, len(keys))
	for i, k := range keys {
		at[k] = i
	}
	wpos := make([]int, len(jobs))
	ws := make([]int, len(jobs))
	for i, j := range jobs {
		if express(i) {
			continue
		}
		n, ok := at[j.ConcurrencyKey]
		if !ok { // not a key of the walk (it cannot be): last in its round
			n = len(keys)
		}
		wpos[i], ws[i] = n+1, 1
		if n < len(weights) && weights[n] > 0 {
			ws[i] = int(weights[n])
		}
	}
	for i, pos := range fairPlaces(jobs, wpos, ws) {
		set(i, pos, ws[i])
	}
}

// fairPlaces returns the place of each of jobs in the fair claim's order (fairPos:
// by lane, the express lane's priority, round, the key's place in the walk, then
// claim order within the key), from each job's key's place in the walk (wpos) and
// weight, both 0 for a job of the express lane. A key's jobs in a claim are the
// first of its candidates in claim order (priority, run_at, id), so a job's number
// among its key's jobs in the fair lane (i) is its rank among those the claim took,
// and its round is i divided by the key's weight, rounded up.
func fairPlaces(jobs []*Job, wpos, weights []int) []int64 {
	type place struct {
		lane, p, round, wpos, i int
		j                       *Job
		at                      int
	}
	claimOrder := func(a, b *Job) int {
		if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
			return c
		}
		if c := a.RunAt.Compare(b.RunAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	}
	ps := make([]place, len(jobs))
	byKey := map[string][]int{}
	for n, j := range jobs {
		ps[n] = place{j: j, at: n}
		if weights[n] <= 0 {
			ps[n].p = -j.Priority
			continue
		}
		ps[n].lane, ps[n].wpos = 1, wpos[n]
		byKey[j.ConcurrencyKey] = append(byKey[j.ConcurrencyKey], n)
	}
	for _, ns := range byKey {
		slices.SortFunc(ns, func(a, b int) int { return claimOrder(jobs[a], jobs[b]) })
		for r, n := range ns {
			ps[n].i = r + 1
			ps[n].round = (r + weights[n]) / weights[n]
		}
	}
	slices.SortFunc(ps, func(a, b place) int {
		return cmp.Or(cmp.Compare(a.lane, b.lane), cmp.Compare(a.p, b.p), cmp.Compare(a.round, b.round),
			cmp.Compare(a.wpos, b.wpos), cmp.Compare(a.i, b.i), claimOrder(a.j, b.j))
	})
	out := make([]int64, len(jobs))
	for pos, x := range ps {
		out[x.at] = int64(pos + 1)
	}
	return out
}
