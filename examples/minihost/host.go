// Command minihost is a plain wazero host that adopts durable alarms. The
// host (this file) is written as any wazero host would be, with no alarms
// in mind: it owns its runtime, compiles one class, runs one instance of
// it per actor, opens one SQLite database per actor with ncruces's driver
// and serves requests, each one event in a transaction of its database.
// It provides the request and data imports of abi/ABI.md (wasmkeep:actor)
// itself, as its own host API.
//
// Adopting alarms takes the glue in alarms.go and the lines marked
// "alarms:" here: the host registers the wasmkeep:alarm functions in its
// runtime, checks its class (hostmod.CheckGuest), gives each actor's
// connection a hostmod.Table, starts each event in its own transaction
// with hostmod.Table.NewEvent, and hands the plugin its actors for
// delivery; the plugin runs on-alarm through the host's own instance with
// the committed backoff. With a bucket the alarm index and a replica of
// each actor live there, and a survivor of this process would find them.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/ncruces/go-sqlite3"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/hostmod"
)

// Host runs the actors of one class.
type Host struct {
	rt     wazero.Runtime
	class  wazero.CompiledModule
	name   string
	dir    string
	mu     sync.Mutex
	actors map[abi.ActorID]*actor
	alarms *alarmsGlue // alarms: the plugin and its loops
}

// actor is one actor: its instance and its database, one event at a time.
type actor struct {
	id                abi.ActorID
	mu                sync.Mutex
	mod               api.Module
	conn              *sqlite3.Conn
	path              string
	h                 *Host
	alarms.TableActor // alarms: the alarm table, and the plugin's view of the actor
}

// call is what the host's own imports see of the event running.
type call struct {
	req, resp []byte
	conn      *sqlite3.Conn
}

type callKey struct{}

// newHost compiles the class and registers the host's imports.
func newHost(ctx context.Context, dir, class string, wasm []byte) (*Host, error) {
	h := &Host{name: class, dir: dir, actors: map[abi.ActorID]*actor{}}
	h.rt = wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(true))
	b := h.rt.NewHostModuleBuilder(abi.ActorModule)
	fn := func(name string, f api.GoModuleFunc, params ...api.ValueType) {
		b.NewFunctionBuilder().WithGoModuleFunction(f, params, []api.ValueType{api.ValueTypeI32}).Export(name)
	}
	i32 := api.ValueTypeI32
	fn(abi.FuncRequestRead, func(ctx context.Context, m api.Module, s []uint64) {
		c := ctx.Value(callKey{}).(*call)
		s[0] = errno(m.Memory().Write(uint32(s[0]), c.req[:min(len(c.req), int(uint32(s[1])))]))
	}, i32, i32)
	fn(abi.FuncResponseWrite, func(ctx context.Context, m api.Module, s []uint64) {
		c := ctx.Value(callKey{}).(*call)
		b, ok := m.Memory().Read(uint32(s[0]), uint32(s[1]))
		c.resp = append(c.resp, b...)
		s[0] = errno(ok)
	}, i32, i32)
	fn(abi.FuncKVGet, func(ctx context.Context, m api.Module, s []uint64) {
		c, mem := ctx.Value(callKey{}).(*call), m.Memory()
		key, _ := mem.Read(uint32(s[0]), uint32(s[1]))
		v, ok := kv(c.conn, `SELECT value FROM kv WHERE key = ?`, key)
		if !ok {
			s[0] = uint64(abi.ENOENT)
			return
		}
		s[0] = errno(mem.WriteUint32Le(uint32(s[4]), uint32(len(v))) && mem.Write(uint32(s[2]), v[:min(len(v), int(uint32(s[3])))]))
	}, i32, i32, i32, i32, i32)
	fn(abi.FuncKVPut, func(ctx context.Context, m api.Module, s []uint64) {
		key, _ := m.Memory().Read(uint32(s[0]), uint32(s[1]))
		val, _ := m.Memory().Read(uint32(s[2]), uint32(s[3]))
		_, ok := kv(ctx.Value(callKey{}).(*call).conn, `INSERT OR REPLACE INTO kv VALUES (?, ?)`, key, val)
		s[0] = errno(ok)
	}, i32, i32, i32, i32)
	fn(abi.FuncKVDelete, func(ctx context.Context, m api.Module, s []uint64) {
		key, _ := m.Memory().Read(uint32(s[0]), uint32(s[1]))
		_, ok := kv(ctx.Value(callKey{}).(*call).conn, `DELETE FROM kv WHERE key = ?`, key)
		s[0] = errno(ok)
	}, i32, i32)
	_, err := b.Instantiate(ctx)
	if err == nil { // alarms
		err = hostmod.InstantiateAlarms(ctx, h.rt) // alarms: wasmkeep:alarm in this runtime
	} // alarms
	if err == nil {
		h.class, err = h.rt.CompileModule(ctx, wasm)
	}
	if err == nil { // alarms
		err = hostmod.CheckGuest(h.class) // alarms: no on-alarm, or a mistyped one, is refused here
	} // alarms
	if err != nil {
		h.rt.Close(ctx)
		return nil, err
	}
	return h, nil
}

