package skiplock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
)

// TestCitusOperatorReads: on the 3-node cluster the operator's verbs by id and the
// reads that name no key run — JobGet, JobCancel, JobRetry, JobRunNow and JobDelete
// (and their ErrNotFound and ErrJobState answers), JobsByTx(Page), Stats and
// Throughput, a queue verb's check that the queue is known, Children, and the outbox's
// Get, List, Requeue and EventsByTx; FlowTree is refused by name.
// Their single-node plan guards force a generic plan, which Citus cannot make of a
// statement that reads every shard; on the layout they run with a custom plan
// (store.citusGuardOf). The client is never started: the first of them learns the
// layout.
func TestCitusOperatorReads(t *testing.T) {
	t.Parallel()
	e := newCitusEnv(t, skiplock.Config{})
	ob, err := outbox.New(e.client, outbox.Config{})
	e.must(err)
	tx, err := e.pool.Begin(e.ctx)
	e.must(err)
	var txid int64
	e.must(tx.QueryRow(e.ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&txid))
	now, err := e.client.EnqueueTx(e.ctx, tx, orderPlaced{Order: 1}, &skiplock.EnqueueOpts{ConcurrencyKey: "acme"})
	e.must(err)
	later, err := e.client.EnqueueTx(e.ctx, tx, orderPlaced{Order: 2}, &skiplock.EnqueueOpts{ConcurrencyKey: "globex", RunAt: t0.Add(time.Hour)})
	e.must(err)
	evID, err := ob.Write(e.ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "placed", Payload: []byte(`{}`), ConcurrencyKey: "acme"})
	e.must(err)
	e.must(tx.Commit(e.ctx))

	// Reads by id, and the transaction's lineage.
	j, err := e.client.JobGet(e.ctx, now.ID)
	if err != nil || j.ConcurrencyKey != "acme" || j.State != skiplock.StatePending {
		t.Fatalf("JobGet on Citus: %+v, %v; want the pending job of acme", j, err)
	}
	if _, err := e.client.JobGet(e.ctx, "01a24142-6dde-7da1-a69b-4817aea27be6"); !errors.Is(err, skiplock.ErrNotFound) {
		t.Fatalf("JobGet of an unknown id: %v; want ErrNotFound", err)
	}
	byTx, err := e.client.JobsByTx(e.ctx, txid)
	e.must(err)
	if len(byTx) != 2 || byTx[0].ID != now.ID || byTx[1].ID != later.ID {
		t.Fatalf("JobsByTx on Citus: %d jobs, want both of the transaction", len(byTx))
	}
	page, err := e.client.JobsByTxPage(e.ctx, txid, now.ID, 10)
	e.must(err)
	if len(page) != 1 || page[0].ID != later.ID {
		t.Fatalf("JobsByTxPage after the first job: %d jobs, want the second", len(page))
	}

	// Flows are refused on the layout: a flow's tree is refused by name, a job's
	// children (a read of every shard) are none.
	if _, _, err := e.client.FlowTree(e.ctx, now.ID); !errors.Is(err, skiplock.ErrNotOnCitus) {
		t.Fatalf("FlowTree on Citus: %v; want ErrNotOnCitus", err)
	}
	if ch, err := e.client.Children(e.ctx, now.ID); err != nil || len(ch) != 0 {
		t.Fatalf("Children on Citus: %d, %v; want none", len(ch), err)
	}

	// The operator's actions: each a write of every shard, planned with its values.
	if j, err := e.client.JobRunNow(e.ctx, later.ID); err != nil || !j.RunAt.Equal(t0) {
		t.Fatalf("JobRunNow on Citus: %+v, %v; want run_at moved to now", j, err)
	}
	if j, err := e.client.JobCancel(e.ctx, now.ID, "not needed"); err != nil || j.State != skiplock.StateCancelled || j.LastError != "not needed" {
		t.Fatalf("JobCancel on Citus: %+v, %v", j, err)
	}
	if _, err := e.client.JobCancel(e.ctx, now.ID, ""); !errors.Is(err, skiplock.ErrJobState) {
		t.Fatalf("JobCancel of a cancelled job: %v; want ErrJobState", err)
	}
	if _, err := e.client.JobRunNow(e.ctx, now.ID); !errors.Is(err, skiplock.ErrJobState) {
		t.Fatalf("JobRunNow of a cancelled job: %v; want ErrJobState", err)
	}
	if j, err := e.client.JobRetry(e.ctx, now.ID); err != nil || j.State != skiplock.StatePending {
		t.Fatalf("JobRetry on Citus: %+v, %v", j, err)
	}
	if _, err := e.client.JobRetry(e.ctx, now.ID); !errors.Is(err, skiplock.ErrJobState) {
		t.Fatalf("JobRetry of a pending job: %v; want ErrJobState", err)
	}
	if _, err := e.client.JobCancel(e.ctx, "01a24142-6dde-7da1-a69b-4817aea27be6", ""); !errors.Is(err, skiplock.ErrNotFound) {
		t.Fatalf("JobCancel of an unknown id: %v; want ErrNotFound", err)
	}
	// A queue verb checks that something names the queue (queue_known).
	e.must(e.client.QueuePause(e.ctx, skiplock.DefaultQueue))
	e.must(e.client.QueueResume(e.ctx, skiplock.DefaultQueue)) // its NOTIFY's void failed on the layout
	e.must(e.client.QueuePause(e.ctx, skiplock.DefaultQueue))
	if err := e.client.QueuePause(e.ctx, "no-such-queue"); !errors.Is(err, skiplock.ErrQueueNotFound) {
		t.Fatalf("QueuePause of an unknown queue: %v; want ErrQueueNotFound", err)
	}

	// What `skiplock stats` and the dashboard read.
	e.must(execErr(e, `UPDATE `+e.q("jobs")+` SET status = 'succeeded', updated_at = $2 WHERE id = $1 AND concurrency_key = 'globex'`, later.ID, t0))
	// A sequence held up by its failed job: per key on the layout, so the same
	// sequence key under another key, with no failure, is not held up.
	seq := func(key string) skiplock.EnqueueOpts {
		return skiplock.EnqueueOpts{Queue: "seq", ConcurrencyKey: key, Sequence: &skiplock.SequenceOpts{Key: "s1"}}
	}
	seqJobs, err := e.client.EnqueueManyTx(e.ctx, e.pool, []skiplock.EnqueueParams{{Args: orderPlaced{Order: 3}, Opts: seq("initech")},
		{Args: orderPlaced{Order: 4}, Opts: seq("initech")}, {Args: orderPlaced{Order: 5}, Opts: seq("umbrella")}})
	e.must(err)
	e.must(execErr(e, `UPDATE `+e.q("jobs")+` SET status = 'failed', updated_at = $2 WHERE id = $1 AND concurrency_key = 'initech'`, seqJobs[0].ID, t0.Add(-2*time.Hour)))
	// A fair queue's setting and its key backlog are refused by name (the claims
	// rotate over keys there anyway; the walk of the keys names no key); the stats,
	// which list fair queues, still read, so the setting is written here by hand.
	if err := e.client.QueueSetFair(e.ctx, "seq", nil); !errors.Is(err, skiplock.ErrNotOnCitus) {
		t.Fatalf("QueueSetFair on Citus: %v; want ErrNotOnCitus", err)
	}
	e.must(execErr(e, `INSERT INTO `+e.q("queues")+` (name, fair) VALUES ('seq', true)`))
	if _, err := e.client.FairKeys(e.ctx, "seq", nil); !errors.Is(err, skiplock.ErrNotOnCitus) {
		t.Fatalf("FairKeys on Citus: %v; want ErrNotOnCitus", err)
	}

	st, err := e.client.Stats(e.ctx, nil)
	e.must(err)
	blocked := int64(-1)
	for _, sq := range st.Queues {
		if sq.Queue == "seq" {
			blocked = sq.BlockedSequences
		}
	}
	if blocked != 1 {
		t.Fatalf("Stats on Citus: %d blocked sequences in queue seq (-1: no such queue), want 1 (initech's)", blocked)
	}
	var q *skiplock.QueueStats
	for i := range st.Queues {
		if st.Queues[i].Queue == skiplock.DefaultQueue {
			q = &st.Queues[i]
		}
	}
	if q == nil || q.Pending != 1 || q.Succeeded != 1 || st.Recent.Succeeded != 1 || st.Outbox.Unpublished != 1 {
		t.Fatalf("Stats on Citus: queue %+v, recent %+v, outbox %+v; want 1 pending, 1 succeeded (recently), 1 unpublished event", q, st.Recent, st.Outbox)
	}
	points, err := e.client.Throughput(e.ctx, time.Hour, time.Minute)
	e.must(err)
	if len(points) != 1 || points[0].Succeeded != 1 {
		t.Fatalf("Throughput on Citus: %+v; want the one success", points)
	}

	// The outbox's operator reads and its requeue.
	adm := ob.Admin()
	if rec, err := adm.Get(e.ctx, e.pool, evID); err != nil || rec.ID != evID {
		t.Fatalf("outbox Get on Citus: %+v, %v", rec, err)
	}
	if recs, err := adm.EventsByTx(e.ctx, e.pool, txid); err != nil || len(recs) != 1 || recs[0].ID != evID {
		t.Fatalf("outbox EventsByTx on Citus: %d events, %v; want the transaction's one", len(recs), err)
	}
	e.must(execErr(e, `UPDATE `+e.q("outbox")+` SET dead_at = $2, attempts = 5 WHERE id = $1 AND concurrency_key = 'acme'`, evID, t0))
	if recs, err := adm.List(e.ctx, e.pool, outbox.StateDead, nil, 10); err != nil || len(recs) != 1 {
		t.Fatalf("outbox List(dead) on Citus: %d, %v; want 1", len(recs), err)
	}
	e.must(adm.Requeue(e.ctx, e.pool, evID))
	if rec, err := adm.Get(e.ctx, e.pool, evID); err != nil || rec.DeadAt != nil || rec.Attempts != 0 {
		t.Fatalf("after Requeue on Citus: %+v, %v; want a live event with no attempts", rec, err)
	}
	if err := adm.Requeue(e.ctx, e.pool, evID); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("Requeue of a live event: %v; want ErrNotFound", err)
	}
	e.must(execErr(e, `UPDATE `+e.q("outbox")+` SET published_at = $2 WHERE id = $1 AND concurrency_key = 'acme'`, evID, t0))
	if recs, err := adm.List(e.ctx, e.pool, outbox.StatePublished, nil, 10); err != nil || len(recs) != 1 {
		t.Fatalf("outbox List(published) on Citus: %d, %v; want 1", len(recs), err)
	}
	if j, err := e.client.JobDelete(e.ctx, now.ID); err != nil || j.ID != now.ID {
		t.Fatalf("JobDelete on Citus: %+v, %v", j, err)
	}
	var n int
	e.must(e.pool.QueryRow(e.ctx, `SELECT count(*) FROM `+e.q("jobs")).Scan(&n))
	if n != 4 {
		t.Fatalf("%d jobs; want 4", n)
	}

	// Limit usage: nothing to report while no limit exists (limits are refused on
	// the layout; `skiplock limits usage`, the metrics and the dashboard's limits
	// page read it), refused by name for a limit set before the schema was distributed.
	if use, err := e.client.LimitUsages(e.ctx); err != nil || len(use) != 0 {
		t.Fatalf("LimitUsages on Citus without limits: %+v, %v; want none", use, err)
	}
	e.must(execErr(e, `INSERT INTO `+e.q("limits")+` (scope, target, max_running) VALUES ('queue', 'seq', 2)`))
	if _, err := e.client.LimitUsages(e.ctx); !errors.Is(err, skiplock.ErrNotOnCitus) {
		t.Fatalf("LimitUsages on Citus with a limit: %v; want ErrNotOnCitus", err)
	}
}
