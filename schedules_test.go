package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/maint"
	"github.com/skiplock/skiplock/internal/store"
)

// runScheduler runs one scheduler pass of c and reports whether it held the lock.
func (e *env) runScheduler(c *skiplock.Client) bool {
	e.t.Helper()
	ran, err := c.RunMaintenanceOnceForTest(e.ctx, "scheduler")
	e.must(err)
	return ran
}

// fireTimes returns the fire times of schedule name's jobs, from their deduplication
// keys, in order; it fails the test if any fire time has two jobs.
func (e *env) fireTimes(name string) []time.Time {
	e.t.Helper()
	rows, err := e.pool.Query(e.ctx, `SELECT deduplication_key, count(*) OVER (PARTITION BY deduplication_key)
FROM `+e.q("jobs")+` WHERE deduplication_key LIKE $1 ORDER BY 1`, "periodic:"+name+":%")
	e.must(err)
	defer rows.Close()
	var out []time.Time
	for rows.Next() {
		var key string
		var n int
		e.must(rows.Scan(&key, &n))
		if n != 1 {
			e.t.Fatalf("%d jobs hold %s", n, key)
		}
		at, err := time.Parse(time.RFC3339, strings.TrimPrefix(key, "periodic:"+name+":"))
		e.must(err)
		out = append(out, at)
	}
	e.must(rows.Err())
	return out
}

func (e *env) addSchedule(c *skiplock.Client, p skiplock.PeriodicJob) *skiplock.Schedule {
	e.t.Helper()
	if p.Kind == "" && p.Args == nil {
		p.Kind = "tick"
	}
	s, err := c.ScheduleAdd(e.ctx, p)
	e.must(err)
	return s
}

// 1,000 ticks of "@every 1s", each run by three clients at once: exactly 1,000 jobs,
// one per fire time, whichever client got the lock.
func TestSchedulerThousandTicksThreeClients(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	clients := []*skiplock.Client{e.client, e.newClient(skiplock.Config{}), e.newClient(skiplock.Config{})}
	e.addSchedule(e.client, skiplock.PeriodicJob{Name: "tick", Spec: "@every 1s", Misfire: skiplock.MisfireSkip})
	var runs atomic.Int64
	for range 1000 {
		e.clock.Advance(time.Second)
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if ran, err := c.RunMaintenanceOnceForTest(e.ctx, "scheduler"); err != nil {
					t.Error(err)
				} else if ran {
					runs.Add(1)
				}
			}()
		}
		wg.Wait()
	}
	got := e.fireTimes("tick")
	if len(got) != 1000 {
		t.Fatalf("%d jobs for 1,000 fire times", len(got))
	}
	for i, at := range got {
		if want := t0.Add(time.Duration(i+1) * time.Second); !at.Equal(want) {
			t.Fatalf("job %d is for %s, want %s", i, at, want)
		}
	}
	if n := scalar[int64](e, `SELECT count(*) FROM `+e.q("jobs")); n != 1000 {
		t.Fatalf("%d jobs in all", n)
	}
	s, err := e.client.ScheduleGet(e.ctx, "tick")
	e.must(err)
	if !s.LastFireAt.Equal(t0.Add(1000*time.Second)) || !s.NextFireAt.Equal(t0.Add(1001*time.Second)) || s.LastJobID == "" {
		t.Fatalf("schedule after 1,000 ticks: %+v", s)
	}
	t.Logf("1,000 ticks, %d runs held the lock, 1,000 jobs, 1,000 distinct fire times", runs.Load())
}

