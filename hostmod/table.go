package hostmod

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ncruces/go-sqlite3"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/clock"
)

// Table is the alarm of one actor in a database the host owns: a
// *sqlite3.Conn (ncruces/go-sqlite3) that the host opened, with whatever
// file layout, VFS and journal mode it chose. It is how a wazero host that
// runs its own instances and databases adopts alarms (docs/embedding.md):
//
//   - in each event, the host begins its transaction, starts an Event with
//     NewEvent and calls the guest with WithEvent's context: the guest's
//     set-alarm, get-alarm and clear-alarm (AlarmFunctions) then write the
//     alarm in the host's transaction, committed with the guest's writes or
//     rolled back with them;
//   - when the alarm is due, DeliverAlarm runs the guest's on-alarm through
//     the host's own instance, with the committed backoff of ABI.md.
//
// The Table creates its two tables (_wasmkeep_alarm, _wasmkeep_meta, in
// the connection's main database) and touches nothing else. It prepares its statements on first use and keeps them
// until Close; the connection stays the host's.
//
// A connection runs one event at a time, and a Table sees to it: Begin
// waits for the connection's other event, begun on any goroutine, to end,
// and so does DeliverAlarm, so a host whose request goroutines and timer
// share a connection loses nothing. NewEvent, for a host that opens its
// transactions itself, refuses an event while another is open on the
// connection (its Err names both). The Table's other methods, like the
// connection, are used between events or inside the caller's own, by one
// goroutine at a time.
type Table struct {
	conn *sqlite3.Conn
	r    *Rows
	// turn is the connection's one event at a time: it holds a value
	// from Begin to End and through a delivery; NewEvent holds it only
	// for its checks.
	turn chan struct{}
	mu   sync.Mutex // guards open and seq
	// open is the latest event on the connection, whose transaction may
	// still be open (seq 0: none yet); seq numbers the events from 1, for
	// the errors that name them.
	open openEvent
	seq  uint64
}

// openEvent names an event, for the error of one refused while it is open.
type openEvent struct {
	actor abi.ActorID
	seq   uint64
	how   string
	// marked: NewEvent's, whose transaction the savepoint eventMark
	// marks, so that the next event can tell whether it is still open.
	marked bool
}

func (o openEvent) String() string {
	return fmt.Sprintf("event %d of actor %s (%s)", o.seq, o.actor, o.how)
}

// eventMark is the savepoint NewEvent opens in the host's transaction:
// it goes with the transaction, so the next event finds it only while
// the transaction is still open.
const eventMark = "_wasmkeep_event"

// tableSQL are the statements of a Table: the alarm's tables in the
// connection's main database; its transactions are BEGIN IMMEDIATE, since
// other connections may share the host's database file.
var tableSQL = NewRowsSQL(RowsConfig{Schema: "main"})

// NewTable returns the alarm table of the actor whose database conn is,
// creating its tables if they are not there. With a transaction open on
// conn they are created on first use instead, inside it: then, should it
// roll back, so does their creation, and the next use creates them again.
func NewTable(conn *sqlite3.Conn) (*Table, error) {
	t := &Table{conn: conn, r: NewRows(conn, tableSQL), turn: make(chan struct{}, 1)}
	if conn.GetAutocommit() {
		if err := conn.Exec(tableSQL.create); err != nil {
			return nil, fmt.Errorf("hostmod: create the alarm's tables: %w", err)
		}
	}
	return t, nil
}

// Close finalises the Table's statements (a nil Table has none). The
// connection stays open.
func (t *Table) Close() error {
	if t == nil {
		return nil
	}
	return t.r.Close()
}

// State reads the committed alarm, its failure count and the meta rows an
// index updater reads (MetaAlarmIndexed, MetaInitDone), in the caller's
// transaction if one is open.
func (t *Table) State() (State, error) {
	cs, err := t.r.State()
	if err != nil {
		return State{}, err
	}
	return State{Alarm: cs.Alarm, Failures: cs.Failures, Inited: cs.InitDone,
		InitRecorded: cs.InitDone, Indexed: cs.Indexed}, nil
}

// Meta reads one meta row (MetaAlarmIndexed and the like).
func (t *Table) Meta(key string) (value string, ok bool, err error) { return t.r.Meta(key) }

// SetMeta writes one meta row, in the caller's transaction if one is open
// (otherwise the write commits by itself). An index updater records the
// entry that stands for the alarm with it (alarms.Actor.SetMeta).
func (t *Table) SetMeta(key, value string) error { return t.r.SetMeta(key, value) }

