package outbox_test

// Bad input on every public entry point of the outbox and its adapters: nil, zero
// and typed-nil values. None may panic; each returns an error that matches
// skiplock.ErrInvalid, and nothing is written.

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/amqppub"
	"github.com/skiplock/skiplock/outbox/kafkapub"
	"github.com/skiplock/skiplock/outbox/natspub"
	"github.com/skiplock/skiplock/outbox/outboxtest/memorypub"
	"github.com/skiplock/skiplock/outbox/webhookpub"
)

// call runs fn, turning a panic into a test failure, and returns fn's errors.
func call(t *testing.T, name string, fn func() []error) []error {
	t.Helper()
	var errs []error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("%s panicked: %v", name, p)
				errs = nil
			}
		}()
		errs = fn()
	}()
	return errs
}

func one(err error) []error                { return []error{err} }
func ignore[T any](_ T, err error) []error { return []error{err} }

// fromSQLFixed reports whether skiplock.FromSQL refuses a nil *sql.Tx without
// panicking (a fix in the root package).
func fromSQLFixed(ctx context.Context) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	_, err := skiplock.FromSQL((*sql.Tx)(nil)).Exec(ctx, "SELECT 1")
	return errors.Is(err, skiplock.ErrInvalid)
}

func TestBadInputEveryEntryPoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := e.ctx
	ob := e.ob
	ev := event("1", 1)
	msgs := []outbox.Message{{ID: "0190c0de-0000-7000-8000-000000000001", Destination: "d", Payload: []byte(`{}`)}}
	var (
		nilCtx   context.Context
		nilOb    *outbox.Outbox
		zeroOb   = &outbox.Outbox{}
		nilRelay *outbox.Relay
		nilTx    pgx.Tx = (*pgxpool.Tx)(nil)
		nilPool  *pgxpool.Pool
		nilConn  *pgx.Conn
	)
	dbs := map[string]skiplock.DB{
		"nil DB":               nil,
		"typed-nil pgx.Tx":     nilTx,
		"typed-nil pool":       nilPool,
		"typed-nil conn":       nilConn,
		"FromSQL(nil)":         skiplock.FromSQL(nil),
		"FromSQL(nil *sql.Tx)": skiplock.FromSQL((*sql.Tx)(nil)),
	}
	sqlFixed := fromSQLFixed(ctx)

	cases := map[string]func() []error{
		// outbox.New and the Outbox itself
		"New(nil client)":        func() []error { return ignore(outbox.New(nil, outbox.Config{})) },
		"New(zero Client)":       func() []error { return ignore(outbox.New(&skiplock.Client{}, outbox.Config{})) },
		"nil Outbox.Write":       func() []error { return ignore(nilOb.Write(ctx, e.pool, ev)) },
		"nil Outbox.WriteMany":   func() []error { return ignore(nilOb.WriteMany(ctx, e.pool, []outbox.Event{ev})) },
		"zero Outbox.Write":      func() []error { return ignore(zeroOb.Write(ctx, e.pool, ev)) },
		"zero Outbox.WriteMany":  func() []error { return ignore(zeroOb.WriteMany(ctx, e.pool, nil)) },
		"Write(nil ctx)":         func() []error { return ignore(ob.Write(nilCtx, e.pool, ev)) },
		"WriteMany(nil ctx)":     func() []error { return ignore(ob.WriteMany(nilCtx, e.pool, []outbox.Event{ev})) },
		"Write(zero Event)":      func() []error { return ignore(ob.Write(ctx, e.pool, outbox.Event{})) },
		"WriteMany(zero Events)": func() []error { return ignore(ob.WriteMany(ctx, e.pool, make([]outbox.Event, 3))) },
		"nil Outbox.NewRelay":    func() []error { return ignore(nilOb.NewRelay(memorypub.New(), outbox.RelayConfig{})) },
		"zero Outbox.NewRelay":   func() []error { return ignore(zeroOb.NewRelay(memorypub.New(), outbox.RelayConfig{})) },
		"NewRelay(nil pub)":      func() []error { return ignore(ob.NewRelay(nil, outbox.RelayConfig{})) },
		"NewRelay(typed-nil memorypub)": func() []error {
			return ignore(ob.NewRelay((*memorypub.Publisher)(nil), outbox.RelayConfig{}))
		},
		"NewRelay(typed-nil webhookpub)": func() []error {
			return ignore(ob.NewRelay((*webhookpub.Publisher)(nil), outbox.RelayConfig{}))
		},
		"NewRelay(typed-nil RetryPolicy)": func() []error {
			return ignore(ob.NewRelay(memorypub.New(), outbox.RelayConfig{RetryPolicy: (*skiplock.ExponentialBackoff)(nil)}))
		},
		"nil Relay.Start":      func() []error { return one(nilRelay.Start(ctx)) },
		"nil Relay.Stop":       func() []error { return one(nilRelay.Stop(ctx)) },
		"nil Relay.RunOnce":    func() []error { _, _, err := nilRelay.RunOnce(ctx); return one(err) },
		"zero Relay.Start":     func() []error { return one((&outbox.Relay{}).Start(ctx)) },
		"zero Relay.Stop":      func() []error { return one((&outbox.Relay{}).Stop(ctx)) },
		"zero Relay.RunOnce":   func() []error { _, _, err := (&outbox.Relay{}).RunOnce(ctx); return one(err) },
		"Relay.Start(nil ctx)": func() []error { return one(e.relay(memorypub.New(), outbox.RelayConfig{}).Start(nilCtx)) },
		"Relay.Stop(nil ctx)":  func() []error { return one(e.relay(memorypub.New(), outbox.RelayConfig{}).Stop(nilCtx)) },
		"Relay.RunOnce(nil ctx)": func() []error {
			_, _, err := e.relay(memorypub.New(), outbox.RelayConfig{}).RunOnce(nilCtx)
			return one(err)
		},

		// Inbox and Admin: zero values, nil Outbox, nil ctx
		"zero Inbox.Claim":       func() []error { return ignore(outbox.Inbox{}.Claim(ctx, e.pool, "c", "id")) },
		"zero Inbox.Prune":       func() []error { return ignore(outbox.Inbox{}.Prune(ctx, e.pool, time.Hour, 0)) },
		"nil Outbox.Inbox.Claim": func() []error { return ignore(nilOb.Inbox().Claim(ctx, e.pool, "c", "id")) },
		"Inbox.Claim(nil ctx)":   func() []error { return ignore(e.inbox.Claim(nilCtx, e.pool, "c", "id")) },
		"Inbox.Claim(empty)":     func() []error { return ignore(e.inbox.Claim(ctx, e.pool, "", "")) },
		"Inbox.Claim(NUL)":       func() []error { return ignore(e.inbox.Claim(ctx, e.pool, "c\x00", "id")) },
		"Inbox.Prune(0)":         func() []error { return ignore(e.inbox.Prune(ctx, e.pool, 0, 0)) },
		"Inbox.Prune(batch -1)":  func() []error { return ignore(e.inbox.Prune(ctx, e.pool, time.Hour, -1)) },
		"zero Admin.Get":         func() []error { return ignore(outbox.Admin{}.Get(ctx, e.pool, "x")) },
		"zero Admin.List":        func() []error { return ignore(outbox.Admin{}.List(ctx, e.pool, outbox.StateDead, nil, 0)) },
		"zero Admin.Requeue":     func() []error { return one(outbox.Admin{}.Requeue(ctx, e.pool, "x")) },
		"zero Admin.RequeueDead": func() []error { return ignore(outbox.Admin{}.RequeueDead(ctx, e.pool)) },
		"zero Admin.Prune":       func() []error { return ignore(outbox.Admin{}.Prune(ctx, e.pool, outbox.Retention{})) },
		"zero Admin.Count":       func() []error { return ignore(outbox.Admin{}.Count(ctx, e.pool)) },
		"Admin.Get(nil ctx)":     func() []error { return ignore(e.admin.Get(nilCtx, e.pool, "x")) },
		"Admin.Prune(batch -1)":  func() []error { return ignore(e.admin.Prune(ctx, e.pool, outbox.Retention{BatchSize: -1})) },

		// webhookpub
		"webhookpub.New(zero)":   func() []error { return ignore(webhookpub.New(webhookpub.Config{})) },
		"webhookpub.New(no URL)": func() []error { return ignore(webhookpub.New(webhookpub.Config{Secrets: []string{"k"}})) },
		"webhookpub.New(bad URL)": func() []error {
			return ignore(webhookpub.New(webhookpub.Config{Secrets: []string{"k"}, DefaultURL: "::"}))
		},
		"webhookpub.New(empty secret)": func() []error {
			return ignore(webhookpub.New(webhookpub.Config{Secrets: []string{""}, DefaultURL: "https://x"}))
		},
		"webhookpub.ParseSecrets(nil)": func() []error { return ignore(webhookpub.ParseSecrets(nil)) },
		"webhookpub.Verify(nil)":       func() []error { return one(webhookpub.Verify(nil, nil, nil, 0)) },
		"nil webhookpub.Publish":       func() []error { return (*webhookpub.Publisher)(nil).Publish(ctx, msgs) },
		"zero webhookpub.Publish":      func() []error { return (&webhookpub.Publisher{}).Publish(ctx, msgs) },
		"nil webhookpub.Close":         func() []error { return one((*webhookpub.Publisher)(nil).Close()) },
		"zero webhookpub.Close":        func() []error { return one((&webhookpub.Publisher{}).Close()) },
		"webhookpub.Publish(nil ctx)":  func() []error { return webhookPub(t).Publish(nilCtx, msgs) },
		"amqppub.New(zero)":            func() []error { return ignore(amqppub.New(amqppub.Config{})) },
		"amqppub.New(bad URL)":         func() []error { return ignore(amqppub.New(amqppub.Config{URL: "http://x"})) },
		"nil amqppub.Publish":          func() []error { return (*amqppub.Publisher)(nil).Publish(ctx, msgs) },
		"zero amqppub.Publish":         func() []error { return (&amqppub.Publisher{}).Publish(ctx, msgs) },
		"nil amqppub.Close":            func() []error { return one((*amqppub.Publisher)(nil).Close()) },
		"zero amqppub.Close":           func() []error { return one((&amqppub.Publisher{}).Close()) },
		"amqppub.Publish(nil ctx)":     func() []error { return amqpPub(t).Publish(nilCtx, msgs) },
		"kafkapub.New(zero)":           func() []error { return ignore(kafkapub.New(kafkapub.Config{})) },
		"kafkapub.New(empty broker)":   func() []error { return ignore(kafkapub.New(kafkapub.Config{SeedBrokers: []string{""}})) },
		"kafkapub.New(nil option)": func() []error {
			return ignore(kafkapub.New(kafkapub.Config{SeedBrokers: []string{"127.0.0.1:1"}, Options: []kgo.Opt{nil}}))
		},
		"kafkapub.New(conflicting option)": func() []error {
			return ignore(kafkapub.New(kafkapub.Config{SeedBrokers: []string{"127.0.0.1:1"}, Options: []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck())}}))
		},
		"nil kafkapub.Publish":      func() []error { return (*kafkapub.Publisher)(nil).Publish(ctx, msgs) },
		"zero kafkapub.Publish":     func() []error { return (&kafkapub.Publisher{}).Publish(ctx, msgs) },
		"nil kafkapub.Close":        func() []error { return one((*kafkapub.Publisher)(nil).Close()) },
		"zero kafkapub.Close":       func() []error { return one((&kafkapub.Publisher{}).Close()) },
		"kafkapub.Publish(nil ctx)": func() []error { return kafkaPub(t).Publish(nilCtx, msgs) },
		"natspub.New(zero)":         func() []error { return ignore(natspub.New(natspub.Config{})) },
		"natspub.New(typed-nil Conn)": func() []error {
			return ignore(natspub.New(natspub.Config{Conn: (*nats.Conn)(nil)}))
		},
		"natspub.New(nil option)": func() []error {
			return ignore(natspub.New(natspub.Config{URL: "nats://127.0.0.1:1", Options: []nats.Option{nil}}))
		},
		"nil natspub.Publish":      func() []error { return (*natspub.Publisher)(nil).Publish(ctx, msgs) },
		"zero natspub.Publish":     func() []error { return (&natspub.Publisher{}).Publish(ctx, msgs) },
		"nil natspub.Close":        func() []error { return one((*natspub.Publisher)(nil).Close()) },
		"zero natspub.Close":       func() []error { return one((&natspub.Publisher{}).Close()) },
		"natspub.Publish(nil ctx)": func() []error { return natsPub(t).Publish(nilCtx, msgs) },
	}
	for name, db := range dbs {
		if strings.HasPrefix(name, "FromSQL") && !sqlFixed {
			t.Logf("skipping %s: skiplock.FromSQL does not refuse a nil *sql.Tx yet (root package)", name)
			continue
		}
		cases["Write("+name+")"] = func() []error { return ignore(ob.Write(ctx, db, ev)) }
		cases["WriteMany("+name+")"] = func() []error { return ignore(ob.WriteMany(ctx, db, []outbox.Event{ev})) }
		cases["Inbox.Claim("+name+")"] = func() []error { return ignore(e.inbox.Claim(ctx, db, "c", "id")) }
		cases["Inbox.Prune("+name+")"] = func() []error { return ignore(e.inbox.Prune(ctx, db, time.Hour, 0)) }
		cases["Admin.Get("+name+")"] = func() []error { return ignore(e.admin.Get(ctx, db, "x")) }
		cases["Admin.List("+name+")"] = func() []error { return ignore(e.admin.List(ctx, db, outbox.StateDead, nil, 0)) }
		cases["Admin.Requeue("+name+")"] = func() []error { return one(e.admin.Requeue(ctx, db, "x")) }
		cases["Admin.RequeueDead("+name+")"] = func() []error { return ignore(e.admin.RequeueDead(ctx, db)) }
		cases["Admin.Prune("+name+")"] = func() []error { return ignore(e.admin.Prune(ctx, db, outbox.Retention{})) }
		cases["Admin.Count("+name+")"] = func() []error { return ignore(e.admin.Count(ctx, db)) }
	}

	for name, fn := range cases {
		errs := call(t, name, fn)
		if len(errs) == 0 {
			continue // panicked, reported
		}
		for i, err := range errs {
			if !errors.Is(err, skiplock.ErrInvalid) {
				t.Errorf("%s: result %d is %v, want an error matching skiplock.ErrInvalid", name, i, err)
			}
		}
	}

	// Calls that return no error must not panic either.
	call(t, "nil Relay.Stats", func() []error { _ = nilRelay.Stats(); return nil })
	call(t, "nil Relay.Wake", func() []error { nilRelay.Wake(); return nil })
	call(t, "nil Outbox.Schema", func() []error { _ = nilOb.Schema(); return nil })
	call(t, "FailAll(nil)", func() []error { return outbox.FailAll(nil, errors.New("x")) })
	call(t, "webhookpub.Sign(nil)", func() []error { _ = webhookpub.Sign(nil, "", 0, nil); return nil })
	call(t, "nil StatusError.Error", func() []error { _ = (*webhookpub.StatusError)(nil).Error(); return nil })
	call(t, "nil kafkapub.Client", func() []error { _ = (*kafkapub.Publisher)(nil).Client(); return nil })

	if c := e.counts(); c != (outbox.Counts{}) {
		t.Fatalf("bad input wrote events: %+v", c)
	}
	if n := scalar[int64](e, "SELECT count(*) FROM "+e.q("inbox")); n != 0 {
		t.Fatalf("bad input wrote %d inbox rows", n)
	}
}

