//! The checker: a pure function from a run's events to its verdict.
//!
//! A *hold* is one acquisition: from `acquire`'s return with the lock to the end of the
//! client's critical section (its write's return, else its release, its death, or the end of
//! the run). The checks:
//!
//! - (a) overlapping holds of two clients, by their monotonic timestamps. An overlap is
//!   *fenced* when at most one of the two holds had a write accepted: the resource saw only
//!   one writer. An *unfenced* overlap (both writes taken) is a safety violation.
//! - (b) stale writes accepted: a write taken although its token was lower than one the
//!   register had taken (the register says so without fencing; with fencing it is found from
//!   the timestamps: a higher-token write had returned before this one was sent).
//! - (c) breaks in token order: a client that called `acquire` after another's `acquire`
//!   returned must get a larger token.
//! - (d) lost updates: every write stores the value it read plus one, so an accepted write
//!   whose read is not the value the register held (the previous accepted write's) overwrote
//!   the updates in between; they are counted, and charged to that write.
//! - (e) acquires whose outcome is unknown (an error, or no return: the process was killed),
//!   counted.
//! - (f) liveness: after each fault heals, some client acquires within the stated bound.
//!
//! - (g) elections: each observer reports terms in strictly increasing order, and every
//!   observer names the same leader for a term: the participant whose campaign returned
//!   that term, where one did (its value is `<lane>/<pid>`).
//!
//! (a) unfenced, (b), (c), (d) and (g) are safety checks; (e) and (f) are reported beside
//! them.
//!
//! The lock family ([`Rule`], issue 24 point 6) changes what (a) to (d) look at:
//!
//! - read-write lock: a reader's hold is part 1 (a writer's part 0). Writers write the
//!   register with their token; a reader reads it, holds, and ends with a *checked read*
//!   recorded as a write of the value it read: accepted when no write with a higher token
//!   than the reader's had been taken (the reader's view still stood), rejected (fenced)
//!   otherwise. (a) looks at pairs with at least one writer (readers share); (b), (c), (d)
//!   and the write counts at writers only.
//! - semaphore of N: permit holders write one register of N fenced slots (`permits.lua`): a
//!   holding takes a slot when granted and gives it back before its permit, and a write is
//!   taken only while its holding has its slot; when the semaphore grants a permit while all
//!   N slots are taken, the lowest tokens (holdings whose lease ran out) lose theirs. (a)
//!   becomes *crowds*: an instant when more than N holds are open, fenced when at most N of
//!   them had their write accepted. (d) does not apply (N holders update the register at
//!   once by design); (b) is the register's own word (control runs).
//! - multi-lock: each client holds several locks, each with its own register (part = the
//!   lock's index); every check runs per lock, on that lock's events and the process events.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::events::{Event, Kind};

/// What the checker needs besides the events.
#[derive(Debug, Clone, Copy)]
pub struct Bounds<'a> {
    /// When each fault healed (ns, monotonic).
    pub heals: &'a [u64],
    /// The end of the run (ns): holds still open then end there.
    pub end: u64,
    /// How soon after a fault heals the lock must be acquired again (ns).
    pub liveness_bound: u64,
}

/// How a hold's write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Write {
    /// No write returned (none was sent, or the client died first).
    None,
    /// Taken; `stale` when the register had taken a higher token.
    Accepted { value: u64, stale: bool },
    /// Refused for its stale token.
    Rejected,
    /// Failed: outcome unknown.
    Failed,
}

/// The rules a run is checked by: the primitive its clients contend for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// A mutex or an election: one holder at a time.
    Mutex,
    /// A read-write lock: readers (part 1) share, writers (part 0) exclude everyone.
    ReadWrite,
    /// A semaphore of N permits.
    Permits(u32),
    /// A multi-lock over this many locks, each checked as a mutex.
    Multi(u8),
}

