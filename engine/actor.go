package engine

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/hostmod"
)

// ErrClosed is returned by an Actor after Close.
var ErrClosed = errors.New("actor closed")

// ErrNoExport is wrapped by the error of an event whose export the guest
// does not have (a request to a class without on-request): retrying cannot
// help.
var ErrNoExport = errors.New("missing export")

// Actor is one actor: its database and, while it runs, one instance of its
// class. Methods are safe for concurrent use and run one event at a time.
//
// Under the engine's residency budget an idle actor may sleep: its instance
// and its database are closed, and the next call opens them again (waiting
// for room, or failing with ErrNoRoom, when every other open actor is busy).
type Actor struct {
	e     *Engine
	id    abi.ActorID
	class *Class
	path  string

	mu    sync.Mutex
	store *Store // nil while the actor sleeps
	mod   api.Module
	mem   *guestMemory // mod's memory
	// fns are mod's exports looked up so far: wazero makes a new function
	// (with its own stack) on each lookup, so each is looked up once per
	// instance. A Function is not safe for concurrent use; the actor runs
	// one event at a time.
	fns map[string]api.Function
	// cc is the context of every call into the instance, and stack the
	// parameters and result of each (api.Function.CallWithStack): both
	// reused, so a call allocates neither. ev is the running event's state.
	cc     *callCtx
	slotW  slotWaiter           // its wait for a guest slot
	room   atomic.Pointer[Room] // the room its next call uses (UseRoom)
	stack  [2]uint64
	ev     event
	inited bool
	closed bool
	// restored: the database was written from a snapshot no one checked
	// yet; its first open checks it (OpenRestored).
	restored bool
	// deferCommit: the commit finish makes is a delivery's, deferred
	// (Store.CommitDeferred; WithSyncedDeliveries). pending is the last
	// deferred commit's durability, waited for at the start of the next
	// call (wake): the output gate. unsettled is the same until it is
	// waited for; it stays when an upload of an image that holds the
	// commit returned (Replicated), which lifts the gate, and Settle, a
	// close and a reopening of the database wait for it. imaged is what
	// pending was when SnapshotForUpload last made an image.
	deferCommit bool
	// replicated: Replicated was called since the last deferred commit,
	// so this host uploads the actor's deliveries; the next one's commit
	// asks the journal for its batch lazily (Store.commitDeferred), and a
	// delivery whose upload was not reported so asks at once.
	replicated bool
	pending    Durability
	unsettled  Durability
	imaged     Durability
	// The committed alarm, failure count and the meta rows an index
	// updater reads, read once after the database opens and kept after
	// each commit (only this Actor writes them; Lock forgets them).
	known    bool
	alarm    *int64
	failures int
	initMeta bool
	indexed  string
	// stateReads counts the times the committed state was read from the
	// database (tests check that warm paths read nothing back).
	stateReads int

	stdout, stderr *guestOutput

	// Residency bookkeeping, guarded by the engine's residency lock.
	dbElem, instElem *list.Element
	lastUsed         time.Time
}

// Open opens the actor whose database is at path (created if missing),
// within the residency budget. The instance is created on the first event.
func (e *Engine) Open(ctx context.Context, id abi.ActorID, c *Class, path string) (*Actor, error) {
	return e.open(ctx, id, c, path, false)
}

// OpenRestored is Open for a database a restore just wrote at path from a
// snapshot that was not checked (WriteSnapshot of bytes whose format
// CheckSnapshotFormat accepted): the open checks it as CheckSnapshot
// checks the bytes, on the connection the actor then uses, before
// anything is set or written in it, so that a takeover's restore
// attaches the database once rather than twice. A snapshot that fails
// gives an error wrapping ErrBadSnapshot. Whatever the error, the
// database and its WAL are removed: the snapshot is the bucket's, and
// nothing was committed on it here.
func (e *Engine) OpenRestored(ctx context.Context, id abi.ActorID, c *Class, path string) (*Actor, error) {
	a, err := e.open(ctx, id, c, path, true)
	if err != nil {
		if rerr := RemoveDatabase(path); rerr != nil {
			return nil, fmt.Errorf("%w (and removing the restored database: %v)", err, rerr)
		}
		return nil, err
	}
	return a, nil
}

