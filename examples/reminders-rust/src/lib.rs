//! The reminders actor of guest-sdk/examples/reminders, in Rust: named
//! one-shot reminders and a daily digest on a cron schedule, all over the
//! actor's one alarm with `wasmkeep::timers`. The same requests give the
//! same answers, and the timers are stored the same way.
//!
//! Requests (text bodies):
//!
//! ```text
//! remind <name> <seconds> <text>   a reminder that far ahead (replacing one of that name)
//! cancel <name>                    cancel it
//! list                             the timers, one a line: "<name> <kind> <due, RFC 3339>"
//! sent                             the reminders sent so far, one a line
//! every <name> <seconds>           an interval timer: a tick every that many seconds
//! stop <name>                      cancel the interval timer
//! ticks <name>                     how many times it has ticked
//! whoami                           the actor's identity, tenant/class/name
//! ```
//!
//! A due reminder is "sent" by appending its text to the key "sent"; the
//! digest, at 09:00 UTC each day, counts its runs under "digests"; an
//! interval timer counts its ticks under "ticks/<name>" (after downtime, it
//! ticks once and skips the ticks it missed). The tests
//! at the end run the handlers natively against the SDK's fake host.
//!
//! Build it with (Rust 1.78 and later name the target wasm32-wasip1)
//!
//! ```text
//! cargo build --release --target wasm32-wasi
//! ```

use std::time::{Duration, SystemTime};
use wasmkeep::timers::{self, Fired, Schedule};
use wasmkeep::{Actor, HandlerResult};

struct Reminders;

wasmkeep::export_actor!(Reminders);

impl Actor for Reminders {
    fn on_init() -> HandlerResult<()> {
        timers::set("digest", Schedule::Cron("0 9 * * *".into()), b"")?;
        Ok(())
    }

    fn on_request(req: &[u8]) -> HandlerResult<Vec<u8>> {
        let text = String::from_utf8_lossy(req);
        let f: Vec<&str> = text.split_whitespace().collect();
        match f.as_slice() {
            ["remind", name, secs, words @ ..] if !words.is_empty() => {
                let secs = match parse_int(secs) {
                    Some(s) if s >= 0 => s as u64,
                    _ => return Err(format!("remind: want seconds, got {:?}", secs).into()),
                };
                let at = wasmkeep::now() + Duration::from_secs(secs);
                timers::set(&format!("remind/{}", name), Schedule::At(at), words.join(" ").as_bytes())?;
                Ok(b"ok".to_vec())
            }
            ["cancel", name] => Ok(timers::cancel(&format!("remind/{}", name))?.to_string().into_bytes()),
            ["every", name, secs] => {
                let secs = match parse_int(secs) {
                    Some(s) if s > 0 => s as u64,
                    _ => return Err(format!("every: want positive seconds, got {:?}", secs).into()),
                };
                timers::set(&format!("every/{}", name), Schedule::Every(Duration::from_secs(secs)), b"")?;
                Ok(b"ok".to_vec())
            }
            ["stop", name] => Ok(timers::cancel(&format!("every/{}", name))?.to_string().into_bytes()),
            ["ticks", name] => Ok(count(&format!("ticks/{}", name))?.to_string().into_bytes()),
            ["whoami"] => Ok(wasmkeep::actor_id()?.to_string().into_bytes()),
            ["list"] => {
                let mut out = String::new();
                for t in timers::list()? {
                    out += &format!("{} {} {}\n", t.name, t.kind, timers::format_utc(t.due_ms));
                }
                Ok(out.into_bytes())
            }
            ["sent"] => Ok(wasmkeep::get("sent")?.unwrap_or_default()),
            _ => Err(format!("unknown request {:?}", text).into()),
        }
    }

    fn on_alarm(_scheduled: SystemTime, retry_count: u32) -> HandlerResult<()> {
        timers::dispatch(retry_count, on_timer)
    }
}

