// Named timers over the actor's one alarm: one-shot timers at a time,
// intervals and cron schedules in UTC, each with optional data. The same
// rules and the same stored format as the Go SDK's package timers
// (docs/timers.md in the wasmkeep alarms module), so an actor can move
// between the SDKs with its timers.
//
//   import * as wasmkeep from "wasmkeep-as";
//   import * as timers from "wasmkeep-as/assembly/timers";
//   export { onAlarm, onRequest, onInit } from "wasmkeep-as";
//
//   // The timers own the alarm: handle registers the SDK's alarm handler.
//   timers.handle((f: timers.Fired): string | null => {
//     if (f.name == "flush") return flush();
//     return null; // a string fails the whole on-alarm event, which is retried
//   });
//   wasmkeep.handleRequest((req: Uint8Array): wasmkeep.Reply => {
//     let err = timers.set("flush", timers.Schedule.every(30_000));
//     if (err == null) err = timers.set("nightly", timers.Schedule.cron("0 3 * * *"));
//     if (err == null) err = timers.set("remind/42", timers.Schedule.at(wasmkeep.now() + 3_600_000),
//                                       Uint8Array.wrap(String.UTF8.encode("call Bob")));
//     return err == null ? wasmkeep.Reply.text("ok") : wasmkeep.Reply.fail(err!);
//   });
//
// Times are Unix milliseconds. The timers are kept in the actor's own
// key/value table, all in one value under STATE_KEY, so a change commits
// with the event's other writes or rolls back with them. After every change
// the alarm is set for the earliest timer (cleared when there is none): a
// guest that uses timers does not call handleAlarm, setAlarm or clearAlarm.
// The calls work inside an event and fail with EPERM outside one.
//
// On each on-alarm event the handler runs once for every timer due by
// wasmkeep.now(), in order of due time, then name (byte order). Before a
// timer's handler runs, a one-shot timer is removed and a repeating one
// moved to its first tick after now, skipping the ticks it missed (an
// interval keeps its phase), so the handler sees what will stand and may
// set or cancel any timer; a timer set during the event for a time already
// due runs in the next on-alarm event, and a due timer that an earlier
// handler cancelled or set again does not run in this one. A handler that
// fails fails the whole event: the host rolls back all its writes and
// retries it on its committed backoff, when every timer due by then runs
// again, in the same order. Handlers must be idempotent.

import * as wasmkeep from "./index";

/** The key under which the timers are kept; the guest must not write it. */
export const STATE_KEY = "wasmkeep.timers";
/** The longest timer name, in bytes. */
export const MAX_NAME_LEN: i32 = 256;

const FORMAT_VERSION: u8 = 1;

/** Fires once, at a time. */
export const KIND_AT: u8 = 1;
/** Fires at a fixed interval. */
export const KIND_EVERY: u8 = 2;
/** Fires when a cron expression matches. */
export const KIND_CRON: u8 = 3;

/** "at", "every" or "cron". */
export function kindName(k: u8): string {
  if (k == KIND_AT) return "at";
  if (k == KIND_EVERY) return "every";
  if (k == KIND_CRON) return "cron";
  return "kind " + k.toString();
}

/** When a timer fires; make one with at, every, everyFrom or cron. */
export class Schedule {
  private constructor(
    public readonly kind: u8,
    public readonly atMs: i64,
    public readonly everyMs: i64,
    public readonly hasFirst: bool,
    public readonly cron: string,
  ) {}
  /** Once, at atMs (Unix ms); a time not after now fires at once. */
  static at(atMs: i64): Schedule { return new Schedule(KIND_AT, atMs, 0, false, ""); }
  /** Every everyMs (positive), the first time everyMs from now. */
  static every(everyMs: i64): Schedule { return new Schedule(KIND_EVERY, 0, everyMs, false, ""); }
  /** At firstMs and every everyMs after; when firstMs is not after now, the first tick of that series after now. */
  static everyFrom(firstMs: i64, everyMs: i64): Schedule { return new Schedule(KIND_EVERY, firstMs, everyMs, true, ""); }
  /** Each minute the 5-field cron expression matches, in UTC; the first match after now. */
  static cron(spec: string): Schedule { return new Schedule(KIND_CRON, 0, 0, false, spec); }
}

