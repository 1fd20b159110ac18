package dashboard

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/uuidv7"
)

// jobAction is an operator's write to a job: the states it applies to and the
// authorisation it needs, for one job and in bulk.
type jobAction struct {
	Name    string // in paths and forms
	Label   string // the button's text
	Past    string
	Single  string // the Action asked of Options.Authorize for one job
	Bulk    string // and for every job a filter matches
	From    []skiplock.JobState
	Confirm string // what the script asks before a single action ("" for none)
	run     func(ctx context.Context, c *skiplock.Client, id string) (*skiplock.Job, error)
}

// TestID is the data-testid of the action's button on the job page.
func (a jobAction) TestID() string {
	if a.Name == "run_now" {
		return "action-run-now"
	}
	return "action-" + a.Name
}

// BulkTestID is the data-testid of the action's bulk link on the jobs page.
func (a jobAction) BulkTestID() string {
	if a.Name == "run_now" {
		return "bulk-run-now"
	}
	return "bulk-" + a.Name
}

// FromText lists the states the action applies to, for a person.
func (a jobAction) FromText() string {
	s := ""
	for i, st := range a.From {
		switch {
		case i == 0:
		case i == len(a.From)-1:
			s += " or "
		default:
			s += ", "
		}
		s += string(st)
	}
	return s
}

var jobActions = []jobAction{
	{Name: "retry", Label: "Retry", Past: "retried", Single: ActionJobRetry, Bulk: ActionBulkRetry,
		From: []skiplock.JobState{skiplock.StateFailed, skiplock.StateCancelled},
		run: func(ctx context.Context, c *skiplock.Client, id string) (*skiplock.Job, error) {
			return c.JobRetry(ctx, id)
		}},
	{Name: "run_now", Label: "Run now", Past: "made due now", Single: ActionJobRunNow, Bulk: ActionBulkRunNow,
		From: []skiplock.JobState{skiplock.StatePending},
		run: func(ctx context.Context, c *skiplock.Client, id string) (*skiplock.Job, error) {
			return c.JobRunNow(ctx, id)
		}},
	{Name: "cancel", Label: "Cancel", Past: "cancelled", Single: ActionJobCancel, Bulk: ActionBulkCancel,
		From: []skiplock.JobState{skiplock.StatePending, skiplock.StateClaimed, skiplock.StateRunning, skiplock.StateWaiting}, Confirm: "Cancel this job?",
		run: func(ctx context.Context, c *skiplock.Client, id string) (*skiplock.Job, error) {
			return c.JobCancel(ctx, id, "cancelled from the dashboard")
		}},
	{Name: "delete", Label: "Delete", Past: "deleted", Single: ActionJobDelete, Bulk: ActionBulkDelete,
		From:    []skiplock.JobState{skiplock.StatePending, skiplock.StateSucceeded, skiplock.StateFailed, skiplock.StateCancelled},
		Confirm: "Delete this job for good?",
		run: func(ctx context.Context, c *skiplock.Client, id string) (*skiplock.Job, error) {
			return c.JobDelete(ctx, id)
		}},
}

func findJobAction(name string) (jobAction, bool) {
	for _, a := range jobActions {
		if a.Name == name {
			return a, true
		}
	}
	return jobAction{}, false
}

// jobAct performs an action on one job: POST /jobs/{id}/{action}.
func (h *handler) jobAct(q *request, id, name string) {
	a, ok := findJobAction(name)
	if !ok {
		h.fail(q, http.StatusNotFound, "No such action.")
		return
	}
	if h.refuse(q, a.Single) {
		return
	}
	if _, err := a.run(q.ctx, h.c, id); err != nil {
		h.failErr(q, err)
		return
	}
	to := q.prefix + "/jobs/" + id
	if a.Name == "delete" {
		to = q.prefix + "/jobs"
	}
	h.redirect(q, to+"?"+url.Values{"done": {a.Name}, "what": {"job"}}.Encode())
}

// maxCount bounds the count shown on a bulk confirmation page.
const maxCount = 100000

type confirmData struct {
	Action     jobAction
	Filter     jobFilter
	IDs        []string // the selected jobs, when the action names them
	Count      int
	Capped     bool   // more than Count match
	Last       string // the last matching id when counted: the action stops there
	BackURL    string
	PostURL    string
	ActionName string // for the outbox confirmation
	What       string // what is counted, plural ("jobs")
	WhatOne    string // and singular ("job")
}

