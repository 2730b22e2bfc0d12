//! The Rust SDK for WebAssembly actors run by a wasmkeep host: durable
//! alarms, the request being served, and a small key/value table kept in the
//! actor's database. It has no dependencies and builds with Rust 1.63.
//!
//! An actor is a `cdylib` built for `wasm32-wasi` (`wasm32-wasip1` on Rust
//! 1.78 and later). It implements [`Actor`] and names its type once with
//! [`export_actor!`], which defines the `on-alarm`, `on-request` and
//! `on-init` exports the host calls:
//!
//! ```ignore
//! use std::time::{Duration, SystemTime};
//! use wasmkeep::{Actor, HandlerResult};
//!
//! struct Reminder;
//!
//! impl Actor for Reminder {
//!     fn on_request(_req: &[u8]) -> HandlerResult<Vec<u8>> {
//!         wasmkeep::set_alarm(SystemTime::now() + Duration::from_secs(60))?;
//!         Ok(b"reminder set".to_vec())
//!     }
//!     fn on_alarm(_scheduled: SystemTime, _retry_count: u32) -> HandlerResult<()> {
//!         let n = wasmkeep::get("reminders")?.map_or(0, |v| v.len());
//!         wasmkeep::put("reminders", vec![b'x'; n + 1])?;
//!         Ok(())
//!     }
//! }
//!
//! wasmkeep::export_actor!(Reminder);
//! ```
//!
//! The host calls the actor once per event. Each event runs in a
//! transaction: its key/value writes and alarm changes commit together when
//! the handler returns `Ok`, and are undone when it returns `Err` or panics
//! (a panic traps, and the host starts a fresh instance for the next event).
//! A failing alarm handler is retried after 1 s, then 2 s, 4 s and so on up
//! to 5 min; `retry_count` is the number of failures so far, and it survives
//! restarts and moves between nodes. `SystemTime::now()` reads the host's
//! clock.
//!
//! Every call into the host returns [`Result`]: an [`Error`] names the
//! import and carries its [`Errno`]. "No alarm" and "no value" are `Ok(None)`,
//! not errors.
//!
//! On a target other than wasm32 (under `cargo test` or `rustc --test`) there
//! is no host: every call fails with [`Errno::EPERM`], as one outside an event
//! does, unless a test installs the in-memory host of [`fake`].

#![deny(missing_docs)]

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A result code the host returns from an import, numbered as in WASI
/// preview 1 (the ABI's errno table).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Errno(pub u32);

impl Errno {
    /// A key or value is longer than the host accepts.
    pub const E2BIG: Errno = Errno(1);
    /// A pointer and length are not inside the guest's memory. The SDK passes
    /// only its own buffers, so this means an SDK or host bug.
    pub const EFAULT: Errno = Errno(21);
    /// An argument is out of range, such as an alarm time before 1970 or
    /// after the latest time the host can index.
    pub const EINVAL: Errno = Errno(28);
    /// The host could not read or write the actor's database; the event fails.
    pub const EIO: Errno = Errno(29);
    /// No alarm is set, or no value is stored under the key. The SDK reports
    /// it as `Ok(None)`.
    pub const ENOENT: Errno = Errno(44);
    /// Called outside an event.
    pub const EPERM: Errno = Errno(63);

    /// The short name, such as `"EINVAL"`, or `None` for a number this SDK
    /// does not know.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Errno::E2BIG => "E2BIG",
            Errno::EFAULT => "EFAULT",
            Errno::EINVAL => "EINVAL",
            Errno::EIO => "EIO",
            Errno::ENOENT => "ENOENT",
            Errno::EPERM => "EPERM",
            _ => return None,
        })
    }

    fn meaning(self) -> &'static str {
        match self {
            Errno::E2BIG => "key or value too long",
            Errno::EFAULT => "bad address",
            Errno::EINVAL => "invalid argument",
            Errno::EIO => "host database error",
            Errno::ENOENT => "not found",
            Errno::EPERM => "not within an event",
            _ => "unknown",
        }
    }
}

impl fmt::Display for Errno {
    /// `"EINVAL (invalid argument)"`, or `"errno 99"` for an unknown number.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{} ({})", name, self.meaning()),
            None => write!(f, "errno {}", self.0),
        }
    }
}

impl std::error::Error for Errno {}

/// The host refused a call: [`op`](Error::op) names the import (such as
/// `"set-alarm"`) and [`errno`](Error::errno) the reason.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Error {
    op: &'static str,
    errno: Errno,
}

impl Error {
    /// The name of the import that failed, as in the ABI.
    pub fn op(&self) -> &'static str {
        self.op
    }
    /// What the host returned.
    pub fn errno(&self) -> Errno {
        self.errno
    }
}

impl fmt::Display for Error {
    /// `"wasmkeep: kv-put: E2BIG (key or value too long)"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "wasmkeep: {}: {}", self.op, self.errno)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.errno)
    }
}