/// One acquisition and the critical section that followed it.
#[derive(Debug, Clone, Serialize)]
pub struct Hold {
    /// The client's lane.
    pub client: usize,
    /// The part (see [`Event::part`]): the lock of a multi-lock, 1 for a reader.
    pub part: u8,
    /// The process.
    pub pid: u32,
    /// The process's attempt number.
    pub attempt: u64,
    /// The fencing token.
    pub token: u64,
    /// When `acquire` was called (ns).
    pub called: u64,
    /// When `acquire` returned the lock (ns).
    pub acquired: u64,
    /// When the critical section ended (ns).
    pub end: u64,
    /// When the write was sent, if it was.
    pub write_sent: Option<u64>,
    /// When the write returned, if it did.
    pub write_returned: Option<u64>,
    /// How the write ended.
    pub write: Write,
}

/// Two clients' holds at the same time.
#[derive(Debug, Clone, Serialize)]
pub struct Overlap {
    /// The holds (indexes into [`Verdict::holds`]), the earlier acquisition first.
    pub holds: (usize, usize),
    /// The time both held (ns).
    pub from: u64,
    /// Until when (ns).
    pub to: u64,
    /// At most one of the two writes was accepted.
    pub fenced: bool,
}

/// (a) for a semaphore of N: more than N holds open at once.
#[derive(Debug, Clone, Serialize)]
pub struct Crowd {
    /// When (ns): the latest acquisition among them.
    pub at: u64,
    /// The holds open then (indexes into [`Verdict::holds`]).
    pub holds: Vec<usize>,
    /// At most N of them had their write accepted.
    pub fenced: bool,
}

/// A break in token order.
#[derive(Debug, Clone, Serialize)]
pub struct TokenBreak {
    /// The earlier acquisition (index into [`Verdict::holds`]).
    pub earlier: usize,
    /// The later one, whose token is not larger.
    pub later: usize,
}

/// An accepted write that overwrote updates it had not read.
#[derive(Debug, Clone, Serialize)]
pub struct LostUpdate {
    /// The overwriting hold (index into [`Verdict::holds`]).
    pub hold: usize,
    /// How many accepted updates it erased.
    pub overwritten: u64,
}

/// Liveness after one fault healed.
#[derive(Debug, Clone, Serialize)]
pub struct Recovery {
    /// When the fault healed (ns).
    pub healed: u64,
    /// How long until the next acquisition (ns), if there was one.
    pub after: Option<u64>,
    /// Within the bound; `None` when the run ended before the bound and before any
    /// acquisition (not measured).
    pub ok: Option<bool>,
}

/// (g) An election observer's report that breaks the leaders' order or names another leader.
#[derive(Debug, Clone, Serialize)]
pub struct ObserverBreak {
    /// The observing client's lane and process.
    pub client: usize,
    /// Its process.
    pub pid: u32,
    /// When it reported (ns).
    pub t: u64,
    /// The term reported.
    pub term: u64,
    /// The value reported.
    pub value: String,
    /// What is wrong: `"order"` (not above the observer's previous term) or `"leader"`
    /// (another value than other reports of that term, or than its leader's).
    pub what: &'static str,
}

/// The checker's findings.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// Every hold, in order of acquisition.
    pub holds: Vec<Hold>,
    /// (a) overlapping holds.
    pub overlaps: Vec<Overlap>,
    /// (a) for a semaphore: instants with more than N holds open.
    pub crowds: Vec<Crowd>,
    /// (b) stale writes accepted (indexes into `holds`).
    pub stale_writes: Vec<usize>,
    /// (c) breaks in token order.
    pub token_breaks: Vec<TokenBreak>,
    /// (d) lost updates, charged to the writes that overwrote them.
    pub lost_updates: Vec<LostUpdate>,
    /// Writes accepted, rejected (a read-write lock's writers only: see [`Tally`]).
    pub writes: (usize, usize),
    /// A read-write lock's checked reads: standing, refused (a later writer wrote).
    pub reads: (usize, usize),
    /// (e) acquires whose outcome is unknown.
    pub unknown_acquires: usize,
    /// (f) liveness after each fault healed.
    pub recoveries: Vec<Recovery>,
    /// (g) election observers' reports out of order or naming another leader.
    pub observer_breaks: Vec<ObserverBreak>,
    /// (g) election observers' reports, in all.
    pub observed: usize,
    /// The stated liveness bound (ns).
    pub liveness_bound: u64,
}