/// Runs each due timer: the digest, or a reminder. A failure here retries
/// the whole on-alarm event, so both only append what a rolled-back attempt
/// did not commit.
fn on_timer(f: &Fired) -> HandlerResult<()> {
    if f.name == "digest" || f.name.starts_with("every/") {
        let key = match f.name.strip_prefix("every/") {
            Some(name) => format!("ticks/{}", name),
            None => "digests".to_string(),
        };
        let n = count(&key)?;
        wasmkeep::put(&key, (n + 1).to_string())?;
        return Ok(());
    }
    let mut sent = wasmkeep::get("sent")?.unwrap_or_default();
    let name = f.name.strip_prefix("remind/").unwrap_or(&f.name);
    sent.extend_from_slice(format!("{} {}: ", timers::format_utc(f.due_ms), name).as_bytes());
    sent.extend_from_slice(&f.data);
    sent.push(b'\n');
    wasmkeep::put("sent", sent)?;
    Ok(())
}

/// A counter kept under `key` as decimal text (0 when absent).
fn count(key: &str) -> wasmkeep::Result<i64> {
    Ok(wasmkeep::get(key)?
        .and_then(|v| parse_int(&String::from_utf8_lossy(&v)))
        .unwrap_or(0))
}

/// A decimal integer as Go's strconv.Atoi reads it: an optional sign, then
/// ASCII digits.
fn parse_int(s: &str) -> Option<i64> {
    let body = s.strip_prefix(|c| c == '+' || c == '-').unwrap_or(s);
    if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.strip_prefix('+').unwrap_or(s).parse().ok()
}

// The actor's handlers, run natively against the fake host: reminders fire
// when the clock reaches them, a cancelled one does not, and the digest
// runs each day at 09:00 UTC.
#[cfg(test)]
mod tests {
    use super::*;
    use wasmkeep::fake::TestHost;

    const MAY_1_8AM: i64 = 1_746_086_400_000; // 2025-05-01T08:00:00Z

    #[test]
    fn reminders() {
        let mut h = TestHost::<Reminders>::starting_at(MAY_1_8AM);
        let mut send = |req: &str| String::from_utf8(h.request(req.as_bytes()).unwrap()).unwrap();
        send("remind tea 300 put the kettle on");
        send("remind call 60 call Ann");
        send("remind gone 120 never sent");
        assert_eq!(send("cancel gone"), "true");
        assert_eq!(
            send("list"),
            "remind/call at 2025-05-01T08:01:00Z\nremind/tea at 2025-05-01T08:05:00Z\ndigest cron 2025-05-01T09:00:00Z\n"
        );
        h.advance(Duration::from_secs(24 * 3600));
        assert_eq!(
            String::from_utf8(h.request(b"sent").unwrap()).unwrap(),
            "2025-05-01T08:01:00Z call: call Ann\n2025-05-01T08:05:00Z tea: put the kettle on\n"
        );
        assert_eq!(h.get("digests"), Some(b"1".to_vec()), "one 09:00 passed");
        assert_eq!(h.alarm_ms(), Some(MAY_1_8AM + 25 * 3_600_000), "the next digest, 2025-05-02T09:00Z");
        assert!(h.request(b"remind x -1 no").is_err());
        assert!(h.request(b"bogus").is_err());
    }

    // An interval ticks on time, ticks once for the ticks it missed while
    // its node was down, and the actor knows its own name.
    // (guest-sdk-rust/README.md quotes this test.)
    #[test]
    fn interval_ticks_once_for_what_it_missed() {
        let mut h = TestHost::<Reminders>::starting_at(MAY_1_8AM).with_actor("acme", "reminders", b"ann");
        h.request(b"every beat 30").unwrap();
        h.advance(Duration::from_secs(95)); // ticks at 08:00:30, 08:01:00, 08:01:30
        h.down(Duration::from_secs(600)); // the node is down: 20 ticks missed
        assert_eq!(h.advance(Duration::ZERO).len(), 1, "one delivery after the outage");
        assert_eq!(h.get("ticks/beat"), Some(b"4".to_vec()));
        assert_eq!(h.alarm_ms(), Some(MAY_1_8AM + 720_000), "08:12:00: the interval keeps its phase");
        assert_eq!(h.request(b"whoami").unwrap(), b"acme/reminders/ann");
    }
}
