// The timers on the fake host: the rules of docs/timers.md, as the Go SDK's
// own tests check them, and the stored format byte for byte.

use super::*;
use crate::fake::TestHost;
use crate::{Actor, HandlerResult};
use std::time::{Duration, UNIX_EPOCH};

// 2025-03-01T10:00:00Z, the Go tests' t0.
const T0: i64 = 1_740_823_200_000;
const S: i64 = 1000;
const MIN: i64 = 60 * S;
const HOUR: i64 = 60 * MIN;

type Hook = Box<dyn Fn(&Fired) -> HandlerResult<()>>;

thread_local! {
    // What the test actor's timers ran: name, due, retry count.
    static RUNS: RefCell<Vec<(String, i64, u32)>> = RefCell::new(Vec::new());
    // What each run does after it is recorded.
    static HOOK: RefCell<Option<Hook>> = RefCell::new(None);
}

struct T;

impl Actor for T {
    fn on_alarm(_: SystemTime, retry_count: u32) -> HandlerResult<()> {
        dispatch(retry_count, |f| {
            RUNS.with(|r| r.borrow_mut().push((f.name.clone(), f.due_ms, f.retry_count)));
            HOOK.with(|h| match h.borrow().as_ref() {
                Some(hook) => hook(f),
                None => Ok(()),
            })
        })
    }
}

fn setup(hook: Option<Hook>) -> TestHost<T> {
    RUNS.with(|r| r.borrow_mut().clear());
    HOOK.with(|h| *h.borrow_mut() = hook);
    TestHost::starting_at(T0)
}

fn runs() -> Vec<String> {
    RUNS.with(|r| r.borrow().iter().map(|x| x.0.clone()).collect())
}

fn dues() -> Vec<i64> {
    RUNS.with(|r| r.borrow().iter().map(|x| x.1 - T0).collect())
}

fn at(ms: i64) -> Schedule {
    Schedule::At(crate::from_millis(ms))
}

fn run(h: &mut TestHost<T>, f: impl FnOnce() -> HandlerResult<()>) {
    if let Err(e) = h.run(f) {
        panic!("event failed: {}", e);
    }
}

fn names(ts: &[Timer]) -> Vec<&str> {
    ts.iter().map(|t| t.name.as_str()).collect()
}

#[test]
fn set_list_next_cancel() {
    let mut h = setup(None);
    run(&mut h, || {
        set("b", at(T0 + 2 * MIN), b"B")?;
        set("a", at(T0 + 2 * MIN), b"")?;
        set("c", at(T0 + MIN), b"")?;
        set("tick", Schedule::Every(Duration::from_secs(300)), b"")?;
        set("nightly", Schedule::Cron("0 3 * * *".into()), b"")?;
        Ok(())
    });
    assert_eq!(h.alarm_ms(), Some(T0 + MIN), "the alarm is the earliest timer's");
    run(&mut h, || {
        let l = list()?;
        assert_eq!(names(&l), ["c", "a", "b", "tick", "nightly"], "by due time, then name");
        assert_eq!((l[3].kind, l[3].every, l[3].due_ms), (Kind::Every, Duration::from_secs(300), T0 + 5 * MIN));
        // 2025-03-02T03:00:00Z
        assert_eq!((l[4].kind, l[4].cron.as_str(), l[4].due_ms), (Kind::Cron, "0 3 * * *", T0 + 17 * HOUR));
        let b = get("b")?.expect("b");
        assert_eq!((b.kind, b.data.as_slice()), (Kind::At, &b"B"[..]));
        assert_eq!(next()?.map(|t| t.name), Some("c".to_string()));
        assert_eq!(get("nope")?, None);
        Ok(())
    });
    run(&mut h, || {
        assert!(cancel("c")?);
        assert!(!cancel("c")?, "cancelling twice");
        Ok(())
    });
    assert_eq!(h.alarm_ms(), Some(T0 + 2 * MIN));
    run(&mut h, || {
        for n in ["a", "b", "tick", "nightly"] {
            cancel(n)?;
        }
        assert_eq!(next()?, None);
        Ok(())
    });
    assert_eq!(h.alarm_ms(), None, "no timers, no alarm");
    assert_eq!(h.get(STATE_KEY), None, "no timers, no value");
}