// Ten clients race for one fire time — through the advisory lock, and without it
// (only the row lock between them) — and a fire time set back by hand finds its job:
// one job.
func TestSchedulerTenClientsRaceOneFireTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	var clients []*skiplock.Client
	for range 10 {
		clients = append(clients, e.newClient(skiplock.Config{}))
	}
	e.addSchedule(e.client, skiplock.PeriodicJob{Name: "locked", Spec: "0 13 * * *"})
	e.addSchedule(e.client, skiplock.PeriodicJob{Name: "unlocked", Spec: "30 13 * * *"})
	race := func(run func(c *skiplock.Client) int) int {
		var fired atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, c := range clients {
			wg.Add(1)
			go func() { defer wg.Done(); <-start; fired.Add(int64(run(c))) }()
		}
		close(start)
		wg.Wait()
		return int(fired.Load())
	}
	e.clock.Set(t0.Add(time.Hour))
	race(func(c *skiplock.Client) int {
		_, err := c.RunMaintenanceOnceForTest(e.ctx, "scheduler")
		if err != nil {
			t.Error(err)
		}
		return 0
	})
	if got := e.fireTimes("locked"); len(got) != 1 || !got[0].Equal(t0.Add(time.Hour)) {
		t.Fatalf("through the advisory lock: fire times %v, want one at 13:00", got)
	}
	e.clock.Set(t0.Add(90 * time.Minute))
	fired := race(func(c *skiplock.Client) int {
		n, _, err := c.RunSchedulerUnlockedForTest(e.ctx)
		if err != nil {
			t.Error(err)
		}
		return n
	})
	if got := e.fireTimes("unlocked"); fired != 1 || len(got) != 1 {
		t.Fatalf("without the advisory lock: %d inserted, fire times %v", fired, got)
	}
	// The third wall: the deduplication key. Set the fire time back as a restored
	// backup or a hand edit would; firing it again inserts nothing.
	first := scalar[string](e, `SELECT last_job_id::text FROM `+e.q("schedules")+` WHERE name = 'unlocked'`)
	_, err := e.pool.Exec(e.ctx, `UPDATE `+e.q("schedules")+` SET next_fire_at = $1 WHERE name = 'unlocked'`, t0.Add(90*time.Minute))
	e.must(err)
	n, dups, err := clients[3].RunSchedulerUnlockedForTest(e.ctx)
	e.must(err)
	if n != 0 || dups != 1 || len(e.fireTimes("unlocked")) != 1 {
		t.Fatalf("re-fired a fire time: %d inserted, %d duplicates", n, dups)
	}
	if again := scalar[string](e, `SELECT last_job_id::text FROM `+e.q("schedules")+` WHERE name = 'unlocked'`); again != first {
		t.Fatalf("last_job_id %s, want the first job %s", again, first)
	}
	if n := scalar[int64](e, `SELECT count(*) FROM `+e.q("jobs")); n != 2 {
		t.Fatalf("%d jobs, want 2", n)
	}
}

// A client killed between inserting a fire's job and committing leaves neither the
// job nor the advance: the next run, in another client, fires the same fire time once.
func TestSchedulerClientKilledMidFire(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	other := e.newClient(skiplock.Config{})
	e.addSchedule(e.client, skiplock.PeriodicJob{Name: "nightly", Spec: "0 13 * * *"})
	e.clock.Set(t0.Add(time.Hour))
	fired, err := e.client.RunSchedulerAndDieForTest(e.ctx)
	e.must(err)
	if fired != 1 {
		t.Fatalf("the doomed run inserted %d jobs before dying, want 1", fired)
	}
	if n := scalar[int64](e, `SELECT count(*) FROM `+e.q("jobs")); n != 0 {
		t.Fatalf("%d jobs survived the killed run", n)
	}
	if next := scalar[time.Time](e, `SELECT next_fire_at FROM `+e.q("schedules")); !next.Equal(t0.Add(time.Hour)) {
		t.Fatalf("next_fire_at %s after the killed run, want 13:00 still", next)
	}
	// The dead session's locks go when the server notices the closed connection.
	waitFor(t, 10*time.Second, "another client to run the scheduler", func() bool { return e.runScheduler(other) })
	e.runScheduler(e.client)
	if got := e.fireTimes("nightly"); len(got) != 1 || !got[0].Equal(t0.Add(time.Hour)) {
		t.Fatalf("fire times %v, want one at 13:00", got)
	}
}

// The clock jumping back refires nothing; jumping ahead is a misfire (below).
func TestSchedulerClockJumpsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	e.addSchedule(e.client, skiplock.PeriodicJob{Name: "five", Spec: "*/5 * * * *"})
	e.clock.Advance(5 * time.Minute)
	e.runScheduler(e.client)
	e.clock.Advance(-time.Hour)
	for range 13 {
		e.runScheduler(e.client)
		e.clock.Advance(5 * time.Minute)
	}
	// Back at 12:10 now: the 12:05 fire is not repeated; 12:10 fires once.
	e.runScheduler(e.client)
	e.runScheduler(e.client)
	got := e.fireTimes("five")
	if len(got) != 2 || !got[0].Equal(t0.Add(5*time.Minute)) || !got[1].Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("fire times %v, want 12:05 and 12:10", got)
	}
}

