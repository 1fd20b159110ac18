package gateway

// The routes that act on a claimed job's lease: heartbeats and the outcomes
// (complete, fail, snooze, cancel), one job or many per request, each fenced
// by its lease token.

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/skiplock/skiplock"
)

// handle rebuilds the claim a single-job route names (its path's id, the body's
// lease token).
func (g *Gateway) handle(w http.ResponseWriter, r *http.Request, token string) (*skiplock.Job, bool) {
	if token == "" {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "lease_token is required", "lease_token")
		return nil, false
	}
	job, err := g.m.Handle(r.PathValue("id"), token)
	if err != nil {
		g.writeFailure(w, r, err)
		return nil, false
	}
	return job, true
}

func (g *Gateway) heartbeat(w http.ResponseWriter, r *http.Request, _ string) {
	var req LeaseRequest
	if !g.decode(w, r, &req) {
		return
	}
	job, ok := g.handle(w, r, req.LeaseToken)
	if !ok {
		return
	}
	lost, err := g.m.Heartbeat(r.Context(), job)
	if err != nil {
		g.writeFailure(w, r, err)
		return
	}
	if len(lost) > 0 {
		g.writeFailure(w, r, skiplock.ErrLeaseLost)
		return
	}
	writeJSON(w, http.StatusOK, HeartbeatResponse{ID: job.ID, LeaseMS: g.lease.Milliseconds()})
}

// handles rebuilds the claims a many-job route names, n of them (item gives the
// i-th's job id and lease token): 1 to MaxClaimBatch, each job once. It writes the
// refusal itself, naming the item (jobs[i].id).
func (g *Gateway) handles(w http.ResponseWriter, r *http.Request, n int, item func(i int) (id, token string)) ([]*skiplock.Job, bool) {
	if n == 0 || n > g.opts.MaxClaimBatch {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("jobs: give 1 to %d", g.opts.MaxClaimBatch), "jobs")
		return nil, false
	}
	jobs := make([]*skiplock.Job, n)
	ids := make(map[string]bool, n)
	for i := range n {
		id, token := item(i)
		if ids[id] {
			writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("jobs[%d]: job %s is given twice", i, id), fmt.Sprintf("jobs[%d].id", i))
			return nil, false
		}
		ids[id] = true
		job, err := g.m.Handle(id, token)
		if err != nil {
			g.writeItemFailure(w, r, i, err)
			return nil, false
		}
		jobs[i] = job
	}
	return jobs, true
}

// writeItemFailure answers an error of a many-job route's i-th item: a refused
// value names the item's field (jobs[i].output); anything else is writeFailure's.
func (g *Gateway) writeItemFailure(w http.ResponseWriter, r *http.Request, i int, err error) {
	var ve *skiplock.ValidationError
	if errors.As(err, &ve) {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("jobs[%d]: %s", i, ve.Reason), fmt.Sprintf("jobs[%d].%s", i, ve.Field))
		return
	}
	g.writeFailure(w, r, err)
}

