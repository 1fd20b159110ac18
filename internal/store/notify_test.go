package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestNotifyAfterOwnCommit: an insert on the pool asked to announce after its commit
// (Notify.AfterCommit) commits by itself and announces its queue afterwards, in a
// transaction of its own (withNotifyAfter). The listener is woken once the job is
// visible; a deduplicated insert still reports the holder; and a NOTIFY that fails (a
// channel name PostgreSQL refuses) loses no committed job and reports no error. The
// controls: without AfterCommit, and in a caller's transaction whatever it says, the
// NOTIFY is part of the insert, and its failure fails the insert.
func TestNotifyAfterOwnCommit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schema := pgtest.Schema(t)
	s := newStore(t, schema)
	pool := pgtest.Pool(t)
	job := func(key string) InsertParams {
		p := InsertParams{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3}
		if key != "" {
			p.DedupKey = &key
		}
		return p
	}
	count := func() int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+s.Table("jobs")).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	listener, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	channel := "notify_after_" + schema
	if err := Listen(ctx, listener, channel); err != nil {
		t.Fatal(err)
	}
	n := &Notify{Channel: channel, Queues: []string{"q"}, AfterCommit: true}
	first, err := s.Insert(ctx, pool, nil, job("a"), n)
	if err != nil || !first.Inserted {
		t.Fatalf("insert: %+v, %v", first, err)
	}
	got, err := listener.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	if got.Channel != channel || got.Payload != "q" {
		t.Fatalf("notification %q on %q, want q on %q", got.Payload, got.Channel, channel)
	}
	var visible bool
	if err := listener.QueryRow(ctx, "SELECT EXISTS (SELECT FROM "+s.Table("jobs")+" WHERE id = $1)", first.ID).Scan(&visible); err != nil || !visible {
		t.Fatalf("woken before the job was visible: %v, %v", visible, err)
	}
	again, err := s.Insert(ctx, pool, nil, job("a"), n)
	if err != nil || again.Inserted || again.ID != first.ID {
		t.Fatalf("deduplicated insert: %+v, %v; want the holder %s", again, err, first.ID)
	}

	refused := &Notify{Channel: strings.Repeat("c", 100), Queues: []string{"q"}, AfterCommit: true} // over NAMEDATALEN
	one, err := s.Insert(ctx, pool, nil, job(""), refused)
	if err != nil || !one.Inserted {
		t.Fatalf("own insert with a refused NOTIFY: %+v, %v; want the job committed and no error", one, err)
	}
	many, err := s.InsertMany(ctx, pool, nil, []InsertParams{job(""), job("")}, refused)
	if err != nil || len(many) != 2 || !many[0].Inserted || !many[1].Inserted {
		t.Fatalf("own batch with a refused NOTIFY: %+v, %v", many, err)
	}
	if c := count(); c != 4 {
		t.Fatalf("%d jobs, want 4", c)
	}
	within := &Notify{Channel: refused.Channel, Queues: refused.Queues}
	if _, err := s.Insert(ctx, pool, nil, job(""), within); err == nil || !strings.Contains(err.Error(), "channel name too long") {
		t.Fatalf("own insert with the NOTIFY inside its transaction: %v; want the NOTIFY's error", err)
	}
	if c := count(); c != 4 {
		t.Fatalf("%d jobs after a failed insert, want 4", c)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := s.Insert(ctx, tx, nil, job(""), refused); err == nil || !strings.Contains(err.Error(), "channel name too long") {
		t.Fatalf("insert in a caller's transaction with a refused NOTIFY: %v; want the NOTIFY's error", err)
	}
}
