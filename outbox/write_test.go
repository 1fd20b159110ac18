package outbox_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/outbox"
)

func TestWriteExistsIffCommittedAndNotifies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	// A listener on the outbox channel sees the committed write only.
	conn, err := pgx.Connect(e.ctx, pgtest.URL(t))
	e.must(err)
	defer conn.Close(e.ctx)
	_, err = conn.Exec(e.ctx, `LISTEN "`+outbox.Channel(e.schema)+`"`)
	e.must(err)

	tx, err := e.pool.Begin(e.ctx)
	e.must(err)
	_, err = e.ob.Write(e.ctx, tx, event("1", 1))
	e.must(err)
	e.must(tx.Rollback(e.ctx))
	if c := e.counts(); c.Pending != 0 {
		t.Fatalf("rolled back write left %+v", c)
	}

	tx, err = e.pool.Begin(e.ctx)
	e.must(err)
	ev := event("1", 2)
	ev.Headers = map[string]string{"x-trace": "abc", "x-tenant": "acme"}
	id, err := e.ob.Write(e.ctx, tx, ev)
	e.must(err)
	id2, err := e.ob.Write(e.ctx, tx, event("1", 3))
	e.must(err)
	e.must(tx.Commit(e.ctx))

	if id[14] != '7' {
		t.Fatalf("id %s is not a version-7 UUID", id)
	}
	if id2 <= id {
		t.Fatalf("ids not increasing within a transaction: %s then %s", id, id2)
	}
	r := e.get(id)
	if r.AggregateType != "order" || r.AggregateID != "1" || r.EventType != "order.paid" || r.Destination != "orders" ||
		string(r.Payload) != `{"n": 2}` || r.Headers["x-trace"] != "abc" || r.MaxAttempts != outbox.DefaultMaxAttempts ||
		!r.CreatedAt.Equal(t0) || r.PublishedAt != nil || r.Attempts != 0 {
		t.Fatalf("stored event: %+v payload %s", r, r.Payload)
	}

	wctx, cancel := contextWithTimeout(e, 10*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(wctx)
	e.must(err)
	if n.Channel != outbox.Channel(e.schema) {
		t.Fatalf("notification on %q", n.Channel)
	}
}

func TestWriteFromDatabaseSQL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db, err := sql.Open("pgx", pgtest.URL(t))
	e.must(err)
	defer db.Close()
	_ = stdlib.GetDefaultDriver()
	tx, err := db.BeginTx(e.ctx, nil)
	e.must(err)
	ids, err := e.ob.WriteMany(e.ctx, skiplock.FromSQL(tx), []outbox.Event{event("a", 1), event("b", 2)})
	e.must(err)
	e.must(tx.Commit())
	if len(ids) != 2 || e.counts().Pending != 2 {
		t.Fatalf("ids %v, counts %+v", ids, e.counts())
	}
}

func TestWriteManyKeepsInputOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.writeN(e.ob, 500, 7)
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("id %d (%s) not after id %d (%s)", i, ids[i], i-1, ids[i-1])
		}
	}
	r := e.get(ids[321])
	if string(r.Payload) != `{"n": 321}` {
		t.Fatalf("id 321 holds %s", r.Payload)
	}
}

func TestWriteValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	long := strings.Repeat("x", outbox.MaxNameLen+1)
	cases := map[string]func(*outbox.Event){
		"empty aggregate type":  func(ev *outbox.Event) { ev.AggregateType = "" },
		"empty aggregate id":    func(ev *outbox.Event) { ev.AggregateID = "" },
		"empty event type":      func(ev *outbox.Event) { ev.EventType = "" },
		"overlong event type":   func(ev *outbox.Event) { ev.EventType = long },
		"overlong destination":  func(ev *outbox.Event) { ev.Destination = long },
		"control in aggregate":  func(ev *outbox.Event) { ev.AggregateID = "a\nb" },
		"bad utf8":              func(ev *outbox.Event) { ev.AggregateID = "\xff" },
		"empty payload":         func(ev *outbox.Event) { ev.Payload = nil },
		"invalid json":          func(ev *outbox.Event) { ev.Payload = []byte(`{"a":`) },
		"nul escape":            func(ev *outbox.Event) { ev.Payload = []byte(`{"a":"x\u0000y"}`) },
		"nul escape in key":     func(ev *outbox.Event) { ev.Payload = []byte(`{"\u0000":1}`) },
		"oversized payload":     func(ev *outbox.Event) { ev.Payload = []byte(`"` + strings.Repeat("a", outbox.DefaultMaxPayload) + `"`) },
		"negative max attempts": func(ev *outbox.Event) { ev.MaxAttempts = -1 },
		"huge max attempts":     func(ev *outbox.Event) { ev.MaxAttempts = outbox.MaxMaxAttempts + 1 },
		"empty header name":     func(ev *outbox.Event) { ev.Headers = map[string]string{"": "v"} },
		"header value newline":  func(ev *outbox.Event) { ev.Headers = map[string]string{"k": "a\r\nb"} },
		"overlong key":          func(ev *outbox.Event) { ev.ConcurrencyKey = strings.Repeat("k", skiplock.MaxConcurrencyKeyLen+1) },
		"control in key":        func(ev *outbox.Event) { ev.ConcurrencyKey = "a\tb" },
		"the every-key key":     func(ev *outbox.Event) { ev.ConcurrencyKey = skiplock.EachKey },
	}
	for name, mutate := range cases {
		ev := event("1", 1)
		mutate(&ev)
		_, err := e.ob.Write(e.ctx, e.pool, ev)
		var ve *skiplock.ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, skiplock.ErrInvalid) {
			t.Errorf("%s: got %v, want a *skiplock.ValidationError", name, err)
		}
		// In a batch, one bad event writes nothing at all.
		_, err = e.ob.WriteMany(e.ctx, e.pool, []outbox.Event{event("1", 1), ev})
		if !errors.Is(err, skiplock.ErrInvalid) || !strings.Contains(err.Error(), "event 1") {
			t.Errorf("%s in a batch: got %v", name, err)
		}
	}
	// The literal text \u0000 (escaped backslash) is fine.
	ok := event("1", 1)
	ok.Payload = []byte(`{"a":"\\u0000"}`)
	_, err := e.ob.Write(e.ctx, e.pool, ok)
	e.must(err)
	if c := e.counts(); c.Pending != 1 {
		t.Fatalf("validation failures wrote rows: %+v", c)
	}
	if _, err := outbox.New(&skiplock.Client{}, outbox.Config{}); !errors.Is(err, skiplock.ErrInvalid) {
		t.Fatalf("client not made by NewClient: %v", err)
	}
}

// TestWriteConcurrencyKeySingleNode: on one PostgreSQL node an event's ConcurrencyKey
// places nothing (docs/citus.md): the write succeeds, alone and in a batch mixing keys
// and no key, in input order, and the stored events are the events written.
func TestWriteConcurrencyKeySingleNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	keyed := event("1", 1)
	keyed.ConcurrencyKey = "acme"
	id, err := e.ob.Write(e.ctx, e.pool, keyed)
	e.must(err)
	other, plain := event("2", 2), event("3", 3)
	other.ConcurrencyKey = "globex"
	ids, err := e.ob.WriteMany(e.ctx, e.pool, []outbox.Event{other, plain})
	e.must(err)
	for i, want := range map[string]string{id: "1", ids[0]: "2", ids[1]: "3"} {
		if r := e.get(i); r.AggregateID != want {
			t.Errorf("event %s: aggregate %q, want %q", i, r.AggregateID, want)
		}
	}
	if c := e.counts(); c.Pending != 3 {
		t.Fatalf("pending events: %+v, want 3", c)
	}
}

func TestWriteNotMigrated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, err := skiplock.NewClient(e.pool, skiplock.Config{Schema: "no_such_schema_here"})
	e.must(err)
	w, err := outbox.New(c, outbox.Config{})
	e.must(err)
	_, err = w.Write(e.ctx, e.pool, event("1", 1))
	if !errors.Is(err, skiplock.ErrNotMigrated) {
		t.Fatalf("got %v, want ErrNotMigrated", err)
	}
}