#[test]
fn due_timers_run_in_order_of_due_time_then_name() {
    let mut h = setup(None);
    run(&mut h, || {
        set("z", at(T0 - 2 * S), b"")?;
        set("b", at(T0 - S), b"")?;
        set("a", at(T0 - S), b"")?;
        set("B", at(T0 - S), b"")?;
        set("later", at(T0 + HOUR), b"")?;
        Ok(())
    });
    let fired = h.advance(Duration::ZERO);
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].err, None);
    assert_eq!(runs(), ["z", "B", "a", "b"]);
    assert_eq!(dues()[0], -2 * S, "z's due is its own time");
    assert_eq!(h.alarm_ms(), Some(T0 + HOUR));
    h.advance(Duration::from_secs(3600));
    assert_eq!(runs(), ["z", "B", "a", "b", "later"]);
    assert_eq!(h.alarm_ms(), None, "the alarm is set after the last one-shot timer ran");
}

#[test]
fn interval_keeps_phase_and_skips_missed_ticks() {
    let mut h = setup(None);
    run(&mut h, || set("tick", Schedule::Every(Duration::from_secs(10)), b"").map_err(Into::into));
    h.advance(Duration::from_secs(25));
    assert_eq!(dues(), [10 * S, 20 * S]);
    // Down from +25 s to +75 s: the ticks at +30 ... +70 s are missed.
    h.down(Duration::from_secs(50));
    let fired = h.advance(Duration::ZERO);
    assert_eq!(fired.len(), 1);
    assert_eq!(dues(), [10 * S, 20 * S, 30 * S], "one late run, due the earliest missed tick");
    run(&mut h, || {
        assert_eq!(get("tick")?.unwrap().due_ms, T0 + 80 * S, "after now, on the +10 s grid");
        Ok(())
    });
    assert_eq!(h.alarm_ms(), Some(T0 + 80 * S));
}

#[test]
fn every_from_and_at_in_the_past() {
    let mut h = setup(None);
    run(&mut h, || {
        set("grid", Schedule::EveryFrom(crate::from_millis(T0 - 25 * S), Duration::from_secs(10)), b"")?;
        set("future", Schedule::EveryFrom(crate::from_millis(T0 + HOUR), Duration::from_secs(60)), b"")?;
        set("now", at(T0 - HOUR), b"")?;
        Ok(())
    });
    run(&mut h, || {
        assert_eq!(get("grid")?.unwrap().due_ms, T0 + 5 * S);
        assert_eq!(get("future")?.unwrap().due_ms, T0 + HOUR);
        Ok(())
    });
    h.advance(Duration::ZERO);
    assert_eq!(runs(), ["now"], "a past one-shot fires at once");
}

#[test]
fn cron_timer_fires_on_its_minutes_and_skips_missed_ones() {
    let mut h = setup(None);
    run(&mut h, || set("hourly", Schedule::Cron("0 * * * *".into()), b"").map_err(Into::into));
    h.advance(Duration::from_secs(3 * 3600));
    assert_eq!(dues(), [HOUR, 2 * HOUR, 3 * HOUR]);
    let ats: Vec<i64> = h.firings().iter().map(|f| f.at_ms - T0).collect();
    assert_eq!(ats, [HOUR, 2 * HOUR, 3 * HOUR]);
    h.down(Duration::from_secs(5 * 3600 + 1800));
    h.advance(Duration::ZERO);
    assert_eq!(dues(), [HOUR, 2 * HOUR, 3 * HOUR, 4 * HOUR]);
    assert_eq!(h.alarm_ms(), Some(T0 + 9 * HOUR), "the first tick after now");
}