impl Verdict {
    /// Updates lost, in all.
    pub fn updates_lost(&self) -> u64 {
        self.lost_updates.iter().map(|l| l.overwritten).sum()
    }

    /// Its counts, as the progress line gives them.
    pub fn tally(&self) -> Tally {
        Tally {
            holds: self.holds.len(),
            writes: self.writes,
            reads: self.reads,
        }
    }

    /// Overlaps where both writes were accepted (with a semaphore: crowds with more than N
    /// writes accepted).
    pub fn unfenced_overlaps(&self) -> usize {
        let pairs = self.overlaps.iter().filter(|o| !o.fenced).count();
        pairs + self.crowds.iter().filter(|c| !c.fenced).count()
    }

    /// Every safety check passed.
    pub fn safe(&self) -> bool {
        self.unfenced_overlaps() == 0
            && self.stale_writes.is_empty()
            && self.token_breaks.is_empty()
            && self.lost_updates.is_empty()
            && self.observer_breaks.is_empty()
    }

    /// The lock was acquired again within the bound after every fault healed (unmeasured
    /// recoveries do not count against it).
    pub fn live(&self) -> bool {
        self.recoveries.iter().all(|r| r.ok != Some(false))
    }
}

/// The counts a run's progress line and its verdict both give, from the same events by the
/// same rule, so that they agree: holds, writes taken and refused, and a read-write lock's
/// checked reads (a reader's, recorded as its write) standing and refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Holds (a multi-lock's: one per lock).
    pub holds: usize,
    /// Writes taken, refused.
    pub writes: (usize, usize),
    /// Checked reads standing, refused.
    pub reads: (usize, usize),
}

impl Tally {
    /// Counts `e` under `rule`.
    pub fn add(&mut self, rule: Rule, e: &Event) {
        let reader = rule == Rule::ReadWrite && e.part == 1;
        let count = match reader {
            true => &mut self.reads,
            false => &mut self.writes,
        };
        match e.kind {
            Kind::Acquired { .. } => self.holds += 1,
            Kind::WriteAccepted { .. } => count.0 += 1,
            Kind::WriteRejected { .. } => count.1 += 1,
            _ => {}
        }
    }
}

/// Checks a run of a mutex or an election.
#[cfg(test)]
pub fn check(events: &[Event], bounds: Bounds<'_>) -> Verdict {
    check_one(events, bounds, Rule::Mutex)
}

/// Checks a run by `rule`: a multi-lock lock by lock, the others at once.
pub fn check_by(events: &[Event], bounds: Bounds<'_>, rule: Rule) -> Verdict {
    let Rule::Multi(locks) = rule else {
        return check_one(events, bounds, rule);
    };
    let mut verdicts = (0..locks.max(1)).map(|part| {
        let mine: Vec<Event> = events
            .iter()
            .filter(|e| e.part == part || e.process_wide())
            .cloned()
            .collect();
        check_one(&mine, bounds, Rule::Mutex)
    });
    let first = verdicts
        .next()
        .unwrap_or_else(|| check_one(&[], bounds, Rule::Mutex));
    verdicts.fold(first, merge)
}

/// One verdict of two locks' (of a multi-lock): `b`'s holds after `a`'s, its indexes moved.
/// Acquisitions, their outcomes and the recoveries are the multi-lock's, the same in each:
/// `a`'s are kept.
fn merge(mut a: Verdict, b: Verdict) -> Verdict {
    let n = a.holds.len();
    a.holds.extend(b.holds);
    a.overlaps.extend(b.overlaps.into_iter().map(|mut o| {
        o.holds = (o.holds.0 + n, o.holds.1 + n);
        o
    }));
    a.stale_writes
        .extend(b.stale_writes.into_iter().map(|i| i + n));
    a.token_breaks
        .extend(b.token_breaks.into_iter().map(|t| TokenBreak {
            earlier: t.earlier + n,
            later: t.later + n,
        }));
    a.lost_updates
        .extend(b.lost_updates.into_iter().map(|l| LostUpdate {
            hold: l.hold + n,
            overwritten: l.overwritten,
        }));
    a.writes = (a.writes.0 + b.writes.0, a.writes.1 + b.writes.1);
    a.reads = (a.reads.0 + b.reads.0, a.reads.1 + b.reads.1);
    a
}

