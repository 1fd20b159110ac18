package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
)

func TestFlowsAndBatchesCommands(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ctx := context.Background()
	cl := c.client()
	leaf := func(n string) skiplock.Flow { return skiplock.Flow{Kind: "leaf", Payload: []byte(`{"n":` + n + `}`)} }
	res, err := cl.EnqueueFlow(ctx, skiplock.Flow{Kind: "report", Payload: []byte(`{}`), OnChildFailure: skiplock.FailureContinue,
		Children: []skiplock.Flow{{Kind: "part", Payload: []byte(`{}`), Children: []skiplock.Flow{leaf("1"), leaf("2")}}, leaf("3")}})
	if err != nil {
		t.Fatal(err)
	}
	out := c.must("flows", "show", res.Children[0].Children[1].ID)
	for _, want := range []string{res.ID + "  report  waiting  (2 of 2 children open, on failure: continue)",
		"├─ " + res.Children[0].ID + "  part  waiting", "│  └─ " + res.Children[0].Children[1].ID + "  leaf  pending  ◀",
		"└─ " + res.Children[1].ID + "  leaf  pending"} {
		if !strings.Contains(out, want) {
			t.Fatalf("flows show lacks %q:\n%s", want, out)
		}
	}
	var tree skiplock.FlowNode
	if err := json.Unmarshal([]byte(c.must("flows", "show", res.ID, "-o", "json")), &tree); err != nil ||
		tree.ID != res.ID || len(tree.Children) != 2 || len(tree.Children[0].Children) != 2 {
		t.Fatalf("flows show -o json: %+v %v", tree, err)
	}

	id, err := cl.BatchOpen(ctx, skiplock.Batch{Description: "nightly import", OnComplete: &skiplock.EnqueueParams{Kind: "done", Payload: []byte(`{}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.BatchAdd(ctx, id, []skiplock.EnqueueParams{{Kind: "row", Payload: []byte(`{}`)}, {Kind: "row", Payload: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	if out := c.must("batches", "list"); !strings.Contains(out, id+"  open") || !strings.Contains(out, "nightly import") {
		t.Fatalf("batches list:\n%s", out)
	}
	if _, err := cl.BatchSeal(ctx, id); err != nil {
		t.Fatal(err)
	}
	out = c.must("batches", "show", id)
	for _, want := range []string{"state         sealed", "total         2", "members       pending 2"} {
		if !strings.Contains(out, want) {
			t.Fatalf("batches show lacks %q:\n%s", want, out)
		}
	}
	var shown map[string]any
	if err := json.Unmarshal([]byte(c.must("batches", "show", id, "-o", "json")), &shown); err != nil || shown["total"] != 2.0 {
		t.Fatalf("batches show -o json: %v %v", shown, err)
	}
	if out := c.must("batches", "list", "--open", "-o", "json"); !strings.Contains(out, id) {
		t.Fatalf("batches list --open:\n%s", out)
	}
	// The tree's two parents and the batch's callback wait; the batch is open.
	if out := c.must("stats"); !strings.Contains(out, "flows and batches: 3 waiting jobs, 1 open batches") {
		t.Fatalf("stats lacks the flows line:\n%s", out)
	}
	var st struct {
		Waiting     int64 `json:"waiting"`
		OpenBatches int64 `json:"open_batches"`
	}
	if err := json.Unmarshal([]byte(c.must("stats", "-o", "json")), &st); err != nil || st.Waiting != 3 || st.OpenBatches != 1 {
		t.Fatalf("stats -o json: %+v %v", st, err)
	}

	// Bulk cancel takes waiting jobs: the flow's root, whose cancellation cancels the
	// children that have not started; the batch's callback, of another kind, stays.
	c.must("jobs", "cancel", "--state", "waiting", "--kind", "report")
	for _, id := range []string{res.ID, res.Children[0].ID, res.Children[0].Children[0].ID, res.Children[1].ID} {
		if j, err := cl.JobGet(ctx, id); err != nil || j.State != skiplock.StateCancelled {
			t.Fatalf("job %s after cancelling the waiting root: %+v %v", id, j, err)
		}
	}
	if out := c.must("jobs", "list", "--state", "waiting", "-o", "json"); !strings.Contains(out, `"kind": "done"`) {
		t.Fatalf("the batch's callback is no longer waiting:\n%s", out)
	}

	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"flows"}, "flows: missing command; valid: show", 2},
		{[]string{"flows", "show"}, "want one job id, got 0 arguments", 2},
		{[]string{"flows", "show", "nope"}, `"nope" is not a job id`, 2},
		{[]string{"flows", "show", "00000000-0000-7000-8000-000000000000"}, "no job 00000000-0000-7000-8000-000000000000", 1},
		{[]string{"batches"}, "batches: missing command; valid: list, show", 2},
		{[]string{"batches", "show", "nope"}, `"nope" is not a batch id`, 2},
		{[]string{"batches", "show", "00000000-0000-7000-8000-000000000000"}, "no batch 00000000-0000-7000-8000-000000000000", 1},
		{[]string{"batches", "list", "--limit", "0"}, `invalid argument "0" for "--limit" flag: want 1..10000`, 2},
	} {
		_, errOut, code := c.run(ctx, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, want %d with %q:\n%s", tc.args, code, tc.code, tc.want, errOut)
		}
	}
}
