// Host-free tests of the SDK: its own code, pointers included, against the
// in-memory host of `fake`.

use super::*;
use std::time::{Duration, UNIX_EPOCH};

fn host<R>(f: impl FnOnce(&mut fake::Host) -> R) -> R {
    fake::with(f).expect("no fake host installed")
}

#[test]
fn errno_numbers_and_names_are_the_abis() {
    let table = [
        (Errno::E2BIG, 1, "E2BIG"),
        (Errno::EFAULT, 21, "EFAULT"),
        (Errno::EINVAL, 28, "EINVAL"),
        (Errno::EIO, 29, "EIO"),
        (Errno::ENOENT, 44, "ENOENT"),
        (Errno::EPERM, 63, "EPERM"),
    ];
    for (e, n, name) in table {
        assert_eq!(e.0, n, "{}", name);
        assert_eq!(e.name(), Some(name));
        assert!(e.to_string().starts_with(name), "{}", e);
    }
    assert_eq!(Errno(99).name(), None);
    assert_eq!(Errno(99).to_string(), "errno 99");
}

#[test]
fn without_a_host_every_call_is_eperm() {
    fake::uninstall();
    let err = set_alarm_ms(5).unwrap_err();
    assert_eq!((err.op(), err.errno()), ("set-alarm", Errno::EPERM));
    assert_eq!(get("k").unwrap_err().errno(), Errno::EPERM);
    assert_eq!(get_alarm().unwrap_err().errno(), Errno::EPERM);
    assert_eq!(clear_alarm().unwrap_err().errno(), Errno::EPERM);
}

#[test]
fn error_names_the_import_and_the_errno() {
    fake::install();
    host(|h| h.fail.insert("kv-put", 1));
    let err = put("k", "v").unwrap_err();
    assert_eq!(err.to_string(), "wasmkeep: kv-put: E2BIG (key or value too long)");
    let source = std::error::Error::source(&err).unwrap().to_string();
    assert_eq!(source, "E2BIG (key or value too long)");
    // `?` turns it into a handler error.
    fn handler() -> HandlerResult<()> {
        put("k", "v")?;
        Ok(())
    }
    assert_eq!(handler().unwrap_err().to_string(), err.to_string());
}

#[test]
fn set_alarm_rounds_up_to_the_millisecond() {
    fake::install();
    set_alarm(UNIX_EPOCH + Duration::new(1_700_000_000, 1)).unwrap();
    assert_eq!(host(|h| h.alarm), Some(1_700_000_000_001));
    set_alarm(UNIX_EPOCH + Duration::from_millis(42)).unwrap();
    assert_eq!(host(|h| h.alarm), Some(42));
    assert_eq!(get_alarm().unwrap(), Some(UNIX_EPOCH + Duration::from_millis(42)));
    assert_eq!(get_alarm_ms().unwrap(), Some(42));
}

#[test]
fn times_out_of_range_are_refused_by_the_host() {
    fake::install();
    set_alarm_ms(7).unwrap();
    let before_1970 = UNIX_EPOCH - Duration::from_millis(1);
    assert_eq!(to_millis(before_1970), -1);
    assert_eq!(set_alarm(before_1970).unwrap_err().errno(), Errno::EINVAL);
    let far = UNIX_EPOCH + Duration::from_secs(1 << 60);
    assert_eq!(to_millis(far), MAX_ALARM_MS + 1);
    assert_eq!(set_alarm(far).unwrap_err().errno(), Errno::EINVAL);
    assert_eq!(host(|h| h.alarm), Some(7), "a refused time changed the alarm");
    set_alarm_ms(MAX_ALARM_MS).unwrap();
    assert_eq!(from_millis(-5), UNIX_EPOCH - Duration::from_millis(5));
}

#[test]
fn get_alarm_is_none_when_unset_and_clear_removes_it() {
    fake::install();
    assert_eq!(get_alarm().unwrap(), None);
    set_alarm_ms(1000).unwrap();
    clear_alarm().unwrap();
    assert_eq!(get_alarm_ms().unwrap(), None);
    clear_alarm().unwrap();
    host(|h| h.fail.insert("get-alarm", 29));
    assert_eq!(get_alarm().unwrap_err().errno(), Errno::EIO);
}

#[test]
fn kv_round_trip_short_long_and_empty_values() {
    fake::install();
    assert_eq!(get("missing").unwrap(), None);
    put("k", "v").unwrap();
    assert_eq!(get("k").unwrap(), Some(b"v".to_vec()));
    // Longer than the first buffer: a second call with the exact length.
    let long: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    put(b"long".as_ref(), &long).unwrap();
    host(|h| h.calls.clear());
    assert_eq!(get("long").unwrap(), Some(long));
    assert_eq!(host(|h| h.calls["kv-get"]), 2);
    put("", "").unwrap();
    assert_eq!(get("").unwrap(), Some(Vec::new()));
    delete("k").unwrap();
    assert_eq!(get("k").unwrap(), None);
    delete("k").unwrap();
}

#[test]
fn kv_limits_are_e2big() {
    fake::install();
    let key = vec![b'k'; MAX_KEY_LEN + 1];
    assert_eq!(put(&key, "v").unwrap_err().errno(), Errno::E2BIG);
    assert_eq!(get(&key).unwrap_err().errno(), Errno::E2BIG);
    let val = vec![0u8; MAX_VALUE_LEN + 1];
    assert_eq!(put("k", &val).unwrap_err().errno(), Errno::E2BIG);
    put(vec![b'k'; MAX_KEY_LEN], vec![0u8; MAX_VALUE_LEN]).unwrap();
}