/** One named timer as stored. */
export class Timer {
  constructor(
    /** The timer's name, unique within the actor. */
    public name: string,
    /** KIND_AT, KIND_EVERY or KIND_CRON. */
    public kind: u8,
    /** When it next fires (Unix ms); in Fired, the tick being run. */
    public dueMs: i64,
    /** The interval of a KIND_EVERY timer, in ms (0 for the others). */
    public everyMs: i64,
    /** The expression of a KIND_CRON timer ("" for the others). */
    public cron: string,
    /** What set stored with the timer. */
    public data: Uint8Array,
  ) {}
}

/** What the handler receives for each due timer. */
export class Fired extends Timer {
  /** How many times this on-alarm event failed before (the host's count). */
  retryCount: i32 = 0;
}

/** A value, or why the call failed (error is null on success). */
export class TimersResult<T> {
  constructor(public readonly value: T, public readonly error: string | null) {}
  get ok(): bool { return this.error == null; }
}

// ---- state -------------------------------------------------------------------

class Entry {
  constructor(
    public name: string,
    public kind: u8,
    public due: i64,
    public every: i64,
    public cron: CronSchedule | null,
    public data: Uint8Array,
    public seq: i64, // which set made it: a replaced timer has another
  ) {}
  copy(): Entry {
    return new Entry(this.name, this.kind, this.due, this.every, this.cron, this.data, this.seq);
  }
  timer(): Timer {
    const c = this.cron;
    return new Timer(this.name, this.kind, this.due, this.every, c == null ? "" : c.spec, this.data.slice());
  }
}

class State {
  timers: Map<string, Entry> = new Map<string, Entry>();
  armed: i64 = -1; // the alarm the timers last set (Unix ms); -1: none
  sorted(): Entry[] {
    const v = this.timers.values();
    v.sort(byDue);
    return v;
  }
  earliest(): Entry | null {
    const v = this.sorted();
    return v.length == 0 ? null : v[0];
  }
}

// byDue orders entries by due time, then name in byte order (UTF-8 byte
// order is code point order, which UTF-16 order is not above U+FFFF).
function byDue(a: Entry, b: Entry): i32 {
  if (a.due != b.due) return a.due < b.due ? -1 : 1;
  return compareBytes(a.name, b.name);
}

function compareBytes(a: string, b: string): i32 {
  const x = Uint8Array.wrap(String.UTF8.encode(a));
  const y = Uint8Array.wrap(String.UTF8.encode(b));
  const n = min(x.length, y.length);
  for (let i = 0; i < n; i++) {
    if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
  }
  return x.length - y.length;
}

let handler: ((f: Fired) => string | null) | null = null;
let dispatching: State | null = null;
let seq: i64 = 0;

/**
 * Registers the function that runs each due timer, and the SDK's alarm
 * handler (wasmkeep.handleAlarm): call it at the top level of the entry file.
 * It returns null when the timer is handled, or a message that fails the
 * whole on-alarm event.
 */
export function handle(f: (f: Fired) => string | null): void {
  handler = f;
  wasmkeep.handleAlarm(dispatch);
}

/**
 * Creates the timer name, or replaces it (its schedule and data), and sets
 * the alarm for the earliest timer; it commits with the event. Null when
 * done, else why not: no handler registered, a name of 0 or more than
 * MAX_NAME_LEN bytes, an interval that is not positive, a cron expression
 * refused, a time outside the host's alarm range, or a host error.
 */
export function set(name: string, s: Schedule, data: Uint8Array | null = null): string | null {
  if (handler == null) return "timers: no handler registered (call timers.handle at the top level)";
  const n = String.UTF8.byteLength(name);
  if (n == 0 || n > MAX_NAME_LEN) return "timers: a timer's name must be 1 to 256 bytes: got " + n.toString() + " bytes";
  const now = wasmkeep.now();
  const e = new Entry(name, s.kind, 0, 0, null, data == null ? new Uint8Array(0) : data.slice(), ++seq);
  if (s.kind == KIND_AT) {
    e.due = s.atMs;
  } else if (s.kind == KIND_EVERY) {
    if (s.everyMs <= 0) return "timers: " + quote(name) + ": the interval " + s.everyMs.toString() + " ms is not positive";
    e.every = s.everyMs;
    e.due = s.hasFirst ? nextTick(s.atMs, s.everyMs, now) : now + s.everyMs;
  } else {
    const c = parseCron(s.cron);
    if (!c.ok) return c.error;
    const sched = c.value!;
    e.cron = sched;
    e.due = sched.nextAfter(now);
  }
  if (e.due < 0 || e.due > wasmkeep.MAX_ALARM_MS) {
    return "timers: " + quote(name) + ": due at " + e.due.toString() + " ms, outside the host's alarm range";
  }
  const d = dispatching;
  if (d != null) {
    d.timers.set(name, e);
    return null;
  }
  const st = load();
  if (!st.ok) return st.error;
  const state = st.value!;
  state.timers.set(name, e);
  return syncAndSave(state);
}