// bulk is the confirmation page (GET) and the action (POST) on every job a filter
// matches, among the states the action applies to.
func (h *handler) bulk(q *request) {
	vals := q.r.URL.Query()
	if q.r.Method == http.MethodPost {
		vals = q.r.PostForm
	}
	a, ok := findJobAction(vals.Get("action"))
	if !ok {
		h.fail(q, http.StatusBadRequest, "Unknown bulk action "+strconv.Quote(vals.Get("action"))+".")
		return
	}
	if h.refuse(q, a.Bulk) {
		return
	}
	if ids := vals["id"]; len(ids) > 0 {
		h.bulkSelected(q, a, ids)
		return
	}
	f, err := parseFilter(vals)
	if err != nil {
		h.failErr(q, err)
		return
	}
	if f.Search != "" && !h.showPayloads(q.r) {
		h.fail(q, http.StatusForbidden, "Searching job arguments needs permission to see payloads.")
		return
	}
	// The states the action applies to, narrowed by the filter's.
	var states []string
	for _, s := range a.From {
		if len(f.States) == 0 || slices.Contains(f.States, string(s)) {
			states = append(states, string(s))
		}
	}
	p := f.params(states)
	if q.r.Method != http.MethodPost {
		d := confirmData{Action: a, Filter: f, BackURL: h.jobsURL(q, f, nil), PostURL: q.prefix + "/jobs/bulk", What: "jobs", WhatOne: "job"}
		if len(states) > 0 {
			if d.Count, d.Last, d.Capped, err = h.count(q, p); err != nil {
				h.failErr(q, err)
				return
			}
		}
		h.render(q, http.StatusOK, "confirm", a.Label+" jobs", "", d)
		return
	}
	last := vals.Get("last")
	done, skipped := 0, 0
	if len(states) > 0 {
		p.Limit = 1000
	pages:
		for {
			page, err := h.c.JobList(q.ctx, p)
			if err != nil {
				h.failErr(q, err)
				return
			}
			for _, j := range page {
				if last != "" && j.ID > last {
					break pages // enqueued after the confirmation: not counted, not touched
				}
				_, err := a.run(q.ctx, h.c, j.ID)
				switch {
				case err == nil:
					done++
				case errors.Is(err, skiplock.ErrJobState), errors.Is(err, skiplock.ErrNotFound):
					skipped++ // it moved on meanwhile (a worker finished it, say)
				default:
					h.failErr(q, err)
					return
				}
			}
			if len(page) < p.Limit {
				break
			}
			p.AfterID = page[len(page)-1].ID
		}
	}
	h.redirect(q, h.jobsURL(q, f, url.Values{"done": {a.Name}, "what": {"job"}, "n": {strconv.Itoa(done)}, "skipped": {strconv.Itoa(skipped)}}))
}

// maxSelected bounds how many jobs one bulk action on selected jobs names.
const maxSelected = 1000

// bulkSelected is bulk on the jobs selected by id (the checkboxes of the job list):
// the confirmation (GET) and the action (POST). A selected job in a state the action
// does not apply to is skipped and counted.
func (h *handler) bulkSelected(q *request, a jobAction, ids []string) {
	if len(ids) > maxSelected {
		h.fail(q, http.StatusBadRequest, "Select at most "+strconv.Itoa(maxSelected)+" jobs at a time.")
		return
	}
	for _, id := range ids {
		if !uuidv7.Valid(id) {
			h.fail(q, http.StatusBadRequest, "A selected job id is not a UUID.")
			return
		}
	}
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	if q.r.Method != http.MethodPost {
		h.render(q, http.StatusOK, "confirm", a.Label+" jobs", "", confirmData{Action: a, IDs: ids, Count: len(ids),
			BackURL: q.prefix + "/jobs", PostURL: q.prefix + "/jobs/bulk", What: "selected jobs", WhatOne: "selected job"})
		return
	}
	done, skipped := 0, 0
	for _, id := range ids {
		_, err := a.run(q.ctx, h.c, id)
		switch {
		case err == nil:
			done++
		case errors.Is(err, skiplock.ErrJobState), errors.Is(err, skiplock.ErrNotFound):
			skipped++
		default:
			h.failErr(q, err)
			return
		}
	}
	h.redirect(q, q.prefix+"/jobs?"+url.Values{"done": {a.Name}, "what": {"job"}, "n": {strconv.Itoa(done)}, "skipped": {strconv.Itoa(skipped)}}.Encode())
}

