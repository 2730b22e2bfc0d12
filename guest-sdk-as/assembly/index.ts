// The AssemblyScript SDK for WebAssembly actors run by a wasmkeep host:
// durable alarms, the request being served, and a small key/value table kept
// in the actor's database. See abi/ABI.md in the wasmkeep alarms module.
//
// An actor registers its handlers at the top level of its entry file (that
// code runs in the module's start function, _initialize) and re-exports the
// SDK's three exports:
//
//   import * as wasmkeep from "wasmkeep-as";
//   export { onAlarm, onRequest, onInit } from "wasmkeep-as";
//
//   wasmkeep.handleRequest((req: Uint8Array): wasmkeep.Reply => {
//     const e = wasmkeep.setAlarm(wasmkeep.now() + 60_000);
//     if (e != 0) return wasmkeep.Reply.error("set-alarm", e);
//     return wasmkeep.Reply.text("reminder set");
//   });
//   wasmkeep.handleAlarm((scheduledMs: i64, retryCount: i32): string | null => {
//     return null; // handled; a string fails the event and is retried
//   });
//
// AssemblyScript cannot export a name with a hyphen, so the package's
// compiler transform (transform.mjs, named in asconfig.json) renames the
// exports onAlarm, onRequest and onInit to on-alarm, on-request and on-init.
//
// Calls into the host return an Errno (0 on success) or a Result; the SDK
// never traps on a host error. Each event runs in a transaction: its writes
// and alarm changes commit when the handler succeeds and are undone when it
// fails (or traps: the host then starts a fresh instance).

// ---- errno -------------------------------------------------------------------

/** A result code of an import, numbered as in WASI preview 1; 0 is success. */
export type Errno = u32;

/** Success. */
export const ESUCCESS: Errno = 0;
/** A key or value is longer than the host accepts. */
export const E2BIG: Errno = 1;
/** A pointer and length are not inside the guest's memory (an SDK or host bug). */
export const EFAULT: Errno = 21;
/** An argument is out of range, such as an alarm time before 1970. */
export const EINVAL: Errno = 28;
/** The host could not read or write the actor's database; the event fails. */
export const EIO: Errno = 29;
/** No alarm is set, or no value under the key (the SDK reports it as not found). */
export const ENOENT: Errno = 44;
/** Called outside an event (from top-level code, which runs in _initialize). */
export const EPERM: Errno = 63;

/** The latest alarm time the host accepts, in Unix milliseconds. */
export const MAX_ALARM_MS: i64 = 999_999_999_999_999;
/** The longest key the host accepts, in bytes. */
export const MAX_KEY_LEN: i32 = 1024;
/** The longest value the host accepts, in bytes. */
export const MAX_VALUE_LEN: i32 = 1 << 20;
/** The longest identity the host gives, in bytes: "tenant/class/name" at its longest. */
export const MAX_ACTOR_ID_LEN: i32 = 63 + 1 + 63 + 1 + 100;

/** The errno's short name, such as "EINVAL", or "errno N". */
export function errnoName(e: Errno): string {
  switch (e) {
    case ESUCCESS: return "ESUCCESS";
    case E2BIG: return "E2BIG";
    case EFAULT: return "EFAULT";
    case EINVAL: return "EINVAL";
    case EIO: return "EIO";
    case ENOENT: return "ENOENT";
    case EPERM: return "EPERM";
  }
  return "errno " + e.toString();
}

function errnoMeaning(e: Errno): string {
  switch (e) {
    case E2BIG: return " (key or value too long)";
    case EFAULT: return " (bad address)";
    case EINVAL: return " (invalid argument)";
    case EIO: return " (host database error)";
    case ENOENT: return " (not found)";
    case EPERM: return " (not within an event)";
  }
  return "";
}

/** "wasmkeep: <op>: <NAME> (<meaning>)", the message for a failed import. */
export function errorMessage(op: string, e: Errno): string {
  return "wasmkeep: " + op + ": " + errnoName(e) + errnoMeaning(e);
}

/**
 * What a call that gives a value returns: errno 0 and found (value set),
 * errno 0 and not found (no alarm, no value under the key), or an errno
 * other than 0 (op names the import).
 */
