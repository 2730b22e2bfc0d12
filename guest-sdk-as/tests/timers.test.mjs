// The timers on the fake host (fake.mjs): the rules of docs/timers.md, as
// the Go and Rust SDKs' own tests check them, through a guest driven by its
// requests (timers-guest.ts).
import { test } from "node:test";
import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { FakeHost, compile } from "../fake.mjs";

const module = compile(join(dirname(fileURLToPath(import.meta.url)), "timers-guest.ts"));
const T0 = Date.UTC(2025, 2, 1, 10); // 2025-03-01T10:00:00Z
const S = 1000, MIN = 60 * S, HOUR = 60 * MIN;

function setup() {
  return new FakeHost(module, { nowMs: T0 });
}
const ok = (h, ...reqs) => { for (const r of reqs) assert.equal(h.request(r), "ok", r); };
const runs = (h) => h.request("runs").split(" ").filter((x) => x).map((r) => {
  const [name, rest] = r.split("@");
  const [due, retry] = rest.split(":");
  return [name, Number(due) - T0, Number(retry)];
});
const names = (h) => runs(h).map((r) => r[0]);
const listNames = (h) => h.request("list").split("\n").filter((x) => x).map((l) => l.split(" ")[0]);

test("set, list, next, cancel; the alarm is the earliest timer's", () => {
  const h = setup();
  ok(h, `set b at ${T0 + 2 * MIN}`, `set a at ${T0 + 2 * MIN}`, `set c at ${T0 + MIN}`,
    `set tick every ${5 * MIN}`, "set nightly cron 0 3 * * *");
  assert.equal(h.alarm, T0 + MIN);
  assert.deepEqual(listNames(h), ["c", "a", "b", "tick", "nightly"]);
  const l = h.request("list").split("\n");
  assert.equal(l[3], `tick every ${T0 + 5 * MIN} ${5 * MIN}  TICK`);
  assert.equal(l[4], `nightly cron ${Date.UTC(2025, 2, 2, 3)} 0 0 3 * * * NIGHTLY`);
  assert.equal(h.request("get b"), `b at ${T0 + 2 * MIN} 0  B`);
  assert.equal(h.request("next").split(" ")[0], "c");
  assert.equal(h.request("get nope"), "none");
  assert.equal(h.request("cancel c"), "true");
  assert.equal(h.request("cancel c"), "false");
  assert.equal(h.alarm, T0 + 2 * MIN);
  for (const n of ["a", "b", "tick", "nightly"]) h.request("cancel " + n);
  assert.equal(h.request("next"), "none");
  assert.equal(h.alarm, null, "no timers, no alarm");
  assert.equal(h.get("wasmkeep.timers"), undefined, "no timers, no value");
});

test("due timers run in order of due time, then name", () => {
  const h = setup();
  ok(h, `set z at ${T0 - 2 * S}`, `set b at ${T0 - S}`, `set a at ${T0 - S}`, `set B at ${T0 - S}`, `set later at ${T0 + HOUR}`);
  const fired = h.advance(0);
  assert.equal(fired.length, 1);
  assert.equal(fired[0].error, null);
  assert.deepEqual(names(h), ["z", "B", "a", "b"]);
  assert.equal(runs(h)[0][1], -2 * S, "z's due is its own time");
  assert.equal(h.alarm, T0 + HOUR);
  h.advance(HOUR);
  assert.deepEqual(names(h), ["z", "B", "a", "b", "later"]);
  assert.equal(h.alarm, null);
});

test("an interval keeps its phase and skips missed ticks", () => {
  const h = setup();
  ok(h, `set tick every ${10 * S}`);
  h.advance(25 * S);
  assert.deepEqual(runs(h).map((r) => r[1]), [10 * S, 20 * S]);
  h.down(50 * S); // +25 s to +75 s: the ticks at +30 ... +70 s are missed
  assert.equal(h.advance(0).length, 1);
  assert.deepEqual(runs(h).map((r) => r[1]), [10 * S, 20 * S, 30 * S], "one late run, due the earliest missed tick");
  assert.equal(h.request("get tick").split(" ")[2], String(T0 + 80 * S));
  assert.equal(h.alarm, T0 + 80 * S);
});

