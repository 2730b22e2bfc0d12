// The actor's handlers, run in Node against the SDK's fake host: reminders
// fire when the clock reaches them, a cancelled one does not, and the
// digest runs each day at 09:00 UTC. Run it with node --test (after make
// guest-tools).
import { test } from "node:test";
import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { FakeHost, compile } from "../../guest-sdk-as/fake.mjs";

const module = compile(join(dirname(fileURLToPath(import.meta.url)), "assembly/index.ts"));

test("reminders", () => {
  const h = new FakeHost(module, { nowMs: Date.UTC(2025, 4, 1, 8) });
  h.request("remind tea 300 put the kettle on");
  h.request("remind call 60 call Ann");
  h.request("remind gone 120 never sent");
  assert.equal(h.request("cancel gone"), "true");
  assert.equal(h.request("list"),
    "remind/call at 2025-05-01T08:01:00Z\nremind/tea at 2025-05-01T08:05:00Z\ndigest cron 2025-05-01T09:00:00Z\n");
  h.advance(24 * 3600 * 1000);
  assert.equal(h.request("sent"), "2025-05-01T08:01:00Z call: call Ann\n2025-05-01T08:05:00Z tea: put the kettle on\n");
  assert.equal(h.get("digests"), "1");
  assert.equal(h.alarm, Date.UTC(2025, 4, 2, 9), "the next digest");
  assert.throws(() => h.request("remind x -1 no"));
  assert.throws(() => h.request("bogus"));
});

// An interval ticks on time, ticks once for the ticks it missed while its
// node was down, and the actor knows its own name. (guest-sdk-as/README.md
// quotes this test.)
test("an interval ticks once for what it missed", () => {
  const h = new FakeHost(module, { nowMs: Date.UTC(2025, 4, 1, 8), actor: "acme/reminders/ann" });
  h.request("every beat 30");
  h.advance(95_000); // ticks at 08:00:30, 08:01:00, 08:01:30
  h.down(600_000); // the node is down: 20 ticks missed
  assert.equal(h.advance(0).length, 1, "one delivery after the outage");
  assert.equal(h.get("ticks/beat"), "4");
  assert.equal(h.alarm, Date.UTC(2025, 4, 1, 8, 12), "08:12:00: the interval keeps its phase");
  assert.equal(h.request("whoami"), "acme/reminders/ann");
});
