package engine_test

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ncruces/go-sqlite3"

	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// counterReply is the counter actor's answer.
type counterReply struct {
	Requests int `json:"requests"`
}

func (e *env) counter() *engine.Class {
	return e.class("counter", testguest.Build(e.t, "examples/counter-actor"))
}

// once sends a keyed request and returns the answer and whether it was
// replayed.
func (e *env) once(a *engine.Actor, key, body string) (string, bool) {
	e.t.Helper()
	r, replayed, err := a.RequestOnce(e.ctx, key, []byte(body))
	if err != nil {
		e.t.Fatalf("request %q under key %q: %v", body, key, err)
	}
	return string(r.Response), replayed
}

func requests(t *testing.T, reply string) int {
	t.Helper()
	var c counterReply
	if err := json.Unmarshal([]byte(reply), &c); err != nil {
		t.Fatalf("the counter's answer %q: %v", reply, err)
	}
	return c.Requests
}

// A request sent again under its key runs once: the second answer is the
// first one, replayed, and the guest's state counts one request.
func TestARequestRetriedUnderItsKeyRunsOnce(t *testing.T) {
	e := newEnv(t)
	a := e.open(e.counter(), "c")
	first, replayed := e.once(a, "k1", "get")
	if replayed || requests(t, first) != 1 {
		t.Fatalf("first: %s (replayed %v), want the first request, run", first, replayed)
	}
	again, replayed := e.once(a, "k1", "get")
	if !replayed || again != first {
		t.Fatalf("again: %s (replayed %v), want %s replayed", again, replayed, first)
	}
	if got := requests(t, e.req(a, "get")); got != 2 {
		t.Fatalf("the counter after the retry and one more request: %d requests, want 2", got)
	}
	// Another key runs.
	if out, replayed := e.once(a, "k2", "get"); replayed || requests(t, out) != 3 {
		t.Fatalf("another key: %s (replayed %v)", out, replayed)
	}
	// The keys survive a close: they are in the actor's database.
	path := filepath.Join(e.dir, "c.db")
	a.Close(e.ctx)
	b, err := e.eng.Open(e.ctx, a.ID(), e.counter(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(e.ctx)
	if out, replayed := e.once(b, "k1", "get"); !replayed || out != first {
		t.Fatalf("k1 after a reopen: %s (replayed %v), want %s replayed", out, replayed, first)
	}
}

// A key is the actor's: another actor's request under the same key runs.
func TestActorsDoNotShareKeys(t *testing.T) {
	e := newEnv(t)
	c := e.counter()
	x, y := e.open(c, "x"), e.open(c, "y")
	e.once(x, "same", "get")
	e.once(x, "same", "get")
	if out, replayed := e.once(y, "same", "get"); replayed || requests(t, out) != 1 {
		t.Fatalf("y under x's key: %s (replayed %v), want y's own first request", out, replayed)
	}
}

// A key recorded for one body refuses another body, running nothing; a
// failed event records no key; a bad key is refused before anything runs.
func TestKeysRefusedAndNotRecorded(t *testing.T) {
	e := newEnv(t)
	a := e.open(e.counter(), "c")
	e.once(a, "k", "get")
	if _, _, err := a.RequestOnce(e.ctx, "k", []byte("stop")); !errors.Is(err, engine.ErrIdempotencyKeyReused) {
		t.Fatalf("k with another body: %v, want ErrIdempotencyKeyReused", err)
	}
	if _, _, err := a.RequestOnce(e.ctx, "bad", []byte("no such command")); err == nil {
		t.Fatal("a failing request succeeded")
	}
	if keys, err := a.IdempotencyKeys(e.ctx); err != nil || !slices.Equal(keys, []string{"k"}) {
		t.Fatalf("keys %v (%v), want [k]: a failed event records none", keys, err)
	}
	for _, key := range []string{"", strings.Repeat("x", engine.MaxIdempotencyKeyLen+1), "a b", "é", "tab\t"} {
		if _, _, err := a.RequestOnce(e.ctx, key, []byte("get")); !errors.Is(err, engine.ErrBadIdempotencyKey) {
			t.Errorf("key %q: %v, want ErrBadIdempotencyKey", key, err)
		}
	}
	if err := engine.ValidateIdempotencyKey(strings.Repeat("~", engine.MaxIdempotencyKeyLen)); err != nil {
		t.Errorf("the longest key: %v", err)
	}
	if got := requests(t, e.req(a, "get")); got != 2 {
		t.Fatalf("the counter: %d requests, want 2 (k and this one)", got)
	}
}

// Retention: the latest N keys, and only as many as keep their replies
// within the byte bound (the newest always); an evicted key runs again.
func TestIdempotencyRetentionIsBounded(t *testing.T) {
	t.Run("keys", func(t *testing.T) {
		e := newEnv(t, engine.WithIdempotencyRetention(3, 0))
		a := e.open(e.counter(), "c")
		for _, k := range []string{"k1", "k2", "k3", "k4"} {
			e.once(a, k, "get")
		}
		if keys, _ := a.IdempotencyKeys(e.ctx); !slices.Equal(keys, []string{"k2", "k3", "k4"}) {
			t.Fatalf("keys %v, want the latest three", keys)
		}
		if out, replayed := e.once(a, "k1", "get"); replayed || requests(t, out) != 5 {
			t.Fatalf("the evicted k1: %s (replayed %v), want it run again", out, replayed)
		}
		if _, replayed := e.once(a, "k4", "get"); !replayed {
			t.Fatal("k4, among the latest three, ran again")
		}
	})
	t.Run("bytes", func(t *testing.T) {
		// The counter's answers are about 60 bytes: 100 bytes keep one.
		e := newEnv(t, engine.WithIdempotencyRetention(0, 100))
		a := e.open(e.counter(), "c")
		for _, k := range []string{"k1", "k2", "k3"} {
			e.once(a, k, "get")
		}
		if keys, _ := a.IdempotencyKeys(e.ctx); !slices.Equal(keys, []string{"k3"}) {
			t.Fatalf("keys %v, want the newest only", keys)
		}
		e2 := newEnv(t, engine.WithIdempotencyRetention(0, 1))
		b := e2.open(e2.counter(), "c")
		e2.once(b, "big", "get")
		if keys, _ := b.IdempotencyKeys(e2.ctx); !slices.Equal(keys, []string{"big"}) {
			t.Fatalf("keys %v: the newest stays whatever its size", keys)
		}
	})
}

// A key travels with a snapshot of the database (what a node uploads and
// the next holder restores), and the snapshot check takes the table as
// the host's.
func TestAKeyTravelsWithTheSnapshot(t *testing.T) {
	e := newEnv(t)
	c := e.counter()
	a := e.open(c, "c")
	first, _ := e.once(a, "k", "get")
	snap, err := a.Snapshot(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := engine.CheckSnapshot(snap); err != nil {
		t.Fatalf("the snapshot with a key: %v", err)
	}
	p := filepath.Join(e.dir, "restored.db")
	if err := engine.WriteSnapshot(p, snap); err != nil {
		t.Fatal(err)
	}
	b, err := e.eng.Open(e.ctx, a.ID(), c, p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(e.ctx)
	if out, replayed := e.once(b, "k", "get"); !replayed || out != first {
		t.Fatalf("k on the restored copy: %s (replayed %v), want %s replayed", out, replayed, first)
	}
	// An actor that never used a key has no table: its schema is the one
	// hosts before keys wrote.
	d := e.open(c, "plain")
	e.req(d, "get")
	if keys, err := d.IdempotencyKeys(e.ctx); err != nil || keys != nil {
		t.Fatalf("keys of an actor that used none: %v, %v", keys, err)
	}
	plain, err := d.Snapshot(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	q := filepath.Join(e.dir, "plain-copy.db")
	if err := engine.WriteSnapshot(q, plain); err != nil {
		t.Fatal(err)
	}
	conn, err := sqlite3.Open(q)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, _, err := conn.Prepare(`SELECT count(*) FROM sqlite_schema WHERE name = '_wasmkeep_idempotency'`)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !st.Step() || st.ColumnInt(0) != 0 {
		t.Fatalf("an actor that used no key has the table of keys (%v)", st.Err())
	}
}
