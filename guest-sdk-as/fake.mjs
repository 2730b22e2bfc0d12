// A fake wasmkeep host for an AssemblyScript guest's tests, in Node: it runs
// the compiled module against an in-memory key/value table, one alarm and a
// clock the test moves, with the host's semantics from abi/ABI.md:
//
//   - every call is an event, in a transaction: a handler that fails (or
//     traps) has its writes and alarm changes rolled back; a trap also
//     drops the instance, and the next event runs in a fresh one;
//   - on-init runs once, before the actor's first other event, and again
//     before the next one while it fails;
//   - advance and advanceTo deliver the alarm whenever it falls due, at its
//     time, with its scheduled time and retry count;
//   - a failing on-alarm is retried on the host's committed backoff: 1 s
//     after the first failure, doubling to 5 min, the alarm moved to the
//     retry time unless the handler set a later one or cleared it;
//   - down moves the clock without delivering, as if the node were down;
//   - outside an event every import returns EPERM.
//
// Times are Unix milliseconds (numbers). The guest reads the clock with
// wasmkeep.now() (WASI's realtime clock, which this fake sets).
//
//   import { FakeHost, compile } from "wasmkeep-as/fake.mjs";
//   const h = new FakeHost(compile("assembly/index.ts"), { nowMs: Date.UTC(2025, 4, 1, 8) });
//   h.request("remind tea 300 put the kettle on");
//   const fired = h.advance(300_000); // the reminder's alarm fires
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const E2BIG = 1, EINVAL = 28, ENOENT = 44, EPERM = 63;
const MAX_ALARM_MS = 999_999_999_999_999;

/** The clock's time when none is given: 2025-01-01T00:00:00Z. */
export const DEFAULT_START_MS = Date.UTC(2025, 0, 1);
/** The identity a FakeHost gives its actor unless told another (as the Go SDK's fake). */
export const DEFAULT_ACTOR = "tenant/class/actor";
/** The delay before the first retry; each failure doubles it, up to RETRY_MAX_MS. */
export const RETRY_BASE_MS = 1000;
export const RETRY_MAX_MS = 300_000;

const sdkDir = dirname(fileURLToPath(import.meta.url));
const enc = new TextEncoder(), dec = new TextDecoder();

/**
 * Compiles an AssemblyScript entry file with the SDK's compiler and options
 * (asconfig.json, with the transform that names the exports) and returns the
 * WebAssembly.Module. The path is relative to the working directory.
 */