func (e *Engine) open(ctx context.Context, id abi.ActorID, c *Class, path string, restored bool) (*Actor, error) {
	a := &Actor{e: e, id: id, class: c, path: path, restored: restored,
		stdout: newGuestOutput(e, id, "stdout", e.cfg.stdout), stderr: newGuestOutput(e, id, "stderr", e.cfg.stderr)}
	a.mu.Lock()
	defer a.end()
	if err := a.wake(ctx); err != nil {
		return nil, err
	}
	if _, _, err := a.committed(); err != nil {
		a.closeLocked(ctx)
		return nil, err
	}
	a.inited = a.initMeta
	return a, nil
}

// wake opens the database of a sleeping actor, within the budget (a.mu
// held). The actor is marked used when the call ends (end).
func (a *Actor) wake(ctx context.Context) error {
	return a.wakeGated(ctx, !hostmod.IsUnreported(ctx))
}

// wakeGated is wake; with gate false, a delivery's deferred commit is not
// waited for while the database is still open (a read the caller reports
// to no one, or an image for an upload: SnapshotForUpload).
func (a *Actor) wakeGated(ctx context.Context, gate bool) error {
	if a.closed {
		return &abi.ActorError{ID: a.id, Err: ErrClosed}
	}
	// The output gate: a delivery's deferred commit is durable before
	// this call reads, writes or reports anything, and before the
	// database opens again (but for a read the caller reports to no one,
	// on the database still open).
	if (a.unsettled != nil && a.store == nil) || (a.pending != nil && gate) {
		if err := a.waitPending(); err != nil {
			return err
		}
	}
	if a.store != nil {
		return nil
	}
	if err := a.e.res.acquireDB(ctx, a); err != nil {
		return &abi.ActorError{ID: a.id, Op: "open database", Err: err}
	}
	st, err := openStore(a.path, a.e.cfg.durable, a.restored)
	if err != nil {
		a.e.res.releaseDB(a)
		return &abi.ActorError{ID: a.id, Err: err}
	}
	a.store, a.restored = st, false
	return nil
}

// waitPending waits for the last deferred commit to be durable (a.mu
// held).
func (a *Actor) waitPending() error {
	d := a.unsettled
	if d == nil {
		d = a.pending
	}
	if err := d.Wait(); err != nil {
		return &abi.ActorError{ID: a.id, Op: "wait for the last delivery's commit to be durable", Err: err}
	}
	a.pending, a.unsettled, a.imaged = nil, nil, nil
	return nil
}

// sleep closes the instance and, with db, the database (a.mu held, the
// residency slots already passed on).
func (a *Actor) sleep(db bool) {
	if a.mod != nil {
		a.mem.closingIdle() // no call runs: its memory may serve another instance
		_ = a.mod.Close(context.Background())
		a.dropInstance()
	}
	if db && a.store != nil {
		_ = a.store.Close()
		a.store = nil
		a.known = false
	}
}

// end marks the actor used, unlocks it after a call and lets actors
// waiting for room consider it: one taking of the residency lock per call.
func (a *Actor) end() { a.e.res.idle(a) }

// ID returns the actor's identity.
func (a *Actor) ID() abi.ActorID { return a.id }

// UseRoom makes r (Engine.TryRoom, Engine.AwaitRoom) the room of the
// actor's next guest call: that call uses it up as it asks for a slot. A
// room no call used is the caller's to Release.
func (a *Actor) UseRoom(r *Room) {
	if old := a.room.Swap(r); old != nil && old != r {
		old.Release()
	}
}

// Asleep reports whether the actor's database is closed under the budget.
func (a *Actor) Asleep() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.store == nil
}

// Close closes the instance and the database.
func (a *Actor) Close(ctx context.Context) error {
	a.mu.Lock()
	defer a.end()
	return a.closeLocked(ctx)
}

func (a *Actor) closeLocked(ctx context.Context) error {
	if a.closed {
		return nil
	}
	a.closed = true
	a.discard(ctx)
	var err error
	if a.unsettled != nil {
		// Closed for good: no later call of this actor waits for it.
		err = a.waitPending()
	}
	if a.store != nil {
		if cerr := a.store.Close(); err == nil {
			err = cerr
		}
		a.store = nil
		a.known = false
		a.e.res.releaseDB(a)
	}
	return err
}

