package skiplock

import (
	"context"
	"fmt"

	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/store"
)

// CompleteTx marks a running job succeeded inside tx — the handler's own transaction
// — conditional on the job's lease token, so the handler's business writes, any
// outbox events it writes in tx and the job's completion commit together or not at
// all. That turns at-least-once execution into exactly-once effects for work whose
// effects are writes to this database.
//
// If the lease was lost (the lease expired and the job was reclaimed, or an operator
// cancelled it), CompleteTx returns an error matching ErrLeaseLost and leaves tx
// aborted in the database: its commit fails, so nothing the stale worker wrote in it
// survives, even if the caller ignores the error. After tx commits, the runtime does
// not write the job's outcome again (the handler should return nil). If tx rolls
// back instead, the job is still running under its lease and whatever the handler
// returns is written as usual.
//
// tx must be a transaction on the client's database (a pgx.Tx, or FromSQL of a
// *sql.Tx); job is the handler's job. See docs/guarantees.md for the exact conditions.
func (c *Client) CompleteTx(ctx context.Context, tx DB, job *Job) error {
	if err := checkDB(ctx, tx); err != nil {
		return err
	}
	if job == nil {
		return invalid("job", "must not be nil")
	}
	if job.LeaseToken == "" {
		return invalid("job", "job %s is not held under a lease (CompleteTx takes the handler's running job)", job.ID)
	}
	res, err := c.writeOutcomes(ctx, tx, []store.Outcome{{Lease: job.lease(), Action: store.ActionComplete, Output: job.output}})
	if err != nil {
		return fmt.Errorf("completing job %s in the caller's transaction: %w", job.ID, wrapPgError(err))
	}
	if _, ok := res[job.lease()]; !ok {
		// Abort tx in the database, so it cannot commit what the stale worker wrote.
		abort := c.store.AbortLeaseLost(ctx, tx, job.ID)
		if abort != nil && pgerr.Code(abort) != store.SQLStateLeaseLost {
			return fmt.Errorf("completing job %s in the caller's transaction: %w (and aborting it failed: %v)", job.ID, ErrLeaseLost, abort)
		}
		return fmt.Errorf("completing job %s in the caller's transaction: %w; the transaction is aborted", job.ID, ErrLeaseLost)
	}
	job.completedInTx = true
	return nil
}
