// A guest with timers driven by its requests, for timers.test.mjs. Its
// handler records each run (in memory, so a rolled-back run still shows)
// and writes "ran/<name>"; "fail <name> <n>" makes that timer fail while
// its retry count is below n; "mode dispatch" sets and cancels timers from
// the handler of "x".
import * as wasmkeep from "../assembly/index";
import * as timers from "../assembly/timers";
export { onAlarm, onRequest, onInit } from "../assembly/index";

let runs = new Array<string>(0);
let failName = "";
let failUntil: i32 = 0;
let mode = "";

timers.handle((f: timers.Fired): string | null => {
  runs.push(f.name + "@" + f.dueMs.toString() + ":" + f.retryCount.toString());
  const e = wasmkeep.put("ran/" + f.name, "");
  if (e != 0) return wasmkeep.errorMessage("kv-put", e);
  if (mode == "panic") unreachable(); // traps, as a panic does
  if (mode == "dispatch" && f.name == "x" && runs.length == 1) {
    const self = timers.get("x");
    if (self.value != null) return "x still stands in its own handler";
    const c = timers.cancel("y");
    if (!c.ok) return c.error;
    const t = f.dueMs + 3000; // t0, as the test sets x for t0-3s
    let err = timers.set("x", timers.Schedule.at(t + 60_000));
    if (err == null) err = timers.set("w", timers.Schedule.at(t - 3_600_000));
    if (err == null) err = timers.set("z", timers.Schedule.at(t + 120_000));
    return err;
  }
  if (f.name == failName && f.retryCount < failUntil) return f.name + " is not ready";
  return null;
});

wasmkeep.handleRequest((req: Uint8Array): wasmkeep.Reply => {
  const a = String.UTF8.decodeUnsafe(req.dataStart, <usize>req.length).split(" ");
  const cmd = a[0];
  if (cmd == "set") {
    // set <name> at <ms> | every <ms> | from <first> <ms> | cron <spec...> [-- data]
    let s: timers.Schedule;
    if (a[2] == "at") s = timers.Schedule.at(I64.parseInt(a[3]));
    else if (a[2] == "every") s = timers.Schedule.every(I64.parseInt(a[3]));
    else if (a[2] == "from") s = timers.Schedule.everyFrom(I64.parseInt(a[3]), I64.parseInt(a[4]));
    else s = timers.Schedule.cron(a.slice(3).join(" "));
    const name = a[1] == "-" ? "" : a[1] == "long" ? "n".repeat(257) : a[1] == "max" ? "n".repeat(256) : a[1];
    const err = timers.set(name, s, Uint8Array.wrap(String.UTF8.encode(name.toUpperCase())));
    return wasmkeep.Reply.text(err == null ? "ok" : <string>err);
  }
  if (cmd == "failreq") {
    timers.set(a[1], timers.Schedule.at(I64.parseInt(a[2])));
    return wasmkeep.Reply.fail("the request fails");
  }
  if (cmd == "cancel") {
    const r = timers.cancel(a[1]);
    return r.ok ? wasmkeep.Reply.text(r.value ? "true" : "false") : wasmkeep.Reply.fail(r.error!);
  }
  if (cmd == "list") {
    const r = timers.list();
    if (!r.ok) return wasmkeep.Reply.fail(r.error!);
    const out = new Array<string>(0);
    for (let i = 0; i < r.value.length; i++) out.push(describe(r.value[i]));
    return wasmkeep.Reply.text(out.join("\n"));
  }
  if (cmd == "get" || cmd == "next") {
    const r = cmd == "get" ? timers.get(a[1]) : timers.next();
    if (!r.ok) return wasmkeep.Reply.fail(r.error!);
    const t = r.value;
    return wasmkeep.Reply.text(t == null ? "none" : describe(t));
  }
  if (cmd == "runs") return wasmkeep.Reply.text(runs.join(" "));
  if (cmd == "fail") {
    failName = a[1];
    failUntil = I32.parseInt(a[2]);
    return wasmkeep.Reply.text("ok");
  }
  if (cmd == "mode") {
    mode = a[1];
    return wasmkeep.Reply.text("ok");
  }
  if (cmd == "put") return wasmkeep.Reply.text(wasmkeep.put(a[1], a[2]) == 0 ? "ok" : "error");
  if (cmd == "cronnext") {
    // cronnext <after-ms> <spec...>
    const c = timers.parseCron(a.slice(2).join(" "));
    if (!c.ok) return wasmkeep.Reply.text(c.error!);
    return wasmkeep.Reply.text(c.value!.nextAfter(I64.parseInt(a[1])).toString());
  }
  if (cmd == "format") return wasmkeep.Reply.text(timers.formatUtc(I64.parseInt(a[1])));
  return wasmkeep.Reply.fail("unknown command " + cmd);
});

function describe(t: timers.Timer): string {
  return t.name + " " + timers.kindName(t.kind) + " " + t.dueMs.toString() + " " + t.everyMs.toString() + " " +
    t.cron + " " + String.UTF8.decodeUnsafe(t.data.dataStart, <usize>t.data.length);
}
