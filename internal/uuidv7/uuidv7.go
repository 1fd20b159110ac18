// Package uuidv7 builds time-ordered UUIDs with the same layout as the schema's
// uuid_v7() SQL function (see internal/migrate/sql/0001_init.sql):
//
//	48 bits Unix milliseconds │ 4 bits version 7 │ 12 bits sub-millisecond fraction │
//	2 bits variant │ 24 bits sequence within a batch │ 38 bits random
//
// so ids made in Go (bulk COPY) and in SQL sort together by creation time, and a
// batch keeps its insertion order.
package uuidv7

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// New returns the id for position seq of a batch created at t.
func New(t time.Time, seq uint32) [16]byte {
	var rnd [8]byte
	rand.Read(rnd[:])
	return build(t, seq, rnd[:])
}

// Fill sets ids[i] to the id for position i of a batch created at t (as New does),
// with one read of the random source for the whole batch.
func Fill(t time.Time, ids [][16]byte) {
	rnd := make([]byte, 8*len(ids))
	rand.Read(rnd)
	for i := range ids {
		ids[i] = build(t, uint32(i), rnd[8*i:8*i+8])
	}
}

// build lays out the id for position seq of a batch created at t, its random bits
// from rnd's 8 bytes.
func build(t time.Time, seq uint32, rnd []byte) [16]byte {
	var u [16]byte
	us := t.UnixMicro()
	ms := uint64(us / 1000)
	frac := uint64((us % 1000) * 4096 / 1000)
	hi := ms<<16 | 0x7000 | frac
	lo := uint64(1)<<63 | uint64(seq&0xFFFFFF)<<38 | binary.BigEndian.Uint64(rnd)&(1<<38-1)
	binary.BigEndian.PutUint64(u[:8], hi)
	binary.BigEndian.PutUint64(u[8:], lo)
	return u
}

// String formats u in the canonical 8-4-4-4-12 form.
func String(u [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// Valid reports whether s is a UUID (of any version) in the canonical 8-4-4-4-12
// text form, either case: the form skiplock prints and its id parameters accept.
func Valid(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if r != '-' {
				return false
			}
		case !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F'):
			return false
		}
	}
	return true
}
