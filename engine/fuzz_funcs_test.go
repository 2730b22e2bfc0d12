package engine_test

// FuzzHostFunctions drives every host function with arguments from the
// fuzzer, through a guest (testdata/wasm/fuzz_calls.wat) that runs its
// request as a program of host calls. A function listener watches each call
// from the host's side: its errno must be one abi/ABI.md documents for that
// function, and the one the arguments call for; what it wrote to the guest's
// memory must be only what it may write; and after the event, the committed
// alarm, response and table must be what the calls that succeeded say (or,
// for a failed event, what they were before). Another actor's state never
// changes.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// Ops of fuzz_calls.wat.
const (
	opSetAlarm = iota
	opGetAlarm
	opClearAlarm
	opRequestRead
	opResponseWrite
	opKVGet
	opKVPut
	opKVDelete
	opStore
	opFail
	opTrap
	opGrow
)

// rec is one record of a fuzz_calls program.
func rec(op byte, args ...uint32) []byte {
	b := []byte{op}
	for i := range 5 {
		var a uint32
		if i < len(args) {
			a = args[i]
		}
		b = binary.LittleEndian.AppendUint32(b, a)
	}
	return b
}

func recAlarm(at int64) []byte {
	return rec(opSetAlarm, uint32(uint64(at)), uint32(uint64(at)>>32))
}

func program(recs ...[]byte) []byte { return bytes.Join(recs, nil) }

// documentedErrnos reads, for each host function, the errnos abi/ABI.md's
// table under its heading lists (ESUCCESS is always allowed).
func documentedErrnos(tb testing.TB) map[string]map[uint32]bool {
	tb.Helper()
	doc, err := os.ReadFile(filepath.Join(testguest.Root(tb), "abi", "ABI.md"))
	if err != nil {
		tb.Fatal(err)
	}
	values := map[string]uint32{}
	for _, e := range []uint32{abi.ESUCCESS, abi.E2BIG, abi.EFAULT, abi.EINVAL, abi.EIO, abi.ENOENT, abi.EPERM} {
		values[abi.ErrnoName(e)] = e
	}
	heading := regexp.MustCompile("^### `([a-z-]+)`")
	row := regexp.MustCompile("^\\| `(E[A-Z0-9]+)` \\|")
	out := map[string]map[uint32]bool{}
	var cur map[uint32]bool
	for _, line := range strings.Split(string(doc), "\n") {
		if m := heading.FindStringSubmatch(line); m != nil {
			cur = map[uint32]bool{abi.ESUCCESS: true}
			out[m[1]] = cur
			continue
		}
		if strings.HasPrefix(line, "## ") {
			cur = nil
		}
		if m := row.FindStringSubmatch(line); m != nil && cur != nil {
			v, ok := values[m[1]]
			if !ok {
				tb.Fatalf("ABI.md lists %s, which package abi does not define", m[1])
			}
			cur[v] = true
		}
	}
	for _, f := range engine.Functions() {
		if len(out[f.Name]) < 2 {
			tb.Fatalf("found no errno table for %s in ABI.md", f.Name)
		}
	}
	return out
}

// model is what an actor's committed state should be.
type model struct {
	alarm *int64
	kv    map[string][]byte
}

func (m model) clone() model {
	c := model{kv: maps.Clone(m.kv)}
	if m.alarm != nil {
		at := *m.alarm
		c.alarm = &at
	}
	return c
}

// watcher is the function listener on the host functions: it checks each
// call against the event's model.
type watcher struct {
	t          *testing.T // the current fuzz run's
	documented map[string]map[uint32]bool
	req        []byte
	ev         model
	resp       []byte
	calls      int

	name   string
	params []uint64
	before []byte
}

func (w *watcher) NewFunctionListener(def api.FunctionDefinition) experimental.FunctionListener {
	if m := def.ModuleName(); m == abi.AlarmModule || m == abi.ActorModule {
		return w
	}
	return nil
}

func (w *watcher) Before(_ context.Context, mod api.Module, def api.FunctionDefinition, params []uint64, _ experimental.StackIterator) {
	w.name, w.params = def.Name(), slices.Clone(params)
	mem := mod.Memory()
	b, _ := mem.Read(0, mem.Size())
	w.before = bytes.Clone(b)
}

func (w *watcher) Abort(_ context.Context, _ api.Module, def api.FunctionDefinition, err error) {
	if w.t != nil {
		w.t.Errorf("host function %s(%v) did not return: %v", def.Name(), w.params, err)
	}
}

