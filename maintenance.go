package skiplock

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/hostclock"
)

// maintenanceService is a periodic task that one client at a time runs: each run is
// one transaction that first takes a transaction-level advisory lock named after the
// service and the schema, and skips the run when another client holds it.
type maintenanceService struct {
	name     string
	interval time.Duration
	run      func(ctx context.Context, tx pgx.Tx) (attrs []any, err error)
}

func (c *Client) maintenanceServices() []maintenanceService {
	var out []maintenanceService
	if c.cfg.ReclaimInterval > 0 {
		out = append(out, maintenanceService{name: "reclaimer", interval: c.cfg.ReclaimInterval,
			run: func(ctx context.Context, tx pgx.Tx) ([]any, error) {
				res, err := c.reclaim(ctx, tx)
				return []any{"requeued", res.Requeued, "failed", res.Failed}, err
			}})
	}
	return append(out, c.retentionServices()...)
}

func (c *Client) runService(ctx context.Context, svc maintenanceService) (ran bool, attrs []any, err error) {
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if ran, err = c.store.TryServiceLock(ctx, tx, svc.name); err != nil || !ran {
			return err
		}
		attrs, err = svc.run(ctx, tx)
		return err
	})
	return ran, attrs, err
}

func (r *runtime) maintain(svc maintenanceService) {
	defer r.bgWG.Done()
	c := r.c
	for hostclock.Sleep(r.bgCtx, hostclock.Jitter(svc.interval)) {
		ran, attrs, err := c.runService(r.bgCtx, svc)
		switch {
		case err != nil && r.bgCtx.Err() == nil:
			c.failures.warn("maintenance:"+svc.name, err)
		case err == nil:
			c.failures.ok("maintenance:" + svc.name)
			if ran {
				c.log.Debug("skiplock: maintenance run", append([]any{"service", svc.name}, attrs...)...)
			}
		}
	}
}
