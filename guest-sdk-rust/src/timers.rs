//! Any number of named timers over the actor's one alarm: one-shot timers
//! at a time, intervals and cron schedules in UTC, each with optional data.
//! The same rules and the same stored format as the Go SDK's package
//! `timers` (docs/timers.md in the wasmkeep alarms module), so an actor can
//! move between the SDKs with its timers.
//!
//! ```ignore
//! use std::time::Duration;
//! use wasmkeep::timers::{self, Fired, Schedule};
//! use wasmkeep::{Actor, HandlerResult};
//!
//! struct Reminders;
//!
//! impl Actor for Reminders {
//!     fn on_request(_req: &[u8]) -> HandlerResult<Vec<u8>> {
//!         timers::set("flush", Schedule::Every(Duration::from_secs(30)), b"")?;
//!         timers::set("nightly", Schedule::Cron("0 3 * * *".into()), b"")?;
//!         let at = wasmkeep::now() + Duration::from_secs(3600);
//!         timers::set("remind/42", Schedule::At(at), b"call Bob")?;
//!         Ok(b"ok".to_vec())
//!     }
//!     // The timers own the alarm: on_alarm hands every due timer to one function.
//!     fn on_alarm(_scheduled: std::time::SystemTime, retry_count: u32) -> HandlerResult<()> {
//!         timers::dispatch(retry_count, on_timer)
//!     }
//! }
//!
//! fn on_timer(f: &Fired) -> HandlerResult<()> {
//!     // f.name, f.due_ms (the tick being run), f.data, f.retry_count
//!     Ok(())
//! }
//!
//! wasmkeep::export_actor!(Reminders);
//! ```
//!
//! The timers are kept in the actor's own key/value table, all in one value
//! under [`STATE_KEY`], so a change commits with the event's other writes or
//! rolls back with them. After every change the alarm is set for the
//! earliest timer (cleared when there is none): an actor that uses timers
//! calls [`dispatch`] from its `on_alarm` and does not set or clear the
//! alarm itself. The calls work inside an event and fail with `EPERM`
//! outside one. Read the time with [`crate::now`], which is the fake host's
//! clock in a native test.
//!
//! Dispatch runs the handler once for every timer due by [`crate::now`], in
//! order of due time, then name (byte order). Before a timer's handler runs,
//! a one-shot timer is removed and a repeating one moved to its first tick
//! after now, skipping the ticks it missed (an interval keeps its phase), so
//! the handler sees what will stand and may [`set`] or [`cancel`] any timer;
//! a timer set during the event for a time already due runs in the next
//! `on-alarm` event, and a due timer that an earlier handler cancelled or set
//! again does not run in this one.
//!
//! A handler that fails fails the whole event: the host rolls back every
//! write of it (the runs of the timers before it included) and retries it on
//! its committed backoff, when every timer due by then runs again in the
//! same order. Handlers must be idempotent, or check their own state.
//! [`Fired::retry_count`] is the host's count of failed attempts.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Deref;
use std::time::{Duration, SystemTime};

mod cron;

pub use cron::{format_utc, CronError, CronSchedule};

/// The key of the actor's key/value table under which the timers are kept,
/// all in one value. The guest must not write it itself.
pub const STATE_KEY: &str = "wasmkeep.timers";

/// The longest timer name, in bytes.
pub const MAX_NAME_LEN: usize = 256;

const FORMAT_VERSION: u8 = 1;

/// How a timer repeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Fires once, at a time ([`Schedule::At`]).
    At = 1,
    /// Fires at a fixed interval ([`Schedule::Every`], [`Schedule::EveryFrom`]).
    Every = 2,
    /// Fires when a cron expression matches ([`Schedule::Cron`]).
    Cron = 3,
}