/// Whether hold `h` writes the register under `rule` (a reader only reads it).
fn writes(rule: Rule, h: &Hold) -> bool {
    !(rule == Rule::ReadWrite && h.part == 1)
}

/// Checks one set of holds by `rule` (not a multi-lock's: see [`check_by`]).
fn check_one(events: &[Event], bounds: Bounds<'_>, rule: Rule) -> Verdict {
    let mut events = events.to_vec();
    events.sort_by_key(|e| e.t);
    let (holds, unknown_acquires) = holds(&events, bounds.end);
    let writers: Vec<bool> = holds.iter().map(|h| writes(rule, h)).collect();
    let mut tally = Tally::default();
    events.iter().for_each(|e| tally.add(rule, e));
    let (overlaps, crowds) = match rule {
        Rule::Permits(n) => (Vec::new(), crowds(&holds, n)),
        _ => (overlaps(&holds, &writers), Vec::new()),
    };
    let stale_writes = match rule {
        Rule::Permits(_) => own_word_stale(&holds),
        _ => stale_writes(&holds, &writers),
    };
    let lost_updates = match rule {
        Rule::Permits(_) => Vec::new(),
        _ => lost_updates(&holds, &writers),
    };
    Verdict {
        overlaps,
        crowds,
        stale_writes,
        token_breaks: token_breaks(&holds, &writers),
        lost_updates,
        writes: tally.writes,
        reads: tally.reads,
        unknown_acquires,
        recoveries: recoveries(&events, bounds),
        observer_breaks: observer_breaks(&events, &holds),
        observed: events
            .iter()
            .filter(|e| matches!(e.kind, Kind::Observed { .. }))
            .count(),
        liveness_bound: bounds.liveness_bound,
        holds,
    }
}

/// Builds the holds from the events, and counts the acquires with an unknown outcome.
fn holds(events: &[Event], end: u64) -> (Vec<Hold>, usize) {
    let mut b = Builder::default();
    for e in events {
        b.on(e);
    }
    for (_, mut h) in b.open {
        h.end = end;
        b.done.push(h);
    }
    b.done.sort_by_key(|h| (h.acquired, h.pid));
    (b.done, b.unknown)
}

/// A hold's key: the process and its attempt.
type Key = (u32, u64);

/// The holds under construction while the events are read in time order.
#[derive(Default)]
struct Builder {
    /// Acquire calls not yet returned, with their time.
    calls: HashMap<Key, u64>,
    open: BTreeMap<Key, Hold>,
    done: Vec<Hold>,
    unknown: usize,
}

impl Builder {
    fn on(&mut self, e: &Event) {
        match &e.kind {
            Kind::AcquireCall { attempt } => {
                self.calls.insert((e.pid, *attempt), e.t);
            }
            Kind::Acquired { attempt, token } => self.acquired(e, *attempt, *token),
            Kind::NotAcquired { attempt, .. } => {
                self.calls.remove(&(e.pid, *attempt));
            }
            Kind::AcquireUnknown { attempt, .. } => {
                self.calls.remove(&(e.pid, *attempt));
                self.unknown += 1;
            }
            Kind::WriteCall { attempt, .. } => {
                if let Some(h) = self.open.get_mut(&(e.pid, *attempt)) {
                    h.write_sent = Some(e.t);
                }
            }
            Kind::WriteAccepted {
                attempt,
                value,
                stale,
                ..
            } => {
                let write = Write::Accepted {
                    value: *value,
                    stale: *stale,
                };
                self.written(e, *attempt, write);
            }
            Kind::WriteRejected { attempt, .. } => self.written(e, *attempt, Write::Rejected),
            Kind::WriteFailed { attempt, .. } => self.written(e, *attempt, Write::Failed),
            Kind::Released { attempt, .. } => self.close((e.pid, *attempt), e.t),
            Kind::Killed | Kind::Exit => self.process_ended(e),
            Kind::Start | Kind::Read { .. } | Kind::Lost { .. } => {}
            Kind::Paused | Kind::Resumed => {}
            Kind::Observed { .. } | Kind::ObserveFailed { .. } => {}
        }
    }