/** Removes the timer name (value: whether there was one) and re-arms the alarm. */
export function cancel(name: string): TimersResult<bool> {
  const d = dispatching;
  if (d != null) {
    const had = d.timers.has(name);
    if (had) d.timers.delete(name);
    return new TimersResult<bool>(had, null);
  }
  const st = load();
  if (!st.ok) return new TimersResult<bool>(false, st.error);
  const state = st.value!;
  const had = state.timers.has(name);
  if (had) state.timers.delete(name);
  return new TimersResult<bool>(had, syncAndSave(state));
}

/** The timer name, or a null value when there is none. */
export function get(name: string): TimersResult<Timer | null> {
  const st = current();
  if (!st.ok) return new TimersResult<Timer | null>(null, st.error);
  const state = st.value!;
  if (!state.timers.has(name)) return new TimersResult<Timer | null>(null, null);
  return new TimersResult<Timer | null>(state.timers.get(name).timer(), null);
}

/** Every timer, in dispatch order: by due time, then name. */
export function list(): TimersResult<Timer[]> {
  const st = current();
  if (!st.ok) return new TimersResult<Timer[]>([], st.error);
  const v = st.value!.sorted();
  const out = new Array<Timer>(0);
  for (let i = 0; i < v.length; i++) out.push(v[i].timer());
  return new TimersResult<Timer[]>(out, null);
}

/** The timer due first (the earliest name among those due together), or a null value. */
export function next(): TimersResult<Timer | null> {
  const st = current();
  if (!st.ok) return new TimersResult<Timer | null>(null, st.error);
  const e = st.value!.earliest();
  return new TimersResult<Timer | null>(e == null ? null : e.timer(), null);
}

function current(): TimersResult<State | null> {
  const d = dispatching;
  if (d != null) return new TimersResult<State | null>(d, null);
  return load();
}

// syncAndSave sets the alarm for the earliest timer, outside on-alarm,
// keeping a retry in progress (docs/timers.md, "The alarm"), and saves.
function syncAndSave(st: State): string | null {
  const cur = wasmkeep.getAlarm();
  if (!cur.ok) return cur.message;
  const first = st.earliest();
  if (first == null) {
    st.armed = -1;
    if (cur.found) {
      const e = wasmkeep.clearAlarm();
      if (e != 0) return wasmkeep.errorMessage("clear-alarm", e);
    }
    return save(st);
  }
  if (cur.found && st.armed >= 0 && cur.value > st.armed && first.due <= st.armed) {
    return save(st); // backing off: the retry stands
  }
  if (cur.found && cur.value == first.due) {
    st.armed = first.due; // already set: leave the retry count alone
    return save(st);
  }
  st.armed = first.due;
  const e = wasmkeep.setAlarm(first.due);
  if (e != 0) return wasmkeep.errorMessage("set-alarm", e);
  return save(st);
}