// An hour of downtime under each misfire policy: "*/5 * * * *" fired at 12:05, then
// nothing ran until 13:07 (12 fire times missed, the newest two minutes late, beyond
// the one-minute grace) or until 13:05:30 (the newest on time).
func TestSchedulerMisfirePolicies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy     skiplock.MisfirePolicy
		maxCatchUp int
		back       time.Duration // when the scheduler runs again
		want       []string      // the fire times after 12:05 that got jobs, as HH:MM
	}{
		{skiplock.MisfireSkip, 0, 62 * time.Minute, nil},
		{skiplock.MisfireRunOnce, 0, 62 * time.Minute, []string{"13:05"}},
		{skiplock.MisfireCatchUp, 0, 62 * time.Minute, []string{"12:10", "12:15", "12:20", "12:25", "12:30", "12:35",
			"12:40", "12:45", "12:50", "12:55", "13:00", "13:05"}},
		{skiplock.MisfireCatchUp, 5, 62 * time.Minute, []string{"12:45", "12:50", "12:55", "13:00", "13:05"}},
		{skiplock.MisfireSkip, 0, 60*time.Minute + 30*time.Second, []string{"13:05"}},
		{skiplock.MisfireRunOnce, 0, 60*time.Minute + 30*time.Second, []string{"13:05"}},
		// 13:05 is on time and fires anyway; the bound applies to the missed ones.
		{skiplock.MisfireCatchUp, 3, 60*time.Minute + 30*time.Second, []string{"12:50", "12:55", "13:00", "13:05"}},
	} {
		t.Run(fmt.Sprintf("%s_%d_%s", tc.policy, tc.maxCatchUp, tc.back), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, skiplock.Config{})
			e.addSchedule(e.client, skiplock.PeriodicJob{Name: "five", Spec: "*/5 * * * *", Misfire: tc.policy,
				MaxCatchUp: tc.maxCatchUp})
			e.clock.Advance(5 * time.Minute)
			e.runScheduler(e.client)
			e.clock.Advance(tc.back)
			e.runScheduler(e.client)
			got := e.fireTimes("five")
			var hm []string
			for _, at := range got[1:] {
				hm = append(hm, at.Format("15:04"))
			}
			if fmt.Sprint(hm) != fmt.Sprint(tc.want) {
				t.Fatalf("fired %v after the downtime, want %v", hm, tc.want)
			}
			s, err := e.client.ScheduleGet(e.ctx, "five")
			e.must(err)
			if !s.NextFireAt.Equal(t0.Add(70 * time.Minute)) {
				t.Fatalf("next fire %s, want 13:10", s.NextFireAt)
			}
			// And on it goes, on time.
			e.clock.Set(t0.Add(70 * time.Minute))
			e.runScheduler(e.client)
			if n := len(e.fireTimes("five")); n != len(got)+1 {
				t.Fatalf("13:10 did not fire once: %d jobs, had %d", n, len(got))
			}
		})
	}
}

// Daylight saving time in two zones: a daily 02:30 (01:30 for New York's fall-back,
// whose repeated hour is 01:00–02:00) fires once on each changeover day — at the jump
// (03:00) in spring, at the first of the two readings in autumn — driven end to end
// by the fake clock in five-minute steps over two days.
func TestSchedulerDST(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		zone, spec string
		day        string // the changeover, local date
		want       string // the fire on that day, UTC
	}{
		{"Europe/Berlin", "30 2 * * *", "2030-03-31", "2030-03-31T01:00:00Z"},    // 03:00 CEST
		{"Europe/Berlin", "30 2 * * *", "2030-10-27", "2030-10-27T00:30:00Z"},    // 02:30 CEST, not CET
		{"America/New_York", "30 2 * * *", "2030-03-10", "2030-03-10T07:00:00Z"}, // 03:00 EDT
		{"America/New_York", "30 1 * * *", "2030-11-03", "2030-11-03T05:30:00Z"}, // 01:30 EDT, not EST
	} {
		t.Run(tc.zone+"_"+tc.day, func(t *testing.T) {
			t.Parallel()
			loc, err := time.LoadLocation(tc.zone)
			if err != nil {
				t.Skipf("no time zone data: %v", err)
			}
			e := newEnv(t, skiplock.Config{SchedulerMisfireGrace: 10 * time.Minute})
			day, err := time.ParseInLocation("2006-01-02", tc.day, loc)
			e.must(err)
			from, until := day.AddDate(0, 0, -1).Add(12*time.Hour), day.AddDate(0, 0, 1).Add(12*time.Hour)
			e.clock.Set(from)
			e.addSchedule(e.client, skiplock.PeriodicJob{Name: "daily", Spec: tc.spec, Timezone: tc.zone,
				Misfire: skiplock.MisfireCatchUp})
			for e.clock.Now().Before(until) {
				e.clock.Advance(5 * time.Minute)
				e.runScheduler(e.client)
			}
			got := e.fireTimes("daily")
			if len(got) != 2 {
				t.Fatalf("%d fires in two days (%v), want one a day", len(got), got)
			}
			if got[0].Format(time.RFC3339) != tc.want || got[0].In(loc).Format("2006-01-02") != tc.day {
				t.Fatalf("changeover day fired at %s (%s local), want %s", got[0].Format(time.RFC3339), got[0].In(loc), tc.want)
			}
			var minute, hour int
			fmt.Sscanf(tc.spec, "%d %d", &minute, &hour)
			if next := got[1].In(loc); next.Hour() != hour || next.Minute() != minute || !next.After(day.AddDate(0, 0, 1)) {
				t.Fatalf("the day after fired at %s local", next)
			}
		})
	}
}