struct Echo;

impl Actor for Echo {
    fn on_request(req: &[u8]) -> HandlerResult<Vec<u8>> {
        if req == b"fail" {
            put("x", "1")?;
            return Err("failing on request".into());
        }
        let mut out = b"echo ".to_vec();
        out.extend_from_slice(req);
        Ok(out)
    }
    fn on_alarm(scheduled: SystemTime, retry_count: u32) -> HandlerResult<()> {
        if retry_count < 2 {
            return Err(format!("attempt {}", retry_count).into());
        }
        set_alarm(scheduled + Duration::from_secs(1))?;
        Ok(())
    }
}

struct Silent;

impl Actor for Silent {
    fn on_alarm(_: SystemTime, _: u32) -> HandlerResult<()> {
        Ok(())
    }
}

#[test]
fn on_request_reads_the_request_and_writes_the_response() {
    fake::install();
    host(|h| h.request = b"hello".to_vec());
    assert_eq!(dispatch::on_request::<Echo>(5), 0);
    assert_eq!(host(|h| h.response.clone()), b"echo hello".to_vec());
    assert_eq!(dispatch::on_request::<Echo>(-1), 1);
}

#[test]
fn on_request_fails_on_a_handler_error_and_a_host_error() {
    fake::install();
    host(|h| h.request = b"fail".to_vec());
    assert_eq!(dispatch::on_request::<Echo>(4), 1);
    assert!(host(|h| h.response.is_empty()));
    host(|h| {
        h.request = b"ok".to_vec();
        h.fail.insert("response-write", 1);
    });
    assert_eq!(dispatch::on_request::<Echo>(2), 1);
    host(|h| {
        h.fail.clear();
        h.fail.insert("request-read", 63);
    });
    assert_eq!(dispatch::on_request::<Echo>(2), 1);
    // The default handler fails every request.
    host(|h| h.fail.clear());
    assert_eq!(dispatch::on_request::<Silent>(2), 1);
}

#[test]
fn on_alarm_passes_the_time_and_the_retry_count() {
    fake::install();
    assert_eq!(dispatch::on_alarm::<Echo>(5000, 0), 1);
    assert_eq!(dispatch::on_alarm::<Echo>(5000, 1), 1);
    assert_eq!(host(|h| h.alarm), None);
    assert_eq!(dispatch::on_alarm::<Echo>(5000, 2), 0);
    assert_eq!(host(|h| h.alarm), Some(6000));
    assert_eq!(dispatch::on_init::<Echo>(), 0);
}

#[test]
fn actor_id_reads_the_identity_the_host_gives() {
    fake::install();
    let long_name = vec![0xffu8; 100];
    let mut long = format!("{}/{}/", "t".repeat(63), "c".repeat(63)).into_bytes();
    long.extend_from_slice(&long_name);
    let cases: Vec<(Vec<u8>, ActorId)> = vec![
        (b"acme/counter/c1".to_vec(), ActorId { tenant: "acme".into(), class: "counter".into(), name: b"c1".to_vec() }),
        (b"acme/counter/a/b/".to_vec(), ActorId { tenant: "acme".into(), class: "counter".into(), name: b"a/b/".to_vec() }),
        (long, ActorId { tenant: "t".repeat(63), class: "c".repeat(63), name: long_name }),
    ];
    for (give, want) in cases {
        host(|h| h.actor = give.clone());
        assert_eq!(actor_id(), Ok(want), "host gives {:?}", String::from_utf8_lossy(&give));
    }
    assert_eq!(
        ActorId { tenant: "acme".into(), class: "counter".into(), name: b"c1".to_vec() }.to_string(),
        "acme/counter/c1"
    );
    fake::uninstall();
}

#[test]
fn actor_id_refuses_what_is_not_an_identity() {
    fake::install();
    for give in [&b""[..], b"acme", b"acme/counter", b"acme/counter/", b"/counter/c1", b"acme//c1"] {
        host(|h| h.actor = give.to_vec());
        let err = actor_id().unwrap_err();
        assert_eq!((err.op(), err.errno()), ("actor-id", Errno::EIO), "host gives {:?}", give);
    }
    host(|h| h.actor = vec![b'x'; MAX_ACTOR_ID_LEN + 1]);
    assert_eq!(actor_id().unwrap_err().errno(), Errno::E2BIG);
    fake::uninstall();
    assert_eq!(actor_id().unwrap_err().errno(), Errno::EPERM, "with no host");
}

#[test]
fn the_test_host_gives_its_actor_an_identity() {
    struct Nobody;
    impl Actor for Nobody {
        fn on_alarm(_: std::time::SystemTime, _: u32) -> HandlerResult<()> {
            Ok(())
        }
    }
    let h = fake::TestHost::<Nobody>::new();
    assert_eq!(actor_id().unwrap().to_string(), "tenant/class/actor");
    let _h = h.with_actor("acme", "orders", b"o/42");
    assert_eq!(
        actor_id(),
        Ok(ActorId { tenant: "acme".into(), class: "orders".into(), name: b"o/42".to_vec() })
    );
}