export class Result<T> {
  constructor(
    public readonly op: string,
    public readonly errno: Errno,
    public readonly found: bool,
    public readonly value: T,
  ) {}
  /** True when the host did not refuse the call. */
  get ok(): bool { return this.errno == 0; }
  /** The error message; "" when ok. */
  get message(): string { return this.errno == 0 ? "" : errorMessage(this.op, this.errno); }
}

// ---- the host's imports ----------------------------------------------------

@external("wasmkeep:alarm", "set-alarm")
declare function hostSetAlarm(atMs: i64): u32;
@external("wasmkeep:alarm", "get-alarm")
declare function hostGetAlarm(outPtr: usize): u32;
@external("wasmkeep:alarm", "clear-alarm")
declare function hostClearAlarm(): u32;
@external("wasmkeep:actor", "request-read")
declare function hostRequestRead(buf: usize, bufLen: u32): u32;
@external("wasmkeep:actor", "response-write")
declare function hostResponseWrite(buf: usize, len: u32): u32;
@external("wasmkeep:actor", "kv-get")
declare function hostKVGet(key: usize, keyLen: u32, buf: usize, bufLen: u32, outLenPtr: usize): u32;
@external("wasmkeep:actor", "kv-put")
declare function hostKVPut(key: usize, keyLen: u32, val: usize, valLen: u32): u32;
@external("wasmkeep:actor", "kv-delete")
declare function hostKVDelete(key: usize, keyLen: u32): u32;
@external("wasmkeep:actor", "actor-id")
declare function hostActorId(buf: usize, bufLen: u32, outLenPtr: usize): u32;

@external("wasi_snapshot_preview1", "clock_time_get")
declare function wasiClockTimeGet(id: u32, precision: u64, outPtr: usize): u32;
@external("wasi_snapshot_preview1", "fd_write")
declare function wasiFdWrite(fd: u32, iovs: usize, iovsLen: u32, outPtr: usize): u32;

// Scratch space for the host's outputs (an i64, a u32, an iovec).
const scratch = memory.data(16);

// ---- time ------------------------------------------------------------------

/**
 * The host's clock in Unix milliseconds (WASI's realtime clock, which the
 * host sets to the clock alarms are due by). Date.now() is not available:
 * it would import from the JavaScript host.
 */
export function now(): i64 {
  if (wasiClockTimeGet(0, 1_000_000, scratch) != 0) return 0;
  return <i64>(load<u64>(scratch) / 1_000_000);
}

/** The host's clock as a Date. */
export function nowDate(): Date {
  return new Date(now());
}

// ---- alarms ----------------------------------------------------------------

/**
 * Sets the actor's alarm to atMs (Unix milliseconds), replacing any. A time
 * in the past fires as soon as the host can deliver it. Commits with the
 * event. EINVAL: atMs < 0 or > MAX_ALARM_MS; EPERM outside an event; EIO.
 */
export function setAlarm(atMs: i64): Errno {
  return hostSetAlarm(atMs);
}

/** setAlarm with a Date. */
export function setAlarmAt(at: Date): Errno {
  return hostSetAlarm(at.getTime());
}

/**
 * The time the alarm is set for, in Unix milliseconds (found false when
 * none is set). While a failed alarm is retried, the next attempt's time.
 */
export function getAlarm(): Result<i64> {
  const e = hostGetAlarm(scratch);
  if (e == ENOENT) return new Result<i64>("get-alarm", 0, false, 0);
  if (e != 0) return new Result<i64>("get-alarm", e, false, 0);
  return new Result<i64>("get-alarm", 0, true, load<i64>(scratch));
}

/** Removes the alarm, if any. Commits with the event. EPERM; EIO. */
export function clearAlarm(): Errno {
  return hostClearAlarm();
}

// ---- the request -------------------------------------------------------------

/** The first len bytes of the request body (onRequest reads it for you). */
export function readRequest(len: i32): Result<Uint8Array> {
  const buf = new Uint8Array(len);
  if (len > 0) {
    const e = hostRequestRead(buf.dataStart, <u32>len);
    if (e != 0) return new Result<Uint8Array>("request-read", e, false, buf);
  }
  return new Result<Uint8Array>("request-read", 0, true, buf);
}

