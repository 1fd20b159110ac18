package bench

// G1: the HTTP worker gateway (package gateway) against the Go worker, at the same
// concurrency and in the same run. Throughput: W5's pre-inserted jobs worked by
// G1Workers in-process HTTP workers, each claiming one job at a time (a long poll)
// and completing it with its own request, over real loopback TCP; judged against
// W5 (the Go worker, W5Workers = G1Workers) of the same run. Pickup: jobs enqueued
// at a steady rate, timed from the enqueue call to the moment the worker holds the
// job — the decoded claim answer for an HTTP worker, the handler's start for a Go
// worker — both measured here, one after the other, at the same rate.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/gateway"
)

// G1Workers is G1's concurrency, W5's.
const G1Workers = W5Workers

// g1Rate and g1Seconds shape G1's pickup measurement (scaled by Env.Scale).
const (
	g1Rate    = 200
	g1Seconds = 5
)

// gatewayServer is a started gateway for schema, served on a loopback port.
type gatewayServer struct {
	gw     *gateway.Gateway
	url    string
	client *http.Client
	stop   func()
}

func startGateway(ctx context.Context, e *Env, schema string) (*gatewayServer, error) {
	pool, err := e.pool(ctx, 8)
	if err != nil {
		return nil, err
	}
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	if err != nil {
		pool.Close()
		return nil, err
	}
	g, err := gateway.New(c, gateway.Options{Unauthenticated: true})
	if err != nil {
		pool.Close()
		return nil, err
	}
	if err := g.Start(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = g.Stop(ctx)
		pool.Close()
		return nil, err
	}
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	tr := &http.Transport{MaxIdleConns: 4 * G1Workers, MaxIdleConnsPerHost: 4 * G1Workers, DisableCompression: true}
	return &gatewayServer{gw: g, url: "http://" + ln.Addr().String(), client: &http.Client{Transport: tr}, stop: func() {
		tr.CloseIdleConnections()
		_ = srv.Close()
		_ = g.Stop(context.WithoutCancel(ctx))
		c.Close()
		pool.Close()
	}}, nil
}

// post sends one JSON request and decodes a 200 answer into out.
func (s *gatewayServer) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, raw)
	}
	return json.Unmarshal(raw, out)
}

// g1Procs and g1Slots shape G1's HTTP workers: g1Procs workers (processes, as
// they would be deployed), each running up to g1Slots jobs at once, G1Workers in all,
// with up to g1Ahead more claimed ahead (gateway.DefaultMaxClaim: one claim request
// can fill it); each sends at most g1MaxComplete successes in one request.
const (
	g1Procs       = 10
	g1Slots       = G1Workers / g1Procs
	g1Ahead       = gateway.DefaultMaxClaim
	g1MaxComplete = 1000
)

// httpWorkers runs g1Procs HTTP workers on s until ctx ends, each the way a worker
// library in another language would, and the Go worker does: g1Slots runners work
// the jobs of a local buffer (work), and a claimer keeps that buffer filled with
// claims of up to g1Ahead jobs (the worker's prefetch: a runner that finishes finds
// its next job waiting), claiming once a quarter of the buffer is free (or it is
// empty), waiting up to a second for a job; each finished job goes to the worker's
// completer, which sends the successes that are ready in one POST /v1/complete (done
// is called for each once written), as the Go worker's completer writes the outcomes
// that are ready in one statement. A runner takes its next job once its work returns:
// the completion's answer (which only a lost lease would make a failure, with nothing
// left to undo) is not waited for.
func httpWorkers(ctx context.Context, s *gatewayServer, work func(gateway.ClaimedJob), done func()) (wait func() error) {
	var wg sync.WaitGroup
	errs := make(chan error, G1Workers+2*g1Procs)
	for range g1Procs {
		wg.Go(func() {
			finished := make(chan gateway.ClaimedJob, g1Slots+g1Ahead)
			var completer sync.WaitGroup
			completer.Go(func() { g1Complete(context.WithoutCancel(ctx), s, finished, done, errs) })
			defer completer.Wait()
			buffer := make(chan gateway.ClaimedJob, g1Ahead)
			took := make(chan struct{}, 1) // a runner took a job from the buffer
			var runners sync.WaitGroup
			for range g1Slots {
				runners.Go(func() {
					for j := range buffer {
						select {
						case took <- struct{}{}:
						default:
						}
						work(j)
						finished <- j
					}
				})
			}
			defer func() {
				close(buffer) // the runners work what is left, then end
				runners.Wait()
				close(finished)
			}()
			for ctx.Err() == nil {
				room := cap(buffer) - len(buffer)
				if room < cap(buffer)/4 {
					select {
					case <-took:
					case <-ctx.Done():
					}
					continue
				}
				var cr gateway.ClaimResponse
				if err := s.post(ctx, "/v1/claim", gateway.ClaimRequest{Queue: skiplock.DefaultQueue, Limit: room, WaitMS: 1000}, &cr); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				for _, j := range cr.Jobs {
					buffer <- j // room was free, and only this loop fills the buffer
				}
			}
		})
	}
	return func() error {
		wg.Wait()
		close(errs)
		var err error
		for e := range errs {
			err = errors.Join(err, e)
		}
		return err
	}
}