func (g *Gateway) heartbeatMany(w http.ResponseWriter, r *http.Request, _ string) {
	var req HeartbeatManyRequest
	if !g.decode(w, r, &req) {
		return
	}
	jobs, ok := g.handles(w, r, len(req.Jobs), func(i int) (string, string) { return req.Jobs[i].ID, req.Jobs[i].LeaseToken })
	if !ok {
		return
	}
	lost, err := g.m.Heartbeat(r.Context(), jobs...)
	if err != nil {
		g.writeFailure(w, r, err)
		return
	}
	resp := HeartbeatManyResponse{Renewed: []string{}, Lost: []string{}, LeaseMS: g.lease.Milliseconds()}
	for _, j := range jobs {
		if slices.Contains(lost, j) {
			resp.Lost = append(resp.Lost, j.ID)
		} else {
			resp.Renewed = append(resp.Renewed, j.ID)
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

func (g *Gateway) complete(w http.ResponseWriter, r *http.Request, _ string) {
	var req CompleteRequest
	if !g.decode(w, r, &req) {
		return
	}
	job, ok := g.handle(w, r, req.LeaseToken)
	if !ok {
		return
	}
	if len(req.Output) > 0 {
		if err := job.SetOutput(req.Output); err != nil {
			g.writeFailure(w, r, err)
			return
		}
	}
	g.finish(w, r, skiplock.Finish{Job: job, Action: skiplock.FinishComplete})
}

// completeMany writes many successes through the finishers, which put the calls
// that arrive together, these among them, into one statement.
func (g *Gateway) completeMany(w http.ResponseWriter, r *http.Request, _ string) {
	var req CompleteManyRequest
	if !g.decode(w, r, &req) {
		return
	}
	jobs, ok := g.handles(w, r, len(req.Jobs), func(i int) (string, string) { return req.Jobs[i].ID, req.Jobs[i].LeaseToken })
	if !ok {
		return
	}
	fs := make([]skiplock.Finish, len(jobs))
	for i, job := range jobs {
		if out := req.Jobs[i].Output; len(out) > 0 {
			if err := job.SetOutput(out); err != nil {
				g.writeItemFailure(w, r, i, err)
				return
			}
		}
		fs[i] = skiplock.Finish{Job: job, Action: skiplock.FinishComplete}
	}
	res, err := g.submitMany(r.Context(), fs)
	if err != nil {
		g.writeFailure(w, r, err)
		return
	}
	resp := CompleteManyResponse{Succeeded: make([]string, 0, len(fs)), Lost: []string{}}
	var failed error
	for i, x := range res {
		switch {
		case errors.Is(x.err, skiplock.ErrLeaseLost):
			resp.Lost = append(resp.Lost, fs[i].Job.ID)
		case x.err != nil:
			failed = x.err
		default:
			resp.Succeeded = append(resp.Succeeded, fs[i].Job.ID)
		}
	}
	if failed != nil {
		// Some were not written (the database failed): the worker retries the request,
		// and those written meanwhile answer lost, as a retried single completion does.
		g.writeFailure(w, r, failed)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (g *Gateway) fail(w http.ResponseWriter, r *http.Request, _ string) {
	var req FailRequest
	if !g.decode(w, r, &req) {
		return
	}
	if strings.TrimSpace(req.Error) == "" {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "error is required: say why the attempt failed", "error")
		return
	}
	if req.Permanent && req.RetryInMS != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "retry_in_ms with permanent: a permanent failure is not retried", "retry_in_ms")
		return
	}
	job, ok := g.handle(w, r, req.LeaseToken)
	if !ok {
		return
	}
	f, ok := g.failure(w, r, job, req.Error, req.Permanent, req.RetryInMS)
	if ok {
		g.finish(w, r, f)
	}
}

// failure builds a fail's finish. A retry by the job's policy needs the job's kind
// and attempt: it reads the job, and a job no longer held under the token is a lost
// lease at once.
func (g *Gateway) failure(w http.ResponseWriter, r *http.Request, job *skiplock.Job, text string, permanent bool, retryIn *int64) (skiplock.Finish, bool) {
	cause := errors.New(text)
	switch {
	case permanent:
		return skiplock.Finish{Job: job, Action: skiplock.FinishFail, Cause: cause}, true
	case retryIn != nil:
		d, ok := ms(w, "retry_in_ms", *retryIn, skiplock.MaxSchedule)
		return skiplock.Finish{Job: job, Action: skiplock.FinishRetry, Cause: cause, Delay: d}, ok
	}
	read, err := g.client.JobGet(r.Context(), job.ID)
	switch {
	case errors.Is(err, skiplock.ErrNotFound):
		err = skiplock.ErrLeaseLost
	case err == nil && (read.State != skiplock.StateRunning || read.LeaseToken != job.LeaseToken):
		err = skiplock.ErrLeaseLost
	}
	if err != nil {
		g.writeFailure(w, r, err)
		return skiplock.Finish{}, false
	}
	return skiplock.Finish{Job: read, Action: skiplock.FinishRetry, Cause: cause, Delay: -1}, true
}

func (g *Gateway) snooze(w http.ResponseWriter, r *http.Request, _ string) {
	var req SnoozeRequest
	if !g.decode(w, r, &req) {
		return
	}
	d, ok := ms(w, "delay_ms", req.DelayMS, skiplock.MaxSchedule)
	if !ok {
		return
	}
	job, ok := g.handle(w, r, req.LeaseToken)
	if ok {
		g.finish(w, r, skiplock.Finish{Job: job, Action: skiplock.FinishSnooze, Delay: d})
	}
}

func (g *Gateway) cancel(w http.ResponseWriter, r *http.Request, _ string) {
	var req CancelRequest
	if !g.decode(w, r, &req) {
		return
	}
	job, ok := g.handle(w, r, req.LeaseToken)
	if !ok {
		return
	}
	var cause error
	if req.Reason != "" {
		cause = errors.New(req.Reason)
	}
	g.finish(w, r, skiplock.Finish{Job: job, Action: skiplock.FinishCancel, Cause: cause})
}

// finish writes f through the finishers and answers its result.
func (g *Gateway) finish(w http.ResponseWriter, r *http.Request, f skiplock.Finish) {
	st, err := g.submit(r.Context(), f)
	if err != nil {
		g.writeFailure(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, FinishResponse{ID: f.Job.ID, State: st})
}
