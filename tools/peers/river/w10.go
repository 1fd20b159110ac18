package main

// W10 against River: the shape of skiplock bench's W10 (cmd/skiplock/internal/bench/w10.go). A
// steady 800 inserts a second, open loop, while a session sits idle in a REPEATABLE
// READ transaction that has read river_job and taken an xid, so that nothing River's
// fetches and completions leave behind can be vacuumed. Three phases cut into windows
// of 10 s × -scale: a baseline of 3 windows, the pin for 60, a recovery of 9. Pickup
// is timed as in W6, from just before Insert to the worker's first line; each job
// counts in the window in which its Insert began. The rule printed is the issue's:
// every window after the first completes at least 95% of what was offered, and no pin
// window's p99 goes above twice the baseline's (the median of its three windows).
// Like main.go, it reads the host clock on purpose: a stopwatch around River, which no
// job's state depends on (see the package comment).

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	w10Rate                            = 800
	w10Base, w10PinWindows, w10RecWins = 3, 60, 9
	w10Warm                            = 40 // jobs run before the clock starts, as in W6
	w10Pace                            = 5 * time.Millisecond
	w10Drain                           = 2 * time.Minute
	w10RateShare, w10Factor            = 0.95, 2.0
)

// w10Sample is one job's three readings.
type w10Sample struct {
	begin, inserted, started time.Time
	runs                     int
}