// Usable publishers that make no network call until Publish, for the nil-context
// cases; each is closed when the test ends.
func webhookPub(t *testing.T) outbox.Publisher {
	p, err := webhookpub.New(webhookpub.Config{Secrets: []string{"k"}, DefaultURL: "http://127.0.0.1:1/"})
	return closing(t, p, err)
}

func amqpPub(t *testing.T) outbox.Publisher {
	p, err := amqppub.New(amqppub.Config{URL: "amqp://127.0.0.1:1/"})
	return closing(t, p, err)
}

func kafkaPub(t *testing.T) outbox.Publisher {
	p, err := kafkapub.New(kafkapub.Config{SeedBrokers: []string{"127.0.0.1:1"}})
	return closing(t, p, err)
}

func natsPub(t *testing.T) outbox.Publisher {
	p, err := natspub.New(natspub.Config{URL: "nats://127.0.0.1:1"})
	return closing(t, p, err)
}

func closing[P outbox.Publisher](t *testing.T, p P, err error) outbox.Publisher {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Control characters and NUL in names and headers are refused at Write, with an
// error that says what is wrong; nothing is written.
func TestBadInputNULRefusedAtWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := map[string]struct {
		mutate func(*outbox.Event)
		want   string
	}{
		"NUL in header value":  {func(ev *outbox.Event) { ev.Headers = map[string]string{"x-a": "a\x00b"} }, `value of "x-a" contains a NUL byte`},
		"NUL in header name":   {func(ev *outbox.Event) { ev.Headers = map[string]string{"x-\x00": "v"} }, "contains a control character"},
		"NUL in aggregate id":  {func(ev *outbox.Event) { ev.AggregateID = "a\x00" }, "aggregate_id"},
		"NUL in event type":    {func(ev *outbox.Event) { ev.EventType = "\x00" }, "event_type"},
		"NUL in destination":   {func(ev *outbox.Event) { ev.Destination = "d\x00" }, "destination"},
		"raw NUL in payload":   {func(ev *outbox.Event) { ev.Payload = []byte("{\"a\":\"\x00\"}") }, "payload"},
		"escaped NUL payload":  {func(ev *outbox.Event) { ev.Payload = []byte(`{"a":"\u0000"}`) }, "payload"},
		"bad UTF-8 in header":  {func(ev *outbox.Event) { ev.Headers = map[string]string{"x-a": "\xff"} }, "not valid UTF-8"},
		"DEL in header value":  {func(ev *outbox.Event) { ev.Headers = map[string]string{"x-a": "\x7f"} }, "control character"},
		"CRLF in header value": {func(ev *outbox.Event) { ev.Headers = map[string]string{"x-a": "a\r\nb: c"} }, "control character"},
	}
	for name, c := range cases {
		ev := event("1", 1)
		c.mutate(&ev)
		_, err := e.ob.Write(e.ctx, e.pool, ev)
		if !errors.Is(err, skiplock.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an invalid-input error mentioning %q", name, err, c.want)
		}
	}
	ok := event("1", 1)
	ok.Headers = map[string]string{"x-tab": "a\tb"} // a tab is allowed
	_, err := e.ob.Write(e.ctx, e.pool, ok)
	e.must(err)
	if c := e.counts(); c.Pending != 1 {
		t.Fatalf("refused writes wrote rows: %+v", c)
	}
}