// The corrected search, fire by fire over the changeover days: specs pinned to hours
// fire once per wall-clock match; specs covering every hour keep firing once per real
// hour (23 on a spring day, 25 on an autumn day).
func TestScheduleSpecDST(t *testing.T) {
	t.Parallel()
	count := func(spec, zone, day string) []string {
		t.Helper()
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Skipf("no time zone data: %v", err)
		}
		start, _ := time.ParseInLocation("2006-01-02", day, loc)
		end := start.AddDate(0, 0, 1)
		var out []string
		for at := start.Add(-time.Second); ; {
			next, err := skiplock.NextFireForTest(spec, zone, at)
			if err != nil {
				t.Fatal(err)
			}
			if !next.Before(end) {
				return out
			}
			out = append(out, next.In(loc).Format("15:04 MST"))
			at = next
		}
	}
	for _, tc := range []struct {
		spec, zone, day string
		want            string
	}{
		{"30 2 * * *", "Europe/Berlin", "2030-03-31", "[03:00 CEST]"},
		{"30 2 * * *", "Europe/Berlin", "2030-10-27", "[02:30 CEST]"},
		{"30 2 * * *", "America/New_York", "2030-03-10", "[03:00 EDT]"},
		{"30 2 * * *", "America/New_York", "2030-11-03", "[02:30 EST]"},
		{"30 1 * * *", "America/New_York", "2030-11-03", "[01:30 EDT]"},
		{"0 1-3 * * *", "Europe/Berlin", "2030-03-31", "[01:00 CET 03:00 CEST]"},
		{"0 1-3 * * *", "Europe/Berlin", "2030-10-27", "[01:00 CEST 02:00 CEST 03:00 CET]"},
		{"0 0 * * *", "America/Sao_Paulo", "2018-11-04", "[01:00 -02]"}, // midnight skipped
		{"@daily", "Europe/Berlin", "2030-03-31", "[00:00 CET]"},
	} {
		if got := fmt.Sprint(count(tc.spec, tc.zone, tc.day)); got != tc.want {
			t.Errorf("%q in %s on %s: %s, want %s", tc.spec, tc.zone, tc.day, got, tc.want)
		}
	}
	for _, tc := range []struct {
		zone, day string
		want      int
	}{
		{"America/New_York", "2030-03-10", 23}, {"America/New_York", "2030-11-03", 25},
		{"Europe/Berlin", "2030-03-31", 23}, {"Europe/Berlin", "2030-10-27", 25},
	} {
		if got := len(count("0 * * * *", tc.zone, tc.day)); got != tc.want {
			t.Errorf("hourly in %s on %s: %d fires, want %d", tc.zone, tc.day, got, tc.want)
		}
	}
}

// A schedule edited while it runs: a new spec takes effect from now without firing a
// fire time twice; an edit of the payload keeps the timing; a pause stops it and a
// resume goes on from now, without a backlog.
func TestScheduleEditedWhileRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	e.addSchedule(e.client, skiplock.PeriodicJob{Name: "edit", Spec: "@every 10s", Payload: []byte(`{"v":1}`)})
	tick := func(d time.Duration, n int) {
		for range n {
			e.clock.Advance(d)
			e.runScheduler(e.client)
		}
	}
	tick(10*time.Second, 3) // 12:00:10, :20, :30
	s, err := e.client.ScheduleGet(e.ctx, "edit")
	e.must(err)
	p := s.PeriodicJob()
	p.Spec = "@every 1m"
	s, err = e.client.ScheduleUpdate(e.ctx, p)
	e.must(err)
	if !s.NextFireAt.Equal(t0.Add(90 * time.Second)) {
		t.Fatalf("next fire after the new spec: %s, want 12:01:30", s.NextFireAt)
	}
	tick(10*time.Second, 12) // to 12:02:30: fires 12:01:30, 12:02:30
	p.Payload = []byte(`{"v":2}`)
	s, err = e.client.ScheduleUpdate(e.ctx, p)
	e.must(err)
	if !s.NextFireAt.Equal(t0.Add(210*time.Second)) || string(s.Payload) != `{"v": 2}` {
		t.Fatalf("after a payload edit: next %s, payload %s", s.NextFireAt, s.Payload)
	}
	_, err = e.client.SchedulePause(e.ctx, "edit")
	e.must(err)
	tick(time.Minute, 3) // paused through 12:05:30
	s, err = e.client.ScheduleResume(e.ctx, "edit")
	e.must(err)
	if !s.Enabled || !s.NextFireAt.Equal(t0.Add(390*time.Second)) {
		t.Fatalf("resumed: %+v, want next 12:06:30", s)
	}
	tick(time.Minute, 1)
	var hms []string
	for _, at := range e.fireTimes("edit") {
		hms = append(hms, at.Format("15:04:05"))
	}
	if want := "[12:00:10 12:00:20 12:00:30 12:01:30 12:02:30 12:06:30]"; fmt.Sprint(hms) != want {
		t.Fatalf("fire times %v, want %s", hms, want)
	}
	if v := scalar[string](e, `SELECT payload::text FROM `+e.q("jobs")+` ORDER BY run_at DESC LIMIT 1`); v != `{"v": 2}` {
		t.Fatalf("the last job's payload %s, want the edited one", v)
	}

	// Edits racing the scheduler's runs in three clients: each waits for the other's
	// row lock, and every fire time still has one job.
	clients := []*skiplock.Client{e.client, e.newClient(skiplock.Config{}), e.newClient(skiplock.Config{})}
	e.addSchedule(e.client, skiplock.PeriodicJob{Name: "busy", Spec: "@every 1s"})
	done, editorExited := make(chan struct{}), make(chan struct{})
	var edits atomic.Int64
	go func() {
		defer close(editorExited)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if _, err := e.client.ScheduleUpdate(e.ctx, skiplock.PeriodicJob{Name: "busy", Spec: "@every 1s", Kind: "tick",
				Payload: []byte(fmt.Sprintf(`{"edit":%d}`, i))}); err != nil {
				t.Error(err)
				return
			}
			edits.Add(1)
		}
	}()
	for range 200 {
		e.clock.Advance(time.Second)
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Add(1)
			go func() { defer wg.Done(); c.RunMaintenanceOnceForTest(e.ctx, "scheduler") }()
		}
		wg.Wait()
	}
	close(done)
	<-editorExited // an edit still running when the test ends would fail after it
	if got := e.fireTimes("busy"); len(got) != 200 {
		t.Fatalf("%d jobs for 200 fire times under %d concurrent edits", len(got), edits.Load())
	}
}