test("every-from and a one-shot in the past", () => {
  const h = setup();
  ok(h, `set grid from ${T0 - 25 * S} ${10 * S}`, `set future from ${T0 + HOUR} ${MIN}`, `set now at ${T0 - HOUR}`);
  assert.equal(h.request("get grid").split(" ")[2], String(T0 + 5 * S));
  assert.equal(h.request("get future").split(" ")[2], String(T0 + HOUR));
  h.advance(0);
  assert.deepEqual(names(h), ["now"]);
});

test("a cron timer fires on its minutes and skips missed ones", () => {
  const h = setup();
  ok(h, "set hourly cron 0 * * * *");
  h.advance(3 * HOUR);
  assert.deepEqual(runs(h).map((r) => r[1]), [HOUR, 2 * HOUR, 3 * HOUR]);
  assert.deepEqual(h.firings.map((f) => f.at - T0), [HOUR, 2 * HOUR, 3 * HOUR]);
  h.down(5 * HOUR + 30 * MIN);
  h.advance(0);
  assert.deepEqual(runs(h).map((r) => r[1]), [HOUR, 2 * HOUR, 3 * HOUR, 4 * HOUR]);
  assert.equal(h.alarm, T0 + 9 * HOUR);
});

test("a failure rolls back the whole event and the retry reruns it", () => {
  const h = setup();
  ok(h, "fail b 2", `set a at ${T0 + S}`, `set b at ${T0 + S}`, `set c at ${T0 + 2 * S}`, `set tick from ${T0 + S} ${MIN}`);
  const fired = h.advance(S);
  assert.equal(fired.length, 1);
  assert.match(fired[0].error, /timer "b" due 2025-03-01T10:00:01Z: b is not ready/);
  assert.equal(h.get("ran/a"), undefined, "a's write committed though the event failed");
  assert.deepEqual(listNames(h), ["a", "b", "tick", "c"], "the runs and moves were not rolled back");
  assert.equal(h.alarm, T0 + 2 * S);
  assert.equal(h.retryCount, 1);
  h.advance(29 * S); // retries at +2 s (fails) and +4 s (succeeds)
  assert.deepEqual(names(h), ["a", "b", "a", "b", "a", "b", "tick", "c"]);
  assert.deepEqual(runs(h).map((r) => r[2]), [0, 0, 1, 1, 2, 2, 2, 2]);
  for (const k of ["ran/a", "ran/b", "ran/c", "ran/tick"]) assert.notEqual(h.get(k), undefined, k);
  assert.equal(h.request("get tick").split(" ")[2], String(T0 + 61 * S));
});

test("a request during the backoff keeps the retry unless it moves the failing timer", () => {
  const h = setup();
  ok(h, "fail bad 1000", `set bad at ${T0}`);
  h.advance(2 * S); // fails at +0 s and +1 s; retry at +3 s
  assert.deepEqual([h.alarm, h.retryCount], [T0 + 3 * S, 2]);
  ok(h, `set later at ${T0 + HOUR}`, `set early at ${T0 - MIN}`);
  assert.deepEqual([h.alarm, h.retryCount], [T0 + 3 * S, 2], "the retry stands");
  h.request("cancel early");
  assert.deepEqual([h.alarm, h.retryCount], [T0 + 3 * S, 2]);
  h.request("cancel bad");
  assert.deepEqual([h.alarm, h.retryCount], [T0 + HOUR, 0], "re-armed for later");
  h.advance(HOUR);
  assert.deepEqual(names(h), ["bad", "bad", "later"]);
});

test("handlers set and cancel timers during the dispatch", () => {
  const h = setup();
  ok(h, "mode dispatch", `set x at ${T0 - 3 * S}`, `set y at ${T0 - 2 * S}`, `set z at ${T0 - S}`, `set v at ${T0 - S}`);
  assert.equal(h.advance(0).length, 2, "this event and the one for w");
  assert.deepEqual(names(h), ["x", "v", "w"]);
  h.advance(MIN);
  h.advance(MIN);
  assert.deepEqual(names(h), ["x", "v", "w", "x", "z"]);
});

test("timers commit with the event, and a trap fails it", () => {
  const h = setup();
  assert.throws(() => h.request(`failreq x ${T0 + MIN}`), /the request fails/);
  assert.equal(h.alarm, null);
  assert.equal(h.get("wasmkeep.timers"), undefined);
  ok(h, `set p at ${T0}`, "mode panic");
  const fired = h.advance(0);
  assert.match(fired[0].error, /trap/);
  assert.deepEqual(listNames(h), ["p"], "a fresh instance reads the stored timers");
});