func (w *watcher) After(_ context.Context, mod api.Module, def api.FunctionDefinition, results []uint64) {
	t := w.t
	if t == nil {
		return
	}
	w.calls++
	errno := uint32(results[0])
	name, p := w.name, w.params
	if !w.documented[name][errno] {
		t.Errorf("%s%v returned %s, which ABI.md does not list for it", name, p, abi.ErrnoName(errno))
	}
	before := w.before
	mem := mod.Memory()
	afterB, _ := mem.Read(0, mem.Size())
	after := bytes.Clone(afterB)
	size := uint64(len(before))
	if uint64(len(after)) != size {
		t.Errorf("%s%v changed the memory's size from %d to %d", name, p, size, len(after))
		return
	}
	in := func(ptr, n uint32) bool { return uint64(ptr)+uint64(n) <= size }
	// applicable: every errno whose documented condition holds; writable:
	// the ranges the call may change.
	applicable := map[uint32]bool{}
	type span struct{ at, n uint32 }
	var writable []span
	key := func() ([]byte, bool) {
		k, kl := uint32(p[0]), uint32(p[1])
		if kl > abi.MaxKeyLen {
			applicable[abi.E2BIG] = true
		}
		if !in(k, kl) {
			applicable[abi.EFAULT] = true
			return nil, false
		}
		return before[k : k+kl], kl <= abi.MaxKeyLen
	}
	var onSuccess func()
	switch name {
	case abi.FuncSetAlarm:
		at := int64(p[0])
		if at < 0 || at > abi.MaxAlarmMillis {
			applicable[abi.EINVAL] = true
		}
		onSuccess = func() { w.ev.alarm = &at }
	case abi.FuncGetAlarm:
		ptr := uint32(p[0])
		if w.ev.alarm == nil {
			applicable[abi.ENOENT] = true
		} else if !in(ptr, 8) {
			applicable[abi.EFAULT] = true
		}
		onSuccess = func() {
			writable = append(writable, span{ptr, 8})
			if got := binary.LittleEndian.Uint64(after[ptr:]); int64(got) != *w.ev.alarm {
				t.Errorf("get-alarm wrote %d, the event's alarm is %d", int64(got), *w.ev.alarm)
			}
		}
	case abi.FuncClearAlarm:
		onSuccess = func() { w.ev.alarm = nil }
	case abi.FuncRequestRead:
		buf, n := uint32(p[0]), uint32(p[1])
		n = uint32(min(uint64(n), uint64(len(w.req))))
		if !in(buf, n) {
			applicable[abi.EFAULT] = true
		}
		onSuccess = func() {
			writable = append(writable, span{buf, n})
			if !bytes.Equal(after[buf:buf+n], w.req[:n]) {
				t.Errorf("request-read(%d, %d) copied something else than the request", buf, p[1])
			}
		}
	case abi.FuncResponseWrite:
		buf, n := uint32(p[0]), uint32(p[1])
		if !in(buf, n) {
			applicable[abi.EFAULT] = true
		} else if len(w.resp)+int(n) > 16<<20 {
			applicable[abi.E2BIG] = true
		}
		onSuccess = func() { w.resp = append(w.resp, before[buf:buf+n]...) }
	case abi.FuncKVGet:
		buf, bufLen, outLen := uint32(p[2]), uint32(p[3]), uint32(p[4])
		k, ok := key()
		var v []byte
		if ok {
			var found bool
			if v, found = w.ev.kv[string(k)]; !found {
				applicable[abi.ENOENT] = true
			}
		}
		n := uint32(min(uint64(bufLen), uint64(len(v))))
		if ok && (!in(outLen, 4) || !in(buf, n)) {
			applicable[abi.EFAULT] = true
		}
		if errno == abi.EFAULT && ok {
			// The ABI promises nothing about what a failed copy left.
			writable = append(writable, span{outLen, 4}, span{buf, n})
		}
		onSuccess = func() {
			writable = append(writable, span{outLen, 4}, span{buf, n})
			// The value is copied after the length: where the two overlap,
			// the value's bytes are what stays.
			overlap := uint64(buf) < uint64(outLen)+4 && uint64(outLen) < uint64(buf)+uint64(n)
			if got := binary.LittleEndian.Uint32(after[outLen:]); !overlap && got != uint32(len(v)) {
				t.Errorf("kv-get wrote length %d, the value has %d bytes", got, len(v))
			}
			if !bytes.Equal(after[buf:buf+n], v[:n]) {
				t.Errorf("kv-get copied %q, the value starts %q", after[buf:buf+n], v[:n])
			}
		}
	case abi.FuncKVPut:
		val, vl := uint32(p[2]), uint32(p[3])
		k, kok := key()
		if vl > abi.MaxValueLen {
			applicable[abi.E2BIG] = true
		} else if !in(val, vl) {
			applicable[abi.EFAULT] = true
		}
		onSuccess = func() {
			if kok && in(val, vl) {
				w.ev.kv[string(k)] = bytes.Clone(before[val : val+vl])
			}
		}
	case abi.FuncKVDelete:
		k, ok := key()
		onSuccess = func() {
			if ok {
				delete(w.ev.kv, string(k))
			}
		}
	default:
		t.Errorf("a call to %s, which the test does not know", name)
		return
	}
	switch {
	case errno == abi.ESUCCESS && len(applicable) > 0:
		t.Errorf("%s%v succeeded, but ABI.md calls for %v", name, p, names(applicable))
	case errno != abi.ESUCCESS && !applicable[errno]:
		t.Errorf("%s%v returned %s; the arguments call for %v", name, p, abi.ErrnoName(errno), names(applicable))
	case errno == abi.ESUCCESS:
		onSuccess()
	}
	for i := range before {
		if i == 0 && bytes.Equal(before, after) {
			break
		}
		if before[i] == after[i] {
			continue
		}
		ok := false
		for _, s := range writable {
			if uint64(i) >= uint64(s.at) && uint64(i) < uint64(s.at)+uint64(s.n) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("%s%v (%s) changed the guest's memory at %d, outside what it may write", name, p, abi.ErrnoName(errno), i)
			break
		}
	}
}