/** Appends bytes to the response (onRequest writes the Reply for you). E2BIG; EPERM. */
export function writeResponse(bytes: Uint8Array): Errno {
  if (bytes.length == 0) return 0;
  return hostResponseWrite(bytes.dataStart, <u32>bytes.length);
}

// ---- key/value ---------------------------------------------------------------

// The size of the first buffer get offers the host; a longer value takes a
// second call with a buffer of its exact length.
const GET_BUF_SIZE = 256;

function utf8(s: string): Uint8Array {
  return Uint8Array.wrap(String.UTF8.encode(s));
}

/** The value under key (found false when there is none). E2BIG; EPERM; EIO. */
export function getBytes(key: Uint8Array): Result<Uint8Array> {
  let buf = new Uint8Array(GET_BUF_SIZE);
  // Within an event nothing else writes the table, so the second call fits;
  // the bound only keeps a misbehaving host from looping forever.
  for (let i = 0; i < 3; i++) {
    const e = hostKVGet(key.dataStart, <u32>key.length, buf.dataStart, <u32>buf.length, scratch);
    if (e == ENOENT) return new Result<Uint8Array>("kv-get", 0, false, new Uint8Array(0));
    if (e != 0) return new Result<Uint8Array>("kv-get", e, false, new Uint8Array(0));
    const n = load<u32>(scratch);
    if (n <= <u32>buf.length) return new Result<Uint8Array>("kv-get", 0, true, buf.subarray(0, <i32>n));
    buf = new Uint8Array(<i32>n);
  }
  return new Result<Uint8Array>("kv-get", EIO, false, new Uint8Array(0));
}

/** getBytes with a string key and the value decoded as UTF-8. */
export function get(key: string): Result<string> {
  const r = getBytes(utf8(key));
  const v = r.found ? String.UTF8.decodeUnsafe(r.value.dataStart, <usize>r.value.length) : "";
  return new Result<string>("kv-get", r.errno, r.found, v);
}

/** Stores value under key, replacing any. Commits with the event. E2BIG; EPERM; EIO. */
export function putBytes(key: Uint8Array, value: Uint8Array): Errno {
  return hostKVPut(key.dataStart, <u32>key.length, value.dataStart, <u32>value.length);
}

/** putBytes with a string key and a string value, stored as UTF-8. */
export function put(key: string, value: string): Errno {
  return putBytes(utf8(key), utf8(value));
}

/** Removes the value under key; removing a missing key succeeds. E2BIG; EPERM; EIO. */
export function removeBytes(key: Uint8Array): Errno {
  const e = hostKVDelete(key.dataStart, <u32>key.length);
  return e == ENOENT ? 0 : e;
}

/** removeBytes with a string key. */
export function remove(key: string): Errno {
  return removeBytes(utf8(key));
}

// ---- handlers and exports ----------------------------------------------------

/** What a request handler returns: a response body, or a failure. */
export class Reply {
  constructor(public readonly body: Uint8Array, public readonly failure: string | null) {}
  /** Succeed with these bytes as the response. */
  static bytes(body: Uint8Array): Reply { return new Reply(body, null); }
  /** Succeed with this text, as UTF-8, as the response. */
  static text(body: string): Reply { return new Reply(utf8(body), null); }
  /** Fail the event (its writes are undone); message goes to standard error. */
  static fail(message: string): Reply { return new Reply(new Uint8Array(0), message); }
  /** Fail the event because an import returned errno. */
  static error(op: string, errno: Errno): Reply { return Reply.fail(errorMessage(op, errno)); }
}

let requestHandler: ((req: Uint8Array) => Reply) | null = null;
let alarmHandler: ((scheduledMs: i64, retryCount: i32) => string | null) | null = null;
let initHandler: (() => string | null) | null = null;

/** Registers the request handler (the on-request export). Without one every request fails. */
export function handleRequest(f: (req: Uint8Array) => Reply): void { requestHandler = f; }

/**
 * Registers the alarm handler (the on-alarm export). It returns null when
 * the alarm is handled (the alarm is then removed unless it set a new one),
 * or a message to fail: the writes are undone and the host retries after
 * 1 s, doubling up to 5 min. Without one, an alarm that fires is dropped.
 */
export function handleAlarm(f: (scheduledMs: i64, retryCount: i32) => string | null): void { alarmHandler = f; }