// A failing handler rolls back every write of the event, the other timers'
// runs and moves included, and the retry runs them all again, in order.
#[test]
fn failure_reruns_the_whole_event() {
    let mut h = setup(Some(Box::new(|f: &Fired| {
        crate::put(format!("ran/{}", f.name), "")?;
        if f.name == "b" && f.retry_count < 2 {
            return Err("b is not ready".into());
        }
        Ok(())
    })));
    run(&mut h, || {
        set("a", at(T0 + S), b"")?;
        set("b", at(T0 + S), b"")?;
        set("c", at(T0 + 2 * S), b"")?;
        set("tick", Schedule::EveryFrom(crate::from_millis(T0 + S), Duration::from_secs(60)), b"")?;
        Ok(())
    });
    let fired = h.advance(Duration::from_secs(1));
    assert_eq!(fired.len(), 1);
    let err = fired[0].err.clone().expect("the event failed");
    assert!(err.contains("timer \"b\"") && err.contains("b is not ready"), "{}", err);
    assert_eq!(h.get("ran/a"), None, "a's write committed though the event failed");
    run(&mut h, || {
        assert_eq!(names(&list()?), ["a", "b", "tick", "c"], "the runs and moves were not rolled back");
        Ok(())
    });
    assert_eq!((h.alarm_ms(), h.retry_count()), (Some(T0 + 2 * S), 1));
    h.advance(Duration::from_secs(29)); // retries at +2 s (fails) and +4 s (succeeds)
    assert_eq!(runs(), ["a", "b", "a", "b", "a", "b", "tick", "c"]);
    let retries: Vec<u32> = RUNS.with(|r| r.borrow().iter().map(|x| x.2).collect());
    assert_eq!(retries, [0, 0, 1, 1, 2, 2, 2, 2]);
    for k in ["ran/a", "ran/b", "ran/c", "ran/tick"] {
        assert!(h.get(k).is_some(), "{} not committed", k);
    }
    run(&mut h, || {
        assert_eq!(get("tick")?.unwrap().due_ms, T0 + 61 * S, "tick ran its missed tick once");
        Ok(())
    });
}

// Changes that leave a timer due at or before the failed time keep the
// host's retry and count; one that leaves none re-arms, the count back to 0.
#[test]
fn a_request_during_backoff_keeps_the_retry() {
    let mut h = setup(Some(Box::new(|f: &Fired| if f.name == "bad" { Err("bad".into()) } else { Ok(()) })));
    run(&mut h, || set("bad", at(T0), b"").map_err(Into::into));
    h.advance(Duration::from_secs(2)); // fails at +0 s and +1 s; retry at +3 s
    let retry_at = h.alarm_ms();
    assert_eq!((retry_at, h.retry_count()), (Some(T0 + 3 * S), 2));
    run(&mut h, || {
        set("later", at(T0 + HOUR), b"")?;
        set("early", at(T0 - MIN), b"")?;
        Ok(())
    });
    assert_eq!((h.alarm_ms(), h.retry_count()), (retry_at, 2), "the retry stands");
    run(&mut h, || cancel("early").map(|_| ()).map_err(Into::into));
    assert_eq!((h.alarm_ms(), h.retry_count()), (retry_at, 2));
    run(&mut h, || cancel("bad").map(|_| ()).map_err(Into::into));
    assert_eq!((h.alarm_ms(), h.retry_count()), (Some(T0 + HOUR), 0), "re-armed for later");
    h.advance(Duration::from_secs(3600));
    assert_eq!(runs(), ["bad", "bad", "later"]);
}

