package gateway

// Push mode: for each PushTarget, the gateway claims the jobs of its queue (through
// the same waiting claims as the HTTP workers, so an idle target costs no query)
// and POSTs each, signed the Standard Webhooks way, to the target's URL, renewing
// the job's lease while it waits. The reply is the outcome; 202 Accepted defers it
// to a later call of the routes, for which the gateway keeps renewing the lease up
// to CallbackTimeout.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/whsign"
)

// PushTarget is a URL the gateway POSTs the jobs of a queue to (push mode).
type PushTarget struct {
	// Queue whose jobs are pushed. Required; a queue is pushed to one target at most.
	Queue string
	// URL receives each job as a PushRequest (http or https). Required.
	URL string
	// Secrets sign each request (Standard Webhooks: "whsec_" and base64, or raw key
	// bytes), as webhookpub.Config.Secrets; the receiver checks with
	// webhookpub.Verify or any Standard Webhooks library. Required. Several sign
	// with each (rotation).
	Secrets []string
	// Concurrency is how many of the queue's jobs are pushed at once. Default 10.
	Concurrency int
	// Timeout bounds one request, the receiver's work included. Default 30s.
	Timeout time.Duration
	// CallbackTimeout is how long a job answered 202 Accepted may wait for its
	// outcome through the routes, its lease renewed meanwhile; then the attempt
	// fails (retried per the job's policy). Default 15 minutes.
	CallbackTimeout time.Duration
	// Header is added to every request (an Authorization for the receiver, say).
	Header http.Header

	keys [][]byte
}

// Defaults of PushTarget.
const (
	DefaultPushConcurrency     = 10
	DefaultPushTimeout         = 30 * time.Second
	DefaultPushCallbackTimeout = 15 * time.Minute
)

// check validates the i-th target and fills its defaults.
func (t *PushTarget) check(i int) error {
	bad := func(field, format string, args ...any) error {
		return &skiplock.ValidationError{Field: fmt.Sprintf("gateway.Options.Push[%d].%s", i, field), Reason: fmt.Sprintf(format, args...)}
	}
	if t.Queue == "" {
		return bad("Queue", "required")
	}
	u, err := url.Parse(t.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad("URL", "%q is not an http or https URL", t.URL)
	}
	if len(t.Secrets) == 0 {
		return bad("Secrets", "no signing secret given: receivers must be able to tell the gateway's requests from anyone's")
	}
	t.keys = nil
	for j, s := range t.Secrets {
		key, err := whsign.DecodeSecret(s)
		if err != nil {
			return bad("Secrets", "secret %d %v", j, err)
		}
		t.keys = append(t.keys, key)
	}
	if t.Concurrency == 0 {
		t.Concurrency = DefaultPushConcurrency
	}
	if t.Timeout == 0 {
		t.Timeout = DefaultPushTimeout
	}
	if t.CallbackTimeout == 0 {
		t.CallbackTimeout = DefaultPushCallbackTimeout
	}
	switch {
	case t.Concurrency < 1:
		return bad("Concurrency", "%d is below 1", t.Concurrency)
	case t.Timeout < 0 || t.CallbackTimeout < 0:
		return bad("Timeout", "negative")
	}
	return nil
}

// pushLoop claims the jobs of t's queue as slots free up and delivers each.
func (g *Gateway) pushLoop(r *run, t *PushTarget) {
	slots := make(chan struct{}, t.Concurrency)
	var deliveries sync.WaitGroup
	defer deliveries.Wait()
	for {
		select { // one free slot, then every other free one
		case slots <- struct{}{}:
		case <-r.ctx.Done():
			return
		}
		n := 1
	fill:
		for n < min(t.Concurrency, g.opts.MaxClaimBatch) {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break fill
			}
		}
		jobs, err := g.claimJobs(r.ctx, t.Queue, n, g.opts.MaxWait)
		for range n - len(jobs) {
			<-slots
		}
		if r.ctx.Err() != nil {
			if len(jobs) > 0 {
				g.giveBack(r.ctx, jobs)
			}
			return
		}
		if err != nil {
			g.log.Warn("gateway: push: claim failed", "queue", t.Queue, "error", err)
			hostclock.Sleep(r.ctx, time.Second)
			continue
		}
		for _, job := range jobs {
			deliveries.Go(func() {
				defer func() { <-slots }()
				g.deliver(r, t, job)
			})
		}
	}
}

// deliver pushes one job and writes its outcome.
func (g *Gateway) deliver(r *run, t *PushTarget, job *skiplock.Job) {
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	// The lease is renewed while the receiver works; losing it (an operator cancelled
	// the job, or a callback already finished it) ends the wait.
	lost := make(chan struct{})
	var beats sync.WaitGroup
	beats.Go(func() { g.keepLease(ctx, job, lost) })
	defer beats.Wait()
	defer cancel()

	outcome, deferred := g.post(ctx, t, job)
	if deferred {
		wait := time.NewTimer(t.CallbackTimeout)
		defer wait.Stop()
		select {
		case <-lost:
			return // finished through the routes (or taken away)
		case <-ctx.Done():
			return // the gateway stops: the lease expires and the job is retried
		case <-wait.C:
			outcome = skiplock.Finish{Action: skiplock.FinishRetry, Delay: -1,
				Cause: fmt.Errorf("push: %s answered 202 but no outcome came within %s", t.URL, t.CallbackTimeout)}
		}
	}
	select {
	case <-lost:
		return
	default:
	}
	if r.ctx.Err() != nil {
		return
	}
	outcome.Job = job
	if _, err := g.submit(r.ctx, outcome); err != nil && !errors.Is(err, skiplock.ErrLeaseLost) && !errors.Is(err, errStopped) {
		g.log.Warn("gateway: push: writing the outcome failed; the job is retried once its lease expires", "job", job.ID, "error", err)
	}
}

