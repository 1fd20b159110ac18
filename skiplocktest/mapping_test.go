package skiplocktest_test

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx" driver
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/skiplocktest"
)

// RequireEnqueued's job is the job Client.JobGet returns, field for field: the
// helper reads jobs through the root's one row mapping, so a column the mapping
// learns is a column the helper shows. The job sets every option and has run
// twice (a retry, then a success with an output), so that no field can agree only
// by being empty on both sides. Read through database/sql (FromSQL) it is the same
// job.
func TestRequireEnqueuedReturnsTheJobJobGetReturns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := newClient(t, skiplock.Config{})
	id := enqueue(t, c, c.Pool(), Email{To: "ana"}, &skiplock.EnqueueOpts{Queue: "mail", Priority: 5, MaxAttempts: 3,
		Metadata: map[string]string{"tenant": "acme"}, Tags: []string{"welcome"}, ConcurrencyKey: "acme",
		DeduplicationKey: "welcome-ana"})

	m := c.Manual()
	claim := func() *skiplock.Job {
		t.Helper()
		jobs, err := m.Claim(ctx, "mail", 1)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("Claim = %v, %v; want the job", jobs, err)
		}
		return jobs[0]
	}
	if st, err := m.Retry(ctx, claim(), errors.New("smtp said no"), 0); err != nil || st != skiplock.StatePending {
		t.Fatalf("Retry = %s, %v", st, err)
	}
	job := claim()
	if err := job.SetOutput(map[string]string{"message_id": "m-1"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Complete(ctx, job); err != nil {
		t.Fatal(err)
	}

	want, err := c.JobGet(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// A finished job holds no lease; every other field must be set, or this test
	// could not see the helper drop it.
	unset := map[string]bool{"LeaseToken": true, "LeaseUntil": true}
	wv := reflect.ValueOf(want).Elem()
	for i := range wv.NumField() {
		if f := wv.Type().Field(i); f.IsExported() && wv.Field(i).IsZero() != unset[f.Name] {
			t.Errorf("JobGet's job has %s = %v: set it (an option, an attempt) so this test covers it, or list it as unset", f.Name, wv.Field(i))
		}
	}

	sqlDB, err := sql.Open("pgx", c.Pool().Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer sqlDB.Close()
	for name, db := range map[string]skiplock.DB{"pgx": c.Pool(), "database/sql": skiplock.FromSQL(sqlDB)} {
		got := skiplocktest.RequireEnqueued[Email](t, c, db, nil).Job
		gv := reflect.ValueOf(got).Elem()
		for i := range wv.NumField() {
			f := wv.Type().Field(i)
			if f.IsExported() && !reflect.DeepEqual(gv.Field(i).Interface(), wv.Field(i).Interface()) {
				t.Errorf("through %s, RequireEnqueued's job has %s = %v; JobGet's has %v", name, f.Name, gv.Field(i), wv.Field(i))
			}
		}
		if !t.Failed() && !reflect.DeepEqual(got, want) {
			t.Errorf("through %s, RequireEnqueued's job differs from JobGet's in an unexported field:\n got %#v\nwant %#v", name, got, want)
		}
	}
}