// Schedules declared in Config are written by the scheduler's first run: added,
// updated when the declaration changes, removed with PeriodicRemoveUndeclared — never
// one added at run time — and a pause survives it.
func TestPeriodicDeclaredReconcile(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	first := e.newClient(skiplock.Config{Periodic: []skiplock.PeriodicJob{
		{Name: "report", Spec: "0 6 * * *", Timezone: "Europe/Berlin", Args: emailArgs{To: "ops"}},
		{Name: "cleanup", Spec: "@hourly", Kind: "cleanup"},
		{Name: "paused", Spec: "@hourly", Kind: "cleanup"},
	}})
	e.addSchedule(e.client, skiplock.PeriodicJob{Name: "adhoc", Spec: "@daily"})
	e.runScheduler(first)
	list, err := e.client.ScheduleList(e.ctx)
	e.must(err)
	var got []string
	for _, s := range list {
		got = append(got, s.Name+":"+string(s.Source))
	}
	if fmt.Sprint(got) != "[adhoc:api cleanup:config paused:config report:config]" {
		t.Fatalf("after the first client's run: %v", got)
	}
	r, err := e.client.ScheduleGet(e.ctx, "report")
	e.must(err)
	if r.Kind != "email" || string(r.Payload) != `{"to": "ops"}` || !r.NextFireAt.Equal(time.Date(2030, 1, 2, 5, 0, 0, 0, time.UTC)) {
		t.Fatalf("declared report: %+v", r)
	}
	_, err = e.client.SchedulePause(e.ctx, "paused")
	e.must(err)
	e.runScheduler(first) // a second run does not write them again
	again, err := e.client.ScheduleGet(e.ctx, "report")
	e.must(err)
	if !again.UpdatedAt.Equal(r.UpdatedAt) {
		t.Fatalf("an unchanged declaration was rewritten")
	}

	e.clock.Advance(time.Minute)
	second := e.newClient(skiplock.Config{PeriodicRemoveUndeclared: true, Periodic: []skiplock.PeriodicJob{
		{Name: "report", Spec: "0 7 * * *", Timezone: "Europe/Berlin", Args: emailArgs{To: "ops"}},
		{Name: "paused", Spec: "@hourly", Kind: "cleanup", Queue: "low"},
	}})
	e.runScheduler(second)
	list, err = e.client.ScheduleList(e.ctx)
	e.must(err)
	got = nil
	for _, s := range list {
		got = append(got, fmt.Sprintf("%s:%s:%v:%s", s.Name, s.Spec, s.Enabled, s.Queue))
	}
	if want := "[adhoc:@daily:true:default paused:@hourly:false:low report:0 7 * * *:true:default]"; fmt.Sprint(got) != want {
		t.Fatalf("after the second client's run:\n%v\nwant\n%s", got, want)
	}
	r, err = e.client.ScheduleGet(e.ctx, "report")
	e.must(err)
	if !r.NextFireAt.Equal(time.Date(2030, 1, 2, 6, 0, 0, 0, time.UTC)) {
		t.Fatalf("the re-declared spec's next fire: %s", r.NextFireAt)
	}
}