#[test]
fn handlers_set_and_cancel_during_dispatch() {
    let mut h = setup(Some(Box::new(|f: &Fired| {
        if f.name != "x" || RUNS.with(|r| r.borrow().len()) > 1 {
            return Ok(());
        }
        assert_eq!(get("x")?, None, "x is gone in its own handler (one-shot)");
        cancel("y")?;
        set("x", at(T0 + MIN), b"")?; // itself again, later
        set("w", at(T0 - HOUR), b"")?; // due already: runs in the next event
        set("z", at(T0 + 2 * MIN), b"")?; // moved: not run in this event
        Ok(())
    })));
    run(&mut h, || {
        set("x", at(T0 - 3 * S), b"")?;
        set("y", at(T0 - 2 * S), b"")?;
        set("z", at(T0 - S), b"")?;
        set("v", at(T0 - S), b"")?;
        Ok(())
    });
    let fired = h.advance(Duration::ZERO);
    assert_eq!(fired.len(), 2, "this event and the one for w");
    assert_eq!(runs(), ["x", "v", "w"]);
    h.advance(Duration::from_secs(60));
    h.advance(Duration::from_secs(60));
    assert_eq!(runs(), ["x", "v", "w", "x", "z"]);
}

#[test]
fn timers_commit_with_the_event() {
    let mut h = setup(None);
    let r = h.run(|| {
        set("x", at(T0 + MIN), b"")?;
        Err("the request fails".into())
    });
    assert!(r.is_err());
    assert_eq!(h.alarm_ms(), None, "a failed event's alarm committed");
    assert_eq!(h.get(STATE_KEY), None, "a failed event's timer committed");
}

#[test]
fn a_panicking_handler_fails_the_event_and_forgets_the_dispatch() {
    let mut h = setup(Some(Box::new(|_: &Fired| panic!("boom"))));
    run(&mut h, || set("p", at(T0), b"").map_err(Into::into));
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let fired = h.advance(Duration::ZERO);
    std::panic::set_hook(prev);
    assert!(fired[0].err.as_deref().unwrap_or("").contains("boom"), "{:?}", fired);
    // Outside a dispatch again: the calls read the stored timers.
    run(&mut h, || {
        assert_eq!(names(&list()?), ["p"]);
        Ok(())
    });
}

#[test]
fn set_refuses() {
    let mut h = setup(None);
    run(&mut h, || {
        let long = "n".repeat(MAX_NAME_LEN + 1);
        for (what, s, name) in [
            ("empty name", at(T0), ""),
            ("long name", at(T0), long.as_str()),
            ("zero interval", Schedule::Every(Duration::ZERO), "x"),
            ("bad cron", Schedule::Cron("0 0 30 2 *".into()), "x"),
            ("before 1970", Schedule::At(UNIX_EPOCH - Duration::from_secs(1)), "x"),
            ("too late", at(crate::MAX_ALARM_MS + 1), "x"),
        ] {
            match set(name, s, b"") {
                Err(Error::Invalid(_)) => {}
                r => panic!("{}: set = {:?}", what, r),
            }
        }
        set(&"n".repeat(MAX_NAME_LEN), at(T0), b"")?;
        Ok(())
    });
    crate::fake::uninstall();
    match set("x", at(T0), b"") {
        Err(Error::Host(e)) if e.errno() == crate::Errno::EPERM => {}
        r => panic!("set without a host = {:?}", r),
    }
}

#[test]
fn a_corrupt_value_fails_the_event_naming_the_key() {
    let mut h = setup(None);
    run(&mut h, || crate::put(STATE_KEY, "junk").map_err(Into::into));
    let err = h.run(|| list().map(|_| ()).map_err(Into::into)).unwrap_err();
    assert!(err.contains(STATE_KEY), "{}", err);
}