/// The result of a call into the host.
pub type Result<T> = std::result::Result<T, Error>;

/// What a handler returns: any error fails the event (`?` converts an
/// [`Error`], a `String` or a `&str`).
pub type HandlerResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The latest alarm time the host accepts, in Unix milliseconds (the 15
/// digits of the alarm index key; the year 33658).
pub const MAX_ALARM_MS: i64 = 999_999_999_999_999;

/// The longest key the host accepts, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// The longest value the host accepts, in bytes.
pub const MAX_VALUE_LEN: usize = 1 << 20;

fn check(op: &'static str, errno: u32) -> Result<()> {
    if errno == 0 {
        Ok(())
    } else {
        Err(Error { op, errno: Errno(errno) })
    }
}

// ---- alarms ----------------------------------------------------------------

/// Sets the actor's alarm to fire at `at`, replacing any alarm already set.
/// The host keeps whole milliseconds; the time is rounded up to the next one,
/// so the alarm never fires before `at`. A time in the past fires as soon as
/// the host can deliver it. The alarm commits with the event.
///
/// Errors: `EINVAL` for a time before 1970 or after [`MAX_ALARM_MS`],
/// `EPERM` outside an event, `EIO` when the host's database fails.
pub fn set_alarm(at: SystemTime) -> Result<()> {
    set_alarm_ms(to_millis(at))
}

/// [`set_alarm`] with a time in Unix milliseconds.
pub fn set_alarm_ms(at_ms: i64) -> Result<()> {
    check("set-alarm", unsafe { host::set_alarm(at_ms) })
}

/// The time the actor's alarm is set for, or `None`. While the host retries a
/// failed alarm handler, it is the time of the next attempt. Errors: `EPERM`
/// outside an event, `EIO` when the host's database fails.
pub fn get_alarm() -> Result<Option<SystemTime>> {
    Ok(get_alarm_ms()?.map(from_millis))
}

/// [`get_alarm`] in Unix milliseconds.
pub fn get_alarm_ms() -> Result<Option<i64>> {
    let mut ms: i64 = 0;
    match unsafe { host::get_alarm(&mut ms) } {
        0 => Ok(Some(ms)),
        e if Errno(e) == Errno::ENOENT => Ok(None),
        e => Err(Error { op: "get-alarm", errno: Errno(e) }),
    }
}

/// Removes the actor's alarm, if one is set. Like [`set_alarm`] it commits
/// with the event; a clear made by a failing alarm handler stands (the host
/// does not retry that alarm). Errors: `EPERM` outside an event, `EIO` when
/// the host's database fails.
pub fn clear_alarm() -> Result<()> {
    check("clear-alarm", unsafe { host::clear_alarm() })
}

/// Converts a time to Unix milliseconds, rounding up. A time before 1970
/// becomes -1 and one past [`MAX_ALARM_MS`] becomes `MAX_ALARM_MS + 1`, which
/// the host refuses with `EINVAL` like any other time out of range.
pub fn to_millis(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Err(_) => -1,
        Ok(d) => {
            let ms = d.as_secs() as u128 * 1000 + (d.subsec_nanos() as u128 + 999_999) / 1_000_000;
            if ms > MAX_ALARM_MS as u128 {
                MAX_ALARM_MS + 1
            } else {
                ms as i64
            }
        }
    }
}

/// Converts Unix milliseconds from the host to a time. Negative values (the
/// host never gives one) are taken as before 1970.
pub fn from_millis(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

/// The host's clock, the one alarms are due by: `SystemTime::now()` in a
/// guest (the host sets WASI's clock), the fake host's clock in a native
/// test that installed one ([`fake`]). Handlers that read the time with it
/// rather than `SystemTime::now()` can be tested with the fake's clock.
pub fn now() -> SystemTime {
    from_millis(now_ms())
}

/// [`now`] in Unix milliseconds (rounded down).
pub fn now_ms() -> i64 {
    #[cfg(not(target_arch = "wasm32"))]
    {
        if let Some(ms) = fake::with(|h| h.now_ms) {
            return ms;
        }
    }
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis().min(i64::MAX as u128) as i64,
        Err(e) => -(e.duration().as_millis().min(i64::MAX as u128) as i64),
    }
}

// ---- the request -----------------------------------------------------------

/// Reads the first `len` bytes of the request body (the length `on-request`
/// receives). [`export_actor!`] calls it for you. Outside `on-request` the
/// body is empty. Errors: `EPERM` outside an event.
pub fn read_request(len: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    if len > 0 {
        check("request-read", unsafe { host::request_read(buf.as_mut_ptr(), len as u32) })?;
    }
    Ok(buf)
}

