package badinput

// Bad input on every public entry point of the outbox's adapters: nil, zero and
// typed-nil values, and credentials in their URLs. None may panic; each returns an
// error that matches skiplock.ErrInvalid; no credential reaches an error or a log.

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/amqppub"
	"github.com/skiplock/skiplock/outbox/kafkapub"
	"github.com/skiplock/skiplock/outbox/natspub"
	"github.com/skiplock/skiplock/outbox/webhookpub"
)

func TestBadInputEveryAdapterEntryPoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var nilCtx context.Context
	msgs := []outbox.Message{{ID: "0190c0de-0000-7000-8000-000000000001", Destination: "d", Payload: []byte(`{}`)}}
	cases := map[string]func() []error{
		// webhookpub
		"webhookpub.New(zero)":   func() []error { return Ignore(webhookpub.New(webhookpub.Config{})) },
		"webhookpub.New(no URL)": func() []error { return Ignore(webhookpub.New(webhookpub.Config{Secrets: []string{"k"}})) },
		"webhookpub.New(bad URL)": func() []error {
			return Ignore(webhookpub.New(webhookpub.Config{Secrets: []string{"k"}, DefaultURL: "::"}))
		},
		"webhookpub.New(empty secret)": func() []error {
			return Ignore(webhookpub.New(webhookpub.Config{Secrets: []string{""}, DefaultURL: "https://x"}))
		},
		"webhookpub.ParseSecrets(nil)": func() []error { return Ignore(webhookpub.ParseSecrets(nil)) },
		"webhookpub.Verify(nil)":       func() []error { return One(webhookpub.Verify(nil, nil, nil, 0)) },
		"nil webhookpub.Publish":       func() []error { return (*webhookpub.Publisher)(nil).Publish(ctx, msgs) },
		"zero webhookpub.Publish":      func() []error { return (&webhookpub.Publisher{}).Publish(ctx, msgs) },
		"nil webhookpub.Close":         func() []error { return One((*webhookpub.Publisher)(nil).Close()) },
		"zero webhookpub.Close":        func() []error { return One((&webhookpub.Publisher{}).Close()) },
		"webhookpub.Publish(nil ctx)":  func() []error { return webhookPub(t).Publish(nilCtx, msgs) },
		"amqppub.New(zero)":            func() []error { return Ignore(amqppub.New(amqppub.Config{})) },
		"amqppub.New(bad URL)":         func() []error { return Ignore(amqppub.New(amqppub.Config{URL: "http://x"})) },
		"nil amqppub.Publish":          func() []error { return (*amqppub.Publisher)(nil).Publish(ctx, msgs) },
		"zero amqppub.Publish":         func() []error { return (&amqppub.Publisher{}).Publish(ctx, msgs) },
		"nil amqppub.Close":            func() []error { return One((*amqppub.Publisher)(nil).Close()) },
		"zero amqppub.Close":           func() []error { return One((&amqppub.Publisher{}).Close()) },
		"amqppub.Publish(nil ctx)":     func() []error { return amqpPub(t).Publish(nilCtx, msgs) },
		"kafkapub.New(zero)":           func() []error { return Ignore(kafkapub.New(kafkapub.Config{})) },
		"kafkapub.New(empty broker)":   func() []error { return Ignore(kafkapub.New(kafkapub.Config{SeedBrokers: []string{""}})) },
		"kafkapub.New(nil option)": func() []error {
			return Ignore(kafkapub.New(kafkapub.Config{SeedBrokers: []string{"127.0.0.1:1"}, Options: []kgo.Opt{nil}}))
		},
		"kafkapub.New(conflicting option)": func() []error {
			return Ignore(kafkapub.New(kafkapub.Config{SeedBrokers: []string{"127.0.0.1:1"}, Options: []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck())}}))
		},
		"nil kafkapub.Publish":      func() []error { return (*kafkapub.Publisher)(nil).Publish(ctx, msgs) },
		"zero kafkapub.Publish":     func() []error { return (&kafkapub.Publisher{}).Publish(ctx, msgs) },
		"nil kafkapub.Close":        func() []error { return One((*kafkapub.Publisher)(nil).Close()) },
		"zero kafkapub.Close":       func() []error { return One((&kafkapub.Publisher{}).Close()) },
		"kafkapub.Publish(nil ctx)": func() []error { return kafkaPub(t).Publish(nilCtx, msgs) },
		"natspub.New(zero)":         func() []error { return Ignore(natspub.New(natspub.Config{})) },
		"natspub.New(typed-nil Conn)": func() []error {
			return Ignore(natspub.New(natspub.Config{Conn: (*nats.Conn)(nil)}))
		},
		"natspub.New(nil option)": func() []error {
			return Ignore(natspub.New(natspub.Config{URL: "nats://127.0.0.1:1", Options: []nats.Option{nil}}))
		},
		"nil natspub.Publish":      func() []error { return (*natspub.Publisher)(nil).Publish(ctx, msgs) },
		"zero natspub.Publish":     func() []error { return (&natspub.Publisher{}).Publish(ctx, msgs) },
		"nil natspub.Close":        func() []error { return One((*natspub.Publisher)(nil).Close()) },
		"zero natspub.Close":       func() []error { return One((&natspub.Publisher{}).Close()) },
		"natspub.Publish(nil ctx)": func() []error { return natsPub(t).Publish(nilCtx, msgs) },
	}
	RequireInvalid(t, cases)

	// Calls that return no error must not panic either.
	Call(t, "webhookpub.Sign(nil)", func() []error { _ = webhookpub.Sign(nil, "", 0, nil); return nil })
	Call(t, "nil StatusError.Error", func() []error { _ = (*webhookpub.StatusError)(nil).Error(); return nil })
	Call(t, "nil kafkapub.Client", func() []error { _ = (*kafkapub.Publisher)(nil).Client(); return nil })
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