// DeadLetter reads the dead letter of the last alarm whose retries were
// given up (DeliverOptions.MaxAttempts).
func (t *Table) DeadLetter() (d DeadLetter, ok bool, err error) { return t.r.DeadLetter() }

// ErrNoTransaction is wrapped by Event.Err for an event started on a
// connection with no transaction open: the alarm the guest sets must commit with the
// event's other writes.
var ErrNoTransaction = errors.New("no transaction is open on the connection")

// ErrInTransaction is wrapped by the error of DeliverAlarm and Begin on a
// connection with a transaction open: a delivery, and an event begun with
// Begin, run in transactions of their own.
var ErrInTransaction = errors.New("a transaction is already open on the connection")

// ErrEventOpen is wrapped by the error of an event refused because another
// event is still open on the Table's connection (NewEvent's Err): a
// connection runs one event at a time, and an event that shared another's
// transaction would commit or roll back with it.
var ErrEventOpen = errors.New("another event is still open on the connection")

// Event is one event of an actor on a host's own connection, inside the
// transaction the host opened: call the guest with the context WithEvent
// returns, and its alarm functions write into that transaction.
type Event struct {
	ev   event
	call call
	// tbl is the Table of an event begun with Begin, until End.
	tbl *Table
}

// NewEvent starts an event of actor id in the transaction the host opened
// on the Table's connection. The host commits or rolls back that
// transaction as it would without alarms, after checking Err: an event
// with an error must not commit. With no transaction open
// (ErrNoTransaction), an invalid id, or another event still open on the
// connection (ErrEventOpen: one begun with Begin or a delivery, on any
// goroutine, or one NewEvent started whose transaction is not yet
// committed or rolled back), the event's alarm functions answer EPERM and
// write nothing, and Err says why.
//
// NewEvent marks the host's transaction with a savepoint, which goes with
// it. A host that starts its events with NewEvent runs them, and all its
// use of the connection, on one goroutine at a time: the Table cannot
// stop a second goroutine's statements while the first's run. Begin can.
func (t *Table) NewEvent(id abi.ActorID) *Event {
	// The failure count is not read: set-alarm and clear-alarm reset it
	// with one write whatever it was.
	ev := &Event{}
	ev.Reset(id, t.r, -1)
	if err := id.Validate(); err != nil {
		ev.ev.alarms, ev.ev.storageErr = nil, err
		return ev
	}
	seq := t.number()
	// While another goroutine's event or a delivery holds the connection,
	// the event is refused without touching it.
	held := true
	select {
	case t.turn <- struct{}{}:
		defer t.release()
	default:
		held = false
	}
	var err error
	switch {
	case !held:
		err = t.refusal(seq)
	case t.conn.GetAutocommit():
		err = ErrNoTransaction
	case t.markedOpen():
		err = t.refusal(seq)
	default:
		if err = t.conn.Exec(`SAVEPOINT ` + eventMark); err != nil {
			err = fmt.Errorf("mark the event's transaction: %w", err)
		} else {
			t.setOpen(openEvent{actor: id, seq: seq, how: "started with Table.NewEvent", marked: true})
		}
	}
	if err != nil {
		ev.ev.alarms, ev.ev.storageErr = nil, err
	}
	return ev
}

// Begin begins an event of actor id on the Table's connection: it waits
// until no other event (Begin's, on any goroutine) or delivery is open on
// the connection, begins a transaction (BEGIN IMMEDIATE) and starts the
// event in it. The host calls the guest with WithEvent's context, its own
// writes going to the same connection, then ends the event with End,
// which commits or rolls back and lets the next event begin. Events begun
// with Begin are serialised whichever goroutines run them, so none can
// write into another's transaction. ctx bounds the wait. An error means no
// event began: ctx ended, the id is invalid, a transaction is already open
// on the connection (ErrInTransaction; the host's own, or a NewEvent's
// event, named), or the BEGIN failed.
func (t *Table) Begin(ctx context.Context, id abi.ActorID) (*Event, error) {
	if err := id.Validate(); err != nil {
		return nil, err
	}
	select {
	case t.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, &abi.ActorError{ID: id, Op: "begin", Err: fmt.Errorf("waiting for %s to end: %w", t.latest(), ctx.Err())}
	}
	seq := t.number()
	if !t.conn.GetAutocommit() {
		what := "the host's own"
		if t.markedOpen() {
			what = "that of " + t.latest().String()
		}
		t.release()
		return nil, &abi.ActorError{ID: id, Op: "begin", Err: fmt.Errorf("event %d: %w: %s", seq, ErrInTransaction, what)}
	}
	t.setOpen(openEvent{actor: id, seq: seq, how: "begun with Table.Begin"})
	if err := t.r.Begin(); err != nil {
		t.release()
		return nil, &abi.ActorError{ID: id, Op: "begin", Err: err}
	}
	ev := &Event{}
	ev.Reset(id, t.r, -1)
	ev.tbl = t
	return ev, nil
}

