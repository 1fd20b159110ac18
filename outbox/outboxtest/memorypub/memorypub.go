// Package memorypub is an in-process outbox.Publisher for tests, benchmarks and
// demos. It records every message it accepts, in order, and can be told to fail:
// all messages (a broker outage), some (a poison message), or permanently.
//
//	pub := memorypub.New()
//	relay, _ := ob.NewRelay(pub, outbox.RelayConfig{}) // ob from outbox.New
//	...
//	pub.WaitFor(ctx, 10)          // until 10 messages were accepted
//	for _, m := range pub.Messages() { ... }
package memorypub

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
)

// ErrDown is the error FailAll(nil) makes Publish return: a broker outage.
var ErrDown = errors.New("memorypub: broker down")

// Publisher records messages in memory. It is safe for concurrent use. The zero
// value is ready to use, like New's.
type Publisher struct {
	mu      sync.Mutex
	msgs    []outbox.Message
	calls   int
	fail    func(outbox.Message) error
	hook    func(ctx context.Context, msgs []outbox.Message)
	closed  bool
	changed chan struct{} // closed and replaced whenever msgs grows; made on first use
}

// errNil is what a nil *Publisher or a nil context gets.
var errNil = &skiplock.ValidationError{Field: "memorypub", Reason: "nil *Publisher or nil context; use memorypub.New and a real context"}

// changedLocked returns the channel closed at the next growth of msgs. p.mu is held.
func (p *Publisher) changedLocked() chan struct{} {
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	return p.changed
}

var _ outbox.Publisher = (*Publisher)(nil)

// New returns an empty Publisher that accepts everything.
func New() *Publisher { return &Publisher{} }

// Publish records the messages the failure function (if any) accepts and returns
// one error per message. A cancelled context fails every message, and so do a nil
// context and a nil *Publisher (with errors wrapping skiplock.ErrInvalid).
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	if p == nil || ctx == nil {
		return outbox.FailAll(errs, errNil)
	}
	p.mu.Lock()
	p.calls++
	hook := p.hook
	switch {
	case p.closed:
		outbox.FailAll(errs, outbox.ErrClosed)
	case ctx.Err() != nil:
		outbox.FailAll(errs, ctx.Err())
	default:
		grew := false
		for i, m := range msgs {
			if p.fail != nil {
				if errs[i] = p.fail(m); errs[i] != nil {
					continue
				}
			}
			m.Payload = slices.Clone(m.Payload)
			p.msgs = append(p.msgs, m)
			grew = true
		}
		if grew {
			close(p.changedLocked())
			p.changed = make(chan struct{})
		}
	}
	p.mu.Unlock()
	if hook != nil {
		hook(ctx, msgs)
	}
	return errs
}

// Close makes later Publish calls fail with outbox.ErrClosed.
func (p *Publisher) Close() error {
	if p == nil {
		return errNil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return nil
}

// SetFailure makes Publish fail each message for which fn returns an error (wrap it
// with skiplock.Permanent for a permanent failure). nil accepts everything again.
func (p *Publisher) SetFailure(fn func(outbox.Message) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail = fn
}

// FailAll makes every message fail with err (ErrDown if nil) until Recover.
func (p *Publisher) FailAll(err error) {
	if err == nil {
		err = ErrDown
	}
	p.SetFailure(func(outbox.Message) error { return err })
}

// Recover accepts everything again.
func (p *Publisher) Recover() { p.SetFailure(nil) }

// SetHook registers fn to run after each Publish has recorded its messages, before
// it returns (tests use it to stop a relay between publish and mark). nil removes it.
func (p *Publisher) SetHook(fn func(ctx context.Context, msgs []outbox.Message)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hook = fn
}

// Messages returns a copy of the accepted messages, in acceptance order.
func (p *Publisher) Messages() []outbox.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.msgs)
}

// Count returns how many messages were accepted (duplicates included).
func (p *Publisher) Count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.msgs)
}

// Calls returns how many times Publish was called.
func (p *Publisher) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// Reset forgets the accepted messages.
func (p *Publisher) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = nil
}

// WaitFor blocks until at least n messages were accepted or ctx ends.
func (p *Publisher) WaitFor(ctx context.Context, n int) error {
	if p == nil || ctx == nil {
		return errNil
	}
	for {
		p.mu.Lock()
		have, ch := len(p.msgs), p.changedLocked()
		p.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}
