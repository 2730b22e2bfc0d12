package hostmod_test

// One connection, one event at a time, whichever goroutines run them.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/hostmod"
)

// One connection, two events: while A's transaction is open, B's event is
// refused, loudly (its Err names both events) and harmlessly (its
// set-alarm answers EPERM and its Result claims nothing), so that A's
// rollback erases nothing B was told it had. Once A's transaction ends,
// the next event is accepted.
func TestTableRefusesAnEventWhileAnotherIsOpen(t *testing.T) {
	h := newOwnHost(t, filepath.Join(t.TempDir(), "a.db"))
	b := abi.ActorID{Tenant: "t", Class: "own", Name: "b"}
	if err := h.conn.Exec(`BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	evA := h.tbl.NewEvent(h.id)
	if res, err := h.mod.ExportedFunction("set").Call(hostmod.WithEvent(h.ctx, evA), api.EncodeI64(t0), 0); err != nil || uint32(res[0]) != 0 {
		t.Fatalf("A's set-alarm: %v, %v", res, err)
	}
	// B's host, on another goroutine, forgot that A's event is running.
	var (
		evB    *hostmod.Event
		errnoB uint64
	)
	done := make(chan error)
	go func() {
		evB = h.tbl.NewEvent(b)
		res, err := h.mod.ExportedFunction("set").Call(hostmod.WithEvent(h.ctx, evB), api.EncodeI64(777), 0)
		if err == nil {
			errnoB = uint64(uint32(res[0]))
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if abi.Errno(errnoB) != abi.EPERM || evB.Result().AlarmChanged {
		t.Errorf("B's set-alarm while A's event is open: errno %d, result %+v; want EPERM and no change", errnoB, evB.Result())
	}
	err := evB.Err()
	if !errors.Is(err, hostmod.ErrEventOpen) || !strings.Contains(err.Error(), "actor t/own/b") ||
		!strings.Contains(err.Error(), "event 1 of actor t/own/a") || !strings.Contains(err.Error(), "event 2 refused") {
		t.Fatalf("B's Err: %v; want ErrEventOpen naming B's event and A's", err)
	}
	if err := h.conn.Exec(`ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	// A's transaction is over: the next event goes ahead.
	if e, ev := h.event("set", api.EncodeI64(t0+5), 0); e != 0 || ev.Err() != nil {
		t.Fatalf("the event after A's ended: errno %d, %v", e, ev.Err())
	}
	if st := h.state(); st.Alarm == nil || *st.Alarm != t0+5 {
		t.Fatalf("committed alarm %+v, want %d", st, int64(t0+5))
	}
}

// Begin and End run an event in a transaction of its own: End commits it
// unless the host's error or the event's says otherwise, an event cannot
// end twice, Begin refuses a connection with a transaction open, naming
// the event that opened it, and NewEvent refuses an event while one begun
// with Begin is open.
func TestBeginAndEnd(t *testing.T) {
	h := newOwnHost(t, filepath.Join(t.TempDir(), "a.db"))
	set := func(at int64, hostErr error) error {
		t.Helper()
		ev, err := h.tbl.Begin(h.ctx, h.id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.mod.ExportedFunction("set").Call(hostmod.WithEvent(h.ctx, ev), api.EncodeI64(at), 0); err != nil {
			t.Fatal(err)
		}
		err = ev.End(hostErr)
		if again := ev.End(nil); again == nil {
			t.Fatal("an event ended twice")
		}
		return err
	}
	if err := set(t0, nil); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("the host's own write failed")
	if err := set(t0+1, boom); !errors.Is(err, boom) {
		t.Fatalf("End with the host's error: %v", err)
	}
	if err := set(-1, nil); err != nil {
		t.Fatalf("an event whose set-alarm answered EINVAL (the guest's business): %v", err)
	}
	if st := h.state(); st.Alarm == nil || *st.Alarm != t0 {
		t.Fatalf("committed %+v, want the first event's alarm alone", st)
	}
	if err := h.conn.Exec(`BEGIN`); err != nil {
		t.Fatal(err)
	}
	_ = h.tbl.NewEvent(h.id)
	if _, err := h.tbl.Begin(h.ctx, h.id); !errors.Is(err, hostmod.ErrInTransaction) || !strings.Contains(err.Error(), "started with Table.NewEvent") {
		t.Fatalf("Begin inside a NewEvent's transaction: %v", err)
	}
	_ = h.conn.Exec(`ROLLBACK`)
	// While an event begun with Begin is open, NewEvent refuses, naming
	// it, and a Begin waiting for its turn gives up with its context.
	ev, err := h.tbl.Begin(h.ctx, h.id)
	if err != nil {
		t.Fatal(err)
	}
	other := h.tbl.NewEvent(abi.ActorID{Tenant: "t", Class: "own", Name: "b"})
	if err := other.Err(); !errors.Is(err, hostmod.ErrEventOpen) || !strings.Contains(err.Error(), "of actor t/own/a (begun with Table.Begin)") {
		t.Fatalf("NewEvent while an event begun with Begin is open: %v", err)
	}
	ctx, cancel := context.WithTimeout(h.ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := h.tbl.Begin(ctx, h.id); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Begin while another event is open, until its context ended: %v", err)
	}
	if err := ev.End(nil); err != nil {
		t.Fatal(err)
	}
}

// Two goroutines run events on one Table (Begin, the guest's set-alarm
// and the host's own write, End) while a third delivers and tries
// NewEvent: events never see each other's alarm, every acknowledged
// event's write is there, the committed alarm is the last committed
// event's, nothing panics and the connection still works. Run it with
// -race too.
func TestTwoGoroutinesOnOneTable(t *testing.T) {
	h := newOwnHost(t, filepath.Join(t.TempDir(), "a.db"))
	const perGoroutine = 100
	c := &clock{now: time.UnixMilli(t0)} // every alarm is in the future
	var (
		mu    sync.Mutex
		acked = map[int64]bool{}
		wg    sync.WaitGroup
		stop  = make(chan struct{})
		errs  = make(chan error, 6)
	)
	// A panic inside SQLite, as two goroutines in one transaction cause,
	// fails the test by its name rather than end the process.
	recovered := func() {
		if r := recover(); r != nil {
			errs <- fmt.Errorf("panic: %v", r)
		}
	}
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer recovered()
			for i := range perGoroutine {
				at := t0 + 1000 + int64(2*i+g)
				ev, err := h.tbl.Begin(h.ctx, h.id)
				if err != nil {
					errs <- err
					return
				}
				ctx := hostmod.WithEvent(h.ctx, ev)
				res, err := h.mod.ExportedFunction("set").Call(ctx, api.EncodeI64(at), 0)
				if err == nil && uint32(res[0]) != 0 {
					err = fmt.Errorf("set-alarm: errno %d", uint32(res[0]))
				}
				if err == nil {
					res, err = h.mod.ExportedFunction("get").Call(ctx, 64)
				}
				if err == nil {
					if got, _ := h.mod.Memory().ReadUint64Le(64); uint32(res[0]) != 0 || int64(got) != at {
						err = fmt.Errorf("get-alarm in the event that set %d read %d (errno %d)", at, int64(got), uint32(res[0]))
					}
				}
				if err == nil {
					err = h.conn.Exec(fmt.Sprintf(`INSERT INTO notes VALUES ('%d')`, at))
				}
				var veto error
				if i%7 == 3 {
					veto = errors.New("the host rolls this one back")
				}
				if err := ev.End(errors.Join(err, veto)); err == nil {
					mu.Lock()
					acked[at] = true
					mu.Unlock()
				} else if !errors.Is(err, veto) {
					errs <- err
					return
				}
			}
		}()
	}
	var refused, notInTx int
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		defer recovered()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := h.tbl.DeliverAlarm(h.ctx, h.id, h.mod.ExportedFunction(abi.ExportOnAlarm).Call, hostmod.DeliverOptions{Clock: c}); err != nil {
				errs <- err
				return
			}
			switch err := h.tbl.NewEvent(h.id).Err(); {
			case errors.Is(err, hostmod.ErrEventOpen):
				refused++
			case errors.Is(err, hostmod.ErrNoTransaction):
				notInTx++
			default:
				errs <- fmt.Errorf("NewEvent beside the events begun: %v", err)
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-delivered
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d events acknowledged; NewEvent refused %d times, found no transaction %d times", len(acked), refused, notInTx)

	// Every acknowledged event's own write committed, and nothing else.
	st, _, err := h.conn.Prepare(`SELECT n FROM notes ORDER BY rowid`)
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	n := 0
	for st.Step() {
		var at int64
		fmt.Sscan(st.ColumnText(0), &at)
		if !acked[at] {
			t.Errorf("the write of an event not acknowledged (%d) committed", at)
		}
		last, n = at, n+1
	}
	if err := errors.Join(st.Err(), st.Close()); err != nil {
		t.Fatal(err)
	}
	if n != len(acked) {
		t.Fatalf("%d writes committed, %d events acknowledged", n, len(acked))
	}
	// The alarm is the last committed event's.
	if got := h.state(); got.Alarm == nil || *got.Alarm != last {
		t.Fatalf("committed alarm %v, the last committed event set %d", got.Alarm, last)
	}
	// The connection is not wedged: a new event commits.
	if e, ev := h.event("set", api.EncodeI64(t0+7), 0); e != 0 || ev.Err() != nil {
		t.Fatalf("an event after the goroutines: errno %d, %v", e, ev.Err())
	}
	ic, _, err := h.conn.Prepare(`PRAGMA integrity_check`)
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close()
	if !ic.Step() || ic.ColumnText(0) != "ok" {
		t.Fatalf("integrity_check: %q, %v", ic.ColumnText(0), ic.Err())
	}
}
