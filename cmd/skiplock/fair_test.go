package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
)

// queues fair, weight and keys, as a person runs them: wrong values are usage
// errors (exit 2), a queue nothing names is refused, stats shows the fair queue's
// keys.
func TestQueuesFair(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ctx := context.Background()
	cl := c.client()
	for _, bad := range [][]string{
		{"queues", "fair"},
		{"queues", "fair", "bad q"},
		{"queues", "fair", "mail", "--off", "--bypass-priority", "3"},
		{"queues", "weight", "mail", "a"},
		{"queues", "weight", "mail", "a", "two"},
		{"queues", "weight", "mail", "a", "0"},
		{"queues", "weight", "mail", "*", "2"},
		{"queues", "keys", "mail", "--top", "0"},
	} {
		if _, errOut, code := c.run(ctx, bad...); code != 2 {
			t.Errorf("%s: exit %d, want 2\n%s", strings.Join(bad, " "), code, errOut)
		}
	}
	if _, errOut, code := c.run(ctx, "queues", "fair", "mail"); code != 1 || !strings.Contains(errOut, "queue not found") {
		t.Fatalf("queues fair of a queue nothing names: exit %d\n%s", code, errOut)
	}
	for _, key := range []string{"a", "a", "a", "b"} {
		if _, err := cl.EnqueueRawTx(ctx, cl.Pool(), "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "mail", ConcurrencyKey: key}); err != nil {
			t.Fatal(err)
		}
	}
	if out := c.must("queues", "fair", "mail", "--bypass-priority", "5"); out != "queue mail is fair by concurrency key; jobs of priority 5 or higher go first\n" {
		t.Fatalf("queues fair: %q", out)
	}
	if out := c.must("queues", "weight", "mail", "a", "3"); out != "key \"a\" of queue mail weighs 3\n" {
		t.Fatalf("queues weight: %q", out)
	}
	out := c.must("queues", "keys", "mail", "--top", "1")
	if !strings.Contains(out, `"a"`) || !strings.Contains(out, "(1 other keys)") {
		t.Fatalf("queues keys:\n%s", out)
	}
	if out := c.must("stats"); !strings.Contains(out, "fair queue mail (by concurrency key, priority 5 and up first)") {
		t.Fatalf("stats without the fair queue:\n%s", out)
	}
	var s struct {
		Fair []fairQueueJSON `json:"fair"`
	}
	if err := json.Unmarshal([]byte(c.must("stats", "--output", "json")), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Fair) != 1 || len(s.Fair[0].Keys) != 2 || s.Fair[0].Keys[0].Key != "a" || s.Fair[0].Keys[0].Due != 3 {
		t.Fatalf("stats --output json: %+v", s.Fair)
	}
	if out := c.must("queues", "fair", "mail", "--off"); out != "queue mail claims in priority order\n" {
		t.Fatalf("queues fair --off: %q", out)
	}
}
