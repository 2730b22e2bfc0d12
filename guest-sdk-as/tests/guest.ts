// A guest driven by its requests, for the SDK's tests (sdk.test.mjs).
import * as wasmkeep from "../assembly/index";
export { onAlarm, onRequest, onInit } from "../assembly/index";

wasmkeep.handleRequest((req: Uint8Array): wasmkeep.Reply => {
  const text = String.UTF8.decodeUnsafe(req.dataStart, <usize>req.length);
  const sp = text.indexOf(" ");
  const cmd = sp < 0 ? text : text.substring(0, sp);
  const arg = sp < 0 ? "" : text.substring(sp + 1);
  if (cmd == "set") return errnoReply(wasmkeep.setAlarm(I64.parseInt(arg)), "set-alarm");
  if (cmd == "setdate") return errnoReply(wasmkeep.setAlarmAt(new Date(I64.parseInt(arg))), "set-alarm");
  if (cmd == "get") {
    const r = wasmkeep.getAlarm();
    if (!r.ok) return wasmkeep.Reply.text(r.message);
    return wasmkeep.Reply.text(r.found ? r.value.toString() : "none");
  }
  if (cmd == "clear") return errnoReply(wasmkeep.clearAlarm(), "clear-alarm");
  if (cmd == "put") {
    const sp2 = arg.indexOf(" ");
    return errnoReply(wasmkeep.put(arg.substring(0, sp2), arg.substring(sp2 + 1)), "kv-put");
  }
  if (cmd == "getkv") {
    const r = wasmkeep.get(arg);
    if (!r.ok) return wasmkeep.Reply.text(r.message);
    return wasmkeep.Reply.text(r.found ? r.value : "none");
  }
  if (cmd == "del") return errnoReply(wasmkeep.remove(arg), "kv-delete");
  if (cmd == "now") return wasmkeep.Reply.text(wasmkeep.now().toString());
  if (cmd == "self") {
    const r = wasmkeep.actorId();
    if (!r.ok) return wasmkeep.Reply.text(r.message);
    const id = r.value!;
    return wasmkeep.Reply.text(id.tenant + "|" + id.className + "|" + id.nameText + "|" + id.name.length.toString());
  }
  if (cmd == "fail") {
    wasmkeep.put("x", "1");
    return wasmkeep.Reply.fail("failing on request");
  }
  return wasmkeep.Reply.fail("unknown command " + cmd);
});

wasmkeep.handleAlarm((scheduledMs: i64, retryCount: i32): string | null => {
  if (retryCount < 2) return "attempt " + retryCount.toString();
  const e = wasmkeep.setAlarm(scheduledMs + 1000);
  return e == 0 ? null : wasmkeep.errorMessage("set-alarm", e);
});

function errnoReply(e: wasmkeep.Errno, op: string): wasmkeep.Reply {
  return wasmkeep.Reply.text(e == 0 ? "ok" : wasmkeep.errorMessage(op, e));
}
