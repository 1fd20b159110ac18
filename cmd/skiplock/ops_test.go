package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type cli struct {
	t      *testing.T
	schema string
}

func newCLI(t *testing.T) *cli { return &cli{t: t, schema: pgtest.Schema(t)} }

// run runs a command in-process and returns its stdout and stderr.
func (c *cli) run(ctx context.Context, name string, args ...string) (string, string, error) {
	var out, errb bytes.Buffer
	ctx = withStreams(ctx, &out, &errb)
	sub := []string{}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[:1], args[1:]
	}
	full := append(sub, append([]string{"--database-url", pgtest.URL(c.t), "--schema", c.schema}, args...)...)
	err := commands[name].run(ctx, full)
	return out.String(), errb.String(), err
}

func (c *cli) must(name string, args ...string) string {
	c.t.Helper()
	out, errOut, err := c.run(context.Background(), name, args...)
	if err != nil {
		c.t.Fatalf("skiplock %s %v: %v\n%s", name, args, err, errOut)
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
	jobs, err := cl.Claim(ctx, "a", 3)
	if err != nil || len(jobs) != 3 {
		t.Fatalf("claim: %d %v", len(jobs), err)
	}
	for _, j := range jobs {
		if err := cl.Fail(ctx, j, io.EOF); err != nil {
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
	_, errOut, err := c.run(ctx, "jobs", "retry", "--state", "failed", "--queue", "a")
	if err != nil || !strings.Contains(errOut, "retry: 3 jobs done, 0 failed") {
		t.Fatalf("bulk retry: %v\n%s", err, errOut)
	}
	s, err := cl.Stats(ctx)
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
	if _, _, err := c.run(ctx, "jobs", "delete", ids[1]); err == nil {
		t.Fatal("deleting a deleted job should fail")
	}
	if _, _, err := c.run(ctx, "jobs", "retry"); err == nil {
		t.Fatal("retry with neither ids nor --state should fail")
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
	_, errOut, err := c.run(ctx, "partitions", "enable", "--premake", "2")
	if err != nil || !strings.Contains(errOut, "jobs was locked for") {
		t.Fatalf("partitions enable: %v\n%s", err, errOut)
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

func TestMetricsCommandServes(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 1)
	ctx = context.WithValue(ctx, listeningKey{}, func(a string) { addrs <- a })
	done := make(chan error, 1)
	go func() {
		_, _, err := c.run(ctx, "metrics", "--addr", "127.0.0.1:0", "--max-oldest-due", "1m")
		done <- err
	}()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("metrics exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("metrics never listened")
	}
	for path, want := range map[string]string{"/metrics": "skiplock_stats_up", "/healthz": `"status":"ok"`, "/readyz": `"status":"ok"`} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("metrics after cancel: %v", err)
	}
}
