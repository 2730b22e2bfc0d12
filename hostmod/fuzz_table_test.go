package hostmod_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/hostmod"
)

// FuzzAlarmFunctionsOnATable drives the exported handlers of
// wasmkeep:alarm (AlarmFunctions), as a host that registers its own
// functions calls them, with the guest's memory and arguments from the
// fuzzer, in events on a host's own connection (Table). Each call answers
// the errno its arguments call for, get-alarm writes only its 8 bytes and
// only on success, and after each event, committed or rolled back as the
// fuzzer says, the committed alarm is what the calls that succeeded left.
// It is FuzzHostFunctions' check of the alarm functions, on the host-owned
// path.
func FuzzAlarmFunctionsOnATable(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(binary.LittleEndian.AppendUint64([]byte{0, 0}, uint64(abi.MaxAlarmMillis+1)))
	f.Add(binary.LittleEndian.AppendUint64([]byte{1, 1}, 65530))
	// One host for every input (its runtime and instance cost more than
	// the calls): each input starts with the alarm cleared.
	h := newOwnHost(f, filepath.Join(f.TempDir(), "a.db"))
	fns := map[string]hostmod.HostFunction{}
	for _, fn := range hostmod.AlarmFunctions() {
		fns[fn.Name] = fn
	}
	mem := h.mod.Memory()
	f.Fuzz(func(t *testing.T, prog []byte) {
		h.t = t
		if err := h.conn.Exec(`DELETE FROM _wasmkeep_alarm; DELETE FROM _wasmkeep_meta`); err != nil {
			t.Fatal(err)
		}
		var committed *int64
		// A record: op (set, get, clear; bit 7 ends the event), commit
		// (even: commit), an 8-byte argument.
		for len(prog) >= 10 {
			op, commit, arg := prog[0], prog[1]%2 == 0, binary.LittleEndian.Uint64(prog[2:10])
			prog = prog[10:]
			if err := h.conn.Exec(`BEGIN`); err != nil {
				t.Fatal(err)
			}
			ev := h.tbl.NewEvent(h.id)
			ctx := hostmod.WithEvent(h.ctx, ev)
			alarm, touched := committed, false
			stack := []uint64{arg}
			before := append([]byte(nil), mustRead(t, mem, 0, mem.Size())...)
			switch op % 3 {
			case 0:
				fns[abi.FuncSetAlarm].Call(ctx, mem, stack)
				at := int64(arg)
				want := abi.ESUCCESS
				if at < 0 || at > abi.MaxAlarmMillis {
					want = abi.EINVAL
				} else {
					alarm, touched = &at, true
				}
				if abi.Errno(stack[0]) != want {
					t.Fatalf("set-alarm(%d): errno %d, want %d", at, stack[0], want)
				}
			case 1:
				ptr := uint32(arg)
				fns[abi.FuncGetAlarm].Call(ctx, mem, stack)
				want := abi.ESUCCESS
				switch {
				case alarm == nil:
					want = abi.ENOENT
				case uint64(ptr)+8 > uint64(mem.Size()):
					want = abi.EFAULT
				}
				if abi.Errno(stack[0]) != want {
					t.Fatalf("get-alarm(%#x) with alarm %v: errno %d, want %d", ptr, alarm, stack[0], want)
				}
				after := mustRead(t, mem, 0, mem.Size())
				for i := range after {
					in := want == 0 && uint32(i) >= ptr && uint32(i) < ptr+8
					if !in && after[i] != before[i] {
						t.Fatalf("get-alarm(%#x) wrote byte %d outside its 8 bytes (errno %d)", ptr, i, want)
					}
				}
				if want == 0 {
					if v, _ := mem.ReadUint64Le(ptr); int64(v) != *alarm {
						t.Fatalf("get-alarm wrote %d, want %d", int64(v), *alarm)
					}
				}
			default:
				fns[abi.FuncClearAlarm].Call(ctx, mem, stack)
				if stack[0] != 0 {
					t.Fatalf("clear-alarm: errno %d", stack[0])
				}
				alarm, touched = nil, true
			}
			if ev.Err() != nil {
				t.Fatal(ev.Err())
			}
			if evTouched := ev.Result().AlarmChanged; evTouched != touched {
				t.Fatalf("the event says touched=%v, want %v", evTouched, touched)
			}
			end := `ROLLBACK`
			if commit {
				end, committed = `COMMIT`, alarm
			}
			if err := h.conn.Exec(end); err != nil {
				t.Fatal(err)
			}
			st := h.state()
			if st.Alarm != nil != (committed != nil) || (committed != nil && (st.Alarm == nil || *st.Alarm != *committed)) || st.Failures != 0 {
				t.Fatalf("committed %+v, want alarm %v", st, committed)
			}
		}
	})
}