/// Appends bytes to the response, which the caller gets if the event
/// succeeds. [`export_actor!`] writes what `on_request` returns. Errors:
/// `E2BIG` past the host's limit (16 MiB in the reference host), `EPERM`
/// outside an event.
pub fn write_response(bytes: &[u8]) -> Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    check("response-write", unsafe { host::response_write(bytes.as_ptr(), bytes.len() as u32) })
}

// ---- key/value -------------------------------------------------------------

/// The size of the first buffer [`get`] offers the host; a longer value takes
/// a second call with a buffer of its exact length.
const GET_BUF_SIZE: usize = 256;

/// The value stored under `key` in the actor's key/value table, or `None`.
/// Errors: `E2BIG` for a key longer than [`MAX_KEY_LEN`], `EPERM` outside an
/// event, `EIO` when the host's database fails.
pub fn get<K: AsRef<[u8]>>(key: K) -> Result<Option<Vec<u8>>> {
    let key = key.as_ref();
    let mut buf = vec![0u8; GET_BUF_SIZE];
    // Within an event nothing else writes the table, so the second call fits;
    // the bound only keeps a misbehaving host from looping forever.
    for _ in 0..3 {
        let mut n: u32 = 0;
        let e = unsafe {
            host::kv_get(key.as_ptr(), key.len() as u32, buf.as_mut_ptr(), buf.len() as u32, &mut n)
        };
        match e {
            0 => {}
            e if Errno(e) == Errno::ENOENT => return Ok(None),
            e => return Err(Error { op: "kv-get", errno: Errno(e) }),
        }
        let n = n as usize;
        if n <= buf.len() {
            buf.truncate(n);
            return Ok(Some(buf));
        }
        buf = vec![0u8; n];
    }
    Err(Error { op: "kv-get", errno: Errno::EIO })
}

/// Stores `value` under `key`, replacing any value there. The write commits
/// with the event. Errors: `E2BIG` for a key longer than [`MAX_KEY_LEN`] or a
/// value longer than [`MAX_VALUE_LEN`], `EPERM` outside an event, `EIO` when
/// the host's database fails.
pub fn put<K: AsRef<[u8]>, V: AsRef<[u8]>>(key: K, value: V) -> Result<()> {
    let (k, v) = (key.as_ref(), value.as_ref());
    check("kv-put", unsafe { host::kv_put(k.as_ptr(), k.len() as u32, v.as_ptr(), v.len() as u32) })
}

/// Removes the value under `key`; removing a missing key is not an error.
/// Commits with the event. Errors: as [`put`].
pub fn delete<K: AsRef<[u8]>>(key: K) -> Result<()> {
    let k = key.as_ref();
    match unsafe { host::kv_delete(k.as_ptr(), k.len() as u32) } {
        e if Errno(e) == Errno::ENOENT => Ok(()),
        e => check("kv-delete", e),
    }
}

// ---- identity --------------------------------------------------------------

/// The longest identity the host gives, in bytes: `tenant/class/name` with a
/// 63-byte tenant and class and a 100-byte name.
pub const MAX_ACTOR_ID_LEN: usize = 63 + 1 + 63 + 1 + 100;

/// An actor's identity. The tenant and the class are 1 to 63 bytes of `a-z`,
/// `0-9`, `-` and `_`; the name is 1 to 100 bytes of anything (`/`
/// included), so it is bytes, not a `String`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ActorId {
    /// The tenant.
    pub tenant: String,
    /// The class: the actor's guest.
    pub class: String,
    /// The name, any bytes.
    pub name: Vec<u8>,
}

impl fmt::Display for ActorId {
    /// `tenant/class/name`, the name's bytes that are not UTF-8 replaced.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.tenant, self.class, String::from_utf8_lossy(&self.name))
    }
}

impl ActorId {
    /// Reads `tenant/class/name` as the host writes it: the tenant and the
    /// class hold no `/`, so the name is everything after the second one.
    pub fn parse(b: &[u8]) -> Option<ActorId> {
        let mut parts = b.splitn(3, |&c| c == b'/');
        let (t, c, n) = (parts.next()?, parts.next()?, parts.next()?);
        if t.is_empty() || c.is_empty() || n.is_empty() {
            return None;
        }
        Some(ActorId {
            tenant: String::from_utf8(t.to_vec()).ok()?,
            class: String::from_utf8(c.to_vec()).ok()?,
            name: n.to_vec(),
        })
    }
}

/// The identity of the actor the event runs in: the same on every node and
/// for the actor's whole life. Errors: `EPERM` outside an event; `E2BIG` (or
/// `EIO` for an identity that is not `tenant/class/name`) from a host out of
/// step with this SDK.
pub fn actor_id() -> Result<ActorId> {
    let mut buf = [0u8; MAX_ACTOR_ID_LEN];
    let mut n: u32 = 0;
    check("actor-id", unsafe { host::actor_id(buf.as_mut_ptr(), buf.len() as u32, &mut n) })?;
    buf.get(..n as usize)
        .and_then(ActorId::parse)
        .ok_or(Error { op: "actor-id", errno: Errno::EIO })
}