// A client started with declared schedules writes them and fires them, and the job
// tells its handler which schedule and fire time it is for.
func TestPeriodicStartedClientFires(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	ws := skiplock.NewWorkers()
	ran := make(chan *skiplock.Job, 10)
	e.must(ws.AddHandler("tick", func(_ context.Context, j *skiplock.Job) error { ran <- j; return nil }, nil))
	c := e.newClient(skiplock.Config{Workers: ws, Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 1}},
		SchedulerInterval: 10 * time.Millisecond, PollInterval: 10 * time.Millisecond,
		Periodic: []skiplock.PeriodicJob{{Name: "minutely", Spec: "* * * * *", Kind: "tick"}}})
	startClient(t, c)
	waitFor(t, 10*time.Second, "the declared schedule", func() bool {
		_, err := c.ScheduleGet(e.ctx, "minutely")
		return err == nil
	})
	e.clock.Advance(time.Minute)
	select {
	case j := <-ran:
		name, at, ok := skiplock.JobSchedule(j)
		if !ok || name != "minutely" || !at.Equal(t0.Add(time.Minute)) || !j.RunAt.Equal(at) {
			t.Fatalf("JobSchedule = %q %s %v; run_at %s", name, at, ok, j.RunAt)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the scheduled job did not run")
	}
}

// Jitter delays a job's run_at, never the fire time; Trigger enqueues outside the
// fire times; a fire that a hook refuses is recorded on its schedule and skipped
// without holding up the others, and is not an operation failure.
func TestScheduleJitterTriggerAndRefusedFire(t *testing.T) {
	t.Parallel()
	refuse := func(_ context.Context, p *skiplock.EnqueueParams) error {
		if p.Kind == "refused" {
			return errors.New("no refused jobs today")
		}
		return nil
	}
	e := newEnv(t, skiplock.Config{EnqueueHooks: []skiplock.EnqueueHook{refuse}})
	e.addSchedule(e.client, skiplock.PeriodicJob{Name: "jit", Spec: "0 13 * * *", Jitter: 30 * time.Second})
	e.addSchedule(e.client, skiplock.PeriodicJob{Name: "bad", Spec: "0 13 * * *", Kind: "refused"})
	e.clock.Set(t0.Add(time.Hour))
	e.runScheduler(e.client)
	jit, err := e.client.ScheduleGet(e.ctx, "jit")
	e.must(err)
	j, err := e.client.JobGet(e.ctx, jit.LastJobID)
	e.must(err)
	if j.RunAt.Before(t0.Add(time.Hour)) || j.RunAt.After(t0.Add(time.Hour+30*time.Second)) {
		t.Fatalf("run_at %s outside 13:00..13:00:30", j.RunAt)
	}
	if !jit.NextFireAt.Equal(t0.Add(25 * time.Hour)) {
		t.Fatalf("jitter moved the next fire time: %s", jit.NextFireAt)
	}
	if name, at, ok := skiplock.JobSchedule(j); !ok || name != "jit" || !at.Equal(t0.Add(time.Hour)) {
		t.Fatalf("JobSchedule: %q %s %v", name, at, ok)
	}
	bad, err := e.client.ScheduleGet(e.ctx, "bad")
	e.must(err)
	if !strings.Contains(bad.LastError, "no refused jobs today") || bad.LastJobID != "" ||
		!bad.NextFireAt.Equal(t0.Add(25*time.Hour)) || !bad.LastFireAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("the refused schedule: %+v", bad)
	}
	for _, op := range e.client.Operations() {
		if op.Failing {
			t.Fatalf("a refused fire counts as a failing operation: %+v", op)
		}
	}
	for range 2 {
		res, err := e.client.ScheduleTrigger(e.ctx, "jit")
		e.must(err)
		tj, err := e.client.JobGet(e.ctx, res.ID)
		e.must(err)
		if name, at, ok := skiplock.JobSchedule(tj); res.Duplicate || !ok || name != "jit" || !at.IsZero() || tj.DeduplicationKey != "" {
			t.Fatalf("triggered job: %+v", tj)
		}
	}
	if n := scalar[int64](e, `SELECT count(*) FROM `+e.q("jobs")); n != 3 {
		t.Fatalf("%d jobs, want the fire and two triggers", n)
	}
	if _, err := e.client.ScheduleTrigger(e.ctx, "bad"); err == nil {
		t.Fatal("a trigger the hook refuses succeeded")
	}
}

func TestScheduleStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	e.addSchedule(e.client, skiplock.PeriodicJob{Name: "a", Spec: "0 13 * * *"})
	e.addSchedule(e.client, skiplock.PeriodicJob{Name: "b", Spec: "30 12 * * *"})
	_, err := e.client.SchedulePause(e.ctx, "b")
	e.must(err)
	s, err := e.client.Stats(e.ctx, nil)
	e.must(err)
	if s.Schedules.Total != 2 || s.Schedules.Enabled != 1 || !s.Schedules.NextFireAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("Stats.Schedules = %+v", s.Schedules)
	}
}

