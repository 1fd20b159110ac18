package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/metrics"
)

// The vacuum horizon's gauges follow a session that holds it. The database is the
// test's own: the horizon is the database's.
func TestCollectorVacuumHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := pgtest.MigratedDatabase(t, skiplock.DefaultSchema)
	c, err := skiplock.NewClient(pool, skiplock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)

	pgtest.HoldHorizon(t, url)
	for range 3 {
		if _, err := pool.Exec(ctx, "SELECT txid_current()"); err != nil {
			t.Fatal(err)
		}
	}
	m := metrics.New(c, metrics.Options{MinInterval: time.Hour})
	defer m.Close()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			if g := mt.GetGauge(); g != nil {
				got[f.GetName()] = g.GetValue()
			}
		}
	}
	if got["skiplock_vacuum_horizon_xid_age"] < 3 || got["skiplock_vacuum_horizon_held_seconds"] <= 0 {
		t.Fatalf("with a session pinning the horizon: xid age %v, held %v s; want 3 or more, and a positive time",
			got["skiplock_vacuum_horizon_xid_age"], got["skiplock_vacuum_horizon_held_seconds"])
	}
	if _, ok := got["skiplock_jobs_dead_tuples"]; !ok {
		t.Fatal("skiplock_jobs_dead_tuples is missing")
	}
}