// g1Complete is one HTTP worker's completer: it sends the finished jobs that are
// ready (up to g1MaxComplete) in one POST /v1/complete, one request at a time, until
// finished is closed and drained.
func g1Complete(ctx context.Context, s *gatewayServer, finished <-chan gateway.ClaimedJob, done func(), errs chan<- error) {
	report := func(err error) { // the first ones are enough
		select {
		case errs <- err:
		default:
		}
	}
	batch := make([]gateway.JobCompletion, 0, g1MaxComplete)
	for j := range finished {
		batch = append(batch[:0], gateway.JobCompletion{ID: j.ID, LeaseToken: j.LeaseToken})
	fill:
		for len(batch) < g1MaxComplete {
			select {
			case j, ok := <-finished:
				if !ok {
					break fill
				}
				batch = append(batch, gateway.JobCompletion{ID: j.ID, LeaseToken: j.LeaseToken})
			default:
				break fill
			}
		}
		var res gateway.CompleteManyResponse
		if err := s.post(ctx, "/v1/complete", gateway.CompleteManyRequest{Jobs: batch}, &res); err != nil {
			report(err)
			continue
		}
		if len(res.Lost) > 0 {
			report(fmt.Errorf("%d completions answered lost (first: job %s)", len(res.Lost), res.Lost[0]))
		}
		if done != nil {
			for range res.Succeeded {
				done()
			}
		}
	}
}

func runG1(ctx context.Context, e *Env) (*Result, error) {
	n := e.n(50000)
	schema, err := e.schema(ctx, "bench_g1")
	if err != nil {
		return nil, err
	}
	if err := preinsert(ctx, e, schema, n); err != nil {
		return nil, err
	}
	s, err := startGateway(ctx, e, schema)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	tr := newTracker(n)
	var completed atomic.Int64
	wctx, cancel := context.WithCancel(ctx)
	stopProgress := e.progress("G1", n, completed.Load)
	start := time.Now()
	wait := httpWorkers(wctx, s, func(j gateway.ClaimedJob) { tr.count(j.Args) }, func() { completed.Add(1) })
	for completed.Load() < int64(n) && ctx.Err() == nil {
		<-time.After(time.Millisecond)
	}
	// Every completion is written: the waiting claims can go.
	cancel()
	if err := wait(); err != nil {
		stopProgress()
		return nil, fmt.Errorf("G1: %w", err)
	}
	elapsed := time.Since(start)
	stopProgress()
	verified, err := tr.verify(ctx, e.Pool, schema, n, false)
	if err != nil {
		return nil, fmt.Errorf("G1: %w", err)
	}
	r := &Result{Workload: "G1", N: n, Seconds: elapsed.Seconds(), JobsPerSec: float64(n) / elapsed.Seconds(),
		Settings: e.Settings, Verified: verified, Extra: map[string]any{
			"concurrency": fmt.Sprintf("%d HTTP workers of %d slots each (%d jobs running at once) and up to %d claimed ahead each, claimed once a quarter of those are free, the successes that are ready in one POST /v1/complete per worker at a time (W5: %d Go workers, prefetch up to 1,000)", g1Procs, g1Slots, G1Workers, g1Ahead, W5Workers),
		}}
	st := s.gw.Stats()
	r.Extra["batches"] = fmt.Sprintf("%d claim statements (avg %.1f jobs; %d given back unasked), %d finishing statements (avg %.1f)",
		st.ClaimStatements, float64(st.Claimed)/float64(max(st.ClaimStatements, 1)), st.GivenBack, st.FinishStatements, float64(st.Finished)/float64(max(st.FinishStatements, 1)))
	if e.w5 > 0 {
		r.Limit, r.Ratio = "W5", r.JobsPerSec/e.w5
		r.Extra["overhead_per_job_us"] = fmt.Sprintf("%.1f (1/G1 − 1/W5, per job at this concurrency)", 1e6*(1/r.JobsPerSec-1/e.w5))
	}
	r.judgeBy("≥ 0.3 × W5 (same run)", func(x *Result) bool { return x.Limit == "W5" && x.Ratio >= 0.3 })

	// Pickup: the gateway's, then the Go worker's, at the same rate.
	total := max(int(g1Rate*g1Seconds*min(max(e.Scale, 0.1), 1)), 50)
	gw, err := g1Pickup(ctx, e, "G1p", total, true)
	if err != nil {
		return nil, err
	}
	gw.fill(r)
	goLat, err := g1Pickup(ctx, e, "G1g", total, false)
	if err != nil {
		return nil, err
	}
	var goRes Result
	goLat.fill(&goRes)
	r.Extra["pickup"] = fmt.Sprintf("%d jobs at %d/s, enqueue call → worker holds the job; gateway p50/p95/p99 %.2f/%.2f/%.2f ms, Go worker %.2f/%.2f/%.2f ms",
		total, g1Rate, r.P50ms, r.P95ms, r.P99ms, goRes.P50ms, goRes.P95ms, goRes.P99ms)
	return r, nil
}