impl Kind {
    /// `"at"`, `"every"` or `"cron"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::At => "at",
            Kind::Every => "every",
            Kind::Cron => "cron",
        }
    }
    fn from_byte(b: u8) -> Option<Kind> {
        match b {
            1 => Some(Kind::At),
            2 => Some(Kind::Every),
            3 => Some(Kind::Cron),
            _ => None,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// When a timer fires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Once, at this time (rounded up to the millisecond, so never before
    /// it). A time not after now fires at once: in the next `on-alarm` event.
    At(SystemTime),
    /// Every interval (rounded up to a whole millisecond, and positive), the
    /// first time one interval from now.
    Every(Duration),
    /// At the first time and every interval after it; when the first time is
    /// not after now, the first tick of that series after now.
    EveryFrom(SystemTime, Duration),
    /// Each minute the 5-field cron expression matches, in UTC (see
    /// [`CronSchedule`]); the first time is the first match after now.
    Cron(String),
}

/// One named timer as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timer {
    /// The timer's name, unique within the actor.
    pub name: String,
    /// How it repeats.
    pub kind: Kind,
    /// When it next fires, in Unix ms. In [`Fired`], the tick being run.
    pub due_ms: i64,
    /// The interval of an [`Kind::Every`] timer (zero for the others).
    pub every: Duration,
    /// The expression of a [`Kind::Cron`] timer (empty for the others).
    pub cron: String,
    /// What [`set`] stored with the timer.
    pub data: Vec<u8>,
}

impl Timer {
    /// [`due_ms`](Timer::due_ms) as a time.
    pub fn due(&self) -> SystemTime {
        crate::from_millis(self.due_ms)
    }
}

/// What the handler receives for each due timer; it derefs to the
/// [`Timer`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fired {
    /// The timer, its `due_ms` the tick being run.
    pub timer: Timer,
    /// How many times this `on-alarm` event failed before (the host's count,
    /// shared by every timer the event runs).
    pub retry_count: u32,
}

impl Deref for Fired {
    type Target = Timer;
    fn deref(&self) -> &Timer {
        &self.timer
    }
}

/// Why a timers call failed.
#[derive(Debug)]
pub enum Error {
    /// The host refused a call.
    Host(crate::Error),
    /// [`set`] was given a bad name or schedule; the message says which.
    Invalid(String),
    /// The stored value is not one this SDK can read.
    Corrupt(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Host(e) => e.fmt(f),
            Error::Invalid(s) => f.write_str(s),
            Error::Corrupt(why) => write!(f, "timers: the value under {:?}: {}", STATE_KEY, why),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Host(e) => Some(e),
            _ => None,
        }
    }
}

impl From<crate::Error> for Error {
    fn from(e: crate::Error) -> Error {
        Error::Host(e)
    }
}

/// The result of a timers call.
pub type Result<T> = std::result::Result<T, Error>;

/// Creates the timer `name`, or replaces it (its schedule and data), and
/// sets the alarm for the earliest timer. It commits with the event.
/// Errors: [`Error::Invalid`] for a name of 0 or more than
/// [`MAX_NAME_LEN`] bytes, an interval that is not positive, a cron
/// expression [`CronSchedule::parse`] refuses or a time outside the host's
/// alarm range; [`Error::Host`] (`EPERM` outside an event).
pub fn set(name: &str, schedule: Schedule, data: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(Error::Invalid(format!(
            "timers: a timer's name must be 1 to {} bytes: got {} bytes",
            MAX_NAME_LEN,
            name.len()
        )));
    }
    let now = crate::now_ms();
    let mut e = Entry {
        name: name.to_string(),
        kind: Kind::At,
        due: 0,
        every: 0,
        cron: None,
        data: data.to_vec(),
        seq: next_seq(),
    };
    match schedule {
        Schedule::At(t) => e.due = crate::to_millis(t),
        Schedule::Every(d) | Schedule::EveryFrom(_, d) if ceil_ms(d) <= 0 => {
            return Err(Error::Invalid(format!("timers: {:?}: the interval {:?} is not positive", name, d)));
        }
        Schedule::Every(d) => {
            e.kind = Kind::Every;
            e.every = ceil_ms(d);
            e.due = now.saturating_add(e.every);
        }
        Schedule::EveryFrom(first, d) => {
            e.kind = Kind::Every;
            e.every = ceil_ms(d);
            e.due = next_tick(crate::to_millis(first), e.every, now);
        }
        Schedule::Cron(spec) => {
            let c = CronSchedule::parse(&spec).map_err(|err| Error::Invalid(err.to_string()))?;
            e.kind = Kind::Cron;
            e.due = c.next_after_ms(now).unwrap_or(-1);
            e.cron = Some(c);
        }
    }
    if e.due < 0 || e.due > crate::MAX_ALARM_MS {
        return Err(Error::Invalid(format!(
            "timers: {:?}: due at {} ms, outside the host's alarm range",
            name, e.due
        )));
    }
    update(|st| {
        st.timers.insert(e.name.clone(), e);
        false
    })
    .map(|_| ())
}