// dispatch is the on-alarm handler: every timer due by now, in order, then
// the timers saved and the alarm set for the earliest one left, or cleared.
function dispatch(scheduledMs: i64, retryCount: i32): string | null {
  const h = handler;
  if (h == null) return "timers: no handler registered";
  const loaded = load();
  if (!loaded.ok) return loaded.error;
  const st = loaded.value!;
  const now = wasmkeep.now();
  const all = st.sorted();
  const due = new Array<Entry>(0);
  for (let i = 0; i < all.length && all[i].due <= now; i++) due.push(all[i]);
  dispatching = st;
  for (let i = 0; i < due.length; i++) {
    const e = due[i];
    if (!st.timers.has(e.name) || st.timers.get(e.name).seq != e.seq) continue; // cancelled or replaced
    const t = e.timer();
    const f = new Fired(t.name, t.kind, t.dueMs, t.everyMs, t.cron, t.data);
    f.retryCount = retryCount;
    const nx = e.copy();
    if (nx.kind != KIND_AT && reschedule(nx, now)) {
      st.timers.set(nx.name, nx);
    } else {
      st.timers.delete(e.name);
    }
    const failure = h(f);
    if (failure != null) {
      dispatching = null;
      return "timer " + quote(e.name) + " due " + formatUtc(f.dueMs) + ": " + failure;
    }
  }
  dispatching = null;
  // The host removes the delivered alarm unless the handler sets one, so
  // set (or clear) it even when it would not change.
  const first = st.earliest();
  let err: wasmkeep.Errno = 0;
  if (first != null) {
    st.armed = first.due;
    err = wasmkeep.setAlarm(first.due);
    if (err != 0) return wasmkeep.errorMessage("set-alarm", err);
  } else {
    st.armed = -1;
    err = wasmkeep.clearAlarm();
    if (err != 0) return wasmkeep.errorMessage("clear-alarm", err);
  }
  return save(st);
}

// reschedule moves a repeating timer to its first tick after now; false
// when it has none within the host's alarm range.
function reschedule(e: Entry, now: i64): bool {
  if (e.kind == KIND_EVERY) {
    e.due = nextTick(e.due, e.every, now);
  } else if (e.kind == KIND_CRON) {
    const c = e.cron;
    if (c == null) return false;
    const t = c.nextAfter(now);
    if (t < 0) return false;
    e.due = t;
  }
  return e.due <= wasmkeep.MAX_ALARM_MS;
}

// nextTick is the first of the ticks due, due+every, ... after now.
function nextTick(due: i64, every: i64, now: i64): i64 {
  if (due > now) return due;
  return due + ((now - due) / every + 1) * every;
}

function quote(s: string): string {
  return '"' + s + '"';
}

// ---- the stored format (docs/timers.md) ------------------------------------

function load(): TimersResult<State | null> {
  const r = wasmkeep.getBytes(Uint8Array.wrap(String.UTF8.encode(STATE_KEY)));
  if (!r.ok) return new TimersResult<State | null>(null, r.message);
  if (!r.found) return new TimersResult<State | null>(new State(), null);
  const st = decode(r.value);
  if (st == null) {
    return new TimersResult<State | null>(null, "timers: the value under " + quote(STATE_KEY) + ": not a timers value this SDK can read");
  }
  return new TimersResult<State | null>(st, null);
}

function save(st: State): string | null {
  const key = Uint8Array.wrap(String.UTF8.encode(STATE_KEY));
  if (st.timers.size == 0 && st.armed < 0) {
    const e = wasmkeep.removeBytes(key);
    return e == 0 ? null : wasmkeep.errorMessage("kv-delete", e);
  }
  const e = wasmkeep.putBytes(key, encode(st));
  return e == 0 ? null : wasmkeep.errorMessage("kv-put", e);
}

class Writer {
  b: u8[] = [];
  byte(v: u8): void { this.b.push(v); }
  uvarint(v: u64): void {
    while (v >= 0x80) {
      this.b.push(<u8>(v | 0x80));
      v >>= 7;
    }
    this.b.push(<u8>v);
  }
  varint(v: i64): void { this.uvarint(<u64>((v << 1) ^ (v >> 63))); }
  bytes(v: Uint8Array): void {
    this.uvarint(<u64>v.length);
    for (let i = 0; i < v.length; i++) this.b.push(v[i]);
  }
}

// encode writes the format of docs/timers.md, as the Go SDK does.
function encode(st: State): Uint8Array {
  const w = new Writer();
  w.byte(FORMAT_VERSION);
  w.uvarint(<u64>(st.armed + 1));
  const names = st.timers.keys();
  names.sort(compareBytes);
  w.uvarint(<u64>names.length);
  for (let i = 0; i < names.length; i++) {
    const e = st.timers.get(names[i]);
    w.bytes(Uint8Array.wrap(String.UTF8.encode(e.name)));
    w.byte(e.kind);
    w.varint(e.due);
    if (e.kind == KIND_EVERY) w.varint(e.every);
    if (e.kind == KIND_CRON) {
      const c = e.cron;
      w.bytes(Uint8Array.wrap(String.UTF8.encode(c == null ? "" : c.spec)));
    }
    w.bytes(e.data);
  }
  const out = new Uint8Array(w.b.length);
  for (let i = 0; i < w.b.length; i++) out[i] = w.b[i];
  return out;
}