test("set refuses bad names, intervals, cron expressions and times", () => {
  const h = setup();
  for (const req of ["set - at 1", "set long at 1", "set x every 0", "set x cron 0 0 30 2 *", `set x at -1`, "set x at 1000000000000000"]) {
    assert.notEqual(h.request(req), "ok", req);
  }
  assert.equal(h.request(`set max at ${T0}`), "ok");
});

test("a corrupt value fails the event, naming the key", () => {
  const h = setup();
  ok(h, "put wasmkeep.timers junk");
  assert.throws(() => h.request("list"), /wasmkeep\.timers/);
});

test("the stored value is the Go SDK's format", () => {
  const h = setup();
  ok(h, `set a at ${T0 + S}`, `set b every ${S}`, "set c cron */5 * * * *");
  const v = Buffer.from(h.kv.get("wasmkeep.timers"));
  // version, armed+1, count; then by name: name, kind, zigzag due, every or spec, data
  const uv = (n) => { const out = []; let x = BigInt(n); while (x >= 0x80n) { out.push(Number(x & 0x7fn) | 0x80); x >>= 7n; } out.push(Number(x)); return out; };
  const zz = (n) => uv(BigInt(n) * 2n);
  const str = (s) => [...uv(s.length), ...Buffer.from(s)];
  const want = Buffer.from([1, ...uv(T0 + S + 1), 3,
    ...str("a"), 1, ...zz(T0 + S), ...str("A"),
    ...str("b"), 2, ...zz(T0 + S), ...zz(S), ...str("B"),
    ...str("c"), 3, ...zz(T0 + 5 * MIN), ...str("*/5 * * * *"), ...str("C")]);
  assert.deepEqual(v, want);
});

test("cron: next matches, refusals", () => {
  const h = setup();
  const u = (s) => Date.parse(s.replace(" ", "T") + ":00Z");
  const cases = [
    ["*/15 * * * *", "2025-01-01 12:45", "2025-01-01 13:00"],
    ["5/20 * * * *", "2025-01-01 12:45", "2025-01-01 13:05"],
    ["30 9-17/4 * * *", "2025-01-01 17:30", "2025-01-02 09:30"],
    ["0 0 31 * *", "2025-01-31 00:00", "2025-03-31 00:00"],
    ["59 23 28-31 * *", "2025-02-28 23:59", "2025-03-28 23:59"],
    ["0 0 29 2 *", "2096-03-01 00:00", "2104-02-29 00:00"],
    ["@yearly", "2025-06-01 00:00", "2026-01-01 00:00"],
    ["@weekly", "2025-01-05 00:00", "2025-01-12 00:00"],
    ["0 12 * * MON-FRI", "2025-01-04 08:00", "2025-01-06 12:00"],
    ["0 0 * * 7", "2025-01-01 00:00", "2025-01-05 00:00"],
    ["0 0 * * sun", "2025-01-01 00:00", "2025-01-05 00:00"],
    ["0 0 * * */2", "2025-01-04 00:00", "2025-01-05 00:00"],
    ["0 0 1 * MON", "2025-01-27 00:00", "2025-02-01 00:00"],
    ["0 0 30 2 MON", "2025-01-01 00:00", "2025-02-03 00:00"],
    ["0 0 */2 * MON", "2025-01-01 00:00", "2025-01-13 00:00"],
    ["0 0 1 mar-may/2 *", "2025-03-01 00:00", "2025-05-01 00:00"],
  ];
  for (const [spec, after, want] of cases) {
    assert.equal(h.request(`cronnext ${u(after)} ${spec}`), String(u(want)), `${spec} after ${after}`);
  }
  for (const spec of ["* * * *", "60 * * * *", "* * * 13 *", "* * * * 8", "5-1 * * * *", "* * * * FRI-MON", "*/0 * * * *",
    "1,,2 * * * *", "-1 * * * *", "+5 * * * *", "@reboot", "0 0 30 2 *", "0 0 31 4,6,9,11 *"]) {
    assert.match(h.request(`cronnext 0 ${spec}`), /^timers: cron/, spec);
  }
  assert.equal(h.request(`format ${T0 + 1999}`), "2025-03-01T10:00:01Z");
});
