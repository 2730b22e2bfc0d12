//! The counter actor of examples/counter-actor, in Rust: the same requests,
//! the same answers, the same alarm behaviour. It counts the requests it
//! serves and the times its alarm fired, in its key/value table, and, once
//! started, re-arms its alarm every interval.
//!
//! Requests (text bodies):
//!
//! ```text
//! get          (or an empty body) the state, as JSON
//! start <ms>   store the interval and set the alarm for now + interval
//! stop         clear the alarm and the interval
//! ```
//!
//! Every request counts, and every answer is the state after it:
//! `{"requests":3,"fired":1,"alarm_ms":1700000060000,"interval_ms":60000}`.
//! `alarm_ms` is null when no alarm is set; `interval_ms` is 0 when stopped.
//! An unknown command fails the request, so it is not counted.
//!
//! Build it with (Rust 1.78 and later name the target wasm32-wasip1)
//!
//! ```text
//! cargo build --release --target wasm32-wasi
//! ```

use std::time::{Duration, SystemTime};
use wasmkeep::{Actor, HandlerResult};

// Keys in the actor's key/value table, each a decimal number.
const KEY_REQUESTS: &str = "requests";
const KEY_FIRED: &str = "fired";
const KEY_INTERVAL: &str = "interval_ms";

struct Counter;

wasmkeep::export_actor!(Counter);

impl Actor for Counter {
    fn on_request(req: &[u8]) -> HandlerResult<Vec<u8>> {
        let text = String::from_utf8_lossy(req);
        let text = text.trim();
        let (cmd, arg) = match text.find(' ') {
            Some(i) => (&text[..i], &text[i + 1..]),
            None => (text, ""),
        };
        match cmd {
            "" | "get" => {}
            "start" => {
                let ms = match parse_i64(arg.trim()) {
                    Some(ms) if ms > 0 => ms,
                    _ => return Err(format!("start: want a positive interval in ms, got {:?}", arg).into()),
                };
                put_int(KEY_INTERVAL, ms)?;
                wasmkeep::set_alarm(SystemTime::now() + Duration::from_millis(ms as u64))?;
            }
            "stop" => {
                wasmkeep::clear_alarm()?;
                wasmkeep::delete(KEY_INTERVAL)?;
            }
            _ => return Err(format!("unknown command {:?} (want get, start <ms> or stop)", cmd).into()),
        }
        add_int(KEY_REQUESTS, 1)?;
        state()
    }

    fn on_alarm(scheduled: SystemTime, _retry_count: u32) -> HandlerResult<()> {
        add_int(KEY_FIRED, 1)?;
        let interval = get_int(KEY_INTERVAL)?;
        if interval <= 0 {
            return Ok(()); // stopped: leave the alarm unset
        }
        let every = Duration::from_millis(interval as u64);
        let mut next = scheduled + every;
        let now = SystemTime::now();
        if next <= now {
            // Delivered late (the actor's node was down, say): skip the
            // missed firings rather than fire them back to back.
            next = now + every;
        }
        wasmkeep::set_alarm(next)?;
        Ok(())
    }
}

/// The counters, the alarm and the interval as JSON.
fn state() -> HandlerResult<Vec<u8>> {
    let requests = get_int(KEY_REQUESTS)?;
    let fired = get_int(KEY_FIRED)?;
    let interval = get_int(KEY_INTERVAL)?;
    let alarm = match wasmkeep::get_alarm_ms()? {
        Some(ms) => ms.to_string(),
        None => "null".to_string(),
    };
    Ok(format!(
        r#"{{"requests":{},"fired":{},"alarm_ms":{},"interval_ms":{}}}"#,
        requests, fired, alarm, interval
    )
    .into_bytes())
}

/// A decimal int64 as Go's strconv.ParseInt(s, 10, 64) reads it: an optional
/// sign, then one or more ASCII digits, within range.
fn parse_i64(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('+').unwrap_or(s);
    if digits.is_empty() || digits.starts_with('+') {
        return None;
    }
    let body = digits.strip_prefix('-').unwrap_or(digits);
    if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A counter; a missing key is 0.
fn get_int(key: &str) -> HandlerResult<i64> {
    match wasmkeep::get(key)? {
        None => Ok(0),
        Some(v) => {
            let s = String::from_utf8_lossy(&v);
            parse_i64(&s).ok_or_else(|| format!("counter {:?} holds {:?}", key, s).into())
        }
    }
}

fn put_int(key: &str, n: i64) -> HandlerResult<()> {
    wasmkeep::put(key, n.to_string())?;
    Ok(())
}

/// Adds d to a counter and returns the new value.
fn add_int(key: &str, d: i64) -> HandlerResult<i64> {
    let n = get_int(key)? + d;
    put_int(key, n)?;
    Ok(n)
}