class Reader {
  pos: i32 = 0;
  bad: bool = false;
  constructor(public b: Uint8Array) {}
  // A uvarint as Go's binary.Uvarint reads one: at most 10 bytes, no overflow.
  uvarint(): u64 {
    let v: u64 = 0;
    for (let i = 0; ; i++) {
      if (this.pos >= this.b.length || i == 10) { this.bad = true; return 0; }
      const c = this.b[this.pos++];
      if (i == 9 && c > 1) { this.bad = true; return 0; }
      v |= (<u64>(c & 0x7f)) << (<u64>(7 * i));
      if (c < 0x80) return v;
    }
    return 0; // not reached
  }
  varint(): i64 {
    const u = this.uvarint();
    return <i64>(u >> 1) ^ -(<i64>(u & 1));
  }
  byte(): u8 {
    if (this.pos >= this.b.length) { this.bad = true; return 0; }
    return this.b[this.pos++];
  }
  bytes(): Uint8Array {
    const n = this.uvarint();
    if (this.bad || n > <u64>(this.b.length - this.pos)) { this.bad = true; return new Uint8Array(0); }
    const v = this.b.slice(this.pos, this.pos + <i32>n);
    this.pos += <i32>n;
    return v;
  }
}

function decode(b: Uint8Array): State | null {
  if (b.length == 0 || b[0] != FORMAT_VERSION) return null;
  const r = new Reader(b);
  r.pos = 1;
  const st = new State();
  st.armed = <i64>r.uvarint() - 1;
  const n = r.uvarint();
  if (r.bad || n > <u64>(b.length - r.pos)) return null;
  for (let i: u64 = 0; i < n; i++) {
    const nb = r.bytes();
    const name = String.UTF8.decode(nb.buffer);
    const kind = r.byte();
    const e = new Entry(name, kind, r.varint(), 0, null, new Uint8Array(0), ++seq);
    if (kind == KIND_EVERY) {
      e.every = r.varint();
      if (e.every <= 0) return null;
    } else if (kind == KIND_CRON) {
      const sb = r.bytes();
      if (r.bad) return null;
      const c = parseCron(String.UTF8.decode(sb.buffer));
      if (!c.ok) return null;
      e.cron = c.value;
    } else if (kind != KIND_AT) {
      return null;
    }
    e.data = r.bytes();
    if (r.bad) return null;
    st.timers.set(name, e);
  }
  if (r.pos != b.length) return null;
  return st;
}

// ---- cron ----------------------------------------------------------------------

/**
 * A parsed 5-field cron expression, evaluated in UTC: minute, hour, day of
 * month, month (or JAN-DEC), day of week (0-7 or SUN-SAT, 0 and 7 Sunday);
 * each * or a comma list of values, ranges and steps; @yearly, @monthly,
 * @weekly, @daily and @hourly. Both day fields restricted: either matches
 * (Vixie cron). The dialect of docs/timers.md, as in the Go and Rust SDKs.
 */
export class CronSchedule {
  spec: string = "";
  minute: u64 = 0;
  hour: u64 = 0;
  dom: u64 = 0;
  month: u64 = 0;
  dow: u64 = 0;
  domStar: bool = false;
  dowStar: bool = false;

  /** The first minute strictly after afterMs (Unix ms) that matches; -1 for none within nine years. */
  nextAfter(afterMs: i64): i64 {
    const MIN: i64 = 60_000, HOUR: i64 = 3_600_000, DAY: i64 = 86_400_000;
    let t = floorDiv(afterMs, MIN) * MIN + MIN;
    const limit = civilYear(floorDiv(t, DAY)) + 9;
    for (;;) {
      const days = floorDiv(t, DAY);
      const ymd = civilFromDays(days);
      const y = ymd[0], m = ymd[1], d = ymd[2];
      if (y > limit) return -1;
      const inDay = t - days * DAY;
      const hour = inDay / HOUR, minute = (inDay % HOUR) / MIN;
      if ((this.month & (<u64>1 << <u64>m)) == 0) {
        t = (m == 12 ? daysFromCivil(y + 1, 1, 1) : daysFromCivil(y, m + 1, 1)) * DAY;
      } else if (!this.dayMatches(d, (days + 4) % 7 < 0 ? (days + 4) % 7 + 7 : (days + 4) % 7)) {
        t = (days + 1) * DAY;
      } else if ((this.hour & (<u64>1 << <u64>hour)) == 0) {
        t = floorDiv(t, HOUR) * HOUR + HOUR;
      } else if ((this.minute & (<u64>1 << <u64>minute)) == 0) {
        t += MIN;
      } else {
        return t;
      }
    }
    return -1; // not reached
  }