// ---- the exports -----------------------------------------------------------

/// An actor's handlers. Name the type with [`export_actor!`] to export them.
pub trait Actor {
    /// Called when the alarm fires (the `on-alarm` export). `scheduled` is
    /// the time it was set for; `retry_count` how many attempts have failed
    /// before (0 on the first). `Ok` marks it handled: the alarm is removed
    /// unless the handler set a new one. `Err` (or a panic) fails the event:
    /// its writes are undone and the host retries after 1 s, doubling up to
    /// 5 min. An alarm the handler set for after the retry time, or a clear,
    /// stands.
    fn on_alarm(scheduled: SystemTime, retry_count: u32) -> HandlerResult<()>;

    /// Called for each request (the `on-request` export) with its body; what
    /// it returns is the response. `Err` fails the event: its writes are
    /// undone and the caller gets an error. The default fails every request.
    fn on_request(_req: &[u8]) -> HandlerResult<Vec<u8>> {
        Err("no request handler".into())
    }

    /// Called once per actor before its first other event (the `on-init`
    /// export); the host records its success. `Err` fails it, and the host
    /// runs it again before the next event. The default does nothing.
    fn on_init() -> HandlerResult<()> {
        Ok(())
    }
}

/// Defines the `on-alarm`, `on-request` and `on-init` exports for a type
/// that implements [`Actor`]. Use it once, in the cdylib crate:
///
/// ```ignore
/// wasmkeep::export_actor!(Counter);
/// ```
#[macro_export]
macro_rules! export_actor {
    ($actor:ty) => {
        #[export_name = "on-alarm"]
        pub extern "C" fn __wasmkeep_on_alarm(scheduled_ms: i64, retry_count: i32) -> i32 {
            $crate::dispatch::on_alarm::<$actor>(scheduled_ms, retry_count)
        }
        #[export_name = "on-request"]
        pub extern "C" fn __wasmkeep_on_request(req_len: i32) -> i32 {
            $crate::dispatch::on_request::<$actor>(req_len)
        }
        #[export_name = "on-init"]
        pub extern "C" fn __wasmkeep_on_init() -> i32 {
            $crate::dispatch::on_init::<$actor>()
        }
    };
}

/// What the exports [`export_actor!`] defines call: each returns 0 when the
/// handler succeeded and 1 when it failed, and writes a failure to standard
/// error (which the host may keep in its logs).
#[doc(hidden)]
pub mod dispatch {
    use super::*;

    fn fail(export: &str, err: &dyn fmt::Display) -> i32 {
        #[cfg(not(target_arch = "wasm32"))]
        {
            if super::fake::with(|h| h.log.push_str(&format!("{}: {}\n", export, err))).is_some() {
                return 1;
            }
        }
        eprintln!("{}: {}", export, err);
        1
    }

    /// The `on-alarm` export.
    pub fn on_alarm<A: Actor + ?Sized>(scheduled_ms: i64, retry_count: i32) -> i32 {
        match A::on_alarm(from_millis(scheduled_ms), retry_count.max(0) as u32) {
            Ok(()) => 0,
            Err(e) => fail("on-alarm", &e),
        }
    }

    /// The `on-request` export: reads the request, runs the handler, writes
    /// its response.
    pub fn on_request<A: Actor + ?Sized>(req_len: i32) -> i32 {
        if req_len < 0 {
            return fail("on-request", &"negative request length from the host");
        }
        let req = match read_request(req_len as usize) {
            Ok(r) => r,
            Err(e) => return fail("on-request", &e),
        };
        let resp = match A::on_request(&req) {
            Ok(r) => r,
            Err(e) => return fail("on-request", &e),
        };
        match write_response(&resp) {
            Ok(()) => 0,
            Err(e) => fail("on-request", &e),
        }
    }

    /// The `on-init` export.
    pub fn on_init<A: Actor + ?Sized>() -> i32 {
        match A::on_init() {
            Ok(()) => 0,
            Err(e) => fail("on-init", &e),
        }
    }
}

pub mod timers;

// ---- the host --------------------------------------------------------------

/// The host's imports (abi/ABI.md in the wasmkeep alarms module). Each
/// returns an errno; pointers are addresses in the guest's memory.
#[cfg(target_arch = "wasm32")]
mod host {
    #[link(wasm_import_module = "wasmkeep:alarm")]
    extern "C" {
        #[link_name = "set-alarm"]
        pub fn set_alarm(at_ms: i64) -> u32;
        #[link_name = "get-alarm"]
        pub fn get_alarm(out: *mut i64) -> u32;
        #[link_name = "clear-alarm"]
        pub fn clear_alarm() -> u32;
    }

