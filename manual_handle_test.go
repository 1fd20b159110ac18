package skiplock_test

import (
	"errors"
	"testing"

	"github.com/skiplock/skiplock"
)

// A claim rebuilt from its id and token (Manual.Handle) finishes the job as the
// claimed *Job would; a stale or made-up pair writes nothing.
func TestManualHandleAndFinishMany(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	m := e.client.Manual()
	enqueueKind(e, e.client, "k", 4)
	jobs, err := m.Claim(e.ctx, skiplock.DefaultQueue, 4)
	e.must(err)
	if len(jobs) != 4 {
		e.t.Fatalf("claimed %d", len(jobs))
	}
	handles := make([]*skiplock.Job, len(jobs))
	for i, j := range jobs {
		handles[i], err = m.Handle(j.ID, j.LeaseToken)
		e.must(err)
	}
	e.must(handles[0].SetOutput(map[string]int{"n": 1}))
	stale, err := m.Handle(jobs[3].ID, "018f0000-0000-7000-8000-000000000000")
	e.must(err)
	states, err := m.FinishMany(e.ctx, []skiplock.Finish{
		{Job: handles[0], Action: skiplock.FinishComplete},
		{Job: handles[1], Action: skiplock.FinishRetry, Cause: errors.New("boom"), Delay: 0},
		{Job: handles[2], Action: skiplock.FinishCancel, Cause: errors.New("no")},
		{Job: stale, Action: skiplock.FinishFail, Cause: errors.New("stale")},
	})
	e.must(err)
	want := []skiplock.JobState{skiplock.StateSucceeded, skiplock.StatePending, skiplock.StateCancelled, ""}
	for i := range want {
		if states[i] != want[i] {
			t.Fatalf("states %v, want %v", states, want)
		}
	}
	got, err := e.client.JobGet(e.ctx, jobs[0].ID)
	e.must(err)
	if string(got.Output) != `{"n": 1}` {
		t.Fatalf("output %s", got.Output)
	}
	got, err = e.client.JobGet(e.ctx, jobs[3].ID)
	e.must(err)
	if got.State != skiplock.StateRunning || got.LastError != "" {
		t.Fatalf("the stale finish changed job 3: %s %q", got.State, got.LastError)
	}
	if err := m.Complete(e.ctx, stale); !errors.Is(err, skiplock.ErrLeaseLost) {
		t.Fatalf("stale Complete: %v", err)
	}
	// The rebuilt handle knows no attempt: the retry policy needs the job read.
	h3, err := m.Handle(jobs[3].ID, jobs[3].LeaseToken)
	e.must(err)
	if _, err := m.Retry(e.ctx, h3, errors.New("x"), -1); !errors.Is(err, skiplock.ErrInvalid) {
		t.Fatalf("Retry by policy of a handle: %v, want ErrInvalid", err)
	}
	if st, err := m.Retry(e.ctx, jobs[3], errors.New("x"), -1); err != nil || st != skiplock.StatePending {
		t.Fatalf("Retry by policy of the claimed job: %s %v", st, err)
	}
}

func TestManualHandleAndFinishManyBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	m := e.client.Manual()
	const id, token = "018f0000-0000-7000-8000-000000000000", "018f0000-0000-7000-8000-000000000001"
	for _, c := range []struct{ id, token, field string }{
		{"42", token, "id"}, {id, "", "lease_token"}, {id, "abc", "lease_token"},
	} {
		var ve *skiplock.ValidationError
		if _, err := m.Handle(c.id, c.token); !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("Handle(%q, %q): %v, want a ValidationError of %s", c.id, c.token, err, c.field)
		}
	}
	h, err := m.Handle(id, token)
	e.must(err)
	for name, fs := range map[string][]skiplock.Finish{
		"nil job":        {{Action: skiplock.FinishComplete}},
		"unknown action": {{Job: h, Action: "explode"}},
		"twice":          {{Job: h, Action: skiplock.FinishComplete}, {Job: h, Action: skiplock.FinishFail}},
	} {
		if _, err := m.FinishMany(e.ctx, fs); !errors.Is(err, skiplock.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := m.Retry(e.ctx, nil, nil, -1); !errors.Is(err, skiplock.ErrInvalid) {
		t.Errorf("Retry(nil): %v", err)
	}
	if states, err := m.FinishMany(e.ctx, nil); err != nil || states != nil {
		t.Errorf("FinishMany(nil): %v %v", states, err)
	}
}