  dayMatches(day: i64, weekday: i64): bool {
    const dom = (this.dom & (<u64>1 << <u64>day)) != 0;
    const dow = (this.dow & (<u64>1 << <u64>weekday)) != 0;
    return this.domStar || this.dowStar ? dom && dow : dom || dow;
  }
}

class Field {
  constructor(public name: string, public min: i32, public max: i32, public names: string[]) {}
}

const MINUTE = new Field("minute", 0, 59, []);
const HOUR_F = new Field("hour", 0, 23, []);
const DOM = new Field("day of month", 1, 31, []);
const MONTH = new Field("month", 1, 12, ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]);
const DOW = new Field("day of week", 0, 7, ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]);

// parseErr carries a field's error out of parseField.
let parseErr: string | null = null;

/** Parses a 5-field cron expression; the error names the expression. */
export function parseCron(spec: string): TimersResult<CronSchedule | null> {
  const fail = "timers: cron " + quote(spec) + ": ";
  let expr = spec.trim();
  if (expr.startsWith("@")) {
    const m = expr.toLowerCase();
    if (m == "@yearly" || m == "@annually") expr = "0 0 1 1 *";
    else if (m == "@monthly") expr = "0 0 1 * *";
    else if (m == "@weekly") expr = "0 0 * * 0";
    else if (m == "@daily" || m == "@midnight") expr = "0 0 * * *";
    else if (m == "@hourly") expr = "0 * * * *";
    else return new TimersResult<CronSchedule | null>(null, fail + "unknown macro (want @yearly, @monthly, @weekly, @daily or @hourly)");
  }
  const f = fields(expr);
  if (f.length != 5) {
    return new TimersResult<CronSchedule | null>(null, fail + "want 5 fields (minute hour day-of-month month day-of-week), got " + f.length.toString());
  }
  const c = new CronSchedule();
  c.spec = spec;
  parseErr = null;
  c.minute = parseField(f[0], MINUTE);
  if (parseErr == null) c.hour = parseField(f[1], HOUR_F);
  if (parseErr == null) c.dom = parseField(f[2], DOM);
  if (parseErr == null) c.month = parseField(f[3], MONTH);
  if (parseErr == null) c.dow = parseField(f[4], DOW);
  const err = parseErr;
  if (err != null) return new TimersResult<CronSchedule | null>(null, fail + err);
  if ((c.dow & (1 << 7)) != 0) c.dow = (c.dow & ~(<u64>1 << 7)) | 1;
  c.domStar = f[2].startsWith("*");
  c.dowStar = f[4].startsWith("*");
  if (!c.domStar && c.dowStar && !domFitsAMonth(c)) {
    return new TimersResult<CronSchedule | null>(null, fail + "never matches (no month in it has such a day)");
  }
  return new TimersResult<CronSchedule | null>(c, null);
}

function domFitsAMonth(c: CronSchedule): bool {
  const first = <i64>ctz(c.dom);
  for (let m: i64 = 1; m <= 12; m++) {
    if ((c.month & (<u64>1 << <u64>m)) != 0 && first <= daysIn(2000, m)) return true;
  }
  return false;
}

// fields splits on ASCII white space, as Go's strings.Fields does for it.
function fields(s: string): string[] {
  const out = new Array<string>(0);
  let start = -1;
  for (let i = 0; i <= s.length; i++) {
    const c = i < s.length ? s.charCodeAt(i) : 0x20;
    const space = c == 0x20 || (c >= 0x09 && c <= 0x0d);
    if (space && start >= 0) {
      out.push(s.substring(start, i));
      start = -1;
    } else if (!space && start < 0) {
      start = i;
    }
  }
  return out;
}