/// Removes the timer `name`, reporting whether there was one, and sets the
/// alarm for the earliest timer left (or clears it). It commits with the
/// event.
pub fn cancel(name: &str) -> Result<bool> {
    update(|st| st.timers.remove(name).is_some())
}

/// The timer `name`, or `None`.
pub fn get(name: &str) -> Result<Option<Timer>> {
    with_current(|st| st.timers.get(name).map(Entry::timer))
}

/// Every timer, in dispatch order: by due time, then name.
pub fn list() -> Result<Vec<Timer>> {
    with_current(|st| st.sorted().into_iter().map(Entry::timer).collect())
}

/// The timer due first (the earliest name among those due at the same
/// time), or `None` when there are none.
pub fn next() -> Result<Option<Timer>> {
    with_current(|st| st.sorted().first().map(|e| e.timer()))
}

/// The `on-alarm` handler of an actor with timers: call it from
/// [`Actor::on_alarm`](crate::Actor::on_alarm) with the retry count. It
/// runs `handler` for every timer due by now, in order of due time, then
/// name, moving each repeating timer to its first tick after now and
/// removing each one-shot timer before its handler runs; then it saves the
/// timers and sets the alarm for the earliest one left (or clears it). The
/// first handler error fails the event, naming the timer.
pub fn dispatch<F>(retry_count: u32, mut handler: F) -> crate::HandlerResult<()>
where
    F: FnMut(&Fired) -> crate::HandlerResult<()>,
{
    let st = load()?;
    let now = crate::now_ms();
    let due: Vec<Entry> = st.sorted().into_iter().take_while(|e| e.due <= now).cloned().collect();
    DISPATCHING.with(|d| *d.borrow_mut() = Some(st));
    // Forget the dispatch's state however the handlers end (a panic too).
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            DISPATCHING.with(|d| *d.borrow_mut() = None);
        }
    }
    let _reset = Reset;
    for e in due {
        let fired = DISPATCHING.with(|d| {
            let mut d = d.borrow_mut();
            let st = d.as_mut().expect("timers: the dispatch's state is gone");
            match st.timers.get(&e.name) {
                Some(cur) if cur.seq == e.seq => {}
                _ => return None, // an earlier handler cancelled or replaced it
            }
            let fired = Fired { timer: e.timer(), retry_count };
            let mut next = e.clone();
            if next.kind != Kind::At && next.reschedule(now) {
                st.timers.insert(next.name.clone(), next);
            } else {
                st.timers.remove(&e.name);
            }
            Some(fired)
        });
        if let Some(f) = fired {
            if let Err(err) = handler(&f) {
                return Err(format!("timer {:?} due {}: {}", f.name, format_utc(f.due_ms), err).into());
            }
        }
    }
    let mut st = DISPATCHING.with(|d| d.borrow_mut().take()).expect("timers: the dispatch's state is gone");
    // The host removes the delivered alarm unless the handler sets one, so
    // set (or clear) it even when it would not change.
    match st.earliest_due() {
        Some(due) => {
            st.armed = due;
            crate::set_alarm_ms(due)?;
        }
        None => {
            st.armed = -1;
            crate::clear_alarm()?;
        }
    }
    save(&st)?;
    Ok(())
}

// ---- state -----------------------------------------------------------------

#[derive(Clone, Debug)]
struct Entry {
    name: String,
    kind: Kind,
    due: i64,   // Unix ms
    every: i64, // ms, Kind::Every
    cron: Option<CronSchedule>,
    data: Vec<u8>,
    seq: u64, // which Set made it: a replaced timer has another
}

impl Entry {
    fn timer(&self) -> Timer {
        Timer {
            name: self.name.clone(),
            kind: self.kind,
            due_ms: self.due,
            every: Duration::from_millis(self.every.max(0) as u64),
            cron: self.cron.as_ref().map_or(String::new(), |c| c.spec().to_string()),
            data: self.data.clone(),
        }
    }