// End ends an event begun with Begin: it commits the event's transaction
// when err is nil and the event has no error (Err), and rolls it back
// otherwise; then the connection's next event may begin. It returns what
// the event ended with: err and Err joined, or the commit's error (the
// transaction then rolled back). nil means the event committed. Ending an
// event twice, or one NewEvent started, is an error and does nothing.
func (ev *Event) End(err error) error {
	t := ev.tbl
	if t == nil {
		return &abi.ActorError{ID: ev.call.actor, Op: "end", Err: errors.New("not an event begun with Table.Begin, or one already ended")}
	}
	ev.tbl = nil
	defer t.release()
	if err = errors.Join(err, ev.Err()); err != nil {
		if rerr := t.r.Rollback(); rerr != nil {
			err = errors.Join(err, &abi.ActorError{ID: ev.call.actor, Op: "rollback", Err: rerr})
		}
		return err
	}
	if err := t.r.Commit(); err != nil {
		return &abi.ActorError{ID: ev.call.actor, Op: "commit", Err: err}
	}
	return nil
}

// release ends the turn of the event or delivery that holds it (it never
// waits: only the holder releases).
func (t *Table) release() {
	select {
	case <-t.turn:
	default:
	}
}

// number returns the next event's number.
func (t *Table) number() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	return t.seq
}

func (t *Table) setOpen(o openEvent) {
	t.mu.Lock()
	t.open = o
	t.mu.Unlock()
}

func (t *Table) latest() openEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.open
}

// markedOpen reports whether the transaction of the latest event NewEvent
// started is still open: its savepoint is still there. Releasing it, when
// it is, leaves the transaction as it was; it is opened again, so that the
// next event finds it too. The caller holds the turn.
func (t *Table) markedOpen() bool {
	if !t.latest().marked || t.conn.Exec(`RELEASE `+eventMark) != nil {
		return false
	}
	_ = t.conn.Exec(`SAVEPOINT ` + eventMark)
	return true
}

// refusal is the error of event seq, refused while the latest event on
// the connection is open.
func (t *Table) refusal(seq uint64) error {
	return fmt.Errorf("event %d refused: %s is still open on the connection: %w", seq, t.latest(), ErrEventOpen)
}

// Reset makes ev a new event of actor id whose alarm is s, inside the
// transaction the host opened on it, with the committed failure count
// failures (-1 when unknown: set-alarm and clear-alarm then reset it with
// a write whatever it was). With a nil s the alarm functions answer EPERM
// and write nothing, as outside an event (the guest's _initialize). It is
// for a host that keeps one Event per actor and reuses it from event to
// event, so that an event allocates nothing (NewEvent makes one on a
// Table's connection); such a host puts it in its calls' context with
// WithEvent, or with ContextValue.
func (ev *Event) Reset(id abi.ActorID, s AlarmStore, failures int) {
	*ev = Event{ev: event{alarms: s, failures: failures}, call: call{actor: id}}
	ev.call.ev = &ev.ev
}

// WithEvent returns ctx carrying ev, for the calls into the guest in the
// event: the alarm functions find their actor and transaction there.
func WithEvent(ctx context.Context, ev *Event) context.Context { return withCall(ctx, &ev.call) }

// ContextValue is the value the context of a call in ev holds for key,
// and ok is true when key is the alarm functions' own: for a host whose
// calls carry ev in a context.Context type of its own, made once and
// reused from call to call (package engine's), whose Value method asks
// ContextValue first and answers v when ok. WithEvent is the same for a
// context.Context of the standard library.
func (ev *Event) ContextValue(key any) (v any, ok bool) {
	if _, ok := key.(ctxKey); ok {
		return &ev.call, true
	}
	return nil, false
}

// Failures is the alarm's failure count in the event's transaction: what
// Reset gave, or 0 once set-alarm or clear-alarm reset it.
func (ev *Event) Failures() int { return ev.ev.failures }

// DatabaseErr is the database error an alarm function met in the event
// (the guest saw EIO), as the database returned it; nil if none. Err
// wraps it, naming the actor.
func (ev *Event) DatabaseErr() error {
	if ev.ev.alarms == nil {
		return nil // the event never started (Err says why)
	}
	return ev.ev.storageErr
}