// count counts the jobs p matches, up to maxCount, and returns how many there are
// and the last one's id (none when capped: the action then takes all).
func (h *handler) count(q *request, p skiplock.ListParams) (n int, last string, capped bool, err error) {
	c, last, err := h.c.JobCount(q.ctx, p, maxCount)
	if err != nil {
		return 0, "", false, err
	}
	return int(c), last, c >= maxCount, nil
}

// queueAct pauses or resumes a queue: POST /queues/{pause|resume}, field "queue". A
// queue nothing names is refused as a likely misspelling (skiplock.ErrQueueNotFound),
// unless the pause says "ahead" (the form that pauses a queue by name before its
// first job).
func (h *handler) queueAct(q *request, verb string) {
	name := q.r.PostFormValue("queue")
	var err error
	switch verb {
	case "pause":
		if h.refuse(q, ActionQueuePause) {
			return
		}
		if q.r.PostFormValue("ahead") == "1" {
			err = h.c.QueuePauseAhead(q.ctx, name)
		} else {
			err = h.c.QueuePause(q.ctx, name)
		}
	case "resume":
		if h.refuse(q, ActionQueueResume) {
			return
		}
		err = h.c.QueueResume(q.ctx, name)
	default:
		h.fail(q, http.StatusNotFound, "No such action.")
		return
	}
	if err != nil {
		h.failErr(q, err)
		return
	}
	h.redirect(q, q.prefix+"/queues?"+url.Values{"done": {verb}, "what": {"queue"}}.Encode())
}

// scheduleAct pauses, resumes or triggers a schedule: POST
// /schedules/{pause|resume|trigger}, field "schedule". A trigger shows the job it
// enqueued.
func (h *handler) scheduleAct(q *request, verb string) {
	name := q.r.PostFormValue("schedule")
	var err error
	switch verb {
	case "pause":
		if h.refuse(q, ActionSchedulePause) {
			return
		}
		_, err = h.c.SchedulePause(q.ctx, name)
	case "resume":
		if h.refuse(q, ActionScheduleResume) {
			return
		}
		_, err = h.c.ScheduleResume(q.ctx, name)
	case "trigger":
		if h.refuse(q, ActionScheduleTrigger) {
			return
		}
		res, err := h.c.ScheduleTrigger(q.ctx, name)
		if err != nil {
			h.failErr(q, err)
			return
		}
		h.redirect(q, q.prefix+"/jobs/"+res.ID+"?"+url.Values{"done": {"trigger"}, "what": {"schedule"}}.Encode())
		return
	default:
		h.fail(q, http.StatusNotFound, "No such action.")
		return
	}
	if err != nil {
		h.failErr(q, err)
		return
	}
	h.redirect(q, q.prefix+"/schedules?"+url.Values{"done": {verb}, "what": {"schedule"}}.Encode())
}

// eventRequeue requeues one dead event: POST /outbox/{id}/requeue.
func (h *handler) eventRequeue(q *request, id string) {
	if h.refuse(q, ActionOutboxRequeue) {
		return
	}
	if err := h.ob.Admin().Requeue(q.ctx, h.c.Pool(), id); err != nil {
		h.failErr(q, err)
		return
	}
	h.redirect(q, q.prefix+"/outbox/"+id+"?"+url.Values{"done": {"requeue"}, "what": {"event"}}.Encode())
}

// requeueDead is the confirmation page (GET) and the requeue (POST) of every dead event.
func (h *handler) requeueDead(q *request) {
	if h.refuse(q, ActionOutboxRequeueDead) {
		return
	}
	if q.r.Method == http.MethodPost {
		n, err := h.ob.Admin().RequeueDead(q.ctx, h.c.Pool())
		if err != nil {
			h.failErr(q, err)
			return
		}
		h.redirect(q, q.prefix+"/outbox?"+url.Values{"state": {"dead"}, "done": {"requeue"}, "what": {"event"}, "n": {strconv.Itoa(n)}}.Encode())
		return
	}
	s, err := h.c.Stats(q.ctx, &skiplock.StatsOpts{SamplePages: -1, RecentWindow: -1})
	if err != nil {
		h.failErr(q, err)
		return
	}
	h.render(q, http.StatusOK, "confirm", "Requeue dead events", "", confirmData{
		Action: jobAction{Name: "requeue", Label: "Requeue"}, Count: int(s.Outbox.Dead), What: "dead outbox events", WhatOne: "dead outbox event",
		BackURL: q.prefix + "/outbox?state=dead", PostURL: q.prefix + "/outbox/requeue-dead", ActionName: "requeue-dead"})
}