// Request runs a request event on the actor.
func (h *Host) Request(ctx context.Context, id abi.ActorID, body []byte) ([]byte, error) {
	a, err := h.take(ctx, id)
	if err != nil {
		return nil, err
	}
	defer a.mu.Unlock()
	return a.event(ctx, body)
}

// event runs on-request in a transaction of the actor's database.
func (a *actor) event(ctx context.Context, body []byte) ([]byte, error) {
	if err := a.conn.Exec(`BEGIN IMMEDIATE`); err != nil {
		return nil, err
	}
	c := &call{req: body, conn: a.conn}
	ctx = context.WithValue(ctx, callKey{}, c)
	ev := a.Table.NewEvent(a.id)     // alarms: the guest's alarm commits with its writes
	ctx = hostmod.WithEvent(ctx, ev) // alarms
	res, err := a.mod.ExportedFunction(abi.ExportOnRequest).Call(ctx, uint64(len(body)))
	if err == nil && uint32(res[0]) != 0 {
		err = fmt.Errorf("actor %s: on-request returned %d", a.id, uint32(res[0]))
	}
	err = errors.Join(err, ev.Err()) // alarms: the alarm's write failed
	if err != nil {
		_ = a.conn.Exec(`ROLLBACK`)
		a.restart(ctx)
		return nil, err
	}
	if err := a.conn.Exec(`COMMIT`); err != nil {
		return nil, err
	}
	return c.resp, a.h.alarms.afterEvent(ctx, a, ev) // alarms: replicate, re-arm the timer
}

// restart replaces an instance that trapped or was stopped.
func (a *actor) restart(ctx context.Context) {
	if a.mod.IsClosed() {
		if m, err := a.h.instantiate(ctx); err == nil {
			a.mod = m
		}
	}
}

func (h *Host) instantiate(ctx context.Context) (api.Module, error) {
	return h.rt.InstantiateModule(ctx, h.class, hostmod.GuestConfig(nil, nil)) // alarms: the wall clock
}

// take returns the actor locked and open: its instance and its database.
func (h *Host) take(ctx context.Context, id abi.ActorID) (*actor, error) {
	if err := id.Validate(); err != nil {
		return nil, err
	}
	h.mu.Lock()
	a := h.actors[id]
	if a == nil {
		a = &actor{id: id, h: h}
		h.actors[id] = a
	}
	h.mu.Unlock()
	a.mu.Lock()
	if a.conn != nil {
		a.restart(ctx)
		return a, nil
	}
	a.path = filepath.Join(h.dir, filepath.FromSlash(id.Path())+".db")
	err := os.MkdirAll(filepath.Dir(a.path), 0o755)
	if err == nil {
		a.conn, err = sqlite3.Open(a.path)
	}
	if err == nil {
		err = a.conn.Exec(`PRAGMA journal_mode=DELETE; CREATE TABLE IF NOT EXISTS kv (key BLOB PRIMARY KEY, value BLOB)`)
	}
	if err == nil {
		a.mod, err = h.instantiate(ctx)
	}
	if err == nil { // alarms
		a.TableActor = alarms.TableActor{Actor: id, Path: a.path, Bucket: h.alarms.b} // alarms
		err = a.Open(ctx, a.conn)                                                     // alarms: its table, and what the bucket had of it
	} // alarms
	if err != nil {
		a.close(ctx)
		a.mu.Unlock()
		return nil, fmt.Errorf("actor %s: %w", id, err)
	}
	return a, nil
}

// close closes the actor's instance and database (a.mu held).
func (a *actor) close(ctx context.Context) {
	if a.mod != nil {
		a.mod.Close(ctx)
	}
	a.TableActor.Close() // alarms
	if a.conn != nil {
		a.conn.Close()
	}
	a.mod, a.conn = nil, nil
}

// Close closes every actor and the runtime.
func (h *Host) Close(ctx context.Context) error {
	h.alarms.stop() // alarms
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range h.actors {
		a.mu.Lock()
		a.close(ctx)
		a.mu.Unlock()
	}
	return h.rt.Close(ctx)
}

func errno(ok bool) uint64 {
	if ok {
		return 0
	}
	return uint64(abi.EFAULT)
}

// kv runs one statement of the guest's data. A query returns the value
// found (ok is false for none); a write returns whether it ran.
func kv(conn *sqlite3.Conn, sql string, args ...[]byte) (value []byte, ok bool) {
	st, _, err := conn.Prepare(sql)
	if err != nil {
		return nil, false
	}
	defer st.Close()
	for i, a := range args {
		if st.BindBlob(i+1, a) != nil {
			return nil, false
		}
	}
	if st.Step() {
		return st.ColumnBlob(0, nil), true
	}
	return nil, st.Err() == nil && !strings.HasPrefix(sql, "SELECT")
}