func w10(ctx context.Context, url string, cooldown time.Duration, scale float64) error {
	window := max(time.Duration(float64(10*time.Second)*scale), 100*time.Millisecond)
	windows := w10Base + w10PinWindows + w10RecWins
	total := int(w10Rate * (time.Duration(windows) * window).Seconds())

	samples := make([]w10Sample, total+w10Warm)
	var mu sync.Mutex
	first := newRunCount(w10Warm, total) // each job's first run only
	rig, err := newLatencyRig(ctx, url, cooldown, func(i int) {
		at := now()
		mu.Lock()
		defer mu.Unlock()
		s := &samples[i]
		if s.runs++; s.runs == 1 {
			s.started = at
			first.add()
		}
	})
	if err != nil {
		return err
	}
	defer rig.close(ctx)
	app, workPool := rig.app, rig.workPool
	for i := total; i < total+w10Warm; i++ {
		if _, err := app.Insert(ctx, noopArgs{I: i}, nil); err != nil {
			return err
		}
	}
	select {
	case <-first.warmed:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("warm-up: the %d warm-up jobs did not all run within 30s", w10Warm)
	}

	// The observer reads the dead tuples at each window's end and takes and releases
	// the pin at the phase boundaries.
	start := now()
	dead := make([]int64, windows)
	var pinXid, pinDead int64
	obsErr := make(chan error, 1)
	go func() {
		var pin *pgx.Conn
		defer func() {
			if pin != nil {
				pin.Close(context.WithoutCancel(ctx))
			}
		}()
		err := func() error {
			for k := 1; k <= windows; k++ {
				time.Sleep(time.Until(start.Add(time.Duration(k) * window)))
				if err := workPool.QueryRow(ctx, `SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE relname = 'river_job'`).Scan(&dead[k-1]); err != nil {
					return fmt.Errorf("reading the dead tuples: %w", err)
				}
				switch k {
				case w10Base:
					c, err := pgx.Connect(ctx, url)
					if err != nil {
						return fmt.Errorf("connecting the pinning session: %w", err)
					}
					pin = c
					if _, err := pin.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
						return err
					}
					if _, err := pin.Exec(ctx, "SELECT 1 FROM river_job LIMIT 1"); err != nil {
						return err
					}
					if err := pin.QueryRow(ctx, "SELECT txid_current()").Scan(&pinXid); err != nil {
						return err
					}
				case w10Base + w10PinWindows:
					pinDead = dead[k-1]
					if _, err := pin.Exec(ctx, "ROLLBACK"); err != nil {
						return fmt.Errorf("releasing the pin: %w", err)
					}
				}
			}
			return nil
		}()
		obsErr <- err
	}()

	tick := time.NewTicker(w10Pace)
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var insertErr error
	for launched := 0; launched < total; {
		<-tick.C
		due := min(int(since(start).Seconds()*w10Rate)+1, total)
		for ; launched < due; launched++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				b := now()
				_, err := app.Insert(ctx, noopArgs{I: i}, nil)
				e := now()
				mu.Lock()
				samples[i].begin, samples[i].inserted = b, e
				mu.Unlock()
				if err != nil {
					errMu.Lock()
					insertErr = err
					errMu.Unlock()
				}
			}(launched)
		}
	}
	tick.Stop()
	wg.Wait()
	if insertErr != nil {
		return fmt.Errorf("inserting: %w", insertErr)
	}
	if err := <-obsErr; err != nil {
		return err
	}
	select {
	case <-first.all:
	case <-time.After(w10Drain):
		mu.Lock()
		defer mu.Unlock()
		return fmt.Errorf("only %d of %d jobs ran within %s of the last insert", first.n, total+w10Warm, w10Drain)
	}

	mu.Lock()
	defer mu.Unlock()
	wrong := 0
	type win struct{ pickup, insert, queue []time.Duration }
	per := make([]win, windows)
	completed := make([]int, windows)
	at := func(t time.Time) int { return min(max(int(t.Sub(start)/window), 0), windows-1) }
	for i, s := range samples {
		if s.runs != 1 {
			wrong++
		}
		if i >= total {
			continue
		}
		k := at(s.begin)
		per[k].pickup = append(per[k].pickup, s.started.Sub(s.begin))
		per[k].insert = append(per[k].insert, s.inserted.Sub(s.begin))
		per[k].queue = append(per[k].queue, max(s.started.Sub(s.inserted), 0))
		completed[at(s.started)]++
	}
	pct := func(d []time.Duration, p float64) float64 {
		if len(d) == 0 {
			return 0
		}
		slices.Sort(d)
		return float64(d[min(int(p*float64(len(d))), len(d)-1)].Microseconds()) / 1000
	}
	secs := window.Seconds()
	var base, pinP99, rec []float64
	var slow []int
	for k := range per {
		phase := "recovery"
		switch {
		case k < w10Base:
			phase = "baseline"
		case k < w10Base+w10PinWindows:
			phase = "pin"
		}
		offered, got := float64(len(per[k].pickup))/secs, float64(completed[k])/secs
		p99 := pct(per[k].pickup, 0.99)
		fmt.Printf("w%02d %-8s offered %4.0f/s completed %4.0f/s  p50 %7.2f  p99 %7.2f  insert p99 %7.2f  queue p99 %7.2f ms  dead %d\n",
			k, phase, offered, got, pct(per[k].pickup, 0.5), p99, pct(per[k].insert, 0.99), pct(per[k].queue, 0.99), dead[k])
		switch phase {
		case "baseline":
			base = append(base, p99)
		case "pin":
			pinP99 = append(pinP99, p99)
		default:
			rec = append(rec, p99)
		}
		if k > 0 && got < w10RateShare*offered {
			slow = append(slow, k)
		}
	}
	baseP99 := median(base)
	over := 0
	for _, p := range pinP99 {
		if p > w10Factor*baseP99 {
			over++
		}
	}
	pinMax := slices.Max(pinP99)
	fmt.Printf("W10 River FetchCooldown=%v, windows of %v: baseline p99 %.2f ms; pin windows' p99 median %.2f, max %.2f ms (%.2f× the baseline), %d of %d over %g×; recovery median %.2f ms\n",
		cooldown, window, baseP99, median(pinP99), pinMax, pinMax/baseP99, over, len(pinP99), w10Factor, median(rec))
	fmt.Printf("windows under %.0f%% of offered: %v; jobs not run exactly once: %d; pin xid %d, %d dead tuples at release\n",
		100*w10RateShare, slow, wrong, pinXid, pinDead)
	verdict := "met"
	if over > 0 || len(slow) > 0 || wrong > 0 {
		verdict = "missed"
	}
	fmt.Println("verdict:", verdict)
	return nil
}

// median is the middle of xs (the mean of the two middle values for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
