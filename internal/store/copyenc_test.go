package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// copyParams are jobs that between them use every column the COPY writes and every
// edge of its encodings: NULL and set metadata, nil, empty and full tags (quotes,
// commas, braces, backslashes, multi-byte text), negative priorities, run_at before
// 2000-01-01 and with sub-microsecond digits, time zones other than UTC.
func copyParams(n int) []InsertParams {
	berlin := time.FixedZone("CET", 3600)
	runAts := []time.Time{
		time.Date(2026, 12, 5, 8, 0, 0, 123456789, berlin),
		time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC),
		time.Date(2000, 1, 1, 0, 0, 0, 1000, time.UTC),
	}
	tags := [][]string{nil, {}, {"a"}, {`q"uo,te{}`, `back\slash`, "ünï cødé ✓", ""}}
	ps := make([]InsertParams, n)
	for i := range ps {
		t := runAts[i%len(runAts)]
		ps[i] = InsertParams{
			Queue: []string{"default", "q two", "ünï"}[i%3], Kind: fmt.Sprintf("kind-%d", i%4),
			Payload:  fmt.Appendf(nil, `{"i": %d, "s": "x\u00e9\"\\", "n": [1, 2.5, null, true]}`, i),
			Priority: i%5 - 2, MaxAttempts: 1 + i%9, RunAt: &t, Tags: tags[i%len(tags)],
			ConcurrencyKey: []string{"", "tenant-1", "ключ"}[i%3],
		}
		if i%2 == 0 {
			ps[i].Metadata = fmt.Appendf(nil, `{"trace": "t-%d", "nested": {"a": [1]}}`, i)
		}
	}
	return ps
}

// copiedColumns reads what both paths write, keyed by the payload's "i".
const copiedColumns = `SELECT (payload->>'i')::int, queue, kind, payload::text, priority, max_attempts,
	metadata::text, tags, concurrency_key, run_at, created_at, updated_at, status::text, parent_id::text,
	batch_id::text, flow_policy, flow_open, grouped, fair_indexed FROM %s WHERE (payload->>'i')::int BETWEEN $1 AND $2 ORDER BY 1`

func readJobRows(t *testing.T, ctx context.Context, s *Store, db DBTX, from, to int) [][]any {
	t.Helper()
	rows, err := db.Query(ctx, fmt.Sprintf(copiedColumns, s.Table("jobs")), from, to)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out {
		r[0] = r[0].(int32) % 1000 // the two halves' payload numbers differ by 1000
		r[3] = nil                 // the payloads differ in their number alone (checked above)
	}
	return out
}

// TestCopyWritesWhatTheStatementWrites: the same jobs written by the batch insert
// statement and by the binary COPY read back identical in every column either writes,
// with the injected clock and with the database's.
func TestCopyWritesWhatTheStatementWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	now := time.Date(2026, 12, 5, 7, 30, 0, 654321000, time.UTC)
	for _, clock := range []*time.Time{&now, nil} {
		base := 0
		if clock == nil {
			base = 10000
		}
		const n = 150
		stmt, cp := copyParams(n), copyParams(n)
		ids := make([][16]byte, n)
		for i := range cp {
			cp[i].Payload = bytes.Replace(cp[i].Payload, fmt.Appendf(nil, `{"i": %d,`, i), fmt.Appendf(nil, `{"i": %d,`, base+1000+i), 1)
			stmt[i].Payload = bytes.Replace(stmt[i].Payload, fmt.Appendf(nil, `{"i": %d,`, i), fmt.Appendf(nil, `{"i": %d,`, base+i), 1)
			ids[i] = testUUID(i + base)
		}
		if _, err := s.InsertMany(ctx, pool, clock, stmt, nil); err != nil {
			t.Fatal(err)
		}
		marks := LaneMarks{"default": {}, "q two": {}, "ünï": {}} // the plain queues' marks, as job_grouped and job_fair give them
		if err := s.CopyInsert(ctx, pool, ids, cp, true, clock, marks); err != nil {
			t.Fatal(err)
		}
		want, got := readJobRows(t, ctx, s, pool, base, base+n-1), readJobRows(t, ctx, s, pool, base+1000, base+1000+n-1)
		if len(want) != n || len(got) != n {
			t.Fatalf("clock %v: %d rows by the statement, %d by COPY, want %d each", clock, len(want), len(got), n)
		}
		for i := range want {
			if clock == nil { // the database's now(): the two transactions' times differ
				want[i][10], want[i][11], got[i][10], got[i][11] = nil, nil, nil, nil
			}
			if !reflect.DeepEqual(want[i], got[i]) {
				t.Errorf("clock %v, job %d:\nstatement %v\nCOPY      %v", clock, i, want[i], got[i])
			}
		}
	}
	var payloads int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+s.Table("jobs")+` WHERE payload->>'s' = 'xé"\' AND payload->'n' = '[1, 2.5, null, true]'`).Scan(&payloads); err != nil {
		t.Fatal(err)
	}
	if payloads != 600 {
		t.Fatalf("%d payloads read back whole, want 600", payloads)
	}
}

