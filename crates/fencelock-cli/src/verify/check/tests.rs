//! The checker on synthetic histories with known violations: each must be found, and a clean
//! history must pass.

use super::*;

const MS: u64 = 1_000_000;

/// Builds a history: events of client lanes, each process's PID being 100 + lane; events of
/// the part last set with `part` (0 at first).
struct History(Vec<Event>, u8);

impl History {
    fn new() -> Self {
        Self(Vec::new(), 0)
    }

    /// The next events are of `part` (a reader's: 1; a multi-lock's lock).
    fn part(&mut self, part: u8) -> &mut Self {
        self.1 = part;
        self
    }

    fn at(&mut self, ms: u64, client: usize, kind: Kind) -> &mut Self {
        self.0.push(Event {
            t: ms * MS,
            client,
            pid: 100 + client as u32,
            part: self.1,
            kind,
        });
        self
    }

    /// A whole hold: acquire call at `from`, lock at `from + 1`, read, write at `to - 1`
    /// (accepted or rejected), release at `to`.
    fn hold(&mut self, client: usize, span: (u64, u64), token: u64, write: Write) -> &mut Self {
        let (from, to) = span;
        let attempt = token;
        self.at(from, client, Kind::AcquireCall { attempt }).at(
            from + 1,
            client,
            Kind::Acquired { attempt, token },
        );
        let value = match write {
            Write::Accepted { value, .. } => value,
            _ => 0,
        };
        self.at(
            to - 2,
            client,
            Kind::WriteCall {
                attempt,
                token,
                value,
            },
        );
        let returned = match write {
            Write::Accepted { value, stale } => Kind::WriteAccepted {
                attempt,
                token,
                value,
                stale,
            },
            _ => Kind::WriteRejected {
                attempt,
                token,
                highest: None,
            },
        };
        self.at(to - 1, client, returned)
            .at(to, client, Kind::Released { attempt, ok: true })
    }

    fn check(&self, heals: &[u64], end_ms: u64) -> Verdict {
        check(
            &self.0,
            Bounds {
                heals,
                end: end_ms * MS,
                liveness_bound: 1_000 * MS,
            },
        )
    }

    fn check_by(&self, end_ms: u64, rule: Rule) -> Verdict {
        let bounds = Bounds {
            heals: &[],
            end: end_ms * MS,
            liveness_bound: 1_000 * MS,
        };
        check_by(&self.0, bounds, rule)
    }
}

fn ok(value: u64) -> Write {
    Write::Accepted {
        value,
        stale: false,
    }
}

#[test]
fn a_clean_history_passes() {
    let mut h = History::new();
    h.hold(0, (0, 10), 1, ok(1))
        .hold(1, (12, 20), 2, ok(2))
        .hold(0, (21, 30), 3, ok(3));
    let v = h.check(&[], 40);
    assert!(v.safe() && v.live(), "{v:?}");
    assert_eq!(v.holds.len(), 3);
    assert_eq!(v.writes, (3, 0));
    assert!(v.overlaps.is_empty());
}

/// Kleppmann's pause with fencing: client 0 pauses past its lease, client 1 takes the lock
/// and writes; client 0's late write is rejected. The overlap is found, and fenced.
#[test]
fn a_fenced_overlap_is_found_and_safe() {
    let mut h = History::new();
    h.hold(0, (0, 100), 1, Write::Rejected)
        .hold(1, (50, 60), 2, ok(1));
    let v = h.check(&[], 200);
    assert_eq!(v.overlaps.len(), 1, "{v:?}");
    assert!(v.overlaps[0].fenced);
    assert_eq!(v.overlaps[0].from, 51 * MS);
    assert_eq!(v.overlaps[0].to, 59 * MS);
    assert!(v.safe(), "{v:?}");
}

/// The same pause without fencing: the late write is taken although the register had seen
/// token 2, and it stores the value client 1 stored: an unfenced overlap, a stale write and
/// a lost update.
#[test]
fn the_unfenced_pause_shows_every_violation() {
    let mut h = History::new();
    let stale = Write::Accepted {
        value: 1,
        stale: true,
    };
    h.hold(0, (0, 100), 1, stale).hold(1, (50, 60), 2, ok(1));
    let v = h.check(&[], 200);
    assert_eq!(v.unfenced_overlaps(), 1, "{v:?}");
    assert_eq!(v.stale_writes, vec![0]);
    assert_eq!(v.lost_updates.len(), 1);
    assert_eq!((v.lost_updates[0].hold, v.updates_lost()), (0, 1));
    assert!(!v.safe());
}

