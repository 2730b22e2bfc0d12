// Host-free tests of the SDK: a test guest built with it (guest.ts) runs in
// Node against an in-memory host with the ABI's semantics.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { FakeHost } from "../fake.mjs";

const sdk = dirname(dirname(fileURLToPath(import.meta.url)));
const out = join(mkdtempSync(join(tmpdir(), "wasmkeep-as-test-")), "guest.wasm");
execFileSync(process.execPath, [join(sdk, "node_modules/assemblyscript/bin/asc.js"),
  join(sdk, "tests/guest.ts"), "--config", join(sdk, "asconfig.json"), "-o", out], { cwd: sdk, stdio: "inherit" });
const wasm = readFileSync(out);
const module = new WebAssembly.Module(wasm);

const ENOENT = 44, EINVAL = 28, E2BIG = 1, EPERM = 63;
const enc = new TextEncoder(), dec = new TextDecoder();

// newHost instantiates the guest against a fresh fake host.
function newHost() {
  const h = { alarm: null, kv: new Map(), request: new Uint8Array(0), response: [], inEvent: false,
    fail: new Map(), calls: [], stderr: "", nowMs: 1_700_000_000_123n, actor: "acme/orders/o/42" };
  let mem;
  const bytes = (p, n) => new Uint8Array(mem.buffer, p >>> 0, n >>> 0);
  const view = () => new DataView(mem.buffer);
  const call = (op) => { h.calls.push(op); if (!h.inEvent) return EPERM; return h.fail.get(op) ?? 0; };
  const key = (p, n) => dec.decode(bytes(p, n).slice());
  const imports = {
    "wasmkeep:alarm": {
      "set-alarm": (at) => { const e = call("set-alarm"); if (e) return e;
        if (at < 0n || at > 999_999_999_999_999n) return EINVAL; h.alarm = at; return 0; },
      "get-alarm": (p) => { const e = call("get-alarm"); if (e) return e;
        if (h.alarm === null) return ENOENT; view().setBigInt64(p, h.alarm, true); return 0; },
      "clear-alarm": () => { const e = call("clear-alarm"); if (e) return e; h.alarm = null; return 0; },
    },
    "wasmkeep:actor": {
      "request-read": (p, n) => { const e = call("request-read"); if (e) return e;
        bytes(p, Math.min(n, h.request.length)).set(h.request.subarray(0, n)); return 0; },
      "response-write": (p, n) => { const e = call("response-write"); if (e) return e;
        h.response.push(...bytes(p, n)); return 0; },
      "kv-get": (k, kn, b, bn, outLen) => { const e = call("kv-get"); if (e) return e;
        if (kn > 1024) return E2BIG; const v = h.kv.get(key(k, kn)); if (v === undefined) return ENOENT;
        view().setUint32(outLen, v.length, true); bytes(b, Math.min(bn, v.length)).set(v.subarray(0, bn)); return 0; },
      "kv-put": (k, kn, v, vn) => { const e = call("kv-put"); if (e) return e;
        if (kn > 1024 || vn > 1 << 20) return E2BIG; h.kv.set(key(k, kn), bytes(v, vn).slice()); return 0; },
      "kv-delete": (k, kn) => { const e = call("kv-delete"); if (e) return e; h.kv.delete(key(k, kn)); return 0; },
      "actor-id": (b, bn, outLen) => { const e = call("actor-id"); if (e) return e;
        const id = enc.encode(h.actor); view().setUint32(outLen, id.length, true);
        if (id.length > bn) return E2BIG; bytes(b, id.length).set(id); return 0; },
    },
    wasi_snapshot_preview1: {
      clock_time_get: (id, prec, p) => { view().setBigUint64(p, h.nowMs * 1_000_000n + 456_789n, true); return 0; },
      fd_write: (fd, iovs, n, outp) => { let total = 0;
        for (let i = 0; i < n; i++) { const ptr = view().getUint32(iovs + 8 * i, true), len = view().getUint32(iovs + 8 * i + 4, true);
          if (fd === 2) h.stderr += dec.decode(bytes(ptr, len)); total += len; }
        view().setUint32(outp, total, true); return 0; },
    },
  };
  const inst = new WebAssembly.Instance(module, imports);
  mem = inst.exports.memory;
  inst.exports._initialize();
  h.exports = inst.exports;
  h.event = (name, ...args) => { h.inEvent = true; try { return inst.exports[name](...args); } finally { h.inEvent = false; } };
  h.req = (text) => { h.request = enc.encode(text); h.response = [];
    const code = h.event("on-request", h.request.length); return [code, dec.decode(new Uint8Array(h.response))]; };
  return h;
}