    #[link(wasm_import_module = "wasmkeep:actor")]
    extern "C" {
        #[link_name = "request-read"]
        pub fn request_read(buf: *mut u8, buf_len: u32) -> u32;
        #[link_name = "response-write"]
        pub fn response_write(buf: *const u8, len: u32) -> u32;
        #[link_name = "kv-get"]
        pub fn kv_get(key: *const u8, key_len: u32, buf: *mut u8, buf_len: u32, out_len: *mut u32) -> u32;
        #[link_name = "kv-put"]
        pub fn kv_put(key: *const u8, key_len: u32, val: *const u8, val_len: u32) -> u32;
        #[link_name = "kv-delete"]
        pub fn kv_delete(key: *const u8, key_len: u32) -> u32;
        #[link_name = "actor-id"]
        pub fn actor_id(buf: *mut u8, buf_len: u32, out_len: *mut u32) -> u32;
    }
}

/// On a native build the imports go to the thread's [`fake::Host`], if a test
/// installed one, and otherwise return `EPERM`.
#[cfg(not(target_arch = "wasm32"))]
mod host {
    use super::fake::with;
    use std::slice;

    const NO_HOST: u32 = 63;

    unsafe fn bytes<'a>(p: *const u8, n: u32) -> &'a [u8] {
        if n == 0 {
            &[]
        } else {
            slice::from_raw_parts(p, n as usize)
        }
    }

    pub unsafe fn set_alarm(at_ms: i64) -> u32 {
        with(|h| h.set_alarm(at_ms)).unwrap_or(NO_HOST)
    }
    pub unsafe fn get_alarm(out: *mut i64) -> u32 {
        with(|h| h.get_alarm(&mut *out)).unwrap_or(NO_HOST)
    }
    pub unsafe fn clear_alarm() -> u32 {
        with(|h| h.clear_alarm()).unwrap_or(NO_HOST)
    }
    pub unsafe fn request_read(buf: *mut u8, buf_len: u32) -> u32 {
        with(|h| h.request_read(slice::from_raw_parts_mut(buf, buf_len as usize))).unwrap_or(NO_HOST)
    }
    pub unsafe fn response_write(buf: *const u8, len: u32) -> u32 {
        with(|h| h.response_write(bytes(buf, len))).unwrap_or(NO_HOST)
    }
    pub unsafe fn kv_get(key: *const u8, key_len: u32, buf: *mut u8, buf_len: u32, out_len: *mut u32) -> u32 {
        with(|h| h.kv_get(bytes(key, key_len), slice::from_raw_parts_mut(buf, buf_len as usize), &mut *out_len))
            .unwrap_or(NO_HOST)
    }
    pub unsafe fn kv_put(key: *const u8, key_len: u32, val: *const u8, val_len: u32) -> u32 {
        with(|h| h.kv_put(bytes(key, key_len), bytes(val, val_len))).unwrap_or(NO_HOST)
    }
    pub unsafe fn kv_delete(key: *const u8, key_len: u32) -> u32 {
        with(|h| h.kv_delete(bytes(key, key_len))).unwrap_or(NO_HOST)
    }
    pub unsafe fn actor_id(buf: *mut u8, buf_len: u32, out_len: *mut u32) -> u32 {
        with(|h| h.actor_id(slice::from_raw_parts_mut(buf, buf_len as usize), &mut *out_len)).unwrap_or(NO_HOST)
    }
}

/// An in-memory host with the ABI's semantics, for unit tests of actors on
/// the build machine (not on wasm32).
///
/// [`TestHost`] runs an actor's handlers as the host does: each call an
/// event, committed or rolled back; a clock the test moves, delivering the
/// alarm when it falls due and retrying a failing `on-alarm` on the host's
/// committed backoff. Underneath, [`install`] puts a bare [`Host`] on the
/// test's thread, whose fields a test may read and change directly.
#[cfg(not(target_arch = "wasm32"))]
pub mod fake {
    use std::cell::RefCell;
    use std::collections::BTreeMap;
    use std::marker::PhantomData;
    use std::panic::{self, AssertUnwindSafe};
    use std::time::Duration;

    /// The clock's time when a host is installed: 2025-01-01T00:00:00Z in
    /// Unix ms (as the Go SDK's fake starts).
    pub const DEFAULT_START_MS: i64 = 1_735_689_600_000;

    /// The identity a fresh host gives its actor (as the Go SDK's fake).
    pub const DEFAULT_ACTOR: &[u8] = b"tenant/class/actor";

    /// The delay before the first retry of a failed alarm handler; each
    /// further failure doubles it, up to [`RETRY_MAX`].
    pub const RETRY_BASE: Duration = Duration::from_secs(1);
    /// The longest delay between retries.
    pub const RETRY_MAX: Duration = Duration::from_secs(300);