/// A register that failed to fence (says "not stale") is caught by the timestamps: a write
/// with token 2 had returned before the write with token 1 was sent.
#[test]
fn a_stale_write_is_found_from_timestamps() {
    let mut h = History::new();
    h.hold(0, (0, 100), 1, ok(2)).hold(1, (50, 60), 2, ok(1));
    let v = h.check(&[], 200);
    assert_eq!(v.stale_writes, vec![0], "{v:?}");
    assert!(!v.safe());
}

#[test]
fn a_break_in_token_order_is_found() {
    let mut h = History::new();
    h.hold(0, (0, 10), 5, ok(1)).hold(1, (20, 30), 4, ok(2));
    let v = h.check(&[], 40);
    assert_eq!(v.token_breaks.len(), 1, "{v:?}");
    assert_eq!(v.token_breaks[0].earlier, 0);
    assert_eq!(v.token_breaks[0].later, 1);
    assert!(!v.safe());
    // Equal tokens are a break too.
    let mut h = History::new();
    h.hold(0, (0, 10), 5, ok(1)).hold(1, (20, 30), 5, ok(2));
    assert_eq!(h.check(&[], 40).token_breaks.len(), 1);
}

/// Two holds one after the other that both stored 1: the second read a value from before
/// the first write (a register or lock that lost state), so the first update was lost.
#[test]
fn a_lost_update_is_found() {
    let mut h = History::new();
    h.hold(0, (0, 10), 1, ok(1)).hold(1, (20, 30), 2, ok(1));
    let v = h.check(&[], 40);
    assert_eq!(v.lost_updates.len(), 1, "{v:?}");
    assert_eq!((v.lost_updates[0].hold, v.updates_lost()), (1, 1));
    assert!(v.overlaps.is_empty() && v.stale_writes.is_empty());
    assert!(!v.safe());
}

/// An acquire that failed with an unknown outcome, and one cut short by a kill, are counted;
/// the killed client's hold ends at the kill.
/// A stale write that sets the register back from 3 to 1 erases two updates, charged to it;
/// the writes after it, which read what it stored, are not to blame.
#[test]
fn a_stale_write_is_charged_with_the_updates_it_erased() {
    let mut h = History::new();
    let stale = Write::Accepted {
        value: 1,
        stale: true,
    };
    h.hold(0, (0, 100), 1, stale)
        .hold(1, (20, 30), 2, ok(1))
        .hold(2, (31, 40), 3, ok(2))
        .hold(1, (41, 50), 4, ok(3))
        .hold(2, (101, 110), 5, ok(2));
    let v = h.check(&[], 200);
    assert_eq!(v.lost_updates.len(), 1, "{v:?}");
    assert_eq!(v.lost_updates[0].hold, 0);
    assert_eq!(v.updates_lost(), 3);
}

#[test]
fn acquires_with_unknown_outcome_are_counted() {
    let mut h = History::new();
    h.at(0, 0, Kind::AcquireCall { attempt: 1 })
        .at(
            5,
            0,
            Kind::AcquireUnknown {
                attempt: 1,
                error: "timed out".into(),
            },
        )
        .at(6, 1, Kind::AcquireCall { attempt: 1 })
        .at(
            7,
            2,
            Kind::Acquired {
                attempt: 1,
                token: 1,
            },
        )
        .at(9, 1, Kind::Killed)
        .at(12, 2, Kind::Killed);
    let v = h.check(&[], 40);
    assert_eq!(v.unknown_acquires, 2, "{v:?}");
    assert_eq!(v.holds.len(), 1);
    assert_eq!(v.holds[0].end, 12 * MS);
    assert!(v.safe());
}