    fn acquired(&mut self, e: &Event, attempt: u64, token: u64) {
        let called = self.calls.remove(&(e.pid, attempt)).unwrap_or(e.t);
        let hold = Hold {
            client: e.client,
            part: e.part,
            pid: e.pid,
            attempt,
            token,
            called,
            acquired: e.t,
            end: e.t,
            write_sent: None,
            write_returned: None,
            write: Write::None,
        };
        self.open.insert((e.pid, attempt), hold);
    }

    /// The write returned: the critical section ends there.
    fn written(&mut self, e: &Event, attempt: u64, write: Write) {
        if let Some(h) = self.open.get_mut(&(e.pid, attempt)) {
            h.write = write;
            h.write_returned = Some(e.t);
        }
        self.close((e.pid, attempt), e.t);
    }

    fn close(&mut self, key: Key, t: u64) {
        if let Some(mut h) = self.open.remove(&key) {
            h.end = t;
            self.done.push(h);
        }
    }

    /// A process exited or was killed: its holds end, and an acquire it had not seen return
    /// has an unknown outcome.
    fn process_ended(&mut self, e: &Event) {
        let keys: Vec<Key> = self.open.keys().filter(|k| k.0 == e.pid).copied().collect();
        for key in keys {
            self.close(key, e.t);
        }
        let before = self.calls.len();
        self.calls.retain(|k, _| k.0 != e.pid);
        self.unknown += before - self.calls.len();
    }
}

fn accepted(h: &Hold) -> bool {
    matches!(h.write, Write::Accepted { .. })
}

/// (a): holds sorted by acquisition; each is compared with the later ones that began before
/// it ended. Two readers (neither of them `writers`) share.
fn overlaps(holds: &[Hold], writers: &[bool]) -> Vec<Overlap> {
    let mut found = Vec::new();
    for (i, a) in holds.iter().enumerate() {
        for (j, b) in holds.iter().enumerate().skip(i + 1) {
            if b.acquired >= a.end || !(writers[i] || writers[j]) {
                continue;
            }
            if a.pid == b.pid || b.end <= a.acquired {
                continue;
            }
            found.push(Overlap {
                holds: (i, j),
                from: b.acquired.max(a.acquired),
                to: a.end.min(b.end),
                fenced: !(accepted(a) && accepted(b)),
            });
        }
    }
    found
}

/// (a) for a semaphore of `n`: at each acquisition, the holds open then (of distinct
/// processes); more than `n` is a crowd, fenced when at most `n` of them had a write accepted.
fn crowds(holds: &[Hold], n: u32) -> Vec<Crowd> {
    let mut found = Vec::new();
    for h in holds {
        let at = h.acquired;
        let open: Vec<usize> = (0..holds.len())
            .filter(|&i| holds[i].acquired <= at && at < holds[i].end)
            .collect();
        let mut pids: Vec<u32> = open.iter().map(|&i| holds[i].pid).collect();
        pids.sort_unstable();
        pids.dedup();
        if pids.len() > n as usize {
            let taken = open.iter().filter(|&&i| accepted(&holds[i])).count();
            found.push(Crowd {
                at,
                fenced: taken <= n as usize,
                holds: open,
            });
        }
    }
    found
}

/// (b) for a semaphore: the register's own word (a control run's write it would refuse).
fn own_word_stale(holds: &[Hold]) -> Vec<usize> {
    (0..holds.len())
        .filter(|&i| matches!(holds[i].write, Write::Accepted { stale: true, .. }))
        .collect()
}