// Bad input is refused before anything is written, naming the field.
func TestScheduleBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	ok := skiplock.PeriodicJob{Name: "ok", Spec: "@hourly", Kind: "tick"}
	with := func(f func(p *skiplock.PeriodicJob)) skiplock.PeriodicJob { p := ok; f(&p); return p }
	for _, tc := range []struct {
		p     skiplock.PeriodicJob
		field string
	}{
		{with(func(p *skiplock.PeriodicJob) { p.Spec = "61 * * * *" }), "spec"},
		{with(func(p *skiplock.PeriodicJob) { p.Spec = "every day" }), "spec"},
		{with(func(p *skiplock.PeriodicJob) { p.Spec = "" }), "spec"},
		{with(func(p *skiplock.PeriodicJob) { p.Spec = "CRON_TZ=Europe/Berlin 0 6 * * *" }), "spec"},
		{with(func(p *skiplock.PeriodicJob) { p.Spec = "0 0 30 2 *" }), "spec"}, // never
		// @every: whole seconds, at least one (the cron parser would round these to 1s).
		{with(func(p *skiplock.PeriodicJob) { p.Spec = "@every -5s" }), "spec"},
		{with(func(p *skiplock.PeriodicJob) { p.Spec = "@every 0s" }), "spec"},
		{with(func(p *skiplock.PeriodicJob) { p.Spec = "@every 500ms" }), "spec"},
		{with(func(p *skiplock.PeriodicJob) { p.Spec = "@every 1500ms" }), "spec"},
		{with(func(p *skiplock.PeriodicJob) { p.Spec = "@every soon" }), "spec"},
		{with(func(p *skiplock.PeriodicJob) { p.Timezone = "Mars/Olympus_Mons" }), "timezone"},
		{with(func(p *skiplock.PeriodicJob) { p.Timezone = "Local" }), "timezone"},
		{with(func(p *skiplock.PeriodicJob) { p.Name = "" }), "name"},
		{with(func(p *skiplock.PeriodicJob) { p.Name = "two words" }), "name"},
		{with(func(p *skiplock.PeriodicJob) { p.Name = "-dash" }), "name"},
		{with(func(p *skiplock.PeriodicJob) { p.Name = strings.Repeat("n", 129) }), "name"},
		{with(func(p *skiplock.PeriodicJob) { p.Kind = "" }), "kind"},
		{with(func(p *skiplock.PeriodicJob) { p.Payload = []byte("{") }), "payload"},
		{with(func(p *skiplock.PeriodicJob) { p.Queue = "no queue" }), "queue"},
		{with(func(p *skiplock.PeriodicJob) { p.Priority = 5000 }), "priority"},
		{with(func(p *skiplock.PeriodicJob) { p.MaxAttempts = -1 }), "max_attempts"},
		{with(func(p *skiplock.PeriodicJob) { p.Misfire = "sometimes" }), "misfire"},
		{with(func(p *skiplock.PeriodicJob) { p.MaxCatchUp = 5000 }), "max_catch_up"},
		{with(func(p *skiplock.PeriodicJob) { p.Jitter = -time.Second }), "jitter"},
	} {
		_, err := e.client.ScheduleAdd(e.ctx, tc.p)
		var ve *skiplock.ValidationError
		if !errors.Is(err, skiplock.ErrInvalid) || !errors.As(err, &ve) || ve.Field != tc.field {
			t.Errorf("%+v: %v, want an invalid %s", tc.p, err, tc.field)
		}
		_, err = skiplock.NewClient(e.pool, skiplock.Config{Schema: e.schema, Periodic: []skiplock.PeriodicJob{ok, tc.p}})
		if !errors.As(err, &ve) || ve.Field != "Config.Periodic" || !strings.Contains(ve.Reason, "invalid "+tc.field) {
			t.Errorf("Config.Periodic with %+v: %v, want Config.Periodic naming %s", tc.p, err, tc.field)
		}
	}
	_, err := skiplock.NewClient(e.pool, skiplock.Config{Schema: e.schema, Periodic: []skiplock.PeriodicJob{ok, ok}})
	if !errors.Is(err, skiplock.ErrInvalid) || !strings.Contains(err.Error(), `two schedules are named "ok"`) {
		t.Errorf("duplicate declared names: %v", err)
	}
	if n := scalar[int64](e, `SELECT count(*) FROM `+e.q("schedules")); n != 0 {
		t.Fatalf("%d schedules written by refused input", n)
	}
	e.addSchedule(e.client, ok)
	if _, err := e.client.ScheduleAdd(e.ctx, ok); !errors.Is(err, skiplock.ErrScheduleExists) {
		t.Errorf("adding a taken name: %v", err)
	}
	for name, f := range map[string]func(string) error{
		"get":    func(n string) error { _, err := e.client.ScheduleGet(e.ctx, n); return err },
		"pause":  func(n string) error { _, err := e.client.SchedulePause(e.ctx, n); return err },
		"resume": func(n string) error { _, err := e.client.ScheduleResume(e.ctx, n); return err },
		"delete": func(n string) error { _, err := e.client.ScheduleDelete(e.ctx, n); return err },
		"trigger": func(n string) error {
			_, err := e.client.ScheduleTrigger(e.ctx, n)
			return err
		},
		"update": func(n string) error {
			p := ok
			p.Name = n
			_, err := e.client.ScheduleUpdate(e.ctx, p)
			return err
		},
	} {
		if err := f("missing"); !errors.Is(err, skiplock.ErrScheduleNotFound) || !errors.Is(err, skiplock.ErrNotFound) {
			t.Errorf("%s of a missing schedule: %v", name, err)
		}
		var ve *skiplock.ValidationError
		if err := f("bad name"); !errors.As(err, &ve) || ve.Field != "name" {
			t.Errorf("%s of a bad name: %v", name, err)
		}
	}
	del, err := e.client.ScheduleDelete(e.ctx, "ok")
	e.must(err)
	if del.Name != "ok" || del.Source != skiplock.ScheduleFromAPI {
		t.Fatalf("deleted: %+v", del)
	}
}