export function compile(entry) {
  const tmp = mkdtempSync(join(tmpdir(), "wasmkeep-as-"));
  try {
    const out = join(tmp, "guest.wasm");
    execFileSync(process.execPath, [join(sdkDir, "node_modules/assemblyscript/bin/asc.js"), resolve(entry),
      "--config", join(sdkDir, "asconfig.json"), "-o", out], { cwd: sdkDir, stdio: "inherit" });
    return new WebAssembly.Module(readFileSync(out));
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

/** What an event whose handler failed throws; its writes were rolled back. */
export class EventFailed extends Error {}

/** The fake host, with one actor. */
export class FakeHost {
  constructor(module, { nowMs = DEFAULT_START_MS, actor = DEFAULT_ACTOR } = {}) {
    this.module = module;
    this.now = nowMs;
    /** The identity actor-id gives: "tenant/class/name". */
    this.actor = actor;
    /** Committed state: the table (string keys), the alarm, the failure count. */
    this.kv = new Map();
    this.alarm = null;
    this.retryCount = 0;
    /** Every delivery so far: { scheduled, retryCount, at, error }. */
    this.firings = [];
    /** What the guest wrote to standard error. */
    this.log = "";
    this.inited = false;
    this.ev = null;
    this.inst = null;
  }

  /** The committed value under key as text, or undefined. */
  get(key) {
    const v = this.kv.get(key);
    return v === undefined ? undefined : dec.decode(v);
  }

  /** Sends a request; returns the response as text, or throws EventFailed. */
  request(body) {
    this.#ensureInit();
    const req = typeof body === "string" ? enc.encode(body) : body;
    const ev = this.#run("on-request", req, (x) => x["on-request"](req.length));
    return dec.decode(new Uint8Array(ev.resp));
  }

  /** Moves the clock forward by ms, delivering the alarm each time it falls due; returns those deliveries. */
  advance(ms) {
    return this.advanceTo(this.now + ms);
  }

  /** Moves the clock to t, as advance does. */
  advanceTo(t) {
    const out = [];
    while (this.alarm !== null && this.alarm <= Math.max(t, this.now)) {
      if (out.length === 100_000) throw new Error("fake: 100000 alarms delivered in one advance");
      this.now = Math.max(this.now, this.alarm);
      out.push(this.#deliver());
    }
    this.now = Math.max(this.now, t);
    this.firings.push(...out);
    return out;
  }

  /** Moves the clock forward by ms without delivering, as if the node were down. */
  down(ms) {
    this.now += ms;
  }

  #deliver() {
    const at = this.alarm, failures = this.retryCount;
    const f = { scheduled: at, retryCount: failures, at: this.now, error: null };
    this.#ensureInit();
    try {
      const ev = this.#run("on-alarm", null, (x) => x["on-alarm"](BigInt(at), failures));
      if (!ev.touched) this.alarm = null;
      this.retryCount = 0;
      return f;
    } catch (e) {
      if (!(e instanceof EventFailed)) throw e;
      f.error = e.message;
      const left = e.event.touched ? e.event.alarm : at;
      const n = failures + 1;
      let delay = RETRY_BASE_MS;
      for (let i = 1; i < n && delay < RETRY_MAX_MS; i++) delay *= 2;
      const retryAt = Math.min(this.now + Math.min(delay, RETRY_MAX_MS), MAX_ALARM_MS);
      if (left === null) {
        this.alarm = null;
        this.retryCount = 0;
      } else {
        this.alarm = Math.max(left, retryAt);
        this.retryCount = n;
      }
      return f;
    }
  }

  #ensureInit() {
    if (this.inited) return;
    this.#run("on-init", null, (x) => x["on-init"]());
    this.inited = true;
  }

  // #run runs one event; it throws EventFailed (with .event) when it fails.
  #run(name, req, call) {
    if (this.ev) throw new Error("fake: an event started inside another");
    const inst = this.#instance();
    const ev = { kv: new Map(this.kv), alarm: this.alarm, touched: false, req: req ?? new Uint8Array(0), resp: [] };
    const logged = this.log.length;
    this.ev = ev;
    let code;
    try {
      code = call(inst.exports);
    } catch (e) {
      // A trap: the instance is dropped, as the host does.
      this.inst = null;
      this.log += `${name}: trap: ${e.message}\n`;
      code = 1;
    } finally {
      this.ev = null;
    }
    if (code !== 0) {
      const said = this.log.slice(logged).trim();
      const err = new EventFailed(said || `${name} returned ${code}`);
      err.event = ev;
      throw err;
    }
    this.kv = ev.kv;
    this.alarm = ev.alarm;
    if (ev.touched) this.retryCount = 0;
    return ev;
  }

  #instance() {
    if (this.inst) return this.inst;
    let mem;
    const bytes = (p, n) => new Uint8Array(mem.buffer, p >>> 0, n >>> 0);
    const view = () => new DataView(mem.buffer);
    const ev = () => this.ev;
    const imports = {
      "wasmkeep:alarm": {
        "set-alarm": (at) => {
          const e = ev(); if (!e) return EPERM;
          if (at < 0n || at > BigInt(MAX_ALARM_MS)) return EINVAL;
          e.alarm = Number(at); e.touched = true; return 0;
        },
        "get-alarm": (p) => {
          const e = ev(); if (!e) return EPERM;
          if (e.alarm === null) return ENOENT;
          view().setBigInt64(p, BigInt(e.alarm), true); return 0;
        },
        "clear-alarm": () => { const e = ev(); if (!e) return EPERM; e.alarm = null; e.touched = true; return 0; },
      },
      "wasmkeep:actor": {
        "request-read": (p, n) => {
          const e = ev(); if (!e) return EPERM;
          bytes(p, Math.min(n, e.req.length)).set(e.req.subarray(0, n)); return 0;
        },
        "response-write": (p, n) => { const e = ev(); if (!e) return EPERM; e.resp.push(...bytes(p, n)); return 0; },
        "kv-get": (k, kn, b, bn, outLen) => {
          const e = ev(); if (!e) return EPERM;
          if (kn > 1024) return E2BIG;
          const v = e.kv.get(dec.decode(bytes(k, kn).slice()));
          if (v === undefined) return ENOENT;
          view().setUint32(outLen, v.length, true); bytes(b, Math.min(bn, v.length)).set(v.subarray(0, bn)); return 0;
        },
        "kv-put": (k, kn, v, vn) => {
          const e = ev(); if (!e) return EPERM;
          if (kn > 1024 || vn > 1 << 20) return E2BIG;
          e.kv.set(dec.decode(bytes(k, kn).slice()), bytes(v, vn).slice()); return 0;
        },
        "kv-delete": (k, kn) => { const e = ev(); if (!e) return EPERM; e.kv.delete(dec.decode(bytes(k, kn).slice())); return 0; },
        "actor-id": (b, bn, outLen) => {
          const e = ev(); if (!e) return EPERM;
          const id = enc.encode(this.actor);
          view().setUint32(outLen, id.length, true);
          if (id.length > bn) return E2BIG;
          bytes(b, id.length).set(id); return 0;
        },
      },
      wasi_snapshot_preview1: {
        clock_time_get: (id, prec, p) => { view().setBigUint64(p, BigInt(this.now) * 1_000_000n, true); return 0; },
        fd_write: (fd, iovs, n, outp) => {
          let total = 0;
          for (let i = 0; i < n; i++) {
            const ptr = view().getUint32(iovs + 8 * i, true), len = view().getUint32(iovs + 8 * i + 4, true);
            if (fd === 2) this.log += dec.decode(bytes(ptr, len));
            total += len;
          }
          view().setUint32(outp, total, true); return 0;
        },
      },
    };
    this.inst = new WebAssembly.Instance(this.module, imports);
    mem = this.inst.exports.memory;
    this.inst.exports._initialize();
    return this.inst;
  }
}