/// (b): the register's own word (without fencing), or a higher-token write that returned
/// accepted before this one was sent; `writers` only.
fn stale_writes(holds: &[Hold], writers: &[bool]) -> Vec<usize> {
    let taken: Vec<(u64, u64)> = holds
        .iter()
        .zip(writers)
        .filter(|(h, &w)| w && accepted(h))
        .filter_map(|(h, _)| Some((h.write_returned?, h.token)))
        .collect();
    holds
        .iter()
        .enumerate()
        .filter(|&(i, _)| writers[i])
        .filter(|(_, h)| match h.write {
            Write::Accepted { stale: true, .. } => true,
            Write::Accepted { stale: false, .. } => {
                let sent = h.write_sent.unwrap_or(h.acquired);
                taken
                    .iter()
                    .any(|&(at, token)| at < sent && token > h.token)
            }
            _ => false,
        })
        .map(|(i, _)| i)
        .collect()
}

/// (c): `later` called `acquire` after `earlier`'s returned, so its token must be larger
/// (among `writers`).
fn token_breaks(holds: &[Hold], writers: &[bool]) -> Vec<TokenBreak> {
    let mut found = Vec::new();
    for (i, a) in holds.iter().enumerate().filter(|&(i, _)| writers[i]) {
        for (j, b) in holds.iter().enumerate().filter(|&(j, _)| writers[j]) {
            if i != j && a.acquired < b.called && b.token <= a.token {
                found.push(TokenBreak {
                    earlier: i,
                    later: j,
                });
            }
        }
    }
    found
}

/// (d): the accepted writes in the order they returned (the register's order, but for
/// writes in flight at once); each must have read the value the previous one stored.
fn lost_updates(holds: &[Hold], writers: &[bool]) -> Vec<LostUpdate> {
    let mut order: Vec<usize> = (0..holds.len())
        .filter(|&i| writers[i] && accepted(&holds[i]))
        .collect();
    order.sort_by_key(|&i| holds[i].write_returned);
    let mut current = 0;
    let mut lost = Vec::new();
    for i in order {
        if let Write::Accepted { value, .. } = holds[i].write {
            let read = value.saturating_sub(1);
            if read != current {
                lost.push(LostUpdate {
                    hold: i,
                    overwritten: current.abs_diff(read).max(1),
                });
            }
            current = value;
        }
    }
    lost
}

/// (f): the first acquisition after each heal.
fn recoveries(events: &[Event], bounds: Bounds<'_>) -> Vec<Recovery> {
    bounds
        .heals
        .iter()
        .map(|&healed| {
            let next = events
                .iter()
                .find(|e| e.t >= healed && matches!(e.kind, Kind::Acquired { .. }));
            let after = next.map(|e| e.t - healed);
            let ok = match after {
                Some(a) => Some(a <= bounds.liveness_bound),
                None if bounds.end.saturating_sub(healed) < bounds.liveness_bound => None,
                None => Some(false),
            };
            Recovery { healed, after, ok }
        })
        .collect()
}

/// (g) Reports of election observers that go back in term, or that name for a term another
/// leader than the participant that got it (its `<lane>/<pid>`) or than other reports did.
fn observer_breaks(events: &[Event], holds: &[Hold]) -> Vec<ObserverBreak> {
    let leaders: HashMap<u64, String> = holds
        .iter()
        .map(|h| (h.token, format!("{}/{}", h.client, h.pid)))
        .collect();
    let mut named: HashMap<u64, String> = HashMap::new();
    let mut last: HashMap<u32, u64> = HashMap::new();
    let mut breaks = Vec::new();
    for e in events {
        let Kind::Observed {
            term: Some(term),
            value: Some(value),
        } = &e.kind
        else {
            continue;
        };
        let expected = leaders
            .get(term)
            .or_else(|| named.get(term))
            .cloned()
            .unwrap_or_else(|| value.clone());
        named.entry(*term).or_insert_with(|| expected.clone());
        let previous = last.insert(e.pid, *term);
        let what = if previous.is_some_and(|p| p >= *term) {
            "order"
        } else if *value != expected {
            "leader"
        } else {
            continue;
        };
        breaks.push(ObserverBreak {
            client: e.client,
            pid: e.pid,
            t: e.t,
            term: *term,
            value: value.clone(),
            what,
        });
    }
    breaks
}

#[cfg(test)]
mod tests;
