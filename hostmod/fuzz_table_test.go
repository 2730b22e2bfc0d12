package hostmod_test

import (
	"encoding/binary"
	"path/filepath"
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