// The worker role runs the scheduler — writing declared schedules, firing them — and
// may manage schedules as it may pause queues; the dashboard reads them only.
func TestSchedulerRoles(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	names := skiplock.RoleNames{Worker: e.schema + "_w", Dashboard: e.schema + "_d"}
	for _, r := range []string{names.Worker, names.Dashboard} {
		_, err := e.pool.Exec(e.ctx, `CREATE ROLE "`+r+`" NOLOGIN`)
		e.must(err)
		t.Cleanup(func() { e.pool.Exec(e.ctx, `DROP OWNED BY "`+r+`"; DROP ROLE "`+r+`"`) })
	}
	ddl, err := skiplock.RolesSQL(e.schema, names)
	e.must(err)
	_, err = e.pool.Exec(e.ctx, ddl)
	e.must(err)

	w, err := skiplock.NewClient(e.rolePool(names.Worker), skiplock.Config{Schema: e.schema, Clock: e.clock,
		PeriodicRemoveUndeclared: true, Periodic: []skiplock.PeriodicJob{{Name: "declared", Spec: "0 13 * * *", Kind: "tick"}}})
	e.must(err)
	t.Cleanup(w.Close)
	e.runScheduler(w)
	e.addSchedule(w, skiplock.PeriodicJob{Name: "added", Spec: "0 13 * * *"})
	_, err = w.SchedulePause(e.ctx, "added")
	e.must(err)
	_, err = w.ScheduleResume(e.ctx, "added")
	e.must(err)
	e.clock.Set(t0.Add(time.Hour))
	e.runScheduler(w)
	if len(e.fireTimes("declared")) != 1 || len(e.fireTimes("added")) != 1 {
		t.Fatalf("the worker role's scheduler fired %v and %v", e.fireTimes("declared"), e.fireTimes("added"))
	}
	_, err = w.ScheduleDelete(e.ctx, "added")
	e.must(err)

	d, _ := e.roleClient(names.Dashboard)
	if list, err := d.ScheduleList(e.ctx); err != nil || len(list) != 1 {
		t.Fatalf("dashboard lists schedules: %d %v", len(list), err)
	}
	if _, err := d.Stats(e.ctx, nil); err != nil {
		t.Fatalf("dashboard reads stats: %v", err)
	}
	if _, err := d.ScheduleAdd(e.ctx, skiplock.PeriodicJob{Name: "x", Spec: "@hourly", Kind: "tick"}); !denied(err) {
		t.Fatalf("dashboard adds a schedule: %v, want permission denied", err)
	}
	if _, err := d.SchedulePause(e.ctx, "declared"); !denied(err) {
		t.Fatalf("dashboard pauses a schedule: %v, want permission denied", err)
	}
}

// The public policy and source names are the strings the scheduler and the store use
// (the root spells them out so godoc shows their values).
func TestScheduleConstantsMatchTheStore(t *testing.T) {
	t.Parallel()
	for pub, internal := range map[string]string{
		string(skiplock.MisfireSkip): maint.MisfireSkip, string(skiplock.MisfireRunOnce): maint.MisfireRunOnce,
		string(skiplock.MisfireCatchUp):     maint.MisfireCatchUp,
		string(skiplock.ScheduleFromConfig): store.ScheduleSourceConfig, string(skiplock.ScheduleFromAPI): store.ScheduleSourceAPI,
	} {
		if pub != internal {
			t.Errorf("%q != %q", pub, internal)
		}
	}
}
