package conformance_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/gateway"
	"github.com/skiplock/skiplock/internal/conformance"
)

// The Go runners: this test binary started with SKIPLOCK_CONFORMANCE_RUNNER=go (the
// Go worker: a started Client) or =gateway (an HTTP worker of the gateway the suite
// serves), speaking the runner protocol of package conformance.

// releases hands each blocked handler its release line from stdin.
type releases struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

func (r *releases) of(id string) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.ch[id]
	if !ok {
		c = make(chan struct{})
		r.ch[id] = c
	}
	return c
}

func (r *releases) read(in io.Reader) {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var m struct {
			Release string `json:"release"`
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Release != "" {
			close(r.of(m.Release))
		}
	}
}

var stdoutMu sync.Mutex

func started(id string, attempt int) {
	line, _ := json.Marshal(map[string]any{"event": "started", "id": id, "attempt": attempt})
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	os.Stdout.Write(append(line, '\n'))
}

func runnerMain(kind string) int {
	rel := &releases{ch: map[string]chan struct{}{}}
	go rel.read(os.Stdin)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	switch kind {
	case "go":
		err = goRunner(ctx, rel)
	case "gateway":
		err = gatewayRunner(ctx, rel)
	default:
		err = fmt.Errorf("unknown runner %q", kind)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "runner:", err)
		return 1
	}
	return 0
}

func goRunner(ctx context.Context, rel *releases) error {
	pool, err := pgxpool.New(context.Background(), os.Getenv(conformance.EnvDSN))
	if err != nil {
		return err
	}
	defer pool.Close()
	schema, queue := os.Getenv(conformance.EnvSchema), os.Getenv(conformance.EnvQueue)
	var client *skiplock.Client
	ws := skiplock.NewWorkers()
	err = ws.AddHandler(conformance.Kind, func(jctx context.Context, job *skiplock.Job) error {
		var a conformance.Args
		if err := json.Unmarshal(job.Payload, &a); err != nil {
			return skiplock.Permanent(err)
		}
		started(job.ID, job.Attempt)
		if job.Attempt <= a.BlockAttempts {
			<-rel.of(job.ID)
		}
		switch a.ActionFor(job.Attempt) {
		case "complete":
			if len(a.Output) > 0 {
				return job.SetOutput(a.Output)
			}
			return nil
		case "fail":
			return errors.New(a.Error)
		case "permanent":
			return skiplock.Permanent(errors.New(a.Error))
		case "snooze":
			return skiplock.Snooze(time.Duration(a.DelayMS) * time.Millisecond)
		case "cancel":
			return skiplock.Cancel(errors.New(a.Error))
		case "complete_tx":
			if err := job.SetOutput(a.Output); err != nil {
				return err
			}
			return pgx.BeginFunc(context.WithoutCancel(jctx), pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(jctx, `INSERT INTO "`+schema+`".`+conformance.EffectsTable+` VALUES ($1, $2)`, job.ID, job.Attempt); err != nil {
					return err
				}
				return client.CompleteTx(jctx, tx, job)
			})
		}
		return skiplock.Permanent(fmt.Errorf("unknown action %q", a.Action))
	}, nil)
	if err != nil {
		return err
	}
	client, err = skiplock.NewClient(pool, skiplock.Config{Schema: schema, Workers: ws,
		Queues: map[string]skiplock.QueueConfig{queue: {MaxWorkers: 1}}, PollInterval: 50 * time.Millisecond})
	if err != nil {
		return err
	}
	defer client.Close()
	if err := client.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return client.Stop(stopCtx)
}

// gatewayRunner is an HTTP worker: claim (long poll), heartbeat while the handler
// runs, and one finishing call; a 409 lease_lost is the fenced answer, not an error.
func gatewayRunner(ctx context.Context, rel *releases) error {
	base, token, queue := os.Getenv(conformance.EnvGatewayURL), os.Getenv(conformance.EnvGatewayToken), os.Getenv(conformance.EnvQueue)
	call := func(ctx context.Context, path string, body, into any) (int, error) {
		b, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(b))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer res.Body.Close()
		data, err := io.ReadAll(res.Body)
		if err != nil {
			return res.StatusCode, err
		}
		if res.StatusCode/100 != 2 && res.StatusCode != http.StatusConflict {
			return res.StatusCode, fmt.Errorf("POST %s: %s: %s", path, res.Status, data)
		}
		if into != nil && res.StatusCode/100 == 2 {
			return res.StatusCode, json.Unmarshal(data, into)
		}
		return res.StatusCode, nil
	}
	for ctx.Err() == nil {
		var claimed gateway.ClaimResponse
		if _, err := call(ctx, "/v1/claim", gateway.ClaimRequest{Queue: queue, Limit: 1, WaitMS: 1000}, &claimed); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, j := range claimed.Jobs {
			if err := gatewayJob(j, time.Duration(claimed.HeartbeatMS)*time.Millisecond, rel, call); err != nil {
				return err
			}
		}
	}
	return nil
}

func gatewayJob(j gateway.ClaimedJob, every time.Duration, rel *releases, call func(context.Context, string, any, any) (int, error)) error {
	ctx := context.Background()
	var a conformance.Args
	if err := json.Unmarshal(j.Args, &a); err != nil {
		return err
	}
	started(j.ID, j.Attempt)
	beat, stopBeat := context.WithCancel(ctx)
	defer stopBeat()
	go func() {
		for {
			select {
			case <-beat.Done():
				return
			case <-time.After(every):
				_, _ = call(beat, "/v1/jobs/"+j.ID+"/heartbeat", gateway.LeaseRequest{LeaseToken: j.LeaseToken}, nil)
			}
		}
	}()
	if j.Attempt <= a.BlockAttempts {
		<-rel.of(j.ID)
	}
	stopBeat()
	path, body := "/v1/jobs/"+j.ID+"/", any(nil)
	switch a.ActionFor(j.Attempt) {
	case "complete":
		path, body = path+"complete", gateway.CompleteRequest{LeaseToken: j.LeaseToken, Output: a.Output}
	case "fail":
		path, body = path+"fail", gateway.FailRequest{LeaseToken: j.LeaseToken, Error: a.Error}
	case "permanent":
		path, body = path+"fail", gateway.FailRequest{LeaseToken: j.LeaseToken, Error: a.Error, Permanent: true}
	case "snooze":
		path, body = path+"snooze", gateway.SnoozeRequest{LeaseToken: j.LeaseToken, DelayMS: a.DelayMS}
	case "cancel":
		path, body = path+"cancel", gateway.CancelRequest{LeaseToken: j.LeaseToken, Reason: a.Error}
	default:
		path, body = path+"fail", gateway.FailRequest{LeaseToken: j.LeaseToken, Error: "the gateway runner cannot " + a.Action, Permanent: true}
	}
	_, err := call(ctx, path, body, nil)
	return err
}