// The Outbox follows its client: schema, clock and payload limit. No part of the
// outbox writes to the default schema when the client is configured otherwise.
func TestOutboxFollowsItsClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	at := t0.Add(42 * time.Minute)
	clock := fixedClock(at)
	c, err := skiplock.NewClient(e.pool, skiplock.Config{Schema: e.schema, Clock: clock, MaxPayloadBytes: 100})
	e.must(err)
	defer c.Close()
	ob, err := outbox.New(c, outbox.Config{})
	e.must(err)
	if ob.Schema() != e.schema {
		t.Fatalf("schema %q, want the client's %q", ob.Schema(), e.schema)
	}
	id, err := ob.Write(e.ctx, e.pool, event("1", 1))
	e.must(err)
	if rec, err := ob.Admin().Get(e.ctx, e.pool, id); err != nil || !rec.CreatedAt.Equal(at) {
		t.Fatalf("event %+v (%v), want created at the client's clock %v", rec, err, at)
	}
	_, err = ob.Inbox().Claim(e.ctx, e.pool, "c", id)
	e.must(err)
	if got := scalar[time.Time](e, "SELECT processed_at FROM "+e.q("inbox")+" WHERE event_id = $1", id); !got.Equal(at) {
		t.Fatalf("inbox processed_at %v, want the client's clock %v", got, at)
	}
	if _, ok := any(c).(interface{ MaxPayloadBytes() int }); !ok {
		t.Log("skiplock.Client does not report MaxPayloadBytes yet: the payload limit check is skipped")
		return
	}
	big := event("1", 2)
	big.Payload = fmt.Appendf(nil, `{"pad":%q}`, strings.Repeat("x", 200))
	if _, err := ob.Write(e.ctx, e.pool, big); !errors.Is(err, skiplock.ErrInvalid) {
		t.Fatalf("payload over the client's 100-byte limit: %v", err)
	}
}

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// Credentials in broker and webhook URLs never reach errors or logs.
func TestBadInputCredentialsNotLeaked(t *testing.T) {
	t.Parallel()
	const secret = "hunter2"
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var texts []string
	note := func(err error) {
		if err != nil {
			texts = append(texts, err.Error())
		}
	}

	// Configuration errors.
	_, err := webhookpub.New(webhookpub.Config{Secrets: []string{"k"}, DefaultURL: "https://relay:" + secret + "@hooks.example.com:port/"})
	note(err)
	_, err = webhookpub.New(webhookpub.Config{Secrets: []string{"k"}, Endpoints: map[string]string{"a": "ftp://relay:" + secret + "@example.com/"}})
	note(err)
	_, err = amqppub.New(amqppub.Config{URL: "amqp://relay:" + secret + "@rabbit:notaport/"})
	note(err)
	_, err = amqppub.New(amqppub.Config{URL: "amqp://relay:" + secret + "@rabbit:5672/%zz"})
	note(err)
	if len(texts) != 4 {
		t.Fatalf("want 4 configuration errors, got %q", texts)
	}

	// Delivery errors: nothing listens on port 1.
	msg := []outbox.Message{{ID: "0190c0de-0000-7000-8000-000000000001", Payload: []byte(`{}`), Headers: map[string]string{}}}
	wp, err := webhookpub.New(webhookpub.Config{Secrets: []string{"k"}, DefaultURL: "http://relay:" + secret + "@127.0.0.1:1/in", Logger: logger})
	noErr(t, err)
	defer wp.Close()
	ap, err := amqppub.New(amqppub.Config{URL: "amqp://relay:" + secret + "@127.0.0.1:1/", DefaultRoutingKey: "q", Logger: logger, Timeout: 5 * time.Second})
	noErr(t, err)
	defer ap.Close()
	for _, p := range []outbox.Publisher{wp, ap} {
		for _, err := range p.Publish(ctx, msg) {
			if err == nil {
				t.Fatalf("%T: publish to a closed port succeeded", p)
			}
			note(err)
		}
	}
	np, err := natspub.New(natspub.Config{URL: "nats://relay:" + secret + "@127.0.0.1:1", Logger: logger,
		Options: []nats.Option{nats.RetryOnFailedConnect(false)}})
	if err == nil {
		np.Close()
		t.Fatal("natspub connected to a closed port")
	}
	note(err)
	np, err = natspub.New(natspub.Config{URL: "nats://" + secret + "@127.0.0.1:1", Options: []nats.Option{nats.RetryOnFailedConnect(false)}})
	if err == nil {
		np.Close()
	}
	note(err)

	for _, s := range append(texts, logs.String()) {
		if strings.Contains(s, secret) {
			t.Errorf("credential in %q", s)
		}
	}
	if !strings.Contains(strings.Join(texts, "\n"), "xxxxx@") {
		t.Errorf("errors do not show the masked URL: %q", texts)
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