func mustRead(t *testing.T, mem api.Memory, off, n uint32) []byte {
	t.Helper()
	b, ok := mem.Read(off, n)
	if !ok {
		t.Fatal("read guest memory")
	}
	return b
}

// FuzzAlarmFunctionsOutOfTurn drives the exported handlers of
// wasmkeep:alarm (AlarmFunctions) as hosts get them wrong, from two
// goroutines on one Table at once: in events begun with Begin (committed
// or rolled back), with no event in the context at all, and in events
// NewEvent starts with no transaction of the host's or while the other
// goroutine's event is open. Nothing panics; a call with no event, or in
// a refused one, answers EPERM; get-alarm in an event reads what the
// event's transaction holds; and the committed alarm is what the
// committed events' calls, in the order they committed, leave.
func FuzzAlarmFunctionsOutOfTurn(f *testing.F) {
	rec := func(g, kind, op byte, arg uint64) []byte {
		return binary.LittleEndian.AppendUint64([]byte{g | kind<<1, op}, arg)
	}
	f.Add(append(rec(0, 0, 0, 5000), rec(1, 2, 0, 6000)...))
	f.Add(append(append(rec(0, 0, 0, 5000), rec(1, 0, 1, 64)...), rec(1, 3, 2, 0)...))
	f.Add(append(append(rec(0, 1, 0, 7000), rec(1, 0, 2, 0)...), rec(0, 2, 1, 64)...))
	f.Add(append(rec(0, 0, 0, uint64(abi.MaxAlarmMillis+1)), rec(1, 0, 1, 65530)...))
	h := newOwnHost(f, filepath.Join(f.TempDir(), "a.db"))
	fns := map[byte]hostmod.HostFunction{}
	for i, fn := range hostmod.AlarmFunctions() {
		fns[byte(i)] = fn // set, get, clear, in ABI.md's order
	}
	mem := h.mod.Memory()
	rollback := errors.New("the host rolls this event back")
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 64*10 {
			return
		}
		h.t = t
		if err := h.conn.Exec(`DELETE FROM _wasmkeep_alarm; DELETE FROM _wasmkeep_meta; DELETE FROM notes`); err != nil {
			t.Fatal(err)
		}
		var recs [2][][]byte
		for ; len(prog) >= 10; prog = prog[10:] {
			recs[prog[0]&1] = append(recs[prog[0]&1], prog[:10])
		}
		errs := make(chan error, 2)
		var wg sync.WaitGroup
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, r := range recs[g] {
					if err := outOfTurn(h, fns, mem, r, rollback); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		// Replay the committed events' calls, in the order they committed.
		var want *int64
		st, _, err := h.conn.Prepare(`SELECT n FROM notes ORDER BY rowid`)
		if err != nil {
			t.Fatal(err)
		}
		for st.Step() {
			if n := st.ColumnText(0); n == "clear" {
				want = nil
			} else {
				at, _ := strconv.ParseInt(n, 10, 64)
				want = &at
			}
		}
		if err := errors.Join(st.Err(), st.Close()); err != nil {
			t.Fatal(err)
		}
		if got := h.state(); (got.Alarm == nil) != (want == nil) || (want != nil && *got.Alarm != *want) {
			t.Fatalf("committed alarm %v, the committed events leave %v", got.Alarm, want)
		}
	})
}