// Result is what the event did to the alarm, as the engine's events
// report it (a host passes its Alarm to the plugin's Arm when
// AlarmChanged): AlarmChanged once set-alarm or clear-alarm succeeded, and
// then Alarm, the alarm the event leaves (nil for a clear; the event's
// own value: the host may keep the pointer as its committed alarm, and
// must not write through it). It has no Response (the host keeps its own)
// and no failure count (an event that touched the alarm resets it to 0).
func (ev *Event) Result() Result {
	if !ev.ev.alarmTouched {
		return Result{}
	}
	return Result{Alarm: ev.ev.alarm, AlarmChanged: true}
}

// Err is the database error an alarm function met in the event (the guest
// saw EIO), or why the event could not start (NewEvent); nil if none. An
// event with one must roll back.
func (ev *Event) Err() error {
	if ev.ev.storageErr != nil {
		return &abi.ActorError{ID: ev.call.actor, Op: "alarm", Err: ev.ev.storageErr}
	}
	return nil
}

// Invoker calls the guest's on-alarm export on the host's own instance,
// with ctx (which carries the delivery's event) and on-alarm's two
// parameters, the scheduled time (i64) and the retry count (i32); it
// returns the export's results. api.Function's Call is one:
// inst.ExportedFunction("on-alarm").Call.
type Invoker func(ctx context.Context, params ...uint64) ([]uint64, error)

// DeliverOptions configure Table.DeliverAlarm. The zero value is the
// defaults (DefaultAlarmDeadline, DefaultRetryBase, DefaultRetryMax, no
// limit of attempts), which package engine's are too.
type DeliverOptions struct {
	// Clock says when it is (nil: the system clock): alarms are due by it.
	Clock clock.Clock
	// Deadline bounds one on-alarm run (0: DefaultAlarmDeadline). A run
	// stopped by it is a failure of the guest, retried with the backoff.
	// The guest is stopped only if the host's runtime closes modules
	// when their context is done (CheckRuntime); the instance is then
	// closed, and the host makes a new one for the next event.
	Deadline time.Duration
	// RetryBase and RetryMax are the backoff of failed runs: the first
	// retry after RetryBase, doubling up to RetryMax (0:
	// DefaultRetryBase, DefaultRetryMax).
	RetryBase, RetryMax time.Duration
	// MaxAttempts is how many runs in a row may fail before the retries
	// are given up and the dead letter kept (0: no limit).
	MaxAttempts int
}