    /// The fake host's state; tests read and change it freely.
    #[derive(Debug)]
    pub struct Host {
        /// The alarm, in Unix milliseconds.
        pub alarm: Option<i64>,
        /// The key/value table.
        pub kv: BTreeMap<Vec<u8>, Vec<u8>>,
        /// The request body `request-read` copies from.
        pub request: Vec<u8>,
        /// What `response-write` appended.
        pub response: Vec<u8>,
        /// Imports to fail: name (such as `"kv-put"`) and the errno to return.
        pub fail: BTreeMap<&'static str, u32>,
        /// Calls so far, by import name.
        pub calls: BTreeMap<&'static str, usize>,
        /// The host's clock, in Unix ms: what [`crate::now`] returns.
        pub now_ms: i64,
        /// What the SDK's exports reported of failed handlers (on a guest's
        /// standard error, in a real host).
        pub log: String,
        /// The identity `actor-id` gives, `tenant/class/name`
        /// ([`DEFAULT_ACTOR`] unless a test changes it).
        pub actor: Vec<u8>,
        /// Set by a successful set-alarm or clear-alarm.
        alarm_touched: bool,
        /// The alarm a failed event left, when it set or cleared it.
        alarm_left: Option<Option<i64>>,
    }

    impl Default for Host {
        fn default() -> Host {
            Host {
                alarm: None,
                kv: BTreeMap::new(),
                request: Vec::new(),
                response: Vec::new(),
                fail: BTreeMap::new(),
                calls: BTreeMap::new(),
                now_ms: DEFAULT_START_MS,
                log: String::new(),
                actor: DEFAULT_ACTOR.to_vec(),
                alarm_touched: false,
                alarm_left: None,
            }
        }
    }

    thread_local! {
        static HOST: RefCell<Option<Host>> = RefCell::new(None);
    }

    /// Installs a fresh host on this thread, replacing any.
    pub fn install() {
        HOST.with(|h| *h.borrow_mut() = Some(Host::default()));
    }

    /// Removes this thread's host; calls then return `EPERM`.
    pub fn uninstall() {
        HOST.with(|h| *h.borrow_mut() = None);
    }

    /// Runs `f` on this thread's host; `None` when none is installed.
    pub fn with<R>(f: impl FnOnce(&mut Host) -> R) -> Option<R> {
        HOST.with(|h| h.borrow_mut().as_mut().map(f))
    }

    fn host<R>(f: impl FnOnce(&mut Host) -> R) -> R {
        with(f).expect("wasmkeep::fake: the TestHost's host was uninstalled")
    }