// discard closes the instance; a fresh one serves the next event.
func (a *Actor) discard(ctx context.Context) {
	if a.mod != nil {
		_ = a.mod.Close(context.WithoutCancel(ctx))
		a.dropInstance()
		a.e.res.releaseInst(a)
	}
}

// dropInstance forgets the closed instance: its exports, and the deadline
// timer and the watch of the caller's context that its calls armed.
func (a *Actor) dropInstance() {
	a.mod, a.mem, a.fns = nil, nil, nil
	if a.cc != nil {
		a.cc.release()
	}
}

// State reads the committed alarm state. Its Alarm is the actor's own
// value: do not write through it.
func (a *Actor) State(ctx context.Context) (hostmod.State, error) {
	a.mu.Lock()
	defer a.end()
	if err := a.wake(ctx); err != nil {
		return hostmod.State{}, err
	}
	at, n, err := a.committed()
	if err != nil {
		return hostmod.State{}, err
	}
	return hostmod.State{Alarm: at, Failures: n, Inited: a.inited, InitRecorded: a.initMeta, Indexed: a.indexed}, nil
}

// DeadLetter returns the actor's dead letter: the last alarm whose retries
// were given up (WithMaxAttempts). ok is false when none was.
func (a *Actor) DeadLetter(ctx context.Context) (d hostmod.DeadLetter, ok bool, err error) {
	a.mu.Lock()
	defer a.end()
	if err := a.wake(ctx); err != nil {
		return hostmod.DeadLetter{}, false, err
	}
	d, ok, err = a.store.DeadLetter()
	if err != nil {
		return hostmod.DeadLetter{}, false, &abi.ActorError{ID: a.id, Op: "read dead letter", Err: err}
	}
	return d, ok, nil
}

// Snapshot returns the actor's committed database as one SQLite file
// image (Store.Snapshot), holding the actor meanwhile.
func (a *Actor) Snapshot(ctx context.Context) ([]byte, error) { return a.SnapshotTo(ctx, nil) }

// SnapshotTo is Snapshot into buf[:0] (Store.SnapshotTo), for a host that
// reuses its buffers from one upload to the next. The image carries the
// schema's format version in its header (user_version), stamped here on a
// database that has none (docs/design.md#format-versions).
func (a *Actor) SnapshotTo(ctx context.Context, buf []byte) ([]byte, error) {
	return a.snapshotTo(ctx, buf, true)
}

// SnapshotForUpload is SnapshotTo for an upload that makes the image
// durable elsewhere (a bucket) before anything is told of it: it does not
// wait for the last delivery's commit to be durable on this node (the
// output gate; docs/design.md#output-gate), so the upload and the local
// sync run at once. The image may then hold a delivery a power cut can
// still undo in the local files; a host that uses it restores from its
// upload after a crash, and records the local file as matching an upload
// (the node's sidecar) only once Settle has returned.
func (a *Actor) SnapshotForUpload(ctx context.Context, buf []byte) ([]byte, error) {
	return a.snapshotTo(ctx, buf, false)
}

func (a *Actor) snapshotTo(ctx context.Context, buf []byte, gate bool) ([]byte, error) {
	a.mu.Lock()
	defer a.end()
	if err := a.wakeGated(ctx, gate); err != nil {
		return nil, err
	}
	b, err := a.store.SnapshotTo(buf)
	if err == nil {
		stampSchemaVersion(b)
		a.imaged = a.pending
	}
	return b, err
}

// Replicated tells the actor that the image SnapshotForUpload last made
// is in the bucket, uploaded under a hold still valid once it landed: the
// cluster reads the actor from there (a restore after a power cut
// downloads it, as no sidecar names it until Settle returned), so the
// actor's next call need not wait for the commits that image holds to be
// durable on this node. Settle, a close and a reopening of its database
// still wait for them. A commit made after that image keeps the gate.
// Without the journal, or once the actor's calls waited already, it does
// nothing. The actor's next delivery then asks the journal for its
// commit's sync within 20 ms rather than 1 (a batch gathers more
// commits): its upload is expected to make it durable first, and a
// delivery whose upload is not reported so asks at once.
func (a *Actor) Replicated() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending != nil && a.pending == a.imaged {
		a.pending = nil
	}
	a.replicated = true
	a.imaged = nil
}

