package store

// The COPY of jobs (issue #49, W3), CopyInsert and copyJobs: rows written straight into PostgreSQL's binary COPY
// format, field by field, as the reader hands the connection its next chunk. pgx's
// CopyFrom takes each row as []any, finds an encode plan for every value and pipes
// the result through a goroutine; on 2 cores that client work was a fifth of a bulk
// enqueue's CPU. The columns of jobs are few and fixed, so their encodings are here,
// typed. Formats: PostgreSQL's documentation, "COPY", "Binary Format", and each type's
// send/recv function (uuid 16 bytes, int4 big-endian, bool one byte, timestamptz
// microseconds since 2000-01-01 UTC, jsonb a version byte then the text, an array its
// dimensions then its elements).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// copySignature opens a binary COPY stream (then a flags word and a header extension
// length, both zero).
const copySignature = "PGCOPY\n\xff\r\n\x00"

// textOID is the element type of a text[] field.
const textOID = 25

// y2kUnixMicros is 2000-01-01 00:00:00 UTC in microseconds since the Unix epoch,
// timestamptz's binary origin.
const y2kUnixMicros = 946684800 * 1000000

// copyRow appends one row's fields to a binary COPY stream.
type copyRow struct{ b []byte }

func (w *copyRow) fields(n int) { w.b = binary.BigEndian.AppendUint16(w.b, uint16(n)) }

func (w *copyRow) size(n int) { w.b = binary.BigEndian.AppendUint32(w.b, uint32(n)) }

// null writes SQL NULL.
func (w *copyRow) null() { w.b = binary.BigEndian.AppendUint32(w.b, 0xffffffff) }

func (w *copyRow) uuid(v [16]byte) {
	w.size(16)
	w.b = append(w.b, v[:]...)
}

// uuidOrNull writes v, or NULL when it is nil.
func (w *copyRow) uuidOrNull(v *[16]byte) {
	if v == nil {
		w.null()
		return
	}
	w.uuid(*v)
}

// text writes a text (or enum) value.
func (w *copyRow) text(s string) {
	w.size(len(s))
	w.b = append(w.b, s...)
}

// textOrNull writes *s, or NULL when s is nil.
func (w *copyRow) textOrNull(s *string) {
	if s == nil {
		w.null()
		return
	}
	w.text(*s)
}

func (w *copyRow) int4(v int32) {
	w.size(4)
	w.b = binary.BigEndian.AppendUint32(w.b, uint32(v))
}

// int4OrNull writes *v, or NULL when v is nil.
func (w *copyRow) int4OrNull(v *int) {
	if v == nil {
		w.null()
		return
	}
	w.int4(int32(*v))
}

func (w *copyRow) boolean(v bool) {
	w.size(1)
	if v {
		w.b = append(w.b, 1)
	} else {
		w.b = append(w.b, 0)
	}
}

func (w *copyRow) timestamptz(t time.Time) {
	w.size(8)
	us := t.Unix()*1000000 + int64(t.Nanosecond())/1000 - y2kUnixMicros
	w.b = binary.BigEndian.AppendUint64(w.b, uint64(us))
}

// jsonb writes a JSON document (the server validates it, as it does the text form),
// or NULL when doc is nil.
func (w *copyRow) jsonb(doc []byte) {
	if doc == nil {
		w.null()
		return
	}
	w.size(1 + len(doc))
	w.b = append(w.b, 1) // jsonb's binary format version
	w.b = append(w.b, doc...)
}

// textArray writes a one-dimensional text[] (an empty one for an empty slice), or
// NULL when ss is nil.
func (w *copyRow) textArray(ss []string) {
	if ss == nil {
		w.null()
		return
	}
	n := 12 // dimensions, has-nulls flag, element type
	if len(ss) > 0 {
		n += 8 // the dimension's length and lower bound
	}
	for _, s := range ss {
		n += 4 + len(s)
	}
	w.size(n)
	dims := uint32(0)
	if len(ss) > 0 {
		dims = 1
	}
	w.b = binary.BigEndian.AppendUint32(w.b, dims)
	w.b = binary.BigEndian.AppendUint32(w.b, 0)
	w.b = binary.BigEndian.AppendUint32(w.b, textOID)
	if len(ss) > 0 {
		w.b = binary.BigEndian.AppendUint32(w.b, uint32(len(ss)))
		w.b = binary.BigEndian.AppendUint32(w.b, 1)
	}
	for _, s := range ss {
		w.text(s)
	}
}

// copyStream is the io.Reader of a binary COPY of n rows: it encodes rows with put
// as the connection asks for more, so a batch never sits in memory whole.
type copyStream struct {
	n, next int
	put     func(i int, w *copyRow)
	w       copyRow
	off     int // bytes of w.b already read
	ended   bool
}

func newCopyStream(n int, put func(i int, w *copyRow)) *copyStream {
	s := &copyStream{n: n, put: put}
	s.w.b = append(make([]byte, 0, 64<<10), copySignature...)
	s.w.b = binary.BigEndian.AppendUint64(s.w.b, 0) // flags, header extension length
	return s
}

// Read fills p with the stream's next bytes.
func (s *copyStream) Read(p []byte) (int, error) {
	for len(s.w.b)-s.off < len(p) && !s.ended {
		if s.off > 0 { // keep only what is unread before encoding more
			s.w.b = s.w.b[:copy(s.w.b, s.w.b[s.off:])]
			s.off = 0
		}
		if s.next == s.n {
			s.w.b = binary.BigEndian.AppendUint16(s.w.b, 0xffff) // the trailer
			s.ended = true
			break
		}
		s.put(s.next, &s.w)
		s.next++
	}
	n := copy(p, s.w.b[s.off:])
	s.off += n
	if s.ended && s.off == len(s.w.b) {
		return n, io.EOF
	}
	return n, nil
}