    /// Moves a repeating timer to its first tick after now; false when it
    /// has none within the host's alarm range.
    fn reschedule(&mut self, now: i64) -> bool {
        match self.kind {
            Kind::At => {}
            Kind::Every => self.due = next_tick(self.due, self.every, now),
            Kind::Cron => match self.cron.as_ref().and_then(|c| c.next_after_ms(now)) {
                Some(t) => self.due = t,
                None => return false,
            },
        }
        self.due <= crate::MAX_ALARM_MS
    }
}

/// The timers as stored, and the alarm time they last set.
#[derive(Debug)]
struct State {
    timers: BTreeMap<String, Entry>, // by name, in byte order
    armed: i64,                      // the alarm the timers last set (Unix ms); -1: none
}

impl State {
    /// The entries in dispatch order: by due time, then name.
    fn sorted(&self) -> Vec<&Entry> {
        let mut v: Vec<&Entry> = self.timers.values().collect();
        v.sort_by(|a, b| (a.due, &a.name).cmp(&(b.due, &b.name)));
        v
    }
    fn earliest_due(&self) -> Option<i64> {
        self.timers.values().map(|e| e.due).min()
    }
}

thread_local! {
    /// The state an on-alarm event runs timers from; while it is set, the
    /// calls work on it, and the dispatch saves it once its handlers are done.
    static DISPATCHING: RefCell<Option<State>> = RefCell::new(None);
    static SEQ: std::cell::Cell<u64> = std::cell::Cell::new(0);
}

fn next_seq() -> u64 {
    SEQ.with(|s| {
        s.set(s.get() + 1);
        s.get()
    })
}

fn with_current<R>(f: impl FnOnce(&State) -> R) -> Result<R> {
    let mut f = Some(f);
    let r = DISPATCHING.with(|d| d.borrow().as_ref().map(|st| (f.take().expect("once"))(st)));
    match r {
        Some(r) => Ok(r),
        None => Ok((f.take().expect("once"))(&load()?)),
    }
}

/// Applies f to the timers and, outside a dispatch, saves them and sets the
/// alarm (a dispatch does both when its handlers are done).
fn update<R>(f: impl FnOnce(&mut State) -> R) -> Result<R> {
    let dispatching = DISPATCHING.with(|d| d.borrow().is_some());
    if dispatching {
        return Ok(DISPATCHING.with(|d| f(d.borrow_mut().as_mut().expect("dispatching"))));
    }
    let mut st = load()?;
    let r = f(&mut st);
    sync(&mut st)?;
    save(&st)?;
    Ok(r)
}

/// Sets the alarm for the earliest timer, outside on-alarm, keeping a retry
/// in progress: while the host is backing off a failed on-alarm (the alarm
/// is later than the time the timers set it for) and the earliest timer is
/// not later than that time, the alarm and its retry count stand.
fn sync(st: &mut State) -> Result<()> {
    let cur = crate::get_alarm_ms()?;
    let first = match st.earliest_due() {
        Some(first) => first,
        None => {
            st.armed = -1;
            if cur.is_some() {
                crate::clear_alarm()?;
            }
            return Ok(());
        }
    };
    if let Some(cur) = cur {
        if st.armed >= 0 && cur > st.armed && first <= st.armed {
            return Ok(()); // backing off: the retry stands
        }
        if cur == first {
            st.armed = first; // already set: leave the retry count alone
            return Ok(());
        }
    }
    st.armed = first;
    crate::set_alarm_ms(first)?;
    Ok(())
}

fn load() -> Result<State> {
    match crate::get(STATE_KEY)? {
        None => Ok(State { timers: BTreeMap::new(), armed: -1 }),
        Some(v) => decode(&v),
    }
}

fn save(st: &State) -> Result<()> {
    if st.timers.is_empty() && st.armed < 0 {
        crate::delete(STATE_KEY)?;
    } else {
        crate::put(STATE_KEY, encode(st))?;
    }
    Ok(())
}

/// The first of the ticks due, due+every, due+2*every ... after now.
fn next_tick(due: i64, every: i64, now: i64) -> i64 {
    if due > now {
        return due;
    }
    due.saturating_add(((now - due) / every + 1).saturating_mul(every))
}

fn ceil_ms(d: Duration) -> i64 {
    let ms = (d.as_nanos() + 999_999) / 1_000_000;
    if ms > i64::MAX as u128 {
        i64::MAX
    } else {
        ms as i64
    }
}