// Settle returns once every commit of the actor is durable on this node:
// the last delivery's, which the output gate lets an upload read before
// it is (SnapshotForUpload). Nothing waits without the journal, or when
// the actor's calls since have waited already.
func (a *Actor) Settle() error {
	a.mu.Lock()
	defer a.end()
	if a.unsettled == nil {
		return nil
	}
	return a.waitPending()
}

// SetMeta commits one meta row (key, value) in a transaction of its own:
// what an index updater writes between an event and its upload (the
// alarm_indexed entry, the owner fence). Unlike a write through Lock, the
// committed state the actor keeps stays known, so the next State or event
// reads nothing back from the database.
func (a *Actor) SetMeta(ctx context.Context, key, value string) error {
	a.mu.Lock()
	defer a.end()
	if err := a.wake(ctx); err != nil {
		return err
	}
	// One statement outside any transaction is its own transaction: SQLite
	// commits it, or rolls it back, as BEGIN and COMMIT around it would,
	// without running those two statements.
	if err := a.store.SetMeta(key, value); err != nil {
		a.known = false // whatever failed, the state is read back
		return &abi.ActorError{ID: a.id, Op: "commit meta " + key, Err: err}
	}
	a.metaCommitted(key, value)
	return nil
}

// metaCommitted keeps what the actor knows of its committed state in step
// with a meta row just committed.
func (a *Actor) metaCommitted(key, value string) {
	switch key {
	case hostmod.MetaAlarmIndexed:
		a.indexed = value
	case hostmod.MetaInitDone:
		a.initMeta = true
	case hostmod.MetaAlarmFailures:
		a.known = false // kept as a number: read it back
	}
}

// Lock runs f while holding the actor, so no event runs meanwhile. A
// sleeping actor's database is opened first.
func (a *Actor) Lock(f func(*Store) error) error {
	a.mu.Lock()
	defer a.end()
	if err := a.wake(context.Background()); err != nil {
		return err
	}
	a.known = false // f may write anything
	return f(a.store)
}

// Request runs on-request with body as the request and commits its writes
// when it returns 0. Before the first event of a new actor it runs on-init.
func (a *Actor) Request(ctx context.Context, body []byte) (hostmod.Result, error) {
	a.mu.Lock()
	defer a.end()
	if err := a.wake(ctx); err != nil {
		return hostmod.Result{}, err
	}
	if err := a.ensureInit(ctx); err != nil {
		return hostmod.Result{}, err
	}
	if !a.class.onRequest {
		return hostmod.Result{}, &abi.ActorError{ID: a.id, Err: fmt.Errorf("%w: class %s does not export %q", ErrNoExport, a.class.Name, abi.ExportOnRequest)}
	}
	return a.event(ctx, abi.ExportOnRequest, body, []uint64{uint64(uint32(len(body)))})
}

// Init runs on-init if it has not run yet. Request does this by itself.
func (a *Actor) Init(ctx context.Context) error {
	a.mu.Lock()
	defer a.end()
	if err := a.wake(ctx); err != nil {
		return err
	}
	return a.ensureInit(ctx)
}

func (a *Actor) ensureInit(ctx context.Context) error {
	if a.inited {
		return nil
	}
	if a.class.onInit {
		if _, err := a.event(ctx, abi.ExportOnInit, nil, nil); err != nil {
			return err
		}
	} else if _, err := a.event(ctx, "", nil, nil); err != nil {
		return err
	}
	return nil
}

// committed returns the committed alarm and failure count, reading them
// (with the meta rows State reports) once after the database opens, in
// one statement (a.mu held, no transaction open).
func (a *Actor) committed() (*int64, int, error) {
	if a.known {
		return a.alarm, a.failures, nil
	}
	a.stateReads++
	cs, err := a.store.State()
	if err != nil {
		return nil, 0, &abi.ActorError{ID: a.id, Op: "read committed state", Err: err}
	}
	a.alarm, a.failures, a.initMeta, a.indexed, a.known = cs.Alarm, cs.Failures, cs.InitDone, cs.Indexed, true
	return a.alarm, a.failures, nil
}

