// Command extism-host is an Extism host that adopts durable alarms. The
// host (this file) is written as an Extism host of guests that follow
// abi/ABI.md would be, with no alarms in mind: it compiles one class as
// an Extism plugin, runs one instance of it per actor, opens one SQLite
// database per actor with ncruces's driver and serves requests, each one
// event in a transaction of its database. It provides the request and
// data imports of abi/ABI.md (wasmkeep:actor) itself, as Extism host
// functions.
//
// Adopting alarms takes the glue in alarms.go and the lines marked
// "alarms:" here, as in examples/minihost: the host registers the
// wasmkeep:alarm functions among its Extism host functions, checks its
// class (hostmod.CheckGuestWasm), gives each actor's connection a
// hostmod.Table, starts each event with hostmod.Table.NewEvent, and hands
// the plugin its actors for delivery; the plugin runs on-alarm through the
// host's own Extism instance with the committed backoff.
//
// Extism shapes the host in three ways, alarms or not (docs/embedding.md,
// "Frameworks that wrap wazero"). Plugin.Call passes no parameters and
// CurrentPlugin.Memory is the memory of Extism's kernel, not the guest's,
// so the host calls the guest's exports on its module (guestOf), with
// Extism's plugin in the context, and gives its host functions that
// module's memory. Extism runs no start function, so the host runs
// _initialize. And Extism stops a guest at a context's deadline only with
// WithCloseOnContextDone (or a Manifest.Timeout), which the host sets.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"unsafe"

	extism "github.com/extism/go-sdk"
	"github.com/ncruces/go-sqlite3"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/hostmod"
)

// Host runs the actors of one class.
type Host struct {
	plugin *extism.CompiledPlugin
	dir    string
	mu     sync.Mutex
	actors map[abi.ActorID]*actor
	alarms *alarmsGlue // alarms: the plugin and its loops
}

// actor is one actor: its Extism instance and its database, one event at a
// time.
type actor struct {
	id                abi.ActorID
	mu                sync.Mutex
	inst              *extism.Plugin
	mod               api.Module // the instance's guest module (guestOf)
	conn              *sqlite3.Conn
	path              string
	h                 *Host
	alarms.TableActor // alarms: the alarm table, and the plugin's view of the actor
}

// call is what the host's own imports see of the event running, the
// guest's memory included.
type call struct {
	req, resp []byte
	conn      *sqlite3.Conn
	mem       api.Memory
}

type callKey struct{}

// callOf is the call of ctx (nil outside the host's calls).
func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// newHost compiles the class as an Extism plugin with the host's imports.
func newHost(ctx context.Context, dir string, wasm []byte) (*Host, error) {
	h := &Host{dir: dir, actors: map[abi.ActorID]*actor{}}
	err := hostmod.CheckGuestWasm(ctx, wasm) // alarms: no on-alarm, or a mistyped one, is refused here
	if err == nil {
		// Extism's default runtime never stops a guest at a context's
		// deadline: a looping export would hold its goroutine for ever.
		h.plugin, err = extism.NewCompiledPlugin(ctx, extism.Manifest{Wasm: []extism.Wasm{extism.WasmData{Data: wasm}}},
			extism.PluginConfig{EnableWasi: true, RuntimeConfig: wazero.NewRuntimeConfig().WithCloseOnContextDone(true)}, hostFunctions())
	}
	if err != nil {
		return nil, err
	}
	return h, nil
}