// ---- the stored format (docs/timers.md) ------------------------------------

/// The format, version 1: the version byte; armed+1 (0: none) as a uvarint;
/// the number of timers; then, by name, each timer's name, kind byte, due
/// time, and its interval (every) or cron expression (cron), and its data.
/// Integers are LEB128 varints (signed ones zigzag), strings and data a
/// uvarint length first: Go's encoding/binary.
fn encode(st: &State) -> Vec<u8> {
    let mut b = vec![FORMAT_VERSION];
    put_uvarint(&mut b, (st.armed + 1) as u64);
    put_uvarint(&mut b, st.timers.len() as u64);
    for e in st.timers.values() {
        put_bytes(&mut b, e.name.as_bytes());
        b.push(e.kind as u8);
        put_varint(&mut b, e.due);
        match e.kind {
            Kind::At => {}
            Kind::Every => put_varint(&mut b, e.every),
            Kind::Cron => put_bytes(&mut b, e.cron.as_ref().map_or("", |c| c.spec()).as_bytes()),
        }
        put_bytes(&mut b, &e.data);
    }
    b
}

fn put_uvarint(b: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        b.push(v as u8 | 0x80);
        v >>= 7;
    }
    b.push(v as u8);
}

fn put_varint(b: &mut Vec<u8>, v: i64) {
    put_uvarint(b, ((v << 1) ^ (v >> 63)) as u64);
}

fn put_bytes(b: &mut Vec<u8>, v: &[u8]) {
    put_uvarint(b, v.len() as u64);
    b.extend_from_slice(v);
}

fn decode(b: &[u8]) -> Result<State> {
    let corrupt = || Error::Corrupt("not a timers value this SDK can read".into());
    if b.first() != Some(&FORMAT_VERSION) {
        return Err(corrupt());
    }
    let mut r = Reader(&b[1..]);
    let armed = r.uvarint().ok_or_else(corrupt)?.wrapping_sub(1) as i64;
    let n = r.uvarint().ok_or_else(corrupt)?;
    if n > r.0.len() as u64 {
        return Err(corrupt());
    }
    let mut st = State { timers: BTreeMap::new(), armed };
    for _ in 0..n {
        let name = String::from_utf8(r.bytes().ok_or_else(corrupt)?.to_vec()).map_err(|_| corrupt())?;
        let kind = r.byte().and_then(Kind::from_byte).ok_or_else(corrupt)?;
        let due = r.varint().ok_or_else(corrupt)?;
        let mut e = Entry { name, kind, due, every: 0, cron: None, data: Vec::new(), seq: next_seq() };
        match kind {
            Kind::At => {}
            Kind::Every => {
                e.every = r.varint().ok_or_else(corrupt)?;
                if e.every <= 0 {
                    return Err(corrupt());
                }
            }
            Kind::Cron => {
                let spec = std::str::from_utf8(r.bytes().ok_or_else(corrupt)?).map_err(|_| corrupt())?;
                e.cron = Some(CronSchedule::parse(spec).map_err(|err| Error::Corrupt(err.to_string()))?);
            }
        }
        e.data = r.bytes().ok_or_else(corrupt)?.to_vec();
        st.timers.insert(e.name.clone(), e);
    }
    if !r.0.is_empty() {
        return Err(corrupt());
    }
    Ok(st)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// A uvarint as Go's binary.Uvarint reads one: at most 10 bytes, and no
    /// overflow of 64 bits.
    fn uvarint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for (i, &c) in self.0.iter().enumerate() {
            if i == 10 || (i == 9 && c > 1) {
                return None;
            }
            v |= ((c & 0x7f) as u64) << (7 * i);
            if c < 0x80 {
                self.0 = &self.0[i + 1..];
                return Some(v);
            }
        }
        None
    }
    fn varint(&mut self) -> Option<i64> {
        let u = self.uvarint()?;
        Some((u >> 1) as i64 ^ -((u & 1) as i64))
    }
    fn byte(&mut self) -> Option<u8> {
        let (&c, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(c)
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.uvarint()?;
        if n > self.0.len() as u64 {
            return None;
        }
        let (v, rest) = self.0.split_at(n as usize);
        self.0 = rest;
        Some(v)
    }
}

#[cfg(test)]
mod tests;
