// The counter actor of examples/counter-actor, in AssemblyScript: the same
// requests, the same answers, the same alarm behaviour. It counts the
// requests it serves and the times its alarm fired, in its key/value table,
// and, once started, re-arms its alarm every interval.
//
// Requests (text bodies):
//
//   get          (or an empty body) the state, as JSON
//   start <ms>   store the interval and set the alarm for now + interval
//   stop         clear the alarm and the interval
//
// Every request counts, and every answer is the state after it:
//
//   {"requests":3,"fired":1,"alarm_ms":1700000060000,"interval_ms":60000}
//
// alarm_ms is null when no alarm is set; interval_ms is 0 when stopped. An
// unknown command fails the request, so it is not counted.
//
// Build it from guest-sdk-as (after npm ci) with npm run build:counter.
import * as wasmkeep from "../../../guest-sdk-as/assembly/index";
export { onAlarm, onRequest, onInit } from "../../../guest-sdk-as/assembly/index";

// Keys in the actor's key/value table, each a decimal number.
const KEY_REQUESTS = "requests";
const KEY_FIRED = "fired";
const KEY_INTERVAL = "interval_ms";

wasmkeep.handleRequest(onRequest);
wasmkeep.handleAlarm(onAlarm);

// A counter's value, or the reason it could not be read.
class Int {
  constructor(public value: i64, public failure: string | null) {}
}

function onRequest(req: Uint8Array): wasmkeep.Reply {
  const text = trimSpace(String.UTF8.decodeUnsafe(req.dataStart, <usize>req.length));
  const sp = text.indexOf(" ");
  const cmd = sp < 0 ? text : text.substring(0, sp);
  const arg = sp < 0 ? "" : text.substring(sp + 1);
  if (cmd == "" || cmd == "get") {
    // nothing to change
  } else if (cmd == "start") {
    const ms = parseInt64(trimSpace(arg));
    if (ms.failure != null || ms.value <= 0) {
      return wasmkeep.Reply.fail("start: want a positive interval in ms, got " + quote(arg));
    }
    let e = wasmkeep.put(KEY_INTERVAL, ms.value.toString());
    if (e != 0) return wasmkeep.Reply.error("kv-put", e);
    e = wasmkeep.setAlarm(wasmkeep.now() + ms.value);
    if (e != 0) return wasmkeep.Reply.error("set-alarm", e);
  } else if (cmd == "stop") {
    let e = wasmkeep.clearAlarm();
    if (e != 0) return wasmkeep.Reply.error("clear-alarm", e);
    e = wasmkeep.remove(KEY_INTERVAL);
    if (e != 0) return wasmkeep.Reply.error("kv-delete", e);
  } else {
    return wasmkeep.Reply.fail("unknown command " + quote(cmd) + " (want get, start <ms> or stop)");
  }
  const failure = addInt(KEY_REQUESTS, 1);
  if (failure != null) return wasmkeep.Reply.fail(failure);
  return state();
}

function onAlarm(scheduledMs: i64, retryCount: i32): string | null {
  const failure = addInt(KEY_FIRED, 1);
  if (failure != null) return failure;
  const interval = getInt(KEY_INTERVAL);
  if (interval.failure != null) return interval.failure;
  if (interval.value <= 0) return null; // stopped: leave the alarm unset
  let next = scheduledMs + interval.value;
  const now = wasmkeep.now();
  if (next <= now) {
    // Delivered late (the actor's node was down, say): skip the missed
    // firings rather than fire them back to back.
    next = now + interval.value;
  }
  const e = wasmkeep.setAlarm(next);
  return e == 0 ? null : wasmkeep.errorMessage("set-alarm", e);
}

// state renders the counters, the alarm and the interval as JSON.
function state(): wasmkeep.Reply {
  const requests = getInt(KEY_REQUESTS);
  if (requests.failure != null) return wasmkeep.Reply.fail(requests.failure!);
  const fired = getInt(KEY_FIRED);
  if (fired.failure != null) return wasmkeep.Reply.fail(fired.failure!);
  const interval = getInt(KEY_INTERVAL);
  if (interval.failure != null) return wasmkeep.Reply.fail(interval.failure!);
  const alarm = wasmkeep.getAlarm();
  if (!alarm.ok) return wasmkeep.Reply.fail(alarm.message);
  const alarmMs = alarm.found ? alarm.value.toString() : "null";
  return wasmkeep.Reply.text(
    '{"requests":' + requests.value.toString() +
    ',"fired":' + fired.value.toString() +
    ',"alarm_ms":' + alarmMs +
    ',"interval_ms":' + interval.value.toString() + "}");
}

// getInt reads a counter; a missing key is 0.
function getInt(key: string): Int {
  const v = wasmkeep.get(key);
  if (!v.ok) return new Int(0, v.message);
  if (!v.found) return new Int(0, null);
  const n = parseInt64(v.value);
  if (n.failure != null) return new Int(0, "counter " + quote(key) + " holds " + quote(v.value));
  return n;
}

// addInt adds d to a counter; null when done, else the reason it failed.
function addInt(key: string, d: i64): string | null {
  const n = getInt(key);
  if (n.failure != null) return n.failure;
  const e = wasmkeep.put(key, (n.value + d).toString());
  return e == 0 ? null : wasmkeep.errorMessage("kv-put", e);
}

// parseInt64 reads a decimal int64 as Go's strconv.ParseInt(s, 10, 64) does:
// an optional sign, then one or more ASCII digits, within range.
function parseInt64(s: string): Int {
  let i = 0;
  let neg = false;
  if (s.length > 0 && (s.charCodeAt(0) == 0x2b || s.charCodeAt(0) == 0x2d)) {
    neg = s.charCodeAt(0) == 0x2d;
    i = 1;
  }
  if (i == s.length) return new Int(0, "invalid syntax");
  // Accumulate as a negative number, which reaches i64.MIN_VALUE.
  let n: i64 = 0;
  for (; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return new Int(0, "invalid syntax");
    const digit = <i64>(c - 0x30);
    if (n < (i64.MIN_VALUE + digit) / 10) return new Int(0, "value out of range");
    n = n * 10 - digit;
  }
  if (!neg) {
    if (n == i64.MIN_VALUE) return new Int(0, "value out of range");
    n = -n;
  }
  return new Int(n, null);
}

// isSpace is Go's unicode.IsSpace (the Unicode White_Space property).
function isSpace(c: i32): bool {
  return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// trimSpace is Go's strings.TrimSpace. (String#trim also removes U+FEFF.)
function trimSpace(s: string): string {
  let start = 0;
  let end = s.length;
  while (start < end && isSpace(s.charCodeAt(start))) start++;
  while (end > start && isSpace(s.charCodeAt(end - 1))) end--;
  return s.substring(start, end);
}

// quote puts s in double quotes for a message.
function quote(s: string): string {
  return '"' + s + '"';
}