// hostFunctions are the host's imports as Extism host functions: each
// finds the event's call in its context, and the guest's memory there
// (not CurrentPlugin.Memory, Extism's kernel's); outside the host's calls
// (_initialize) they answer EPERM.
func hostFunctions() []extism.HostFunction {
	var funcs []extism.HostFunction
	fn := func(module, name string, f func(ctx context.Context, c *call, s []uint64) uint64, params ...api.ValueType) {
		hf := extism.NewHostFunctionWithStack(name, func(ctx context.Context, _ *extism.CurrentPlugin, s []uint64) {
			if c := callOf(ctx); c != nil {
				s[0] = f(ctx, c, s)
			} else {
				s[0] = uint64(abi.EPERM)
			}
		}, params, []api.ValueType{api.ValueTypeI32})
		hf.SetNamespace(module)
		funcs = append(funcs, hf)
	}
	i32 := api.ValueTypeI32
	fn(abi.ActorModule, abi.FuncRequestRead, func(_ context.Context, c *call, s []uint64) uint64 {
		return errno(c.mem.Write(uint32(s[0]), c.req[:min(len(c.req), int(uint32(s[1])))]))
	}, i32, i32)
	fn(abi.ActorModule, abi.FuncResponseWrite, func(_ context.Context, c *call, s []uint64) uint64 {
		b, ok := c.mem.Read(uint32(s[0]), uint32(s[1]))
		c.resp = append(c.resp, b...)
		return errno(ok)
	}, i32, i32)
	fn(abi.ActorModule, abi.FuncKVGet, func(_ context.Context, c *call, s []uint64) uint64 {
		key, _ := c.mem.Read(uint32(s[0]), uint32(s[1]))
		v, ok := kv(c.conn, `SELECT value FROM kv WHERE key = ?`, key)
		if !ok {
			return uint64(abi.ENOENT)
		}
		return errno(c.mem.WriteUint32Le(uint32(s[4]), uint32(len(v))) && c.mem.Write(uint32(s[2]), v[:min(len(v), int(uint32(s[3])))]))
	}, i32, i32, i32, i32, i32)
	fn(abi.ActorModule, abi.FuncKVPut, func(_ context.Context, c *call, s []uint64) uint64 {
		key, _ := c.mem.Read(uint32(s[0]), uint32(s[1]))
		val, _ := c.mem.Read(uint32(s[2]), uint32(s[3]))
		_, ok := kv(c.conn, `INSERT OR REPLACE INTO kv VALUES (?, ?)`, key, val)
		return errno(ok)
	}, i32, i32, i32, i32)
	fn(abi.ActorModule, abi.FuncKVDelete, func(_ context.Context, c *call, s []uint64) uint64 {
		key, _ := c.mem.Read(uint32(s[0]), uint32(s[1]))
		_, ok := kv(c.conn, `DELETE FROM kv WHERE key = ?`, key)
		return errno(ok)
	}, i32, i32)
	for _, f := range hostmod.AlarmFunctions() { // alarms: wasmkeep:alarm, the same way
		fn(f.Module, f.Name, func(ctx context.Context, c *call, s []uint64) uint64 { f.Call(ctx, c.mem, s); return s[0] }, f.Params...) // alarms
	} // alarms
	return funcs
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
	ev := a.Table.NewEvent(a.id)     // alarms: the guest's alarm commits with its writes
	ctx = hostmod.WithEvent(ctx, ev) // alarms
	res, err := a.export(ctx, c, abi.ExportOnRequest, uint64(len(body)))
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

// export calls the guest's export name with params, as Plugin.Call would
// if it passed parameters: Extism's plugin in the context, which its host
// functions need, and the host's own call.
func (a *actor) export(ctx context.Context, c *call, name string, params ...uint64) ([]uint64, error) {
	c.mem = a.mod.Memory()
	ctx = context.WithValue(ctx, extism.PluginCtxKey("plugin"), a.inst)
	return a.mod.ExportedFunction(name).Call(context.WithValue(ctx, callKey{}, c), params...)
}

// restart replaces an instance that trapped or was stopped (a.inst is nil
// when that failed).
func (a *actor) restart(ctx context.Context) {
	if a.mod != nil && !a.mod.IsClosed() {
		return
	}
	if a.inst != nil {
		a.inst.Close(ctx)
	}
	a.inst, a.mod, _ = a.h.instantiate(ctx)
}

// instantiate makes an instance of the class and runs its _initialize,
// outside any event (Extism runs no start function itself).
func (h *Host) instantiate(ctx context.Context) (*extism.Plugin, api.Module, error) {
	inst, err := h.plugin.Instance(ctx, extism.PluginInstanceConfig{ModuleConfig: hostmod.GuestConfig(nil, nil)}) // alarms: the wall clock
	if err != nil {
		return nil, nil, err
	}
	mod, err := guestOf(inst)
	if err == nil && mod.ExportedFunction(abi.ExportInitialize) != nil {
		_, err = mod.ExportedFunction(abi.ExportInitialize).Call(context.WithValue(ctx, extism.PluginCtxKey("plugin"), inst))
	}
	if err != nil {
		inst.Close(ctx)
		return nil, nil, err
	}
	return inst, mod, nil
}

// guestOf returns the instance's guest module. Extism keeps it in an
// unexported field (Plugin.Module wraps it, with neither its functions nor
// its memory), and a host of guests that follow abi/ABI.md needs it: its
// host functions read and write the guest's memory (CurrentPlugin.Memory
// is Extism's kernel's), and its calls pass parameters (Plugin.Call passes
// none). This reads the field of go-sdk v1.7.1, and fails rather than
// guess on a version that moved it.
func guestOf(p *extism.Plugin) (api.Module, error) {
	f := reflect.ValueOf(p).Elem().FieldByName("mainModule")
	if !f.IsValid() || f.Type() != reflect.TypeFor[api.Module]() {
		return nil, errors.New("extism: no mainModule field of type api.Module in extism.Plugin (this host is built for go-sdk v1.7.1)")
	}
	m, _ := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(api.Module)
	if m == nil {
		return nil, errors.New("extism: the instance has no main module")
	}
	return m, nil
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
		if a.restart(ctx); a.inst != nil {
			return a, nil
		}
		a.close(ctx)
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
		a.inst, a.mod, err = h.instantiate(ctx)
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
	if a.inst != nil {
		a.inst.Close(ctx)
	}
	a.TableActor.Close() // alarms
	if a.conn != nil {
		a.conn.Close()
	}
	a.inst, a.mod, a.conn = nil, nil, nil
}

// Close closes every actor and the compiled plugin.
func (h *Host) Close(ctx context.Context) error {
	h.alarms.stop() // alarms
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range h.actors {
		a.mu.Lock()
		a.close(ctx)
		a.mu.Unlock()
	}
	return h.plugin.Close(ctx)
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
