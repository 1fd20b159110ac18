// Package conformance is skiplock's language-neutral conformance suite: scenarios as
// data (scenarios.json) that every way of working jobs — the Go worker, the SQL
// worker protocol from the Python and Node clients, the HTTP gateway — must pass, each
// checked against the same expected rows (docs/conformance.md).
//
// A runner is a worker process that works jobs of kind "conformance" from one queue,
// one at a time, doing what each job's Args say. It speaks JSON lines:
//
//   - it writes {"event":"started","id":"<job id>","attempt":N} to stdout when its
//     handler starts a job (other stdout lines are logged, not read);
//   - it reads {"release":"<job id>"} lines from stdin: a handler whose job's attempt is
//     at most Args.BlockAttempts waits for its release before acting;
//   - SIGTERM stops it gracefully (exit 0); the suite SIGKILLs it in a scenario.
//
// Its environment names the database (SKIPLOCK_CONFORMANCE_DSN), the schema
// (SKIPLOCK_CONFORMANCE_SCHEMA) and the queue (SKIPLOCK_CONFORMANCE_QUEUE); a gateway
// runner gets SKIPLOCK_CONFORMANCE_GATEWAY_URL and SKIPLOCK_CONFORMANCE_GATEWAY_TOKEN.
// Business writes (Args.Action "complete_tx") go to the schema's table
// conformance_effects (job_id uuid, attempt int), which the suite creates.
package conformance

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

//go:embed scenarios.json
var scenariosJSON []byte

// Kind is the job kind every scenario enqueues and every runner handles.
const Kind = "conformance"

// EffectsTable is the table a runner's complete_tx writes its business row to.
const EffectsTable = "conformance_effects"

// Environment variables a runner reads.
const (
	EnvDSN          = "SKIPLOCK_CONFORMANCE_DSN"
	EnvSchema       = "SKIPLOCK_CONFORMANCE_SCHEMA"
	EnvQueue        = "SKIPLOCK_CONFORMANCE_QUEUE"
	EnvGatewayURL   = "SKIPLOCK_CONFORMANCE_GATEWAY_URL"
	EnvGatewayToken = "SKIPLOCK_CONFORMANCE_GATEWAY_TOKEN"
)

// Capabilities a scenario may need (Scenario.Needs) and a runner may lack.
const (
	// NeedTransaction: the runner completes a job in the transaction of its handler's
	// business write (Go's CompleteTx, complete_job in the caller's transaction).
	NeedTransaction = "transaction"
)

// Args are a conformance job's arguments: what its handler does.
type Args struct {
	// Action is complete, fail (retry per the job's policy), permanent, snooze, cancel,
	// or complete_tx (insert into EffectsTable and complete in one transaction).
	Action string `json:"action"`
	// Output is complete's and complete_tx's output.
	Output json.RawMessage `json:"output,omitempty"`
	// Error is fail's, permanent's and cancel's text.
	Error string `json:"error,omitempty"`
	// DelayMS is snooze's delay.
	DelayMS int64 `json:"delay_ms,omitempty"`
	// BlockAttempts: attempts up to this one wait for their release before acting.
	BlockAttempts int `json:"block_attempts,omitempty"`
	// SucceedFromAttempt: from this attempt on, the action is complete.
	SucceedFromAttempt int `json:"succeed_from_attempt,omitempty"`
}

// ActionFor is what the handler does on attempt: Action, or complete from
// SucceedFromAttempt on.
func (a Args) ActionFor(attempt int) string {
	if a.SucceedFromAttempt > 0 && attempt >= a.SucceedFromAttempt {
		return "complete"
	}
	return a.Action
}

// Suite is scenarios.json.
type Suite struct {
	Comment   string     `json:"comment"`
	Scenarios []Scenario `json:"scenarios"`
}

// Scenario is one behaviour every runner must show.
type Scenario struct {
	Name  string   `json:"name"`
	About string   `json:"about"`
	Needs []string `json:"needs,omitempty"`
	Steps []Step   `json:"steps"`
	// Expect are the rows the scenario must leave, checked once its steps are done.
	Expect []Expect `json:"expect"`
}