// g1Pickup enqueues total jobs at g1Rate to workers waiting on a fresh schema —
// G1Workers HTTP workers through a gateway (viaGateway), else a Go client with
// G1Workers workers — and returns each job's time from the enqueue call to its
// worker holding it.
func g1Pickup(ctx context.Context, e *Env, name string, total int, viaGateway bool) (*latencies, error) {
	schema, err := e.schema(ctx, "bench_"+name)
	if err != nil {
		return nil, err
	}
	begun := make([]atomic.Int64, total) // unix nanoseconds of each enqueue call, stored before the call
	lat := &latencies{}
	var held atomic.Int64
	allHeld := make(chan struct{})
	hold := func(payload []byte) {
		i, ok := noopIndex(payload)
		if !ok || i < 0 || i >= total {
			return
		}
		lat.add(time.Duration(time.Now().UnixNano() - begun[i].Load()))
		if held.Add(1) == int64(total) {
			close(allHeld)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wait func() error
	if viaGateway {
		s, err := startGateway(ctx, e, schema)
		if err != nil {
			return nil, err
		}
		defer s.stop()
		wait = httpWorkers(wctx, s, func(j gateway.ClaimedJob) { hold(j.Args) }, nil)
	} else {
		pool, err := e.pool(ctx, 8)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		ws := skiplock.NewWorkers()
		if err := ws.AddHandler("noop", func(_ context.Context, j *skiplock.Job) error { hold(j.Payload); return nil }, nil); err != nil {
			return nil, err
		}
		c, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Workers: ws,
			Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: G1Workers}}})
		if err != nil {
			return nil, err
		}
		if err := c.Start(ctx); err != nil {
			return nil, err
		}
		defer c.Stop(context.WithoutCancel(ctx))
		if err := waitWarmed(ctx, name, c, 8); err != nil {
			return nil, err
		}
	}
	appPool, err := e.pool(ctx, 16)
	if err != nil {
		return nil, err
	}
	defer appPool.Close()
	app, err := skiplock.NewClient(appPool, skiplock.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	defer app.Close()
	// Every worker waits before the first job: the HTTP workers' first claims have
	// run, the Go worker's warmer has prepared its statements.
	<-time.After(500 * time.Millisecond)

	tick := time.NewTicker(time.Second / g1Rate)
	var wg sync.WaitGroup
	var enqueueErr atomic.Pointer[error]
	for i := range total {
		<-tick.C
		wg.Go(func() {
			begun[i].Store(time.Now().UnixNano())
			if _, err := app.Enqueue(ctx, noop{I: i}, nil); err != nil {
				enqueueErr.CompareAndSwap(nil, &err)
			}
		})
	}
	tick.Stop()
	wg.Wait()
	if p := enqueueErr.Load(); p != nil {
		return nil, fmt.Errorf("%s: enqueueing: %w", name, *p)
	}
	select {
	case <-allHeld:
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("%s: %d of %d jobs picked up", name, held.Load(), total)
	}
	cancel()
	if wait != nil {
		if err := wait(); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return lat, nil
}
