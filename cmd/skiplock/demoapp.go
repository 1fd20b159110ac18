package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
)

type demoEmail struct {
	OrderID int `json:"order_id"`
}

func (demoEmail) Kind() string { return "send_email" }

func demoApp(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if _, err := skiplock.Migrate(ctx, pool, schema); err != nil {
		return err
	}
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	if err != nil {
		return err
	}
	defer client.Close()
	params := make([]skiplock.EnqueueParams, 500)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Args: demoEmail{OrderID: i}}
	}
	if _, err := client.EnqueueManyTx(ctx, pool, params); err != nil {
		return err
	}
	start := time.Now()
	done := 0
	for ctx.Err() == nil {
		jobs, err := client.Claim(ctx, skiplock.DefaultQueue, 50)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				break
			}
			return err
		}
		if len(jobs) == 0 {
			break
		}
		for _, j := range jobs {
			if err := client.Complete(ctx, j); err != nil {
				return err
			}
			done++
		}
		fmt.Printf("processed %d jobs (%.0f/s)\n", done, float64(done)/time.Since(start).Seconds())
	}
	return nil
}