// Step is one thing the suite does. Do is one of:
//
//	start            start a runner process
//	enqueue          enqueue Job (a name local to the scenario) with Args and MaxAttempts
//	wait_started     wait for the runner's started event of Job's Attempt
//	release          let Job's blocked handler act
//	expire           end Job's lease and reclaim it (reclaim_jobs) to run again after Delay
//	operator_cancel  cancel Job as an operator would (Client.JobCancel) with Reason
//	kill             SIGKILL the runner process
//	settle           enqueue a plain job and wait for it to succeed, then for the
//	                 scenario's jobs to leave running: a one-at-a-time runner that
//	                 writes its outcomes in concurrent batches may record the settling
//	                 job's before an earlier one's
type Step struct {
	Do          string          `json:"do"`
	Job         string          `json:"job,omitempty"`
	Args        json.RawMessage `json:"args,omitempty"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	Attempt     int             `json:"attempt,omitempty"`
	Delay       string          `json:"delay,omitempty"`
	Reason      string          `json:"reason,omitempty"`
}

// Expect is the row a scenario's job must be left as; an absent field is not checked.
type Expect struct {
	Job      string `json:"job"`
	Status   string `json:"status"`
	Attempts *int   `json:"attempts,omitempty"`
	// Output and LastError: JSON null means the column is NULL.
	Output          json.RawMessage `json:"output,omitempty"`
	LastError       json.RawMessage `json:"last_error,omitempty"`
	LastErrorPrefix string          `json:"last_error_prefix,omitempty"`
	// History lists attempt_history's outcomes in order.
	History *[]string `json:"history,omitempty"`
	// Effects counts the job's rows in EffectsTable.
	Effects *int `json:"effects,omitempty"`
	// RetryDelayMS bounds run_at minus the first history entry's finished_at.
	RetryDelayMS *[2]int64 `json:"retry_delay_ms,omitempty"`
	// RunAtInMS bounds run_at minus the time of the check.
	RunAtInMS *[2]int64 `json:"run_at_in_ms,omitempty"`
}

// Row is what the suite reads of a job to check it.
type Row struct {
	Status    string
	Attempts  int
	Output    json.RawMessage // nil: NULL
	LastError *string
	History   []HistoryEntry
	RunAt     time.Time
	Now       time.Time
	Effects   int
}

// HistoryEntry is one attempt_history element.
type HistoryEntry struct {
	Attempt    int       `json:"attempt"`
	Outcome    string    `json:"outcome"`
	Error      string    `json:"error"`
	FinishedAt time.Time `json:"finished_at"`
}

// Load returns the suite, checked: known steps, a job named before it is used, every
// expectation about a job the scenario enqueued.
func Load() (*Suite, error) {
	var s Suite
	dec := json.NewDecoder(strings.NewReader(string(scenariosJSON)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("conformance: scenarios.json: %w", err)
	}
	seen := map[string]bool{}
	for _, sc := range s.Scenarios {
		if sc.Name == "" || seen[sc.Name] {
			return nil, fmt.Errorf("conformance: scenario %q: a missing or repeated name", sc.Name)
		}
		seen[sc.Name] = true
		jobs := map[string]bool{}
		for i, st := range sc.Steps {
			bad := func(format string, a ...any) error {
				return fmt.Errorf("conformance: scenario %s, step %d (%s): %s", sc.Name, i, st.Do, fmt.Sprintf(format, a...))
			}
			switch st.Do {
			case "start", "kill", "settle":
			case "enqueue":
				var a Args
				if err := json.Unmarshal(st.Args, &a); err != nil || a.Action == "" {
					return nil, bad("args must name an action (%v)", err)
				}
				jobs[st.Job] = true
			case "wait_started", "release", "expire", "operator_cancel":
				if !jobs[st.Job] {
					return nil, bad("job %q is not enqueued before", st.Job)
				}
			default:
				return nil, bad("unknown step")
			}
		}
		for _, e := range sc.Expect {
			if !jobs[e.Job] {
				return nil, fmt.Errorf("conformance: scenario %s expects job %q, which it does not enqueue", sc.Name, e.Job)
			}
		}
	}
	return &s, nil
}

// Check lists how r differs from e (nothing: it conforms).
func (e Expect) Check(r Row) []string {
	var diffs []string
	bad := func(format string, a ...any) { diffs = append(diffs, fmt.Sprintf(format, a...)) }
	if e.Status != "" && r.Status != e.Status {
		bad("status %s, want %s", r.Status, e.Status)
	}
	if e.Attempts != nil && r.Attempts != *e.Attempts {
		bad("attempts %d, want %d", r.Attempts, *e.Attempts)
	}
	if len(e.Output) > 0 && !jsonEqual(r.Output, e.Output) {
		bad("output %s, want %s", orNull(r.Output), e.Output)
	}
	if len(e.LastError) > 0 {
		var want *string
		if err := json.Unmarshal(e.LastError, &want); err != nil {
			bad("last_error in scenarios.json: %v", err)
		} else if (want == nil) != (r.LastError == nil) || (want != nil && *want != *r.LastError) {
			bad("last_error %s, want %s", quote(r.LastError), e.LastError)
		}
	}
	if e.LastErrorPrefix != "" && (r.LastError == nil || !strings.HasPrefix(*r.LastError, e.LastErrorPrefix)) {
		bad("last_error %s, want it to start with %q", quote(r.LastError), e.LastErrorPrefix)
	}
	if e.History != nil {
		got := make([]string, 0, len(r.History))
		for _, h := range r.History {
			got = append(got, h.Outcome)
		}
		if !reflect.DeepEqual(got, *e.History) {
			bad("history outcomes %v, want %v", got, *e.History)
		}
	}
	if e.Effects != nil && r.Effects != *e.Effects {
		bad("%d business rows, want %d", r.Effects, *e.Effects)
	}
	if b := e.RetryDelayMS; b != nil {
		if len(r.History) == 0 {
			bad("no history entry to measure the retry delay from")
		} else if d := r.RunAt.Sub(r.History[0].FinishedAt).Milliseconds(); d < b[0] || d > b[1] {
			bad("retried %d ms after the failure, want %d..%d", d, b[0], b[1])
		}
	}
	if b := e.RunAtInMS; b != nil {
		if d := r.RunAt.Sub(r.Now).Milliseconds(); d < b[0] || d > b[1] {
			bad("run_at in %d ms, want %d..%d", d, b[0], b[1])
		}
	}
	return diffs
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if len(a) == 0 {
		a = json.RawMessage("null")
	}
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func orNull(m json.RawMessage) string {
	if len(m) == 0 {
		return "null"
	}
	return string(m)
}

func quote(s *string) string {
	if s == nil {
		return "null"
	}
	return fmt.Sprintf("%q", *s)
}