// The value the Go SDK stores for the same timers (its encode, by hand):
// the format is shared, so an actor keeps its timers across the SDKs.
#[test]
fn the_stored_format_is_the_go_sdks() {
    let mut st = State { timers: BTreeMap::new(), armed: 1234 };
    let mut add = |name: &str, kind, due, every, cron: Option<&str>, data: &[u8]| {
        let e = Entry {
            name: name.into(),
            kind,
            due,
            every,
            cron: cron.map(|c| CronSchedule::parse(c).unwrap()),
            data: data.to_vec(),
            seq: 0,
        };
        st.timers.insert(name.into(), e);
    };
    add("a", Kind::At, 5, 0, None, b"hello");
    add("b", Kind::Every, 7, 1000, None, b"");
    add("c", Kind::Cron, -1, 0, Some("*/5 * * * *"), b"");
    let b = encode(&st);
    let want: Vec<u8> = [
        &[1u8, 0xd3, 0x09, 3][..],                   // version, armed+1 = 1235, count
        &[1, b'a', 1, 10, 5, b'h', b'e', b'l', b'l', b'o'], // a: at, due 5 (zigzag 10), data
        &[1, b'b', 2, 14, 0xd0, 0x0f, 0],            // b: every, due 7, every 1000 (zigzag 2000)
        &[1, b'c', 3, 1, 11],                        // c: cron, due -1 (zigzag 1), spec
        b"*/5 * * * *",
        &[0],
    ]
    .concat();
    assert_eq!(b, want);
    let got = decode(&b).unwrap();
    assert_eq!(encode(&got), b);
    assert_eq!(got.armed, 1234);
    for i in 0..b.len() {
        assert!(decode(&b[..i]).is_err(), "a truncation to {} bytes decoded", i);
    }
    let mut other = b.clone();
    other[0] = 2;
    assert!(decode(&other).is_err(), "another version decoded");
}

// ---- cron ----------------------------------------------------------------

fn utc(s: &str) -> i64 {
    // "2025-01-01 12:00"
    let n = |a: usize, b: usize| s[a..b].parse::<u32>().unwrap();
    let days = cron::days_from_civil(n(0, 4) as i64, n(5, 7), n(8, 10));
    days * 86_400_000 + n(11, 13) as i64 * HOUR + n(14, 16) as i64 * MIN
}

#[test]
fn cron_next() {
    let cases = [
        ("* * * * *", "2025-01-01 12:00", "2025-01-01 12:01"),
        ("*/15 * * * *", "2025-01-01 12:14", "2025-01-01 12:15"),
        ("*/15 * * * *", "2025-01-01 12:45", "2025-01-01 13:00"),
        ("5/20 * * * *", "2025-01-01 12:25", "2025-01-01 12:45"),
        ("5/20 * * * *", "2025-01-01 12:45", "2025-01-01 13:05"),
        ("30 9-17/4 * * *", "2025-01-01 09:30", "2025-01-01 13:30"),
        ("30 9-17/4 * * *", "2025-01-01 17:30", "2025-01-02 09:30"),
        ("0 8,12,18 * * *", "2025-01-01 12:00", "2025-01-01 18:00"),
        ("0 0 31 * *", "2025-01-31 00:00", "2025-03-31 00:00"),
        ("0 0 31 * *", "2025-04-01 00:00", "2025-05-31 00:00"),
        ("0 0 30 * *", "2025-01-30 00:00", "2025-03-30 00:00"),
        ("59 23 28-31 * *", "2025-02-28 23:59", "2025-03-28 23:59"),
        ("0 0 29 2 *", "2025-01-01 00:00", "2028-02-29 00:00"),
        ("0 0 29 2 *", "2096-03-01 00:00", "2104-02-29 00:00"),
        ("0 0 1 1 *", "2025-12-31 23:59", "2026-01-01 00:00"),
        ("@yearly", "2025-06-01 00:00", "2026-01-01 00:00"),
        ("@monthly", "2025-02-15 00:00", "2025-03-01 00:00"),
        ("@daily", "2025-02-28 00:00", "2025-03-01 00:00"),
        ("@hourly", "2025-02-28 23:00", "2025-03-01 00:00"),
        ("0 12 * * MON-FRI", "2025-01-04 08:00", "2025-01-06 12:00"),
        ("0 12 * * 1-5", "2025-01-06 12:00", "2025-01-07 12:00"),
        ("0 0 * * 0", "2025-01-01 00:00", "2025-01-05 00:00"),
        ("0 0 * * 7", "2025-01-01 00:00", "2025-01-05 00:00"),
        ("0 0 * * sun", "2025-01-01 00:00", "2025-01-05 00:00"),
        ("0 0 * * 5-7", "2025-01-04 00:00", "2025-01-05 00:00"),
        ("@weekly", "2025-01-05 00:00", "2025-01-12 00:00"),
        ("0 0 * * */2", "2025-01-04 00:00", "2025-01-05 00:00"),
        ("0 0 1 * MON", "2025-01-01 00:00", "2025-01-06 00:00"),
        ("0 0 1 * MON", "2025-01-27 00:00", "2025-02-01 00:00"),
        ("0 0 30 2 MON", "2025-01-01 00:00", "2025-02-03 00:00"),
        ("0 0 */2 * MON", "2025-01-01 00:00", "2025-01-13 00:00"),
        ("0 0 1 JAN,jul *", "2025-01-01 00:00", "2025-07-01 00:00"),
        ("0 0 1 mar-may/2 *", "2025-03-01 00:00", "2025-05-01 00:00"),
    ];
    for (spec, after, want) in cases {
        let c = CronSchedule::parse(spec).unwrap_or_else(|e| panic!("{}", e));
        assert_eq!(c.next_after_ms(utc(after)), Some(utc(want)), "{} after {}", spec, after);
    }
    let c = CronSchedule::parse("0 * * * *").unwrap();
    let noon = utc("2025-01-01 12:00");
    assert_eq!(c.next_after_ms(noon), Some(noon + HOUR), "strictly after");
    assert_eq!(c.next_after_ms(noon - 1), Some(noon));
}