test("the exports have the ABI's names, and the imports are the ABI's and WASI's", () => {
  const exports = WebAssembly.Module.exports(module).map((e) => e.name).sort();
  assert.deepEqual(exports, ["_initialize", "memory", "on-alarm", "on-init", "on-request"]);
  for (const i of WebAssembly.Module.imports(module)) {
    assert.ok(["wasmkeep:alarm", "wasmkeep:actor", "wasi_snapshot_preview1"].includes(i.module), `import ${i.module}.${i.name}`);
  }
});

test("_initialize registers the handlers and calls no import", () => {
  const h = newHost();
  assert.deepEqual(h.calls, []);
});

test("alarm calls, errnos and messages", () => {
  const h = newHost();
  const steps = [
    ["get", "none"], ["set 5000", "ok"], ["get", "5000"],
    ["set -1", "wasmkeep: set-alarm: EINVAL (invalid argument)"],
    ["set 1000000000000000", "wasmkeep: set-alarm: EINVAL (invalid argument)"],
    ["setdate 7000", "ok"], ["get", "7000"], ["clear", "ok"], ["get", "none"], ["clear", "ok"],
    ["now", "1700000000123"],
  ];
  for (const [req, want] of steps) assert.deepEqual(h.req(req), [0, want], req);
  h.fail.set("get-alarm", 29);
  assert.deepEqual(h.req("get"), [0, "wasmkeep: get-alarm: EIO (host database error)"]);
});

test("key/value: short, long (a second call) and missing values; E2BIG", () => {
  const h = newHost();
  assert.deepEqual(h.req("getkv k"), [0, "none"]);
  assert.deepEqual(h.req("put k two words"), [0, "ok"]);
  assert.deepEqual(h.req("getkv k"), [0, "two words"]);
  const long = "v".repeat(5000);
  assert.deepEqual(h.req("put big " + long), [0, "ok"]);
  h.calls = [];
  assert.deepEqual(h.req("getkv big"), [0, long]);
  assert.equal(h.calls.filter((c) => c === "kv-get").length, 2);
  assert.deepEqual(h.req("del big"), [0, "ok"]);
  assert.deepEqual(h.req("getkv big"), [0, "none"]);
  assert.deepEqual(h.req("del big"), [0, "ok"]);
  assert.deepEqual(h.req("put " + "k".repeat(1025) + " v"), [0, "wasmkeep: kv-put: E2BIG (key or value too long)"]);
});

test("actorId: the identity, a name with '/', what is not one, and E2BIG", () => {
  const h = newHost();
  assert.deepEqual(h.req("self"), [0, "acme|orders|o/42|4"]);
  h.actor = "t".repeat(63) + "/" + "c".repeat(63) + "/" + "n".repeat(100);
  assert.deepEqual(h.req("self"), [0, "t".repeat(63) + "|" + "c".repeat(63) + "|" + "n".repeat(100) + "|100"]);
  for (const bad of ["", "acme", "acme/orders", "acme/orders/", "/orders/o", "acme//o"]) {
    h.actor = bad;
    assert.deepEqual(h.req("self"), [0, "wasmkeep: actor-id: EIO (host database error)"], bad);
  }
  h.actor = "x".repeat(229);
  assert.deepEqual(h.req("self"), [0, "wasmkeep: actor-id: E2BIG (key or value too long)"]);
});

test("the exported FakeHost gives its actor an identity", () => {
  assert.equal(new FakeHost(module).request("self"), "tenant|class|actor|5");
  assert.equal(new FakeHost(module, { actor: "acme/orders/o/42" }).request("self"), "acme|orders|o/42|4");
});

test("a failing request returns 1 and writes its reason to standard error", () => {
  const h = newHost();
  const [code, resp] = h.req("fail");
  assert.equal(code, 1);
  assert.equal(resp, "");
  assert.match(h.stderr, /on-request: failing on request/);
  h.fail.set("response-write", E2BIG);
  assert.equal(h.req("get")[0], 1);
  assert.match(h.stderr, /response-write: E2BIG/);
});

test("on-alarm passes the time and the retry count; failures return 1", () => {
  const h = newHost();
  assert.equal(h.event("on-alarm", 5000n, 0), 1);
  assert.equal(h.event("on-alarm", 5000n, 1), 1);
  assert.match(h.stderr, /on-alarm: attempt 1/);
  assert.equal(h.alarm, null);
  assert.equal(h.event("on-alarm", 5000n, 2), 0);
  assert.equal(h.alarm, 6000n);
  assert.equal(h.event("on-init"), 0);
});

test("outside an event every import is EPERM", () => {
  const h = newHost();
  h.request = enc.encode("get");
  h.response = [];
  assert.equal(h.exports["on-request"](3), 1);
  assert.match(h.stderr, /request-read: EPERM/);
});