#[test]
fn liveness_after_a_fault_is_measured_against_the_bound() {
    let mut h = History::new();
    h.hold(0, (0, 10), 1, ok(1)).hold(1, (500, 510), 2, ok(2));
    // Healed at 100 ms: acquired 401 ms later, within the 1 s bound.
    let v = h.check(&[100 * MS], 3_000);
    assert_eq!(v.recoveries[0].after, Some(401 * MS));
    assert!(v.live());
    // Healed at 600 ms: nothing for the 2.4 s left: a liveness failure.
    let v = h.check(&[600 * MS], 3_000);
    assert_eq!(v.recoveries[0].ok, Some(false), "{v:?}");
    assert!(!v.live() && v.safe());
    // Healed at 600 ms, the run ends at 1 s: not measured, not a failure.
    let v = h.check(&[600 * MS], 1_000);
    assert_eq!(v.recoveries[0].ok, None);
    assert!(v.live());
}

/// (g) Election observers: reports in increasing term order naming each term's leader pass;
/// a report that goes back in term, or names another leader for a term, is found.
#[test]
fn election_observers_out_of_order_or_naming_another_leader_are_found() {
    let observed = |term: u64, value: &str| Kind::Observed {
        term: Some(term),
        value: Some(value.to_owned()),
    };
    let mut h = History::new();
    h.hold(0, (0, 10), 1, ok(1)).hold(1, (12, 20), 2, ok(2));
    h.at(2, 2, observed(1, "0/100"))
        .at(
            11,
            2,
            Kind::Observed {
                term: None,
                value: None,
            },
        )
        .at(14, 2, observed(2, "1/101"));
    let v = h.check(&[], 40);
    assert!(v.safe(), "{v:?}");
    assert_eq!(v.observed, 3);

    h.at(15, 2, observed(1, "0/100"))
        .at(16, 3, observed(2, "0/100"));
    let v = h.check(&[], 40);
    assert!(!v.safe());
    let found: Vec<_> = v
        .observer_breaks
        .iter()
        .map(|b| (b.client, b.what))
        .collect();
    assert_eq!(found, [(2, "order"), (3, "leader")]);
}

/// A reader's checked read that stood, though a later writer had written (a control run):
/// the unfenced form of a reader overlapping a writer.
fn stood_stale(value: u64) -> Write {
    Write::Accepted { value, stale: true }
}

/// Read-write lock: readers share (no overlap between them), a writer after them is clean;
/// a reader paused past its lease overlaps a writer: fenced when its checked read was
/// refused, a violation when it stood. Readers are left out of (b), (c), (d) and the counts.
#[test]
fn readers_share_and_a_writer_overlapping_a_reader_is_found() {
    let mut h = History::new();
    h.part(1)
        .hold(0, (0, 20), 5, ok(0))
        .hold(1, (5, 25), 4, ok(0))
        .part(0)
        .hold(2, (30, 40), 6, ok(1));
    let v = h.check_by(100, Rule::ReadWrite);
    assert!(v.overlaps.is_empty() && v.safe(), "{v:?}");
    assert_eq!(v.writes, (1, 0), "readers' checked reads are not writes");
    // Reader 0 paused from 50 to 150; writer 2 takes the lock at 100 and writes.
    let mut h = History::new();
    h.part(1)
        .hold(0, (50, 150), 7, Write::Rejected)
        .part(0)
        .hold(2, (100, 110), 8, ok(1));
    let v = h.check_by(200, Rule::ReadWrite);
    assert_eq!(v.overlaps.len(), 1, "{v:?}");
    assert!(v.overlaps[0].fenced && v.safe(), "{v:?}");
    let mut h = History::new();
    h.part(1)
        .hold(0, (50, 150), 7, stood_stale(1))
        .part(0)
        .hold(2, (100, 110), 8, ok(1));
    let v = h.check_by(200, Rule::ReadWrite);
    assert_eq!(v.unfenced_overlaps(), 1, "{v:?}");
    assert!(
        v.stale_writes.is_empty() && v.lost_updates.is_empty(),
        "{v:?}"
    );
    assert!(!v.safe());
    // Two writers overlapping are checked as for the mutex.
    let mut h = History::new();
    h.hold(
        0,
        (0, 100),
        1,
        Write::Accepted {
            value: 1,
            stale: true,
        },
    )
    .hold(1, (50, 60), 2, ok(1));
    let v = h.check_by(200, Rule::ReadWrite);
    assert_eq!(v.unfenced_overlaps(), 1, "{v:?}");
    assert_eq!(v.stale_writes, vec![0]);
}