/** Registers the init handler (on-init, once per actor); null is success. */
export function handleInit(f: () => string | null): void { initHandler = f; }

/** Writes a line to standard error, which the host may keep in its logs. */
export function logLine(s: string): void {
  const line = String.UTF8.encode(s + "\n");
  store<usize>(scratch, changetype<usize>(line));
  store<u32>(scratch, <u32>line.byteLength, sizeof<usize>());
  wasiFdWrite(2, scratch, 1, scratch + 8);
}

/** The on-alarm export (renamed by the transform): 0 when handled, 1 when failed. */
export function onAlarm(scheduledMs: i64, retryCount: i32): i32 {
  const h = alarmHandler;
  if (h == null) {
    logLine("on-alarm: no alarm handler registered; the alarm is dropped");
    return 0;
  }
  const failure = h(scheduledMs, retryCount);
  if (failure != null) {
    logLine("on-alarm: " + failure);
    return 1;
  }
  return 0;
}

/** The on-request export: reads the request, runs the handler, writes its reply. */
export function onRequest(reqLen: i32): i32 {
  const h = requestHandler;
  if (h == null) {
    logLine("on-request: no request handler registered");
    return 1;
  }
  if (reqLen < 0) {
    logLine("on-request: negative request length from the host");
    return 1;
  }
  const req = readRequest(reqLen);
  if (!req.ok) {
    logLine("on-request: " + req.message);
    return 1;
  }
  const reply = h(req.value);
  const failure = reply.failure;
  if (failure != null) {
    logLine("on-request: " + failure);
    return 1;
  }
  const e = writeResponse(reply.body);
  if (e != 0) {
    logLine("on-request: " + errorMessage("response-write", e));
    return 1;
  }
  return 0;
}

/** The on-init export: 0 when done, 1 when the handler failed. */
export function onInit(): i32 {
  const h = initHandler;
  if (h == null) return 0;
  const failure = h();
  if (failure != null) {
    logLine("on-init: " + failure);
    return 1;
  }
  return 0;
}

// ---- identity --------------------------------------------------------------

/**
 * An actor's identity. The tenant and the class are 1 to 63 bytes of a-z,
 * 0-9, '-' and '_'; the name is 1 to 100 bytes of anything ('/' included),
 * so it is bytes.
 */
export class ActorId {
  constructor(
    public readonly tenant: string,
    public readonly className: string,
    public readonly name: Uint8Array,
  ) {}
  /** The name as text (bytes that are not UTF-8 are replaced). */
  get nameText(): string { return String.UTF8.decodeUnsafe(this.name.dataStart, <usize>this.name.length); }
  /** "tenant/class/name". */
  toString(): string { return this.tenant + "/" + this.className + "/" + this.nameText; }
}

/**
 * The identity of the actor the event runs in: the same on every node and
 * for the actor's whole life. Errors: EPERM outside an event; E2BIG (or EIO
 * for an identity that is not tenant/class/name) from a host out of step
 * with this SDK.
 */
export function actorId(): Result<ActorId | null> {
  const buf = new Uint8Array(MAX_ACTOR_ID_LEN);
  const e = hostActorId(buf.dataStart, <u32>buf.length, scratch);
  if (e != 0) return new Result<ActorId | null>("actor-id", e, false, null);
  const n = load<u32>(scratch);
  let id: ActorId | null = null;
  if (n <= <u32>buf.length) id = parseActorId(buf.subarray(0, <i32>n));
  if (id === null) return new Result<ActorId | null>("actor-id", EIO, false, null);
  return new Result<ActorId | null>("actor-id", 0, true, id);
}

/** Reads "tenant/class/name": the name is everything after the second '/'. */
export function parseActorId(b: Uint8Array): ActorId | null {
  const slash = <u8>0x2f;
  const i = b.indexOf(slash);
  if (i <= 0) return null;
  const j = b.indexOf(slash, i + 1);
  if (j <= i + 1 || j + 1 >= b.length) return null;
  const text = (p: Uint8Array): string => String.UTF8.decodeUnsafe(p.dataStart, <usize>p.length);
  return new ActorId(text(b.subarray(0, i)), text(b.subarray(i + 1, j)), b.slice(j + 1));
}
