// The reminders actor of guest-sdk/examples/reminders, in AssemblyScript:
// named one-shot reminders and a daily digest on a cron schedule, all over
// the actor's one alarm with the SDK's timers. The same requests give the
// same answers, and the timers are stored the same way.
//
// Requests (text bodies):
//
//   remind <name> <seconds> <text>   a reminder that far ahead (replacing one of that name)
//   cancel <name>                    cancel it
//   list                             the timers, one a line: "<name> <kind> <due, RFC 3339>"
//   sent                             the reminders sent so far, one a line
//   every <name> <seconds>           an interval timer: a tick every that many seconds
//   stop <name>                      cancel the interval timer
//   ticks <name>                     how many times it has ticked
//   whoami                           the actor's identity, tenant/class/name
//
// A due reminder is "sent" by appending its text to the key "sent"; the
// digest, at 09:00 UTC each day, counts its runs under "digests"; an
// interval timer counts its ticks under "ticks/<name>" (after downtime, it
// ticks once and skips the ticks it missed). Its test
// (reminders.test.mjs) runs it in Node against the SDK's fake host.
//
// Build it from the repository root (after make guest-tools) with
//
//   go run ./internal/guestbuild/buildguest as examples/reminders-as/assembly/index.ts build/reminders-as.wasm
import * as wasmkeep from "../../../guest-sdk-as/assembly/index";
import * as timers from "../../../guest-sdk-as/assembly/timers";
export { onAlarm, onRequest, onInit } from "../../../guest-sdk-as/assembly/index";

wasmkeep.handleInit((): string | null => timers.set("digest", timers.Schedule.cron("0 9 * * *")));
wasmkeep.handleRequest(onRequest);
timers.handle(onTimer);

function onRequest(req: Uint8Array): wasmkeep.Reply {
  const text = String.UTF8.decodeUnsafe(req.dataStart, <usize>req.length);
  const f = fields(text);
  if (f.length >= 4 && f[0] == "remind") {
    const secs = parseInt(f[2]);
    if (secs < 0) return wasmkeep.Reply.fail("remind: want seconds, got " + quote(f[2]));
    const at = wasmkeep.now() + secs * 1000;
    const err = timers.set("remind/" + f[1], timers.Schedule.at(at), utf8(f.slice(3).join(" ")));
    return err == null ? wasmkeep.Reply.text("ok") : wasmkeep.Reply.fail(<string>err);
  }
  if (f.length == 2 && f[0] == "cancel") {
    const r = timers.cancel("remind/" + f[1]);
    return r.ok ? wasmkeep.Reply.text(r.value ? "true" : "false") : wasmkeep.Reply.fail(<string>r.error);
  }
  if (f.length == 3 && f[0] == "every") {
    const secs = parseInt(f[2]);
    if (secs <= 0) return wasmkeep.Reply.fail("every: want positive seconds, got " + quote(f[2]));
    const err = timers.set("every/" + f[1], timers.Schedule.every(secs * 1000));
    return err == null ? wasmkeep.Reply.text("ok") : wasmkeep.Reply.fail(<string>err);
  }
  if (f.length == 2 && f[0] == "stop") {
    const r = timers.cancel("every/" + f[1]);
    return r.ok ? wasmkeep.Reply.text(r.value ? "true" : "false") : wasmkeep.Reply.fail(<string>r.error);
  }
  if (f.length == 2 && f[0] == "ticks") {
    const v = wasmkeep.get("ticks/" + f[1]);
    if (!v.ok) return wasmkeep.Reply.fail(v.message);
    return wasmkeep.Reply.text(counter(v).toString());
  }
  if (f.length == 1 && f[0] == "whoami") {
    const r = wasmkeep.actorId();
    return r.ok ? wasmkeep.Reply.text(r.value!.toString()) : wasmkeep.Reply.fail(r.message);
  }
  if (f.length == 1 && f[0] == "list") {
    const r = timers.list();
    if (!r.ok) return wasmkeep.Reply.fail(<string>r.error);
    let out = "";
    for (let i = 0; i < r.value.length; i++) {
      const t = r.value[i];
      out += t.name + " " + timers.kindName(t.kind) + " " + timers.formatUtc(t.dueMs) + "\n";
    }
    return wasmkeep.Reply.text(out);
  }
  if (f.length == 1 && f[0] == "sent") {
    const r = wasmkeep.getBytes(utf8("sent"));
    if (!r.ok) return wasmkeep.Reply.fail(r.message);
    return wasmkeep.Reply.bytes(r.value);
  }
  return wasmkeep.Reply.fail("unknown request " + quote(text));
}

// onTimer runs each due timer: the digest, or a reminder. A failure here
// retries the whole on-alarm event, so both only append what a rolled-back
// attempt did not commit.
function onTimer(f: timers.Fired): string | null {
  if (f.name == "digest" || f.name.startsWith("every/")) {
    const key = f.name == "digest" ? "digests" : "ticks/" + f.name.substring(6);
    const v = wasmkeep.get(key);
    if (!v.ok) return v.message;
    const e = wasmkeep.put(key, (counter(v) + 1).toString());
    return e == 0 ? null : wasmkeep.errorMessage("kv-put", e);
  }
  const sent = wasmkeep.getBytes(utf8("sent"));
  if (!sent.ok) return sent.message;
  const name = f.name.startsWith("remind/") ? f.name.substring(7) : f.name;
  const head = utf8(timers.formatUtc(f.dueMs) + " " + name + ": ");
  const out = new Uint8Array(sent.value.length + head.length + f.data.length + 1);
  out.set(sent.value, 0);
  out.set(head, sent.value.length);
  out.set(f.data, sent.value.length + head.length);
  out[out.length - 1] = 0x0a;
  const e = wasmkeep.putBytes(utf8("sent"), out);
  return e == 0 ? null : wasmkeep.errorMessage("kv-put", e);
}

// counter reads a counter kept as decimal text (0 when absent).
function counter(v: wasmkeep.Result<string>): i64 {
  const n: i64 = v.found ? parseInt(v.value) : 0;
  return n < 0 ? 0 : n;
}

function utf8(s: string): Uint8Array {
  return Uint8Array.wrap(String.UTF8.encode(s));
}

// parseInt reads a decimal number as Go's strconv.Atoi does (an optional
// sign, then digits); -1 for anything else, as the callers refuse negatives.
function parseInt(s: string): i64 {
  let i = 0;
  let neg = false;
  if (s.length > 0 && (s.charCodeAt(0) == 0x2b || s.charCodeAt(0) == 0x2d)) {
    neg = s.charCodeAt(0) == 0x2d;
    i = 1;
  }
  if (i == s.length || s.length - i > 15) return -1;
  let n: i64 = 0;
  for (; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return -1;
    n = n * 10 + (c - 0x30);
  }
  return neg && n != 0 ? -1 : n;
}

// isSpace is Go's unicode.IsSpace (the Unicode White_Space property).
function isSpace(c: i32): bool {
  return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// fields is Go's strings.Fields.
function fields(s: string): string[] {
  const out = new Array<string>(0);
  let start = -1;
  for (let i = 0; i <= s.length; i++) {
    const space = i == s.length || isSpace(s.charCodeAt(i));
    if (space && start >= 0) {
      out.push(s.substring(start, i));
      start = -1;
    } else if (!space && start < 0) {
      start = i;
    }
  }
  return out;
}

function quote(s: string): string {
  return '"' + s + '"';
}