// errNoCopyConn is copyConn's answer for a Copier it cannot reach the connection of.
var errNoCopyConn = errors.New("store: COPY needs a pgx.Tx, *pgx.Conn, *pgxpool.Conn or *pgxpool.Pool")

// CanCopy reports whether db is one of the connections the COPY path writes through
// (pgx.Tx, *pgx.Conn, *pgxpool.Conn, *pgxpool.Pool).
func CanCopy(db any) bool {
	switch db.(type) {
	case pgx.Tx, *pgx.Conn, *pgxpool.Conn, *pgxpool.Pool:
		return true
	}
	return false
}

// copyConn returns the connection a COPY through db runs on, and what gives it back:
// one of a pool's connections for the time of the COPY, the connection of the others.
// A pgx.Tx that has ended is refused with pgx.ErrTxClosed, as its own CopyFrom does.
func copyConn(ctx context.Context, db any) (*pgx.Conn, func(), error) {
	switch d := db.(type) {
	case *pgx.Conn:
		return d, func() {}, nil
	case *pgxpool.Conn:
		return d.Conn(), func() {}, nil
	case pgx.Tx:
		c := d.Conn()
		if c == nil || c.PgConn().TxStatus() == 'I' {
			return nil, nil, pgx.ErrTxClosed
		}
		return c, func() {}, nil
	case *pgxpool.Pool:
		pc, err := d.Acquire(ctx)
		if err != nil {
			return nil, nil, err
		}
		return pc.Conn(), pc.Release, nil
	}
	return nil, nil, errNoCopyConn
}

// copyTo runs COPY table (cols) FROM STDIN BINARY through db with n rows written by
// put, each with len(cols) fields, and returns how many rows the server took.
func copyTo(ctx context.Context, db any, table pgx.Identifier, cols []string, n int, put func(i int, w *copyRow)) (int64, error) {
	conn, release, err := copyConn(ctx, db)
	if err != nil {
		return 0, err
	}
	defer release()
	var q strings.Builder
	q.WriteString("COPY " + table.Sanitize() + " (")
	for i, c := range cols {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString(pgx.Identifier{c}.Sanitize())
	}
	q.WriteString(") FROM STDIN BINARY")
	fields := len(cols)
	tag, err := conn.PgConn().CopyFrom(ctx, newCopyStream(n, func(i int, w *copyRow) {
		w.fields(fields)
		put(i, w)
	}), q.String())
	if err != nil {
		return 0, fmt.Errorf("COPY into %s: %w", table.Sanitize(), err)
	}
	return tag.RowsAffected(), nil
}

// Copier is satisfied by pgx.Tx, *pgx.Conn, *pgxpool.Conn and *pgxpool.Pool, the
// connections a COPY writes through (CanCopy).
type Copier interface {
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error)
}

// CopyInsert writes a batch of jobs without deduplication keys with COPY, the fastest
// path PostgreSQL offers. ids are generated by the caller (time-ordered). With
// withRunAt every row's RunAt must be set; otherwise run_at takes its default, the
// database's now(). A non-nil now sets created_at and updated_at (an injected
// clock); nil leaves them to the database. Non-nil marks (CopyLaned's) set each job's
// grouped and fair_indexed; nil leaves both at their default, true.
func (s *Store) CopyInsert(ctx context.Context, db Copier, ids [][16]byte, ps []InsertParams, withRunAt bool, now *time.Time, marks LaneMarks) error {
	return s.copyJobs(ctx, db, len(ps), nil, withRunAt, now, marks, func(i int, w *copyRow) *InsertParams {
		w.uuid(ids[i])
		return &ps[i]
	})
}

// copyJobs writes n jobs with COPY (binary, copyenc.go). row(i, w) writes the i-th
// job's leading fields into w (its id, then one for each of extra) and returns its
// parameters; the common columns follow them, then run_at when withRunAt (every RunAt
// must be set), then created_at and updated_at when now is set, then grouped and
// fair_indexed when marks is not nil.
func (s *Store) copyJobs(ctx context.Context, db Copier, n int, extra []string, withRunAt bool, now *time.Time, marks LaneMarks,
	row func(i int, w *copyRow) *InsertParams) error {
	cols := append(append([]string{"id"}, extra...), "queue", "kind", "payload", "priority", "max_attempts", "metadata",
		"tags", "concurrency_key")
	if withRunAt {
		cols = append(cols, "run_at")
	}
	if now != nil {
		cols = append(cols, "created_at", "updated_at")
	}
	if marks != nil {
		cols = append(cols, "grouped", "fair_indexed")
	}
	copied, err := copyTo(ctx, db, pgx.Identifier{s.Schema, "jobs"}, cols, n, func(i int, w *copyRow) {
		p := row(i, w)
		w.text(p.Queue)
		w.text(p.Kind)
		w.jsonb(p.Payload)
		w.int4(int32(p.Priority))
		w.int4(int32(p.MaxAttempts))
		w.jsonb(p.Metadata)
		w.textArray(p.Tags)
		w.text(p.ConcurrencyKey)
		if withRunAt {
			w.timestamptz(*p.RunAt)
		}
		if now != nil {
			w.timestamptz(*now)
			w.timestamptz(*now)
		}
		if marks != nil {
			l := marks.of(p.Queue)
			w.boolean(l.Grouped)
			w.boolean(l.FairIndexed)
		}
	})
	if err != nil {
		return err
	}
	if int(copied) != n {
		return fmt.Errorf("store: copied %d of %d jobs", copied, n)
	}
	return nil
}
