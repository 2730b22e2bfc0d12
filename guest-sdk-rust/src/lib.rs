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
}

/// An in-memory host with the ABI's semantics, for unit tests of actors on
/// the build machine (not on wasm32). Install one per test with
/// [`fake::install`]; it lives on the test's thread.
#[cfg(not(target_arch = "wasm32"))]
pub mod fake {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    /// The fake host's state; tests read and change it freely.
    #[derive(Default, Debug)]
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