// orZero is *p, or 0 for nil: an alarm in a log line, 0 for none.
func orZero(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func sameAlarm(x, y *int64) bool {
	if x == nil || y == nil {
		return x == y
	}
	return *x == *y
}

// event runs one export in a transaction; export "" runs nothing (it only
// records on-init for guests without one).
func (a *Actor) event(ctx context.Context, export string, req []byte, params []uint64) (hostmod.Result, error) {
	return a.eventKeyed(ctx, export, req, params, nil)
}

// eventKeyed is event with an idempotency key to record in the event's
// transaction with its response (nil: none).
func (a *Actor) eventKeyed(ctx context.Context, export string, req []byte, params []uint64, rec *idemRecord) (hostmod.Result, error) {
	before, failures, err := a.committed()
	if err != nil {
		return hostmod.Result{}, err
	}
	if err := a.store.Begin(); err != nil {
		return hostmod.Result{}, &abi.ActorError{ID: a.id, Op: "begin", Err: err}
	}
	defer a.store.Rollback()
	ev := a.newEvent(req, failures)
	defer a.endEvent()
	if export != "" {
		code, err := a.call(ctx, ev, export, params, a.e.cfg.eventDeadlineOf(a.class.Name))
		if err != nil {
			return hostmod.Result{}, err
		}
		if code != 0 {
			return hostmod.Result{}, &abi.ActorError{ID: a.id, Err: &hostmod.GuestError{Actor: a.id, Export: export, Code: code, Said: a.stderr.takeLast()}}
		}
	}
	if !a.inited {
		if err := a.store.SetMeta(hostmod.MetaInitDone, "1"); err != nil {
			return hostmod.Result{}, &abi.ActorError{ID: a.id, Op: "record on-init", Err: err}
		}
	}
	if rec != nil {
		if err := a.record(rec, ev.response); err != nil {
			return hostmod.Result{}, err
		}
	}
	after := before
	if r := ev.alarm.Result(); r.AlarmChanged {
		after = r.Alarm
	}
	res, err := a.finish(ctx, before, after, ev.alarm.Failures(), ev.response, nil)
	if err != nil {
		return hostmod.Result{}, err
	}
	if !a.inited {
		a.initMeta = true // written above, committed
	}
	a.inited = true
	return res, nil
}

// newEvent starts the state of an event in the actor's reused one.
func (a *Actor) newEvent(req []byte, failures int) *event {
	a.ev = event{store: a.store, request: req}
	a.ev.alarm.Reset(a.id, a.store, failures)
	return &a.ev
}

// endEvent forgets the event's state, so that the actor keeps no request
// or response after it.
func (a *Actor) endEvent() { a.ev = event{} }

// finish commits an event that leaves the alarm after and the failure
// count n, and keeps them as the committed state.
// A hook (nil: none) runs just before the commit.
func (a *Actor) finish(ctx context.Context, before, after *int64, n int, response []byte, hook BeforeCommit) (hostmod.Result, error) {
	res := hostmod.Result{Response: response, Alarm: after, Failures: n, AlarmChanged: !sameAlarm(before, after)}
	var p *Pending
	if hook != nil {
		p = &Pending{a: a, open: true, State: hostmod.State{Alarm: res.Alarm, Failures: n, Inited: a.inited, InitRecorded: a.initMeta, Indexed: a.indexed}}
		err := hook(ctx, p)
		p.open = false
		if err != nil {
			return hostmod.Result{}, err // the caller's deferred Rollback undoes the event
		}
	}
	var err error
	if a.deferCommit {
		var d Durability
		replicated := a.replicated
		a.replicated = false
		if d, err = a.store.commitDeferred(replicated); d != nil {
			a.pending, a.unsettled = d, d
		}
	} else {
		err = a.store.Commit()
	}
	if err != nil {
		a.known = false
		return hostmod.Result{}, &abi.ActorError{ID: a.id, Op: "commit", Err: err}
	}

	a.alarm, a.failures, a.known = after, n, true
	if p != nil {
		for _, m := range p.set {
			a.metaCommitted(m.key, m.value)
		}
	}
	return res, nil
}

// call runs an export of the instance (creating one if needed) within the
// event ev. A trap, a deadline or a storage error discards the instance and
// returns an error; otherwise it returns the export's i32 result.
func (a *Actor) call(ctx context.Context, ev *event, export string, params []uint64, deadline time.Duration) (uint32, error) {
	a.stderr.takeLast() // the error of this event names only its own output
	if a.mod != nil && a.mod.IsClosed() {
		a.dropInstance()
		a.e.res.releaseInst(a)
	}
	fresh := a.mod == nil
	if fresh {
		if err := a.e.res.acquireInst(ctx, a); err != nil {
			return 0, &abi.ActorError{ID: a.id, Op: "start an instance", Err: err}
		}
	}
	// A guest slot (guestslots.go) for the instance's _initialize and the
	// call: the deadline counts from when it is given.
	room := a.room.Swap(nil)
	slot, err := a.e.slots.acquire(ctx, a.id.Tenant, &a.slotW, room)
	if err != nil {
		if fresh {
			a.e.res.releaseInst(a)
		}
		return 0, &abi.ActorError{ID: a.id, Op: "run " + export, Err: err}
	}
	defer a.e.slots.release(a.id.Tenant, slot)
	if fresh {
		m, mem, err := a.e.instantiate(ctx, a.id, a.class, a.stdout, a.stderr)
		if err != nil {
			a.e.res.releaseInst(a)
			return 0, &abi.ActorError{ID: a.id, Err: &hostmod.GuestError{Actor: a.id, Export: "_initialize", Cause: err, Said: a.stderr.takeLast()}}
		}
		a.mod, a.mem, a.fns = m, mem, nil
	}
	a.mem.takeRefusal()
	fn := a.fns[export]
	if fn == nil {
		fn = a.mod.ExportedFunction(export)
		if fn != nil {
			if a.fns == nil {
				a.fns = make(map[string]api.Function, 2)
			}
			a.fns[export] = fn
		}
	}
	if fn == nil {
		return 0, &abi.ActorError{ID: a.id, Err: fmt.Errorf("%w: class %s does not export %q", ErrNoExport, a.class.Name, export)}
	}
	if a.cc == nil {
		a.cc = newCallCtx(a.id)
	}
	copy(a.stack[:], params)
	a.cc.begin(ctx, ev, deadline)
	mem := a.mem
	mem.enter()
	err = fn.CallWithStack(a.cc, a.stack[:])
	mem.exit()
	stopped := a.cc.end()
	refused := a.mem.takeRefusal()
	if err != nil {
		// A trap or an exit leaves the instance in an unknown state, and a
		// deadline closed it: a fresh one serves the next event.
		a.discard(ctx)
		if stopped == context.DeadlineExceeded && ctx.Err() == nil {
			err = fmt.Errorf("stopped at the %v deadline: %w", deadline, err)
		}
		if refused != nil {
			// Most guests trap or exit when memory.grow fails: say why.
			err = fmt.Errorf("%w; then: %w", refused, err)
		}
		return 0, &abi.ActorError{ID: a.id, Err: &hostmod.GuestError{Actor: a.id, Export: export, Cause: err, Said: a.stderr.takeLast()}}
	}
	if err := ev.dbErr(); err != nil {
		return 0, &abi.ActorError{ID: a.id, Err: fmt.Errorf("%s: database: %w", export, err)}
	}
	if refused != nil {
		a.e.cfg.logger.Warn("memory.grow refused; the guest went on", "actor", a.id.String(), "export", export, "error", refused)
	}
	return uint32(a.stack[0]), nil
}

// DeliverAlarm delivers the actor's alarm if it is due: it reads the
// committed alarm and, when due, runs on-alarm(scheduled, retry count).
//
// On success the alarm is gone unless the handler set one, and the failure
// count is reset. On failure (non-zero, trap, deadline) the handler's writes
// roll back; then, in a new transaction, whatever alarm the handler left due
// before the retry time moves to the retry time (now + alarmindex.RetryDelay), one it
// set later, or a clear, stands, and the failure count grows by one. So the
// backoff is committed and survives restarts.
//
// A not-due or absent alarm runs nothing (Ran is false) and reports the
// committed state, so the caller can re-arm its timer.
func (a *Actor) DeliverAlarm(ctx context.Context) (hostmod.Delivery, error) {
	return a.DeliverAlarmBefore(ctx, nil)
}

// BeforeCommit is called inside an event's transaction once the event's
// writes are done, just before COMMIT. p is what is about to commit; a meta
// row written with p.SetMeta commits with the event, or not at all. The
// actor is held meanwhile: the hook must not call the actor's methods. An
// error rolls the whole event back (as a failure of the host, not of the
// guest: the committed state stays as it was) and is returned as it is.
type BeforeCommit func(ctx context.Context, p *Pending) error

// Pending is an event's state as it is about to commit, as a BeforeCommit
// hook sees it.
type Pending struct {
	// State is what the commit will hold (the alarm and failure count the
	// event leaves, the meta rows written so far).
	hostmod.State
	a    *Actor
	open bool
	set  []metaRow // rows written into the transaction, in order
}

type metaRow struct{ key, value string }

// Open is true while the transaction is open: until the hook returns.
func (p *Pending) Open() bool { return p.open }

// SetMeta writes one meta row into the event's transaction. It fails once
// the hook has returned.
func (p *Pending) SetMeta(key, value string) error {
	if !p.open {
		return &abi.ActorError{ID: p.a.id, Op: "meta " + key, Err: errors.New("the event's transaction is over")}
	}
	if err := p.a.store.SetMeta(key, value); err != nil {
		return &abi.ActorError{ID: p.a.id, Op: "write meta " + key + " in the event's transaction", Err: err}
	}
	p.set = append(p.set, metaRow{key, value})
	switch key {
	case hostmod.MetaAlarmIndexed:
		p.Indexed = value
	case hostmod.MetaInitDone:
		p.InitRecorded = true
	}
	return nil
}

// DeliverAlarmBefore is DeliverAlarm with a hook run inside the event's
// transaction, before it commits (nil: none). A host that lists the alarm
// in a shared index uses it to write the listed entry into the event's own
// commit rather than into a transaction of its own after it.
func (a *Actor) DeliverAlarmBefore(ctx context.Context, hook BeforeCommit) (hostmod.Delivery, error) {
	a.mu.Lock()
	defer a.end()
	if err := a.wake(ctx); err != nil {
		return hostmod.Delivery{}, err
	}
	now := a.e.cfg.clock.Now().UnixMilli()
	cur, failures, err := a.committed()
	if err != nil {
		return hostmod.Delivery{}, err
	}
	if cur == nil || *cur > now {
		return hostmod.Delivery{Result: hostmod.Result{Alarm: cur, Failures: failures}}, nil
	}
	at := *cur
	if !a.class.onAlarm {
		return hostmod.Delivery{}, &abi.ActorError{ID: a.id, Err: fmt.Errorf("%w: class %s does not export %q", ErrNoExport, a.class.Name, abi.ExportOnAlarm)}
	}
	before := &at
	ev := a.newEvent(nil, failures)
	defer a.endEvent()
	ran := false // on-alarm succeeded: its commit may be deferred
	defer func() { a.deferCommit = false }()
	d, err := hostmod.RunDue(hostmod.Due{Actor: a.id, Store: a.store, Event: &ev.alarm, At: at, Now: now, Failures: failures,
		Retry: hostmod.RetryPolicy{Base: a.e.cfg.retryBase, Max: a.e.cfg.retryMax, MaxAttempts: a.e.cfg.maxAttemptsOf(a.class.Name)}},
		func() error {
			code, err := a.call(ctx, ev, abi.ExportOnAlarm, []uint64{api.EncodeI64(at), uint64(uint32(failures))}, a.e.cfg.alarmDeadlineOf(a.class.Name))
			if err == nil && code != 0 {
				err = &abi.ActorError{ID: a.id, Err: &hostmod.GuestError{Actor: a.id, Export: abi.ExportOnAlarm, Code: code, Said: a.stderr.takeLast()}}
			}
			ran = err == nil
			return err
		},
		func(next *int64, n int) (hostmod.Result, error) {
			a.deferCommit = ran && !a.e.cfg.syncedDeliveries
			return a.finish(ctx, before, next, n, nil, hook)
		})
	if err != nil || d.Err == nil {
		return d, err
	}
	if d.GaveUp {
		// At Debug, as a retry is: the host that delivers it logs it (the
		// plugin, at ERROR), once.
		a.e.cfg.logger.Debug("on-alarm failed on its last attempt; retries given up, dead letter kept", "actor", a.id.String(),
			"attempts", failures+1, "scheduled_ms", at, "error", d.Err)
		return d, nil
	}
	a.e.cfg.logger.Debug("on-alarm failed; retry committed", "actor", a.id.String(), "failures", d.Failures, "next_ms", orZero(d.Alarm), "error", d.Err)
	return d, nil
}

// ErrNotInitialised is wrapped by the error of a host event (SetAlarm) on
// an actor whose on-init has not run: an actor that does not exist yet, or
// was deleted. The host does not start an actor the guest never started:
// its on-init must run, through a request, before any other event.
var ErrNotInitialised = errors.New("the actor does not exist (on-init never ran)")

// ErrAlarmOutOfRange is wrapped by the error of SetAlarm for a time
// outside 0..abi.MaxAlarmMillis, the times set-alarm accepts (EINVAL).
var ErrAlarmOutOfRange = errors.New("alarm time out of range")

// SetAlarm is a host event: it sets the actor's alarm to *at (Unix ms), or
// clears it when at is nil, without calling the guest, in a transaction of
// its own, as a guest's set-alarm or clear-alarm in a successful event
// would: the failure count goes back to 0 (docs/design.md#retries), and
// Result says what committed (AlarmChanged when the alarm differs from
// before; no Response). It is how an operator moves, clears or fires an
// actor's alarm from outside.
//
// It fails, committing nothing, for a time outside 0..abi.MaxAlarmMillis
// (ErrAlarmOutOfRange), for an actor whose on-init has not run
// (ErrNotInitialised), and for a time on a class without on-alarm
// (ErrNoExport): such an alarm could never be delivered.
func (a *Actor) SetAlarm(ctx context.Context, at *int64) (hostmod.Result, error) {
	return a.SetAlarmBefore(ctx, at, nil)
}

// SetAlarmBefore is SetAlarm with a hook run inside the event's
// transaction, before it commits (nil: none), as DeliverAlarmBefore has: a
// host that lists the alarm in a shared index writes the listed entry into
// the event's own commit.
func (a *Actor) SetAlarmBefore(ctx context.Context, at *int64, hook BeforeCommit) (hostmod.Result, error) {
	if at != nil && (*at < 0 || *at > abi.MaxAlarmMillis) {
		return hostmod.Result{}, &abi.ActorError{ID: a.id, Op: "set alarm", Err: fmt.Errorf("%w: %d is outside 0..%d (Unix ms)", ErrAlarmOutOfRange, *at, abi.MaxAlarmMillis)}
	}
	a.mu.Lock()
	defer a.end()
	if err := a.wake(ctx); err != nil {
		return hostmod.Result{}, err
	}
	before, failures, err := a.committed()
	if err != nil {
		return hostmod.Result{}, err
	}
	if !a.inited && !a.initMeta {
		return hostmod.Result{}, &abi.ActorError{ID: a.id, Err: ErrNotInitialised}
	}
	if at != nil && !a.class.onAlarm {
		return hostmod.Result{}, &abi.ActorError{ID: a.id, Op: "set alarm", Err: fmt.Errorf("%w: class %s does not export %q", ErrNoExport, a.class.Name, abi.ExportOnAlarm)}
	}
	if err := a.store.Begin(); err != nil {
		return hostmod.Result{}, &abi.ActorError{ID: a.id, Op: "begin", Err: err}
	}
	defer a.store.Rollback()
	if at != nil {
		err = a.store.SetAlarm(*at)
	} else {
		err = a.store.ClearAlarm()
	}
	if err == nil && failures != 0 {
		err = a.store.SetFailures(0)
	}
	if err != nil {
		return hostmod.Result{}, &abi.ActorError{ID: a.id, Op: "set alarm", Err: err}
	}
	if at != nil {
		v := *at
		at = &v // the caller's variable is not kept as the committed state
	}
	return a.finish(ctx, before, at, 0, nil, hook)
}