// TestCopyFlowWritesWhatTheStatementWrites: a flow's nodes (parents waiting with a
// policy and an open count, children pointing at them and at a batch) by InsertFlow
// and by CopyFlow read back identical.
func TestCopyFlowWritesWhatTheStatementWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	now := time.Date(2026, 12, 5, 7, 30, 0, 0, time.UTC)
	nodes := func(base int) []FlowNode {
		ps := copyParams(90)
		out := make([]FlowNode, len(ps))
		policy, batch := "continue", testUUID(base+999)
		for i := range ps {
			ps[i].Payload = fmt.Appendf(nil, `{"i": %d}`, base+i)
			out[i] = FlowNode{InsertParams: ps[i], ID: testUUID(base + i)}
			if i%10 == 0 { // a parent of the next nine
				open := 9
				out[i].Waiting, out[i].Policy, out[i].Open = true, &policy, &open
			} else {
				parent := testUUID(base + i - i%10)
				out[i].ParentID = &parent
				if i%3 == 0 {
					out[i].BatchID = &batch
				}
			}
		}
		return out
	}
	if _, err := s.InsertFlow(ctx, pool, &now, nodes(0), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyFlow(ctx, pool, nodes(1000), true, &now, nil); err != nil {
		t.Fatal(err)
	}
	want, got := readJobRows(t, ctx, s, pool, 0, 89), readJobRows(t, ctx, s, pool, 1000, 1089)
	if len(want) != 90 || len(got) != 90 {
		t.Fatalf("%d rows by the statement, %d by COPY, want 90 each", len(want), len(got))
	}
	for i := range want {
		// parent and batch ids differ by their numbers' base; compare their presence.
		for _, c := range []int{13, 14} {
			want[i][c], got[i][c] = want[i][c] != nil, got[i][c] != nil
		}
		// The statement marks the lanes (job_grouped, job_fair); CopyFlow given nil
		// marks leaves the columns' default.
		want[i][17], want[i][18] = true, true
		if !reflect.DeepEqual(want[i], got[i]) {
			t.Errorf("node %d:\nstatement %v\nCOPY      %v", i, want[i], got[i])
		}
	}
}

// testUUID is a version 7 id whose time prefix is now (the partitioned layout bounds
// on it) and whose last bytes are n.
func testUUID(n int) [16]byte {
	var id [16]byte
	ms := uint64(time.Now().UnixMilli())
	for k := range 6 {
		id[k] = byte(ms >> (40 - 8*k))
	}
	id[6], id[8] = 0x70, 0x80
	for k := range 4 {
		id[15-k] = byte(n >> (8 * k))
	}
	return id
}

// TestCopyStreamReadsTheSameInAnyChunks: the stream gives the same bytes however
// small the reads (the connection reads 64 KiB at a time; a row can be larger),
// and ends with the trailer and io.EOF.
func TestCopyStreamReadsTheSameInAnyChunks(t *testing.T) {
	t.Parallel()
	put := func(i int, w *copyRow) {
		w.fields(2)
		w.int4(int32(i))
		w.text(string(bytes.Repeat([]byte{'x'}, i*37)))
	}
	whole, err := io.ReadAll(newCopyStream(300, put))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(whole, []byte(copySignature)) || !bytes.HasSuffix(whole, []byte{0xff, 0xff}) {
		t.Fatalf("stream of %d bytes lacks its signature or trailer", len(whole))
	}
	for _, chunk := range []int{1, 7, 4096} {
		s := newCopyStream(300, put)
		var got []byte
		p := make([]byte, chunk)
		for {
			n, err := s.Read(p)
			got = append(got, p[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, whole) {
			t.Fatalf("reads of %d bytes gave %d bytes, want the %d of one read", chunk, len(got), len(whole))
		}
	}
	empty, _ := io.ReadAll(newCopyStream(0, put))
	if len(empty) != len(copySignature)+8+2 {
		t.Fatalf("an empty stream is %d bytes, want header and trailer (%d)", len(empty), len(copySignature)+10)
	}
}

// TestCopyRefusesWhatItCannotWriteThrough: an ended transaction and an unknown Copier
// get an error, and nothing is written.
func TestCopyRefusesWhatItCannotWriteThrough(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	ps := copyParams(3)
	ids := [][16]byte{testUUID(1), testUUID(2), testUUID(3)}
	if err := s.CopyInsert(ctx, tx, ids, ps, true, nil, nil); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("COPY through a committed transaction: %v, want pgx.ErrTxClosed", err)
	}
	if err := s.CopyInsert(ctx, otherCopier{}, ids, ps, true, nil, nil); !errors.Is(err, errNoCopyConn) {
		t.Fatalf("COPY through an unknown Copier: %v, want errNoCopyConn", err)
	}
	if CanCopy(otherCopier{}) || !CanCopy(pool) || !CanCopy(tx) {
		t.Fatal("CanCopy: want the pool and the transaction, not the unknown Copier")
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+s.Table("jobs")).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d jobs written (%v), want none", n, err)
	}
}

type otherCopier struct{}

func (otherCopier) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, errors.New("not reached")
}

// BenchmarkCopyInsert COPYs batches of 1,000 of W3's jobs (no-op payloads, the plain
// queue's marks) and reports, besides the time, the client's CPU per job (user and
// system time of this process, from getrusage): the encoding's share of a bulk
// enqueue, the server's work excluded.
func BenchmarkCopyInsert(b *testing.B) {
	ctx := context.Background()
	s := newStore(b, pgtest.Schema(b))
	pool := pgtest.Pool(b)
	const batch = 1000
	ps := make([]InsertParams, batch)
	for i := range ps {
		ps[i] = InsertParams{Queue: "default", Kind: "noop", Payload: fmt.Appendf(nil, `{"i":%d}`, i), MaxAttempts: 25}
	}
	marks := LaneMarks{"default": {}}
	ids := make([][16]byte, batch)
	start := processCPU()
	b.ResetTimer()
	for n := 0; b.Loop(); n++ {
		for i := range ids {
			ids[i] = testUUID(n*batch + i)
		}
		if err := s.CopyInsert(ctx, pool, ids, ps, false, nil, marks); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-start).Nanoseconds())/float64(b.N*batch), "client-ns/job")
}
