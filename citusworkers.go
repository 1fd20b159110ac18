package skiplock

import (
	"context"
	"fmt"

	"github.com/skiplock/skiplock/internal/store"
)

// notOnCitus is the refusal of feature on the Citus layout: ErrNotOnCitus wrapped
// with the feature's name and why it cannot hold its guarantee there.
func (c *Client) notOnCitus(feature, why string) error {
	return fmt.Errorf("%w: %s (schema %q is distributed by Citus: %s; docs/citus.md)", ErrNotOnCitus, feature, c.cfg.Schema, why)
}

// refuseOnCitus returns notOnCitus(feature, why) when the client's schema has the
// Citus layout, nil otherwise; doing is what the caller was doing, for the error of
// the layout's lookup (one catalog query per Store, then remembered).
func (c *Client) refuseOnCitus(ctx context.Context, doing, feature, why string) error {
	switch dist, err := c.store.Distributed(ctx, c.pool); {
	case err != nil:
		return fmt.Errorf("%s: %w", doing, wrapPgError(err))
	case dist:
		return c.notOnCitus(feature, why)
	}
	return nil
}

// citusRefusals returns ErrNotOnCitus, naming the feature, for what a started client
// on the Citus layout cannot do with its guarantee (docs/citus.md, "What works on
// Citus"): each statement of a worker there names one concurrency key, and these
// count or order across keys. The scheduler and the retention service run there
// (their deletes name one key each: internal/store/citusretention.go).
func (c *Client) citusRefusals(ctx context.Context) error {
	refuse := c.notOnCitus
	if len(c.cfg.Limits) > 0 {
		return refuse("Config.Limits", "a limit counts running jobs across keys")
	}
	queues, anyKind, err := c.store.LimitScopes(ctx, c.pool)
	if err != nil {
		return fmt.Errorf("skiplock: reading limits: %w", wrapPgError(err))
	}
	if len(queues) > 0 || anyKind {
		return c.citusLimitRefusal()
	}
	fair, err := c.store.FairQueues(ctx, c.pool)
	if err != nil {
		return fmt.Errorf("skiplock: reading fair queues: %w", wrapPgError(err))
	}
	for _, q := range fair {
		if _, worked := c.cfg.Queues[q.Name]; !worked {
			continue
		}
		if err := c.citusFairRefusal(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// citusFairRefusal returns ErrNotOnCitus when the fair queue q has what the claims
// over keys cannot honour: a bypass priority or key weights.
func (c *Client) citusFairRefusal(ctx context.Context, q store.FairQueue) error {
	if q.BypassPriority != nil {
		return c.notOnCitus(fmt.Sprintf("the fair queue %q's bypass priority", q.Name), "the claims rotate over keys on their own and have no express lane")
	}
	name := q.Name
	ws, err := c.store.FairWeights(ctx, c.pool, &name)
	if err != nil {
		return fmt.Errorf("skiplock: reading fair weights: %w", wrapPgError(err))
	}
	if len(ws) > 0 {
		return c.notOnCitus(fmt.Sprintf("the fair queue %q's key weights", q.Name), "the claims share each claim equally among keys")
	}
	return nil
}

// citusLimitRefusal is the refusal of limits on the Citus layout.
func (c *Client) citusLimitRefusal() error {
	return c.notOnCitus("limits (skiplock limits set)", "a limit counts running jobs across keys; remove the schema's limits (skiplock limits delete)")
}