// outOfTurn runs one record of FuzzAlarmFunctionsOutOfTurn: r[0] is the
// goroutine (bit 0) and the context (bits 1-2: 0 an event begun with Begin
// and committed, 1 one rolled back, 2 no event, 3 NewEvent with no
// transaction of the host's), r[1]%3 the function (set, get, clear),
// r[2:10] its argument.
func outOfTurn(h *ownHost, fns map[byte]hostmod.HostFunction, mem api.Memory, r []byte, rollback error) error {
	kind, op, arg := r[0]>>1&3, r[1]%3, binary.LittleEndian.Uint64(r[2:10])
	fn, stack := fns[op], []uint64{arg}
	switch kind {
	case 2:
		fn.Call(context.Background(), mem, stack)
		if abi.Errno(stack[0]) != abi.EPERM {
			return fmt.Errorf("%s with no event in its context: errno %d, want EPERM", fn.Name, stack[0])
		}
		return nil
	case 3:
		ev := h.tbl.NewEvent(h.id)
		if err := ev.Err(); !errors.Is(err, hostmod.ErrNoTransaction) && !errors.Is(err, hostmod.ErrEventOpen) {
			return fmt.Errorf("NewEvent with no transaction of the host's: %v", err)
		}
		fn.Call(hostmod.WithEvent(h.ctx, ev), mem, stack)
		if abi.Errno(stack[0]) != abi.EPERM {
			return fmt.Errorf("%s in a refused event: errno %d, want EPERM", fn.Name, stack[0])
		}
		return nil
	}
	ev, err := h.tbl.Begin(h.ctx, h.id)
	if err != nil {
		return err
	}
	before, err := h.tbl.State() // in the event's transaction
	if err != nil {
		return errors.Join(err, ev.End(err))
	}
	fn.Call(hostmod.WithEvent(h.ctx, ev), mem, stack)
	e, note := abi.Errno(stack[0]), ""
	switch fn.Name {
	case abi.FuncSetAlarm:
		want := abi.ESUCCESS
		if at := int64(arg); at < 0 || at > abi.MaxAlarmMillis {
			want = abi.EINVAL
		} else {
			note = strconv.FormatInt(at, 10)
		}
		if e != want {
			err = fmt.Errorf("set-alarm(%d): errno %d, want %d", int64(arg), e, want)
		}
	case abi.FuncGetAlarm:
		ptr := uint32(arg)
		switch {
		case before.Alarm == nil && e != abi.ENOENT:
			err = fmt.Errorf("get-alarm with no alarm: errno %d", e)
		case before.Alarm != nil && uint64(ptr)+8 > uint64(mem.Size()) && e != abi.EFAULT:
			err = fmt.Errorf("get-alarm(%#x) past the memory: errno %d", ptr, e)
		case before.Alarm != nil && uint64(ptr)+8 <= uint64(mem.Size()):
			if v, _ := mem.ReadUint64Le(ptr); e != 0 || int64(v) != *before.Alarm {
				err = fmt.Errorf("get-alarm(%#x): errno %d, read %d; the event's transaction holds %d", ptr, e, int64(v), *before.Alarm)
			}
		}
	default:
		if e != 0 {
			err = fmt.Errorf("clear-alarm: errno %d", e)
		}
		note = "clear"
	}
	if err != nil {
		return errors.Join(err, ev.End(err))
	}
	if note != "" {
		if err := h.conn.Exec(`INSERT INTO notes VALUES ('` + note + `')`); err != nil {
			return errors.Join(err, ev.End(err))
		}
	}
	if kind == 1 {
		if err := ev.End(rollback); !errors.Is(err, rollback) {
			return fmt.Errorf("End with the host's error: %v", err)
		}
		return nil
	}
	return ev.End(nil)
}