// keepLease renews job's lease every third of the lease until ctx ends; it closes
// lost when the lease is gone.
func (g *Gateway) keepLease(ctx context.Context, job *skiplock.Job, lost chan<- struct{}) {
	tick := time.NewTicker(g.lease / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		gone, err := g.m.Heartbeat(ctx, job)
		if err != nil {
			if ctx.Err() == nil {
				g.log.Warn("gateway: push: renewing a lease failed; retrying at the next beat", "job", job.ID, "error", err)
			}
			continue
		}
		if len(gone) > 0 {
			close(lost)
			return
		}
	}
}

// post sends job to t and reads the outcome from the reply; deferred is a 202.
func (g *Gateway) post(ctx context.Context, t *PushTarget, job *skiplock.Job) (outcome skiplock.Finish, deferred bool) {
	retry := func(format string, args ...any) (skiplock.Finish, bool) {
		return skiplock.Finish{Action: skiplock.FinishRetry, Delay: -1, Cause: fmt.Errorf("push: "+format, args...)}, false
	}
	body, err := json.Marshal(PushRequest{Job: claimedJob(job), CallbackURL: g.opts.PublicURL})
	if err != nil {
		return retry("encoding the job: %v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, t.URL, bytes.NewReader(body))
	if err != nil {
		return retry("%v", err)
	}
	for k, vs := range t.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "skiplock-gateway")
	// The message id is the claim's lease token: unique per delivery, stable across
	// the HTTP client's own retries of it.
	whsign.SetHeaders(req.Header, t.keys, "msg_"+job.LeaseToken, hostclock.Now().Unix(), body)
	resp, err := g.opts.PushClient.Do(req)
	if err != nil {
		return retry("POST %s: %v", t.URL, err)
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(io.LimitReader(resp.Body, g.opts.MaxBodyBytes+1))
	if err != nil {
		return retry("POST %s: reading the reply: %v", t.URL, err)
	}
	switch {
	case resp.StatusCode == http.StatusAccepted:
		return skiplock.Finish{}, true
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return retry("POST %s answered %s: %s", t.URL, resp.Status, excerpt(reply))
	case int64(len(reply)) > g.opts.MaxBodyBytes:
		return retry("POST %s: the reply exceeds %d bytes", t.URL, g.opts.MaxBodyBytes)
	case len(bytes.TrimSpace(reply)) == 0:
		return skiplock.Finish{Action: skiplock.FinishComplete}, false
	}
	var pr PushReply
	dec := json.NewDecoder(bytes.NewReader(reply))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pr); err != nil {
		return retry("POST %s: the reply is not a PushReply: %v", t.URL, err)
	}
	f, err := pr.finish(job)
	if err != nil {
		return retry("POST %s: %v", t.URL, err)
	}
	return f, false
}

// finish turns a receiver's reply into the job's finish (without its Job).
func (pr PushReply) finish(job *skiplock.Job) (skiplock.Finish, error) {
	switch pr.Outcome {
	case "complete", "":
		if len(pr.Output) > 0 {
			if err := job.SetOutput(pr.Output); err != nil {
				return skiplock.Finish{}, fmt.Errorf("the reply's output: %w", err)
			}
		}
		return skiplock.Finish{Action: skiplock.FinishComplete}, nil
	case "fail":
		cause := errors.New(cmp.Or(pr.Error, "the push receiver reported a failure without an error text"))
		switch {
		case pr.Permanent:
			return skiplock.Finish{Action: skiplock.FinishFail, Cause: cause}, nil
		case pr.RetryInMS != nil:
			if *pr.RetryInMS < 0 || *pr.RetryInMS > skiplock.MaxSchedule.Milliseconds() {
				return skiplock.Finish{}, fmt.Errorf("the reply's retry_in_ms %d is outside 0 to %d", *pr.RetryInMS, skiplock.MaxSchedule.Milliseconds())
			}
			return skiplock.Finish{Action: skiplock.FinishRetry, Cause: cause, Delay: time.Duration(*pr.RetryInMS) * time.Millisecond}, nil
		}
		return skiplock.Finish{Action: skiplock.FinishRetry, Cause: cause, Delay: -1}, nil
	case "snooze":
		if pr.DelayMS < 0 || pr.DelayMS > skiplock.MaxSchedule.Milliseconds() {
			return skiplock.Finish{}, fmt.Errorf("the reply's delay_ms %d is outside 0 to %d", pr.DelayMS, skiplock.MaxSchedule.Milliseconds())
		}
		return skiplock.Finish{Action: skiplock.FinishSnooze, Delay: time.Duration(pr.DelayMS) * time.Millisecond}, nil
	case "cancel":
		var cause error
		if pr.Reason != "" {
			cause = errors.New(pr.Reason)
		}
		return skiplock.Finish{Action: skiplock.FinishCancel, Cause: cause}, nil
	}
	return skiplock.Finish{}, fmt.Errorf("the reply's outcome %q is none of complete, fail, snooze, cancel", pr.Outcome)
}

// excerpt is the start of a reply body for an error text.
func excerpt(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}
