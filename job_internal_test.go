package skiplock

import (
	"reflect"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

// fromRow is the one mapping of a jobs row (skiplocktest reads jobs through it too):
// every column the store reads reaches the Job, and every field of the Job comes
// from a column, but for the few listed with their reasons. A column added to
// store.Job that fromRow ignores fails here, before anyone's Job lacks it.
func TestFromRowMapsEveryColumn(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	full := store.Job{
		ID:               "01a2408a-7bd9-7974-bf3f-c7edf1d4da64",
		Queue:            "mail",
		Kind:             "email",
		Payload:          []byte(`{"to":"ana"}`),
		Status:           store.StatusSucceeded,
		Priority:         5,
		RunAt:            at,
		Attempts:         2,
		MaxAttempts:      3,
		LeaseUntil:       new(at.Add(time.Minute)),
		LeaseToken:       new("token"),
		WorkerID:         new("worker"),
		DeduplicationKey: new("welcome-ana"),
		LastError:        new("smtp said no"),
		Metadata:         []byte(`{"tenant":"acme"}`),
		Tags:             []string{"welcome"},
		Output:           []byte(`{"message_id":"m-1"}`),
		History:          []byte(`[{"attempt":1,"started_at":"2030-01-01T11:00:00Z","finished_at":"2030-01-01T11:00:01Z","outcome":"retried"}]`),
		TxID:             new(int64(740)),
		AttemptedAt:      new(at.Add(time.Second)),
		ConcurrencyKey:   "acme",
		CreatedAt:        at.Add(-time.Hour),
		UpdatedAt:        at.Add(2 * time.Second),
		Unblocks:         true,
		SlotOf:           new("01a2408a-0000-7000-8000-000000000000"),
		SlotToken:        new("slot"),
		Rated:            true,
		Started:          true,
	}
	// Columns that are not the Job's to carry.
	notMapped := map[string]string{
		"Unblocks":  "a claim's own result, read by the engine from the row",
		"SlotOf":    "a successor's predecessor (a limit slot's handoff), read by the engine from the row",
		"SlotToken": "the predecessor's lease, read by the engine with SlotOf",
		"Rated":     "a rate limit counted the claim as a start, read by the engine from the row",
		"Started":   "read into Job.State (StateClaimed when false on a running job)",
	}
	// Fields of the Job that no column fills.
	notFromRow := map[string]string{
		"completedInTx": "set by CompleteTx during the run",
		"output":        "set by SetOutput during the run",
		"client":        "set by the client that claimed the job (Client.claimed)",
		"keyUnknown":    "set by Manual.Handle, whose job is built from an id and a token",
	}

	job := fromRow(&full)
	jv := reflect.ValueOf(job).Elem()
	for i := range jv.NumField() {
		name := jv.Type().Field(i).Name
		if _, skip := notFromRow[name]; !skip && jv.Field(i).IsZero() {
			t.Errorf("fromRow of a row with every column set leaves Job.%s zero: map it from its column", name)
		}
	}
	rv := reflect.ValueOf(full)
	for i := range rv.NumField() {
		name := rv.Type().Field(i).Name
		if rv.Field(i).IsZero() {
			t.Errorf("the test's row leaves store.Job.%s zero: set it", name)
			continue
		}
		without := full
		reflect.ValueOf(&without).Elem().Field(i).SetZero()
		_, skip := notMapped[name]
		if changed := !reflect.DeepEqual(fromRow(&without), job); changed == skip {
			if skip {
				t.Errorf("fromRow now reads store.Job.%s: take it off notMapped", name)
			} else {
				t.Errorf("fromRow ignores store.Job.%s: map it to the Job (job.go), or list it in notMapped with the reason", name)
			}
		}
	}
}
