package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/outbox"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// execute runs the command line in-process, as main does, and returns the exit
// status exitCode gives.
func execute(ctx context.Context, stdout, stderr io.Writer, args ...string) int {
	root := newRootCmd()
	root.SetArgs(append([]string{}, args...))
	root.SetOut(stdout)
	root.SetErr(stderr)
	return exitCode(root.ExecuteContext(ctx), stderr)
}

type cli struct {
	t      *testing.T
	schema string
}

func newCLI(t *testing.T) *cli { return &cli{t: t, schema: pgtest.Schema(t)} }

// run runs a command on the test's schema and returns its stdout, stderr and exit
// status.
func (c *cli) run(ctx context.Context, args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	code := execute(ctx, &out, &errb, append(args, "--database-url", pgtest.URL(c.t), "--schema", c.schema)...)
	return out.String(), errb.String(), code
}

func (c *cli) must(args ...string) string {
	c.t.Helper()
	out, errOut, code := c.run(context.Background(), args...)
	if code != 0 {
		c.t.Fatalf("skiplock %v: exit %d\n%s", args, code, errOut)
	}
	return out
}

func (c *cli) client() *skiplock.Client {
	cl, err := skiplock.NewClient(pgtest.Pool(c.t), skiplock.Config{Schema: c.schema})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

func TestJobsCommands(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ctx := context.Background()
	cl := c.client()
	var ids []string
	for i := range 5 {
		res, err := cl.EnqueueRawTx(ctx, cl.Pool(), "mail", []byte(`{"n": 1}`), &skiplock.EnqueueOpts{Queue: []string{"a", "b"}[i%2]})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	jobs, err := cl.Manual().Claim(ctx, "a", 3)
	if err != nil || len(jobs) != 3 {
		t.Fatalf("claim: %d %v", len(jobs), err)
	}
	for _, j := range jobs {
		if err := cl.Manual().Fail(ctx, j, io.EOF); err != nil {
			t.Fatal(err)
		}
	}

	var listed []map[string]any
	if err := json.Unmarshal([]byte(c.must("jobs", "list", "--state", "failed", "-o", "json")), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 3 || listed[0]["state"] != "failed" || listed[0]["last_error"] != "EOF" {
		t.Fatalf("jobs list --state failed: %v", listed)
	}
	out := c.must("jobs", "list", "--queue", "b", "--limit", "1", "--all")
	if strings.Count(out, "\n") != 3 || !strings.Contains(out, "QUEUE") {
		t.Fatalf("jobs list --queue b --all (a header and 2 rows):\n%s", out)
	}
	if out := c.must("jobs", "show", ids[1]); !strings.Contains(out, `{"n": 1}`) {
		t.Fatalf("jobs show:\n%s", out)
	}
	_, errOut, code := c.run(ctx, "jobs", "retry", "--state", "failed", "--queue", "a")
	if code != 0 || !strings.Contains(errOut, "retry: 3 jobs done, 0 failed") {
		t.Fatalf("bulk retry: exit %d\n%s", code, errOut)
	}
	s, err := cl.Stats(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q := s.Queue("a"); q.Pending != 3 || q.Failed != 0 {
		t.Fatalf("after bulk retry: %+v", q)
	}
	if out := c.must("jobs", "cancel", ids[1], "--reason", "ops", "-o", "json"); !strings.Contains(out, `"state": "cancelled"`) {
		t.Fatalf("jobs cancel: %s", out)
	}
	if out := c.must("jobs", "delete", ids[1]); !strings.Contains(out, "deleted") {
		t.Fatalf("jobs delete: %s", out)
	}
	if _, errOut, code := c.run(ctx, "jobs", "delete", ids[1]); code != 1 || !strings.Contains(errOut, "no job "+ids[1]) {
		t.Fatalf("deleting a deleted job: exit %d\n%s", code, errOut)
	}
	if _, errOut, code := c.run(ctx, "jobs", "retry"); code != 2 || !strings.Contains(errOut, "--state failed|cancelled") {
		t.Fatalf("retry with neither ids nor --state: exit %d\n%s", code, errOut)
	}
	// A job that cannot be retried: the message says its state and what can be.
	_, errOut, code = c.run(ctx, "jobs", "retry", ids[0])
	if code != 1 || !strings.Contains(errOut, "job "+ids[0]+" is pending: only failed or cancelled jobs can be retried") {
		t.Fatalf("retrying a pending job: exit %d\n%s", code, errOut)
	}
	missing := "0190a1b2-0000-7000-8000-000000000000"
	if _, errOut, code := c.run(ctx, "jobs", "retry", missing); code != 1 || !strings.Contains(errOut, "no job "+missing) {
		t.Fatalf("retrying a missing job: exit %d\n%s", code, errOut)
	}
	if _, errOut, code := c.run(ctx, "jobs", "list", "--state", "done"); code != 2 ||
		!strings.Contains(errOut, "pending, claimed, running, succeeded, failed, cancelled") {
		t.Fatalf("jobs list --state done: exit %d\n%s", code, errOut)
	}
}

func TestStatsOutboxRolesRetentionPartitionsCommands(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ctx := context.Background()
	cl := c.client()
	if _, err := cl.EnqueueRawTx(ctx, cl.Pool(), "mail", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	var st struct {
		Queues []struct {
			Queue   string `json:"queue"`
			Pending int64  `json:"pending"`
		} `json:"queues"`
	}
	if err := json.Unmarshal([]byte(c.must("stats", "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Queues) != 1 || st.Queues[0].Queue != "q" || st.Queues[0].Pending != 1 {
		t.Fatalf("stats -o json: %+v", st)
	}
	if out := c.must("stats"); !strings.Contains(out, "OLDEST_DUE") || !strings.Contains(out, "outbox: 0 unpublished") {
		t.Fatalf("stats:\n%s", out)
	}

	if _, err := cl.Pool().Exec(ctx, `INSERT INTO "`+c.schema+`".outbox (aggregate_type, aggregate_id, event_type, payload, dead_at, attempts, last_error)
VALUES ('order', '7', 'paid', '{}', now(), 25, 'broker said no')`); err != nil {
		t.Fatal(err)
	}
	var dead []map[string]any
	if err := json.Unmarshal([]byte(c.must("outbox", "list", "-o", "json")), &dead); err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0]["last_error"] != "broker said no" {
		t.Fatalf("outbox list: %v", dead)
	}
	if out := c.must("outbox", "requeue", dead[0]["id"].(string)); !strings.Contains(out, "requeued 1") {
		t.Fatalf("outbox requeue: %s", out)
	}
	if out := c.must("outbox", "list"); strings.Contains(out, "order/7") {
		t.Fatalf("requeued event still listed as dead:\n%s", out)
	}

	if out := c.must("roles", "sql", "--worker", "w1"); !strings.Contains(out, `GRANT SELECT, DELETE ON "`+c.schema+`"."jobs" TO "w1";`) {
		t.Fatalf("roles sql:\n%s", out)
	}
	if out := c.must("retention", "run", "--succeeded", "1h"); !strings.Contains(out, "deleted 0 succeeded") {
		t.Fatalf("retention run: %s", out)
	}
	_, errOut, code := c.run(ctx, "partitions", "enable", "--premake", "2")
	if code != 0 || !strings.Contains(errOut, "jobs was locked for") {
		t.Fatalf("partitions enable: exit %d\n%s", code, errOut)
	}
	var parts []map[string]any
	if err := json.Unmarshal([]byte(c.must("partitions", "list", "-o", "json")), &parts); err != nil {
		t.Fatal(err)
	}
	if len(parts) != 3 {
		t.Fatalf("partitions list: %v", parts)
	}
	if out := c.must("stats"); !strings.Contains(out, "q ") {
		t.Fatalf("stats on the partitioned layout:\n%s", out)
	}
}

func TestOutboxShowAndListStates(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ctx := context.Background()
	ob, err := outbox.New(c.client(), outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := ob.Write(ctx, pgtest.Pool(t), outbox.Event{AggregateType: "order", AggregateID: "9", EventType: "order.paid",
		Destination: "billing", Payload: []byte(`{"total": 12}`), Headers: map[string]string{"traceparent": "00-abc-01", "tenant": "t1"}})
	if err != nil {
		t.Fatal(err)
	}
	out := c.must("outbox", "show", id)
	for _, want := range []string{"state", "pending", "header tenant", "t1", "header traceparent", "00-abc-01", "destination", "billing",
		"attempts", "0 of 25", `{"total": 12}`} {
		if !strings.Contains(out, want) {
			t.Errorf("outbox show: no %q in\n%s", want, out)
		}
	}
	var ev map[string]any
	if err := json.Unmarshal([]byte(c.must("outbox", "show", id, "-o", "json")), &ev); err != nil {
		t.Fatal(err)
	}
	headers, _ := ev["headers"].(map[string]any)
	payload, _ := ev["payload"].(map[string]any)
	if ev["id"] != id || ev["event_type"] != "order.paid" || headers["tenant"] != "t1" || payload["total"] != 12.0 {
		t.Fatalf("outbox show -o json: %v", ev)
	}
	if _, errOut, code := c.run(ctx, "outbox", "show", "0190a1b2-0000-7000-8000-000000000000"); code != 1 || !strings.Contains(errOut, "no outbox event") {
		t.Fatalf("outbox show of a missing event: exit %d\n%s", code, errOut)
	}
	// The event is pending, not dead: requeue says so.
	if _, errOut, code := c.run(ctx, "outbox", "requeue", id); code != 1 || !strings.Contains(errOut, "is pending: only dead events can be requeued") {
		t.Fatalf("requeue of a pending event: exit %d\n%s", code, errOut)
	}
	// Dead is the default state listed; the event is not dead.
	if out := c.must("outbox", "list", "--state", "dead"); strings.Contains(out, id) {
		t.Fatalf("a pending event listed as dead:\n%s", out)
	}
	if out := c.must("outbox", "list", "--state", "pending"); !strings.Contains(out, id) {
		t.Fatalf("outbox list --state pending does not list the pending event:\n%s", out)
	}
	if out := c.must("outbox", "list", "--state", "published"); strings.Contains(out, id) {
		t.Fatalf("a pending event listed as published:\n%s", out)
	}
}

// limits set, list, usage and delete against a real database, and stats' limits
// section; wrong values exit 2 and name what is wrong.
func TestLimitsCommands(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ctx := context.Background()
	cl := c.client()
	if out := c.must("stats"); strings.Contains(out, "limits:") {
		t.Fatalf("stats shows a limits section without limits:\n%s", out)
	}
	if out := c.must("limits", "set", "--queue", "lq", "--max-running", "2"); out != "set limit queue lq max-running 2\n" {
		t.Fatalf("limits set: %q", out)
	}
	c.must("limits", "set", "--queue", "lq", "--key", "*", "--max-running", "1")
	var set map[string]any
	if err := json.Unmarshal([]byte(c.must("limits", "set", "--kind", "sms", "--rate", "10", "--per", "1m", "-o", "json")), &set); err != nil {
		t.Fatal(err)
	}
	if set["scope"] != "kind" || set["target"] != "sms" || set["rate"] != 10.0 || set["per_seconds"] != 60.0 {
		t.Fatalf("limits set -o json: %v", set)
	}
	for _, args := range [][]string{
		{"limits", "set", "--queue", "lq", "--per", "1s", "--max-running", "3"},
		{"limits", "set", "--queue", "lq", "--kind", "sms", "--max-running", "3"},
		{"limits", "set", "--queue", "lq", "--max-running", "0"},
	} {
		if _, errOut, code := c.run(ctx, args...); code != 2 || !strings.Contains(errOut, "Run 'skiplock limits set --help' for usage.") {
			t.Fatalf("%v: exit %d, want 2\n%s", args, code, errOut)
		}
	}

	var ids []string
	for _, key := range []string{"a", "a", "b", ""} {
		res, err := cl.EnqueueRaw(ctx, "mail", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "lq", ConcurrencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	jobs, err := cl.Manual().Claim(ctx, "lq", 10)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("claim under a limit of 2: %d jobs, %v", len(jobs), err)
	}

	var list []map[string]any
	if err := json.Unmarshal([]byte(c.must("limits", "list", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[0]["key"] != "" || list[1]["key"] != "*" || list[2]["scope"] != "kind" {
		t.Fatalf("limits list -o json: %v", list)
	}
	if out := c.must("limits", "list"); !strings.Contains(out, "MAX_RUNNING") || !strings.Contains(out, "10/1m0s") {
		t.Fatalf("limits list:\n%s", out)
	}
	var use []map[string]any
	if err := json.Unmarshal([]byte(c.must("limits", "usage", "-o", "json")), &use); err != nil {
		t.Fatal(err)
	}
	if len(use) < 2 || use[0]["bucket"] != "" || use[0]["holding"] != 2.0 {
		t.Fatalf("limits usage -o json: %v", use)
	}
	if out := c.must("limits", "usage"); !strings.Contains(out, "2/2") || !strings.Contains(out, "0/10 per 1m0s") {
		t.Fatalf("limits usage:\n%s", out)
	}
	if out := c.must("stats"); !strings.Contains(out, "limits:") || !strings.Contains(out, "queue lq  ") ||
		!strings.Contains(out, "holding 2/2") || !strings.Contains(out, "busiest: holding 1/1") {
		t.Fatalf("stats' limits section:\n%s", out)
	}
	var st struct {
		Limits []map[string]any `json:"limits"`
	}
	if err := json.Unmarshal([]byte(c.must("stats", "-o", "json")), &st); err != nil || len(st.Limits) != len(use) {
		t.Fatalf("stats -o json limits: %v %v", err, st.Limits)
	}
	if out := c.must("jobs", "show", ids[0]); !strings.Contains(out, "concurrency_key") || !strings.Contains(out, "a\n") {
		t.Fatalf("jobs show without the concurrency key:\n%s", out)
	}

	if out := c.must("limits", "delete", "--queue", "lq", "--key", "*"); out != "deleted limit queue lq key *\n" {
		t.Fatalf("limits delete: %q", out)
	}
	if _, errOut, code := c.run(ctx, "limits", "delete", "--queue", "lq", "--key", "*"); code != 1 || !strings.Contains(errOut, "no limit queue lq key *") {
		t.Fatalf("deleting a deleted limit: exit %d\n%s", code, errOut)
	}
	c.must("limits", "delete", "--queue", "lq")
	c.must("limits", "delete", "--kind", "sms")
	if out := c.must("limits", "list", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("limits list after deleting every limit: %s", out)
	}
	if out := c.must("stats"); strings.Contains(out, "limits:") {
		t.Fatalf("stats shows a limits section after every limit was deleted:\n%s", out)
	}
}

// retention run --failed 0 (and --succeeded, --cancelled) keeps none: every failed
// job is deleted now, where RetentionConfig's 0 would be the 7-day default.
func TestRetentionRunZeroKeepsNone(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ctx := context.Background()
	cl := c.client()
	for range 2 {
		if _, err := cl.EnqueueRawTx(ctx, cl.Pool(), "mail", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "r"}); err != nil {
			t.Fatal(err)
		}
	}
	jobs, err := cl.Manual().Claim(ctx, "r", 2)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("claim: %d %v", len(jobs), err)
	}
	if err := cl.Manual().Fail(ctx, jobs[0], io.EOF); err != nil {
		t.Fatal(err)
	}
	if err := cl.Manual().Complete(ctx, jobs[1]); err != nil {
		t.Fatal(err)
	}
	if out := c.must("retention", "run", "--failed", "1h"); !strings.Contains(out, "deleted 0 succeeded, 0 failed") {
		t.Fatalf("retention run --failed 1h deleted a job a minute old: %s", out)
	}
	if out := c.must("retention", "run", "--failed", "0s"); !strings.Contains(out, "deleted 0 succeeded, 1 failed") {
		t.Fatalf("retention run --failed 0s: %s", out)
	}
	if out := c.must("retention", "run", "--succeeded", "0"); !strings.Contains(out, "deleted 1 succeeded, 0 failed") {
		t.Fatalf("retention run --succeeded 0: %s", out)
	}
	if out := c.must("retention", "run", "--help"); strings.Count(out, "0: keep none; negative: keep forever") != 3 {
		t.Fatalf("retention run --help does not say what 0 and negative mean for each state:\n%s", out)
	}
}

// One rule for every queue verb: a queue nothing names (no job, schedule, limit or
// setting) is refused, pause and resume alike, and with several names nothing is
// done; pause --ahead pauses one ahead of its first job. Resuming a queue that is not
// paused changes nothing and succeeds, saying so.
func TestQueuesPauseResume(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ctx := context.Background()
	cl := c.client()
	if _, err := cl.EnqueueRawTx(ctx, cl.Pool(), "mail", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "mail"}); err != nil {
		t.Fatal(err)
	}
	paused := func(name string) bool {
		qs, err := cl.QueueList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.Name == name {
				return q.Paused
			}
		}
		return false
	}
	for _, verb := range []string{"pause", "resume"} {
		_, errOut, code := c.run(ctx, "queues", verb, "mail", "emial")
		if code != 1 || !strings.Contains(errOut, "names queue emial: misspelt?") || !strings.Contains(errOut, "nothing was "+verb+"d") || paused("mail") {
			t.Fatalf("queues %s of a misspelt queue: exit %d, mail paused %v\n%s", verb, code, paused("mail"), errOut)
		}
	}
	out, errOut, code := c.run(ctx, "queues", "resume", "mail")
	if code != 0 || out != "resumed mail\n" || !strings.Contains(errOut, "queue mail is not paused; resuming it changes nothing") {
		t.Fatalf("resuming an active queue with jobs: exit %d\n%s%s", code, out, errOut)
	}
	if out := c.must("queues", "pause", "mail", "spare", "--ahead"); out != "paused mail\npaused spare\n" || !paused("spare") {
		t.Fatalf("queues pause --ahead: %q", out)
	}
	// A queue paused ahead of its first job is known by its setting.
	if out := c.must("queues", "resume", "spare"); out != "resumed spare\n" {
		t.Fatalf("resuming a queue with only a setting: %q", out)
	}
	if out := c.must("queues", "resume", "mail"); out != "resumed mail\n" || paused("mail") {
		t.Fatalf("queues resume: %q", out)
	}
	// A bad name among good ones: nothing is paused.
	_, errOut, code = c.run(ctx, "queues", "pause", "mail", "bad q", "other")
	if code != 2 || !strings.Contains(errOut, "nothing was paused") || paused("mail") || paused("other") {
		t.Fatalf("queues pause mail 'bad q' other: exit %d\n%s", code, errOut)
	}
}

// schedules pause|resume|delete check that every schedule exists before acting on
// any; the messages carry the "skiplock: " prefix once.
func TestSchedulesActChecksEveryName(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ctx := context.Background()
	cl := c.client()
	for _, name := range []string{"a", "b"} {
		c.must("schedules", "add", name, "--spec", "@hourly", "--kind", "k")
	}
	enabled := func(name string) bool {
		s, err := cl.ScheduleGet(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return s.Enabled
	}
	for _, verb := range []string{"pause", "delete"} {
		_, errOut, code := c.run(ctx, "schedules", verb, "a", "nosuch", "b", "gone")
		if code != 1 || !strings.Contains(errOut, "schedules "+verb+": no schedule nosuch, gone; nothing was "+verb+"d") ||
			!enabled("a") || !enabled("b") {
			t.Fatalf("schedules %s a nosuch b gone: exit %d\n%s", verb, code, errOut)
		}
	}
	_, errOut, code := c.run(ctx, "schedules", "pause", "a", "bad name")
	if code != 2 || !strings.Contains(errOut, "invalid name") || !strings.Contains(errOut, "nothing was paused") || !enabled("a") {
		t.Fatalf("schedules pause a 'bad name': exit %d\n%s", code, errOut)
	}
	if out := c.must("schedules", "pause", "a", "b"); out != "paused a\npaused b\n" || enabled("a") || enabled("b") {
		t.Fatalf("schedules pause a b: %q", out)
	}
	_, errOut, code = c.run(ctx, "schedules", "add", "x", "--spec", "bogus", "--kind", "k")
	if code != 2 || !strings.Contains(errOut, "skiplock: schedules add: invalid spec") || strings.Count(errOut, "skiplock:") != 1 {
		t.Fatalf("schedules add --spec bogus: exit %d\n%s", code, errOut)
	}
}

// JobList refuses an AfterID that is not a job id as invalid input, not as a
// database error; the CLI refuses it before connecting.
func TestJobListAfterIDInvalid(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	_, err := c.client().JobList(context.Background(), skiplock.ListParams{AfterID: "notauuid"})
	if !errors.Is(err, skiplock.ErrInvalid) || !strings.Contains(err.Error(), `"notauuid" is not a job id (a UUID)`) {
		t.Fatalf("JobList(AfterID: notauuid): %v", err)
	}
	if _, errOut, code := c.run(context.Background(), "jobs", "list", "--after", "notauuid"); code != 2 || !strings.Contains(errOut, "is not a job id") {
		t.Fatalf("jobs list --after notauuid: exit %d\n%s", code, errOut)
	}
}

// The long-running commands stop at once on a schema without skiplock's tables (a
// misspelt --schema): before, the dashboard served errors and metrics served a
// failing /readyz for ever.
func TestLongRunningCommandsRefuseAnUnmigratedSchema(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.schema += "_misspelt"
	for _, args := range [][]string{{"dashboard", "--listen", "127.0.0.1:0"}, {"metrics", "--listen", "127.0.0.1:0"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, errOut, code := c.run(ctx, args...)
		cancel()
		if code != 1 || !strings.Contains(errOut, "schema not migrated") || !strings.Contains(errOut, c.schema) {
			t.Errorf("%s on an unmigrated schema: exit %d\n%s", args[0], code, errOut)
		}
	}
}

// migrate status prints a header, then each migration and its state.
func TestMigrateStatus(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.must("migrate", "up")
	out := c.must("migrate", "status")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) < 2 || !strings.HasPrefix(lines[0], "MIGRATION") ||
		!strings.HasPrefix(lines[1], "0001_init") || !strings.Contains(lines[1], "applied") {
		t.Fatalf("migrate status:\n%s", out)
	}
}

// TestQueuesDepth: queues depth prints a queue's (or every queue's) due jobs; -o json
// adds the cap.
func TestQueuesDepth(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ctx := context.Background()
	cl := c.client()
	for _, q := range []string{"mail", "mail", "bills"} {
		if _, err := cl.EnqueueRawTx(ctx, cl.Pool(), "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: q}); err != nil {
			t.Fatal(err)
		}
	}
	if out := c.must("queues", "depth", "mail"); out != "2\n" {
		t.Errorf("queues depth mail: %q, want 2", out)
	}
	if out := c.must("queues", "depth"); out != "3\n" {
		t.Errorf("queues depth: %q, want 3", out)
	}
	if out := c.must("queues", "depth", "bills", "-o", "json"); !strings.Contains(out, `"depth": 1`) || !strings.Contains(out, `"cap": 10000`) {
		t.Errorf("queues depth bills -o json: %s", out)
	}
}

// TestMigrateCitus: migrate up --citus on plain PostgreSQL exits 1 naming the missing
// extension; migrate sql --citus appends the layout in a transaction of its own; on a
// Citus cluster (SKIPLOCK_TEST_CITUS_URL) up --citus lays the schema out once.
func TestMigrateCitus(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	_, errOut, code := c.run(context.Background(), "migrate", "up", "--citus")
	if code != 1 || !strings.Contains(errOut, "citus extension is not installed") {
		t.Errorf("migrate up --citus on plain PostgreSQL: exit %d\n%s", code, errOut)
	}
	sql := c.must("migrate", "sql", "--citus")
	if i, j := strings.Index(sql, "-- migration 0001_init"), strings.Index(sql, "create_distributed_table('\""+c.schema+"\".jobs', 'concurrency_key')"); i < 0 || j < i ||
		!strings.HasSuffix(sql, "COMMIT;\n") {
		t.Errorf("migrate sql --citus lacks the migrations or the layout after them:\n%s", sql[max(0, len(sql)-2000):])
	}

	url := pgtest.CitusURL(t)
	schema := pgtest.SchemaName(t)
	pool := pgtest.CitusPool(t)
	t.Cleanup(func() { pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`) })
	run := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := execute(context.Background(), &out, &errb, append(args, "--database-url", url, "--schema", schema)...)
		return out.String(), errb.String(), code
	}
	out, errOut, code := run("migrate", "up", "--citus")
	if code != 0 || !strings.Contains(out, "applied the Citus layout to schema "+schema) {
		t.Fatalf("migrate up --citus on Citus: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = run("migrate", "up", "--citus", "-o", "json")
	if code != 0 || !strings.Contains(out, `"citus_layout": "present"`) || !strings.Contains(out, `"applied": []`) {
		t.Errorf("migrate up --citus again: exit %d\n%s%s", code, out, errOut)
	}
}
