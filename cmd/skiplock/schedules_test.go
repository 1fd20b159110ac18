package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestSchedulesCommands(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ctx := context.Background()
	cl := c.client()

	var added map[string]any
	out := c.must("schedules", "add", "nightly", "--spec", "0 3 * * *", "--timezone", "Europe/Berlin", "--kind", "report",
		"--payload", `{"a":1}`, "--misfire", "catch_up", "--jitter", "90s", "-o", "json")
	if err := json.Unmarshal([]byte(out), &added); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if added["name"] != "nightly" || added["source"] != "api" || added["misfire"] != "catch_up" || added["jitter"] != "1m30s" ||
		added["next_fire_at"] == nil || added["enabled"] != true {
		t.Fatalf("schedules add -o json: %v", added)
	}
	if out := c.must("schedules", "list"); !strings.Contains(out, "NEXT_FIRE") || !strings.Contains(out, "nightly") ||
		!strings.Contains(out, "0 3 * * *") || !strings.Contains(out, "active") {
		t.Fatalf("schedules list:\n%s", out)
	}
	var listed []map[string]any
	if err := json.Unmarshal([]byte(c.must("schedules", "list", "-o", "json")), &listed); err != nil || len(listed) != 1 {
		t.Fatalf("schedules list -o json: %v %v", listed, err)
	}
	if out := c.must("schedules", "show", "nightly"); !strings.Contains(out, "Europe/Berlin") || !strings.Contains(out, `{"a": 1}`) {
		t.Fatalf("schedules show:\n%s", out)
	}
	var updated map[string]any
	if err := json.Unmarshal([]byte(c.must("schedules", "update", "nightly", "--queue", "low", "-o", "json")), &updated); err != nil {
		t.Fatal(err)
	}
	if updated["queue"] != "low" || updated["spec"] != "0 3 * * *" || updated["kind"] != "report" || updated["misfire"] != "catch_up" {
		t.Fatalf("schedules update --queue low changed more: %v", updated)
	}
	if out := c.must("schedules", "pause", "nightly"); out != "paused nightly\n" {
		t.Fatalf("schedules pause: %q", out)
	}
	if out := c.must("schedules", "list"); !strings.Contains(out, "paused") {
		t.Fatalf("schedules list after pause:\n%s", out)
	}
	if out := c.must("schedules", "resume", "nightly"); out != "resumed nightly\n" {
		t.Fatalf("schedules resume: %q", out)
	}
	var trig map[string]string
	if err := json.Unmarshal([]byte(c.must("schedules", "trigger", "nightly", "-o", "json")), &trig); err != nil {
		t.Fatal(err)
	}
	j, err := cl.JobGet(ctx, trig["job_id"])
	if err != nil || j.Kind != "report" || j.Queue != "low" {
		t.Fatalf("the triggered job: %+v %v", j, err)
	}
	if out := c.must("schedules", "delete", "nightly"); out != "deleted nightly\n" {
		t.Fatalf("schedules delete: %q", out)
	}
	if _, errOut, code := c.run(ctx, "schedules", "show", "nightly"); code != 1 || !strings.Contains(errOut, "no schedule nightly") {
		t.Fatalf("showing a deleted schedule: exit %d\n%s", code, errOut)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"schedules"}, "schedules: missing command; valid: add, delete, list, pause, resume, show, trigger, update"},
		{[]string{"schedules", "lst"}, "(did you mean list?)"},
		{[]string{"schedules", "add", "x", "--kind", "k"}, "--spec and --kind are required"},
		{[]string{"schedules", "add", "x", "--spec", "@hourly", "--kind", "k", "--misfire", "often"},
			`"often" is not one of: skip, run_once, catch_up`},
		{[]string{"schedules", "add", "x", "--spec", "every day", "--kind", "k"}, "invalid spec"},
		{[]string{"schedules", "add", "x", "--spec", "@every -5s", "--kind", "k"}, "whole number of seconds, at least 1s"},
		{[]string{"schedules", "add", "x", "--spec", "@every 1500ms", "--kind", "k"}, "whole number of seconds, at least 1s"},
		{[]string{"schedules", "add", "x", "--spec", "@hourly", "--timezone", "Mars/Base", "--kind", "k"}, "invalid timezone"},
		{[]string{"schedules", "add", "bad name", "--spec", "@hourly", "--kind", "k"}, "invalid name"},
		{[]string{"schedules", "show"}, "want one schedule name, got 0 arguments"},
		{[]string{"schedules", "pause"}, "name at least one schedule"},
		{[]string{"schedules", "list", "-o", "yaml"}, `"yaml" is not one of: table, json`},
	} {
		_, errOut, code := c.run(ctx, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("skiplock %v: exit %d, want 2 and %q in:\n%s", tc.args, code, tc.want, errOut)
		}
	}
}