// DeliverAlarm delivers the actor's alarm if it is due (ABI.md,
// "Delivery"), with RunDue, as package engine's actors do: it waits for
// an event begun with Begin on the connection, on any goroutine, to end
// (ctx bounds the wait; never call it inside such an event, which would
// wait for itself), then reads the committed alarm and, when due,
// runs on-alarm(scheduled, retry count) through onAlarm in a transaction
// of its own. On success the alarm is gone unless the handler set one,
// and the failure count is reset; on failure (a non-zero result, a trap,
// the deadline) the handler's writes roll back and the retry is committed
// (1 s doubling to 5 min by default), so the backoff survives restarts.
//
// A not-due or absent alarm runs nothing (Ran is false) and reports the
// committed state, so the caller can re-arm its timer. An error (not
// Delivery.Err, which is the guest's) means the host failed: nothing
// committed, and the same alarm is due again. No transaction may be open
// on the connection.
func (t *Table) DeliverAlarm(ctx context.Context, id abi.ActorID, onAlarm Invoker, o DeliverOptions) (Delivery, error) {
	if err := id.Validate(); err != nil {
		return Delivery{}, err
	}
	select {
	case t.turn <- struct{}{}:
	case <-ctx.Done():
		return Delivery{}, &abi.ActorError{ID: id, Op: "deliver", Err: fmt.Errorf("waiting for %s to end: %w", t.latest(), ctx.Err())}
	}
	defer t.release()
	if !t.conn.GetAutocommit() {
		return Delivery{}, &abi.ActorError{ID: id, Op: "deliver", Err: ErrInTransaction}
	}
	t.setOpen(openEvent{actor: id, seq: t.number(), how: "a delivery"})
	if o.Clock == nil {
		o.Clock = clock.System{}
	}
	if o.Deadline <= 0 {
		o.Deadline = DefaultAlarmDeadline
	}
	if o.RetryBase <= 0 {
		o.RetryBase = DefaultRetryBase
	}
	if o.RetryMax <= 0 {
		o.RetryMax = DefaultRetryMax
	}
	now := o.Clock.Now().UnixMilli()
	st, err := t.State()
	if err != nil {
		return Delivery{}, &abi.ActorError{ID: id, Op: "read committed state", Err: err}
	}
	if st.Alarm == nil || *st.Alarm > now {
		return Delivery{Result: Result{Alarm: st.Alarm, Failures: st.Failures}}, nil
	}
	at, failures := *st.Alarm, st.Failures
	ev := &Event{}
	run := func() error {
		cctx, cancel := context.WithTimeout(WithEvent(ctx, ev), o.Deadline)
		defer cancel()
		res, err := onAlarm(cctx, api.EncodeI64(at), uint64(uint32(failures)))
		switch {
		case ev.ev.storageErr != nil:
			return &abi.ActorError{ID: id, Err: fmt.Errorf("%s: database: %w", abi.ExportOnAlarm, ev.ev.storageErr)}
		case err != nil && ctx.Err() != nil:
			// The caller gave up, not the guest: no failure is counted.
			return &abi.ActorError{ID: id, Op: abi.ExportOnAlarm, Err: err}
		case err != nil:
			if errors.Is(cctx.Err(), context.DeadlineExceeded) {
				err = fmt.Errorf("stopped at the %v deadline: %w", o.Deadline, err)
			}
			return &abi.ActorError{ID: id, Err: &GuestError{Actor: id, Export: abi.ExportOnAlarm, Cause: err}}
		case len(res) != 1:
			return &abi.ActorError{ID: id, Err: &GuestError{Actor: id, Export: abi.ExportOnAlarm,
				Cause: fmt.Errorf("returned %d results, want one i32", len(res))}}
		case uint32(res[0]) != 0:
			return &abi.ActorError{ID: id, Err: &GuestError{Actor: id, Export: abi.ExportOnAlarm, Code: uint32(res[0])}}
		}
		return nil
	}
	before := &at
	finish := func(next *int64, n int) (Result, error) {
		if err := t.r.Commit(); err != nil {
			return Result{}, &abi.ActorError{ID: id, Op: "commit", Err: err}
		}
		return Result{Alarm: next, Failures: n, AlarmChanged: !sameAlarm(before, next)}, nil
	}
	return RunDue(Due{Actor: id, Store: t.r, Event: ev, At: at, Now: now, Failures: failures,
		Retry: RetryPolicy{Base: o.RetryBase, Max: o.RetryMax, MaxAttempts: o.MaxAttempts}}, run, finish)
}

// HostFunction is one host function of the ABI with its handler, for a
// host that registers host functions of its own rather than instantiating
// the plugin's modules (as Extism and many frameworks do).
type HostFunction struct {
	Function
	// Call runs the function: it reads its parameters from stack and
	// writes its one result, the errno, to stack[0]. mem is the calling
	// guest's memory (nil for a guest without one: a function that
	// writes to memory then answers EFAULT): with a framework that
	// wraps wazero, the guest's own, not the framework's. ctx carries
	// the event (WithEvent); without one (the guest's _initialize, or a
	// call from a host that forgot) the function answers EPERM, as
	// outside an event, and writes nothing: it never traps.
	Call func(ctx context.Context, mem api.Memory, stack []uint64)
}

// AlarmFunctions returns the functions of the wasmkeep:alarm module
// (abi.AlarmModule) with their handlers, in ABI.md's order: the same
// handlers, errnos and bounds checks as the plugin's own module.
func AlarmFunctions() []HostFunction {
	var out []HostFunction
	for _, f := range hostFuncs {
		if f.module != abi.AlarmModule {
			continue
		}
		h := f.handler
		out = append(out, HostFunction{
			Function: Function{Module: f.module, Name: f.name, Params: append([]api.ValueType(nil), f.params...),
				ParamNames: append([]string(nil), f.paramNames...)},
			Call: func(ctx context.Context, mem api.Memory, stack []uint64) { stack[0] = uint64(h(ctx, mem, stack)) },
		})
	}
	return out
}

// InstantiateAlarms instantiates the wasmkeep:alarm module alone in r, a
// runtime the host owns, after checking that r can stop a guest at its
// deadline (CheckRuntime): for a host that runs its own instances (Table)
// and provides its own request and data imports. A host that registers its
// functions its own way uses AlarmFunctions instead.
func InstantiateAlarms(ctx context.Context, r wazero.Runtime) error {
	if err := CheckRuntime(ctx, r); err != nil {
		return err
	}
	if _, err := NewAlarmModuleBuilder(r).Instantiate(ctx); err != nil {
		return fmt.Errorf("hostmod: instantiate %s: %w", abi.AlarmModule, err)
	}
	return nil
}