/// Semaphore of 2: two holders at once are no crowd and lose no update (they update the
/// register together by design); a third at the same time is a crowd, fenced when its write
/// was refused, a violation when all three were taken.
#[test]
fn more_than_n_permit_holders_at_once_is_a_crowd() {
    let mut h = History::new();
    h.hold(0, (0, 20), 1, ok(1))
        .hold(1, (5, 25), 2, ok(1))
        .hold(2, (30, 40), 3, ok(2));
    let v = h.check_by(100, Rule::Permits(2));
    assert!(v.crowds.is_empty() && v.overlaps.is_empty(), "{v:?}");
    assert!(v.lost_updates.is_empty() && v.safe(), "{v:?}");
    let three = |late: Write| {
        let mut h = History::new();
        h.hold(0, (0, 100), 1, late)
            .hold(1, (50, 70), 2, ok(1))
            .hold(2, (55, 75), 3, ok(2));
        h.check_by(200, Rule::Permits(2))
    };
    let v = three(Write::Rejected);
    assert!(
        !v.crowds.is_empty() && v.crowds.iter().all(|c| c.fenced),
        "{v:?}"
    );
    assert_eq!(v.crowds[0].holds.len(), 3);
    assert!(v.safe(), "{v:?}");
    let v = three(Write::Accepted {
        value: 3,
        stale: true,
    });
    assert!(v.unfenced_overlaps() >= 1, "{v:?}");
    assert_eq!(v.stale_writes, vec![0], "the register's own word");
    assert!(!v.safe());
    // The same three under a semaphore of 3 are fine.
    let mut h = History::new();
    h.hold(0, (0, 100), 1, ok(1))
        .hold(1, (50, 70), 2, ok(1))
        .hold(2, (55, 75), 3, ok(2));
    assert!(h.check_by(200, Rule::Permits(3)).safe());
}

/// Multi-lock: each lock is checked on its own events (tokens of two locks are never
/// compared); a violation on the second lock is found, its holds' indexes after the first's.
#[test]
fn a_multi_lock_is_checked_lock_by_lock() {
    let mut h = History::new();
    h.part(0)
        .hold(0, (0, 10), 100, ok(1))
        .hold(1, (12, 20), 101, ok(2))
        .part(1)
        .hold(0, (0, 10), 7, ok(1))
        .hold(1, (12, 20), 8, ok(2));
    let v = h.check_by(40, Rule::Multi(2));
    assert!(v.safe(), "{v:?}");
    assert_eq!((v.holds.len(), v.writes), (4, (4, 0)));
    assert!(
        v.token_breaks.is_empty(),
        "tokens of two locks compared: {v:?}"
    );
    // The second lock overlapped, both writes taken; the first lock fenced its late write.
    let mut h = History::new();
    h.part(0)
        .hold(0, (0, 100), 1, Write::Rejected)
        .hold(1, (50, 60), 2, ok(1))
        .part(1)
        .hold(
            0,
            (0, 100),
            1,
            Write::Accepted {
                value: 1,
                stale: true,
            },
        )
        .hold(1, (50, 60), 2, ok(1));
    let v = h.check_by(200, Rule::Multi(2));
    assert_eq!(v.overlaps.len(), 2, "{v:?}");
    assert_eq!(v.unfenced_overlaps(), 1, "{v:?}");
    let unfenced = v.overlaps.iter().find(|o| !o.fenced).unwrap();
    assert_eq!(v.holds[unfenced.holds.0].part, 1, "{v:?}");
    assert_eq!(v.stale_writes.len(), 1);
    assert_eq!(v.holds[v.stale_writes[0]].part, 1);
    // A kill (process-wide) ends the process's holds on both locks.
    let mut h = History::new();
    h.part(0)
        .at(0, 0, Kind::AcquireCall { attempt: 1 })
        .at(
            1,
            0,
            Kind::Acquired {
                attempt: 1,
                token: 1,
            },
        )
        .part(1)
        .at(0, 0, Kind::AcquireCall { attempt: 1 })
        .at(
            1,
            0,
            Kind::Acquired {
                attempt: 1,
                token: 1,
            },
        )
        .part(0)
        .at(5, 0, Kind::Killed);
    let v = h.check_by(40, Rule::Multi(2));
    assert_eq!(v.holds.len(), 2);
    assert!(v.holds.iter().all(|h| h.end == 5 * MS), "{v:?}");
}
