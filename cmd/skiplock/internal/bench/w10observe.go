package bench

// What W10's observer holds and reads: the session that pins the xmin horizon, and
// the server's statistics at each window's end.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// w10Pin is the session that pins the xmin horizon.
type w10Pin struct {
	conn *pgx.Conn
	xid  int64
	held bool
}

// pinSnapshot opens the pinning session: a REPEATABLE READ transaction that reads
// the jobs table (its snapshot is taken) and takes an xid, then stays idle.
func pinSnapshot(ctx context.Context, url, schema string) (*w10Pin, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connecting the pinning session: %w", err)
	}
	p := &w10Pin{conn: conn}
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("beginning the pinning transaction: %w", err)
	}
	p.held = true
	if _, err := conn.Exec(ctx, "SELECT 1 FROM "+pgx.Identifier{schema, "jobs"}.Sanitize()+" LIMIT 1"); err != nil {
		p.release(ctx)
		return nil, fmt.Errorf("taking the pinning snapshot: %w", err)
	}
	if err := conn.QueryRow(ctx, "SELECT txid_current()").Scan(&p.xid); err != nil {
		p.release(ctx)
		return nil, fmt.Errorf("taking the pinning xid: %w", err)
	}
	return p, nil
}

// release rolls the pinning transaction back and closes its session; calls after
// the first do nothing.
func (p *w10Pin) release(ctx context.Context) error {
	if p == nil || p.conn == nil {
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	var err error
	if p.held {
		if _, rerr := p.conn.Exec(ctx, "ROLLBACK"); rerr != nil {
			err = fmt.Errorf("rolling the pinning transaction back: %w", rerr)
		}
	}
	p.held = false
	p.conn.Close(ctx)
	p.conn = nil
	return err
}

// w10Mark is what the observer reads at a window's end.
type w10Mark struct {
	succeeded, claims int64
	claimTime         time.Duration
	dead, indexReads  int64
	passes            int64
	ckptBuffers       int64
	wal               w10WAL
	deadErr           error
}

// w10CheckpointSQL is the statement that reads the buffers the checkpointer has
// written so far, from the view that holds them on a server of version v
// (server_version_num).
func w10CheckpointSQL(v int) string {
	if v >= 170000 {
		return `SELECT buffers_written FROM pg_stat_checkpointer`
	}
	return `SELECT buffers_checkpoint FROM pg_stat_bgwriter`
}

// w10WAL is what pg_stat_wal has counted so far.
type w10WAL struct{ bytes, fpi, syncs int64 }

// w10WALColumns are the select-list items that read pg_stat_wal's bytes, full-page
// images and syncs on a server of version v, or zeros before PostgreSQL 14, which has
// no such view (the window's WAL columns then stay 0).
func w10WALColumns(v int) string {
	if v < 140000 {
		return `0::bigint, 0::bigint, 0::bigint`
	}
	return `(SELECT wal_bytes::bigint FROM pg_stat_wal), (SELECT wal_fpi FROM pg_stat_wal), (SELECT wal_sync FROM pg_stat_wal)`
}
