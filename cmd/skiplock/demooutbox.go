package main

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// demoOutbox is the demo's outbox side (filled in with the outbox relay).
type demoOutbox struct{}

func startDemoOutbox(ctx context.Context, pool *pgxpool.Pool, schema string) (*demoOutbox, error) {
	return &demoOutbox{}, nil
}

func (o *demoOutbox) write(ctx context.Context, tx pgx.Tx, orderID int64, customer string) error {
	return nil
}
func (o *demoOutbox) line() string    { return "" }
func (o *demoOutbox) summary() string { return "" }
func (o *demoOutbox) stop()           {}
