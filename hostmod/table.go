package hostmod

import (
	"context"
	"errors"
	"fmt"
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
// until Close; the connection stays the host's. Like the connection, a
// Table is used by one goroutine at a time: the host runs one event at a
// time per actor.
type Table struct {
	conn *sqlite3.Conn
	r    *Rows
}

// tableSQL are the statements of a Table: the alarm's tables in the
// connection's main database; its transactions are BEGIN IMMEDIATE, since
// other connections may share the host's database file.
var tableSQL = NewRowsSQL(RowsConfig{Schema: "main"})

// NewTable returns the alarm table of the actor whose database conn is,
// creating its tables if they are not there. With a transaction open on
// conn they are created on first use instead, inside it: then, should it
// roll back, so does their creation, and the next use creates them again.
func NewTable(conn *sqlite3.Conn) (*Table, error) {
	t := &Table{conn: conn, r: NewRows(conn, tableSQL)}
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

// ErrInTransaction is wrapped by the error of DeliverAlarm on a
// connection with a transaction open: a delivery runs in transactions of
// its own.
var ErrInTransaction = errors.New("a transaction is already open on the connection")

// Event is one event of an actor on a host's own connection, inside the
// transaction the host opened: call the guest with the context WithEvent
// returns, and its alarm functions write into that transaction.
type Event struct {
	ev   event
	call call
}

// NewEvent starts an event of actor id in the transaction open on the
// Table's connection. The host commits or rolls back that transaction as
// it would without alarms, after checking Err: an event with an error must
// not commit. With no transaction open (ErrNoTransaction), or an invalid
// id, the event's alarm functions answer EPERM and write nothing, and Err
// says why.
func (t *Table) NewEvent(id abi.ActorID) *Event {
	// The failure count is not read: set-alarm and clear-alarm reset it
	// with one write whatever it was.
	ev := &Event{}
	ev.Reset(id, t.r, -1)
	if err := id.Validate(); err != nil {
		ev.ev.alarms, ev.ev.storageErr = nil, err
	} else if t.conn.GetAutocommit() {
		ev.ev.alarms, ev.ev.storageErr = nil, ErrNoTransaction
	}
	return ev
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
// "Delivery"), with RunDue, as package engine's actors do: it reads the committed alarm and, when due,
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
	if !t.conn.GetAutocommit() {
		return Delivery{}, &abi.ActorError{ID: id, Op: "deliver", Err: ErrInTransaction}
	}
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
	// writes to memory then answers EFAULT). ctx must carry the event
	// (WithEvent); outside one the function answers EPERM, and without
	// an actor at all it panics, which wazero turns into a trap.
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