function parseField(s: string, fd: Field): u64 {
  let set: u64 = 0;
  const items = s.split(",");
  for (let k = 0; k < items.length; k++) {
    const item = items[k];
    if (item.length == 0) { parseErr = fd.name + " " + quote(s) + ": empty list item"; return 0; }
    const slash = item.indexOf("/");
    const rng = slash < 0 ? item : item.substring(0, slash);
    let lo = fd.min, hi = fd.max;
    if (rng == "*") {
      if (fd.max == 7) hi = 6; // day of week: * is 0-6
    } else if (rng.indexOf("-") >= 0) {
      const dash = rng.indexOf("-");
      lo = fieldValue(rng.substring(0, dash), fd);
      if (parseErr != null) return 0;
      hi = fieldValue(rng.substring(dash + 1), fd);
      if (parseErr != null) return 0;
      if (lo > hi) { parseErr = fd.name + " " + quote(s) + ": range " + rng + " runs backwards"; return 0; }
    } else {
      lo = fieldValue(rng, fd);
      if (parseErr != null) return 0;
      hi = lo;
      if (slash >= 0) hi = fd.max == 7 ? 6 : fd.max; // "5/10": from 5 to the maximum
    }
    let step: i64 = 1;
    if (slash >= 0) {
      let st = item.substring(slash + 1);
      if (st.startsWith("+")) st = st.substring(1);
      step = digits(st);
      if (step < 1) { parseErr = fd.name + " " + quote(s) + ": step " + quote(item.substring(slash + 1)) + " is not a positive number"; return 0; }
    }
    for (let v = <i64>lo; v <= <i64>hi; v += step) set |= <u64>1 << <u64>v;
  }
  return set;
}

function fieldValue(s: string, fd: Field): i32 {
  const up = s.toUpperCase();
  for (let i = 0; i < fd.names.length; i++) {
    if (up == fd.names[i]) return fd.min + i;
  }
  const v = digits(s);
  if (v < 0) { parseErr = fd.name + ": " + quote(s) + " is not a number"; return 0; }
  if (v < fd.min || v > fd.max) {
    parseErr = fd.name + ": " + v.toString() + " is outside " + fd.min.toString() + "-" + fd.max.toString();
    return 0;
  }
  return <i32>v;
}

// digits reads a run of ASCII digits; -1 for anything else or a huge number.
function digits(s: string): i64 {
  if (s.length == 0 || s.length > 18) return -1;
  let v: i64 = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return -1;
    v = v * 10 + (c - 0x30);
  }
  return v;
}

// ---- dates -------------------------------------------------------------------

function floorDiv(a: i64, b: i64): i64 {
  const q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/** Days since 1970-01-01 of a date of the proleptic Gregorian calendar. */
function daysFromCivil(y: i64, m: i64, d: i64): i64 {
  const yy = m <= 2 ? y - 1 : y;
  const era = floorDiv(yy, 400);
  const yoe = yy - era * 400;
  const mp = (m + 9) % 12;
  const doy = (153 * mp + 2) / 5 + d - 1;
  const doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

/** [year, month 1-12, day] of a day counted from 1970-01-01. */
function civilFromDays(z0: i64): i64[] {
  const z = z0 + 719468;
  const era = floorDiv(z, 146097);
  const doe = z - era * 146097;
  const yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const mp = (5 * doy + 2) / 153;
  const d = doy - (153 * mp + 2) / 5 + 1;
  const m = mp < 10 ? mp + 3 : mp - 9;
  return [yoe + era * 400 + (m <= 2 ? 1 : 0), m, d];
}

function civilYear(days: i64): i64 {
  return civilFromDays(days)[0];
}

function daysIn(y: i64, m: i64): i64 {
  return (m == 12 ? daysFromCivil(y + 1, 1, 1) : daysFromCivil(y, m + 1, 1)) - daysFromCivil(y, m, 1);
}

function pad(v: i64, n: i32): string {
  return v.toString().padStart(n, "0");
}

/**
 * Unix milliseconds as RFC 3339 in UTC to the second
 * ("2025-05-01T08:01:00Z"; the milliseconds dropped), as Go's time.RFC3339
 * layout prints a UTC time.
 */
export function formatUtc(ms: i64): string {
  const days = floorDiv(ms, 86_400_000);
  const secs = (ms - days * 86_400_000) / 1000;
  const ymd = civilFromDays(days);
  return pad(ymd[0], 4) + "-" + pad(ymd[1], 2) + "-" + pad(ymd[2], 2) + "T" +
    pad(secs / 3600, 2) + ":" + pad((secs % 3600) / 60, 2) + ":" + pad(secs % 60, 2) + "Z";
}