    /// One delivery of the alarm: on-alarm's arguments, the clock when it
    /// ran, and what the handler reported.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Firing {
        /// The time on-alarm received (during retries, this attempt's).
        pub scheduled_ms: i64,
        /// How many attempts at this alarm failed before this one.
        pub retry_count: u32,
        /// The clock when the handler ran.
        pub at_ms: i64,
        /// `None` when the handler succeeded, else what it reported.
        pub err: Option<String>,
    }

    /// A fake host running the actor `A`'s handlers (see the module). It
    /// lives on the test's thread, replacing any host there; dropping it
    /// uninstalls it.
    ///
    /// ```ignore
    /// let mut h = wasmkeep::fake::TestHost::<Reminders>::new();
    /// h.request(b"remind tea 300 put the kettle on").unwrap();
    /// let fired = h.advance(Duration::from_secs(300)); // the reminder's alarm fires
    /// assert_eq!(fired.len(), 1);
    /// ```
    pub struct TestHost<A: crate::Actor> {
        failures: u32,
        inited: bool,
        firings: Vec<Firing>,
        _actor: PhantomData<A>,
    }

    impl<A: crate::Actor> Default for TestHost<A> {
        fn default() -> Self {
            Self::new()
        }
    }

    impl<A: crate::Actor> Drop for TestHost<A> {
        fn drop(&mut self) {
            uninstall();
        }
    }

    impl<A: crate::Actor> TestHost<A> {
        /// Installs a host with its clock at [`DEFAULT_START_MS`].
        pub fn new() -> Self {
            Self::starting_at(DEFAULT_START_MS)
        }

        /// Installs a host with its clock at `now_ms` (Unix ms).
        pub fn starting_at(now_ms: i64) -> Self {
            install();
            host(|h| h.now_ms = now_ms);
            TestHost { failures: 0, inited: false, firings: Vec::new(), _actor: PhantomData }
        }

        /// Gives the actor the identity `tenant/class/name`, which
        /// [`crate::actor_id`] then returns (the host starts with
        /// [`DEFAULT_ACTOR`]).
        pub fn with_actor(self, tenant: &str, class: &str, name: &[u8]) -> Self {
            let mut id = format!("{}/{}/", tenant, class).into_bytes();
            id.extend_from_slice(name);
            host(|h| h.actor = id);
            self
        }

        /// The clock, in Unix ms.
        pub fn now_ms(&self) -> i64 {
            host(|h| h.now_ms)
        }

        /// The committed alarm, in Unix ms.
        pub fn alarm_ms(&self) -> Option<i64> {
            host(|h| h.alarm)
        }

        /// The committed failure count: the retry count the next delivery
        /// of the alarm receives.
        pub fn retry_count(&self) -> u32 {
            self.failures
        }

        /// The committed value under `key`.
        pub fn get<K: AsRef<[u8]>>(&self, key: K) -> Option<Vec<u8>> {
            host(|h| h.kv.get(key.as_ref()).cloned())
        }

        /// Every delivery of the alarm so far, oldest first.
        pub fn firings(&self) -> &[Firing] {
            &self.firings
        }

        /// What the SDK reported of failed handlers so far.
        pub fn log(&self) -> String {
            host(|h| h.log.clone())
        }

        /// Sends a request (on-request), first running on-init if it has not
        /// succeeded yet. The response, or what the failing handler reported
        /// (its writes are then rolled back).
        pub fn request(&mut self, body: &[u8]) -> Result<Vec<u8>, String> {
            self.ensure_init()?;
            host(|h| {
                h.request = body.to_vec();
                h.response.clear();
            });
            let len = body.len() as i32;
            self.event("on-request", || crate::dispatch::on_request::<A>(len)).map(|_| host(|h| h.response.clone()))
        }

        /// Runs `f` as an event of the actor, as a request handler runs:
        /// inside it the SDK's calls (and the timers) work, and its writes
        /// commit when it returns `Ok` and roll back when it fails.
        pub fn run(&mut self, f: impl FnOnce() -> crate::HandlerResult<()>) -> Result<(), String> {
            self.ensure_init()?;
            self.event("event", || match f() {
                Ok(()) => 0,
                Err(e) => {
                    host(|h| h.log.push_str(&format!("event: {}\n", e)));
                    1
                }
            })
            .map(|_| ())
        }

        /// Moves the clock forward by `d`, delivering the alarm each time it
        /// falls due on the way (retries included), at its time, and returns
        /// those deliveries. `advance(Duration::ZERO)` delivers an alarm
        /// already due.
        pub fn advance(&mut self, d: Duration) -> Vec<Firing> {
            let to = self.now_ms().saturating_add(d.as_millis().min(i64::MAX as u128) as i64);
            self.advance_to(to)
        }

        /// Moves the clock to `to_ms`, as [`advance`](TestHost::advance)
        /// does; a time before the clock delivers what is due and leaves the
        /// clock where it is.
        pub fn advance_to(&mut self, to_ms: i64) -> Vec<Firing> {
            let mut out = Vec::new();
            loop {
                let (now, alarm) = host(|h| (h.now_ms, h.alarm));
                match alarm {
                    Some(at) if at <= to_ms.max(now) => {
                        assert!(
                            out.len() < 100_000,
                            "wasmkeep::fake: 100000 alarms delivered in one advance: does the alarm handler set its alarm for now again and again?"
                        );
                        host(|h| h.now_ms = now.max(at));
                        out.push(self.deliver(at));
                    }
                    _ => break,
                }
            }
            host(|h| h.now_ms = h.now_ms.max(to_ms));
            self.firings.extend(out.iter().cloned());
            out
        }

        /// Moves the clock forward by `d` without delivering anything, as if
        /// the actor's node were down; the next advance delivers the alarm
        /// that fell due, late.
        pub fn down(&mut self, d: Duration) {
            let d = d.as_millis().min(i64::MAX as u128) as i64;
            host(|h| h.now_ms = h.now_ms.saturating_add(d));
        }

        /// Runs on-alarm for the committed alarm, due now, and commits the
        /// outcome as the host does.
        fn deliver(&mut self, at: i64) -> Firing {
            let failures = self.failures;
            let mut f = Firing { scheduled_ms: at, retry_count: failures, at_ms: self.now_ms(), err: None };
            match self.event("on-alarm", || crate::dispatch::on_alarm::<A>(at, failures as i32)) {
                Ok(touched) => {
                    if !touched.0 {
                        host(|h| h.alarm = None);
                    }
                    self.failures = 0;
                }
                Err(e) => {
                    f.err = Some(e);
                    // The event rolled back; what it left of the alarm was
                    // kept aside: a set or clear stands, else the alarm.
                    let left = host(|h| h.alarm_left.take()).unwrap_or(Some(at));
                    let n = failures + 1;
                    let retry_at = (f.at_ms + retry_delay(n).as_millis() as i64).min(crate::MAX_ALARM_MS);
                    match left {
                        None => {
                            host(|h| h.alarm = None);
                            self.failures = 0;
                        }
                        Some(l) => {
                            host(|h| h.alarm = Some(l.max(retry_at)));
                            self.failures = n;
                        }
                    }
                }
            }
            f
        }

        fn ensure_init(&mut self) -> Result<(), String> {
            if self.inited {
                return Ok(());
            }
            self.event("on-init", crate::dispatch::on_init::<A>)?;
            self.inited = true;
            Ok(())
        }

        /// Runs one event: commits its writes when `call` returns 0, rolls
        /// them back otherwise (or on a panic, which traps in a guest).
        /// Ok says whether the event set or cleared the alarm.
        fn event(&mut self, export: &str, call: impl FnOnce() -> i32) -> Result<Touched, String> {
            let (kv, alarm, logged) = host(|h| {
                h.alarm_touched = false;
                h.alarm_left = None;
                (h.kv.clone(), h.alarm, h.log.len())
            });
            let code = match panic::catch_unwind(AssertUnwindSafe(call)) {
                Ok(code) => code,
                Err(p) => {
                    let msg = p
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    host(|h| h.log.push_str(&format!("{}: panic: {}\n", export, msg)));
                    1
                }
            };
            if code == 0 {
                // A committed set or clear starts the failure count again.
                let touched = host(|h| h.alarm_touched);
                if touched {
                    self.failures = 0;
                }
                return Ok(Touched(touched));
            }
            Err(host(|h| {
                if h.alarm_touched {
                    h.alarm_left = Some(h.alarm);
                }
                h.kv = kv;
                h.alarm = alarm;
                let said = h.log[logged..].trim().to_string();
                if said.is_empty() {
                    format!("{} returned {}", export, code)
                } else {
                    said
                }
            }))
        }
    }

    struct Touched(bool);

    /// The delay after the n-th failure in a row.
    fn retry_delay(n: u32) -> Duration {
        let mut d = RETRY_BASE;
        let mut i = 1;
        while i < n && d < RETRY_MAX {
            d *= 2;
            i += 1;
        }
        d.min(RETRY_MAX)
    }

    impl Host {
        fn call(&mut self, op: &'static str) -> Option<u32> {
            *self.calls.entry(op).or_insert(0) += 1;
            self.fail.get(op).copied()
        }
        pub(crate) fn set_alarm(&mut self, at_ms: i64) -> u32 {
            if let Some(e) = self.call("set-alarm") {
                return e;
            }
            if at_ms < 0 || at_ms > crate::MAX_ALARM_MS {
                return 28;
            }
            self.alarm = Some(at_ms);
            self.alarm_touched = true;
            0
        }
        pub(crate) fn get_alarm(&mut self, out: &mut i64) -> u32 {
            if let Some(e) = self.call("get-alarm") {
                return e;
            }
            match self.alarm {
                Some(t) => {
                    *out = t;
                    0
                }
                None => 44,
            }
        }
        pub(crate) fn clear_alarm(&mut self) -> u32 {
            if let Some(e) = self.call("clear-alarm") {
                return e;
            }
            self.alarm = None;
            self.alarm_touched = true;
            0
        }
        pub(crate) fn request_read(&mut self, buf: &mut [u8]) -> u32 {
            if let Some(e) = self.call("request-read") {
                return e;
            }
            let n = buf.len().min(self.request.len());
            buf[..n].copy_from_slice(&self.request[..n]);
            0
        }
        pub(crate) fn response_write(&mut self, buf: &[u8]) -> u32 {
            if let Some(e) = self.call("response-write") {
                return e;
            }
            self.response.extend_from_slice(buf);
            0
        }
        pub(crate) fn kv_get(&mut self, key: &[u8], buf: &mut [u8], out_len: &mut u32) -> u32 {
            if let Some(e) = self.call("kv-get") {
                return e;
            }
            if key.len() > crate::MAX_KEY_LEN {
                return 1;
            }
            match self.kv.get(key) {
                None => 44,
                Some(v) => {
                    *out_len = v.len() as u32;
                    let n = buf.len().min(v.len());
                    buf[..n].copy_from_slice(&v[..n]);
                    0
                }
            }
        }
        pub(crate) fn kv_put(&mut self, key: &[u8], val: &[u8]) -> u32 {
            if let Some(e) = self.call("kv-put") {
                return e;
            }
            if key.len() > crate::MAX_KEY_LEN || val.len() > crate::MAX_VALUE_LEN {
                return 1;
            }
            self.kv.insert(key.to_vec(), val.to_vec());
            0
        }
        pub(crate) fn actor_id(&mut self, buf: &mut [u8], out_len: &mut u32) -> u32 {
            if let Some(e) = self.call("actor-id") {
                return e;
            }
            *out_len = self.actor.len() as u32;
            if self.actor.len() > buf.len() {
                return 1;
            }
            buf[..self.actor.len()].copy_from_slice(&self.actor);
            0
        }
        pub(crate) fn kv_delete(&mut self, key: &[u8]) -> u32 {
            if let Some(e) = self.call("kv-delete") {
                return e;
            }
            if key.len() > crate::MAX_KEY_LEN {
                return 1;
            }
            self.kv.remove(key);
            0
        }
    }
}

#[cfg(test)]
mod tests;