#[test]
fn cron_refuses() {
    for spec in [
        "", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *", "* * * 0 *",
        "* * * 13 *", "* * * * 8", "5-1 * * * *", "* * * * FRI-MON", "*/0 * * * *", "*/x * * * *", "a * * * *",
        "1,,2 * * * *", "-1 * * * *", "+5 * * * *", "1- * * * *", "* * * FOO *", "@reboot", "@every 5m",
        "0 0 30 2 *", "0 0 31 4,6,9,11 *",
    ] {
        match CronSchedule::parse(spec) {
            Ok(c) => panic!("parse({:?}) = {:?}, want an error", spec, c),
            Err(e) => assert!(e.to_string().starts_with("timers: cron"), "{}", e),
        }
    }
}

// next_after_ms from many times against a scan of every minute: the result
// matches, and no minute between matches.
#[test]
fn cron_next_against_a_scan() {
    let matches = |c: &CronSchedule, t: i64| c.matches(t);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let start = utc("2024-01-01 00:00");
    for spec in ["*/7 */5 * * *", "15 3 * * MON,THU", "0 0 1,15 * *", "0 */6 13 * FRI", "45 23 31 * *", "0 0 */3 2 *"] {
        let c = CronSchedule::parse(spec).unwrap();
        for _ in 0..20 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let after = start + (x % (3 * 365 * 86_400_000)) as i64;
            let got = c.next_after_ms(after).unwrap();
            assert!(got > after && got % MIN == 0 && matches(&c, got), "{}: next({}) = {}", spec, after, got);
            let mut m = after.div_euclid(MIN) * MIN + MIN;
            while m < got {
                assert!(!matches(&c, m), "{}: next({}) = {}, but {} matches first", spec, after, got, m);
                m += MIN;
            }
        }
    }
}

#[test]
fn format_utc_is_rfc3339_to_the_second() {
    assert_eq!(format_utc(T0), "2025-03-01T10:00:00Z");
    assert_eq!(format_utc(T0 + 1999), "2025-03-01T10:00:01Z");
    assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
    assert_eq!(format_utc(utc("2104-02-29 23:59")), "2104-02-29T23:59:00Z");
}