func names(set map[uint32]bool) []string {
	var out []string
	for e := range set {
		out = append(out, abi.ErrnoName(e))
	}
	sort.Strings(out)
	if out == nil {
		out = []string{"ESUCCESS"}
	}
	return out
}

// committed reads an actor's committed alarm and table.
func committed(t *testing.T, a *engine.Actor) model {
	t.Helper()
	st, err := a.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := model{kv: map[string][]byte{}}
	if st.Alarm != nil {
		at := *st.Alarm
		m.alarm = &at
	}
	err = a.Lock(func(s *engine.Store) error {
		rows, err := s.KVRows()
		for _, r := range rows {
			if r.KeyType != "blob" {
				t.Errorf("a key stored as %s, not a blob: %q", r.KeyType, r.Key)
			}
			if _, dup := m.kv[string(r.Key)]; dup {
				t.Errorf("the key %q is in the table twice", r.Key)
			}
			m.kv[string(r.Key)] = r.Value
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sameModel(a, b model) bool {
	if (a.alarm == nil) != (b.alarm == nil) || (a.alarm != nil && *a.alarm != *b.alarm) {
		return false
	}
	return maps.EqualFunc(a.kv, b.kv, bytes.Equal)
}

func FuzzHostFunctions(f *testing.F) {
	w := &watcher{documented: documentedErrnos(f)}
	ctx := experimental.WithFunctionListenerFactory(context.Background(), w)
	eng, err := engine.NewEngine(ctx,
		engine.WithCompilationCache(wazero.NewCompilationCache()), // listeners are compiled in
		engine.WithClock(&clock{now: time.UnixMilli(t0)}))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { eng.Close(ctx) })
	class, err := eng.Compile(ctx, "fuzz", testguest.Fixture(f, "fuzz_calls"))
	if err != nil {
		f.Fatal(err)
	}
	dir := f.TempDir()
	open := func(name string) *engine.Actor {
		a, err := eng.Open(ctx, abi.ActorID{Tenant: "t1", Class: "fuzz", Name: name}, class, filepath.Join(dir, name+".db"))
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { a.Close(ctx) })
		return a
	}
	a, other := open("a"), open("other")
	// The other actor holds an alarm and a value, set once.
	if _, err := other.Request(ctx, program(recAlarm(t0+5000), rec(opKVPut, 0, 21, 0, 21))); err != nil {
		f.Fatal(err)
	}

	// The seed corpus is testdata/fuzz/FuzzHostFunctions: programs that
	// reach each errno of each function, the edges of memory, an empty key,
	// a failed and a trapped event, and grown memory.
	const page = 65536
	f.Fuzz(func(t *testing.T, prog []byte) {
		// Each host call is watched by copying the guest's memory twice: a
		// program of at most about 100 calls keeps each run short. A longer
		// input adds no coverage, so the fuzzer neither keeps nor
		// minimizes one.
		if len(prog) > 2048 {
			return
		}
		wantOther := committed(t, other)
		before := committed(t, a)
		w.t, w.req, w.ev, w.resp, w.calls = t, prog, before.clone(), nil, 0
		res, err := a.Request(ctx, prog)
		w.t = nil
		if t.Failed() {
			return
		}
		got := committed(t, a)
		if err != nil {
			var ge *hostmod.GuestError
			if !errors.As(err, &ge) {
				t.Fatalf("the event failed in the host, not the guest: %v", err)
			}
			if !sameModel(got, before) {
				t.Fatalf("a failed event (%v) changed the committed state", err)
			}
		} else {
			if !sameModel(got, w.ev) {
				t.Fatalf("committed alarm %v and %d keys; the calls that succeeded leave %v and %d keys", got.alarm, len(got.kv), w.ev.alarm, len(w.ev.kv))
			}
			if !bytes.Equal(res.Response, w.resp) {
				t.Fatalf("response of %d bytes, the calls wrote %d", len(res.Response), len(w.resp))
			}
		}
		if w.calls == 0 && len(prog) > 0 && len(prog) <= page {
			t.Fatal("the listener saw no host call: the guest's request-read at least")
		}
		if !sameModel(committed(t, other), wantOther) {
			t.Fatal("another actor's state changed")
		}
	})
}
