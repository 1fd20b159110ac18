package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/cmd/skiplock/internal/bench"
	"github.com/skiplock/skiplock/internal/pgcluster"
)

// The demo's Python worker: beside the Go email workers, a process on the Python
// client (clients/python, the SQL worker protocol) renders each order's receipt, from
// a queue of its own. The shop enqueues the receipt job in the order's transaction
// only while the worker runs; without Python and psycopg the demo says so in one line
// and runs without it.

// demoReceipt is the Python worker's job: render an order's receipt.
type demoReceipt struct {
	OrderID int64 `json:"order_id"`
}

func (demoReceipt) Kind() string { return "render_receipt" }

// demoReceiptQueue is the queue only the Python worker serves.
const demoReceiptQueue = "receipts"

// demoPyScript is the Python worker: 2–10 ms of rendering, and one render in twenty
// fails with a retry after 0.2 s (Retry), so the live figures show Python's retries as
// the Go workers' show theirs. It prints "ready" once its worker is built and stops
// gracefully on SIGTERM.
const demoPyScript = `
import logging, os, random, time
from skiplock import Job, Retry, Worker

def render_receipt(job: Job) -> dict:
    time.sleep(random.uniform(0.002, 0.010))  # rendering the PDF
    if random.random() < 0.05:
        raise Retry("pdf renderer busy", delay=0.2)
    return {"order_id": job.args["order_id"], "pages": 1}

logging.basicConfig(level=logging.WARNING, format="demo: python worker: %(message)s")
w = Worker(os.environ["DEMO_DSN"], {"render_receipt": render_receipt}, queue="receipts",
           schema=os.environ["DEMO_SCHEMA"], name="demo-python", concurrency=8, poll_interval=0.5,
           shutdown_timeout=5, reclaim=False)  # the Go client in this process reclaims
print("ready", flush=True)
w.run()
`

// demoPython is the running Python worker process.
type demoPython struct {
	cmd    *exec.Cmd
	exited chan error
}

// startDemoPython starts the Python worker on schema, or returns why it cannot (a
// missing interpreter, psycopg or client, or a worker that did not start).
func startDemoPython(ctx context.Context, dsn, schema string) (*demoPython, error) {
	python, dir, err := bench.PythonClient("the demo's Python worker")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(python, "-c", demoPyScript)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1", "DEMO_DSN="+dsn, "DEMO_SCHEMA="+schema)
	cmd.Stderr = os.Stderr
	pgcluster.DieWithParent(cmd, syscall.SIGKILL) // never outlives the demo
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", python, err)
	}
	p := &demoPython{cmd: cmd, exited: make(chan error, 1)}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		said := false
		for sc.Scan() {
			if !said && sc.Text() == "ready" {
				said = true
				ready <- true
			}
		}
		if !said {
			ready <- false
		}
		p.exited <- cmd.Wait()
	}()
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case ok := <-ready:
		if ok {
			return p, nil
		}
		return nil, fmt.Errorf("the Python worker exited before it was ready: %v", <-p.exited)
	case <-t.C:
		p.kill()
		return nil, errors.New("the Python worker was not ready within 30s")
	case <-ctx.Done():
		p.kill()
		return nil, ctx.Err()
	}
}

func (p *demoPython) kill() {
	p.cmd.Process.Kill()
	<-p.exited
}

// stop asks the worker to stop (SIGTERM: it finishes its running renders and records
// them) and kills it after grace.
func (p *demoPython) stop(grace time.Duration) {
	p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		p.kill()
	}
}

// demoPyFigures reads the receipts queue's figures: jobs succeeded, waiting (pending)
// and retries (failed attempts recorded in attempt_history).
func demoPyFigures(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema string) (done, waiting, retried int64, err error) {
	err = db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'pending'),
  coalesce(sum(jsonb_array_length(attempt_history)) FILTER (WHERE attempt_history IS NOT NULL), 0)
FROM `+pgx.Identifier{schema, "jobs"}.Sanitize()+` WHERE queue = $1`, demoReceiptQueue).Scan(&done, &waiting, &retried)
	return done, waiting, retried, err
}

// enqueueReceipt adds the order's receipt job to tx, on the Python worker's queue.
func enqueueReceipt(ctx context.Context, client *skiplock.Client, tx pgx.Tx, orderID int64) error {
	_, err := client.EnqueueTx(ctx, tx, demoReceipt{OrderID: orderID},
		&skiplock.EnqueueOpts{Queue: demoReceiptQueue, DeduplicationKey: fmt.Sprintf("receipt-%d", orderID)})
	return err
}

// firstLine is err's first line (a Python traceback or psycopg's error can be long).
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
