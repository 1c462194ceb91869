//! Who holds: a rule over the entries ahead of an attempt's own in the queue, as Curator's
//! drivers decide `getsTheLock(children, name, maxLeases)`.
//!
//! The mutex's rule is [`First`]: an attempt holds when nothing is ahead of it, and waits on
//! the entry just before its own. The primitives to come are other rules over the same
//! queue: a read-write lock's reader holds when no writer is ahead (and waits on the last
//! writer ahead), a writer when nothing is; a semaphore's attempt holds when fewer than `N`
//! entries are ahead (and waits on the one `N` places before it). A rule says what it needs
//! to see ([`Sight`]): the mutex only the first entry and the one just before (which etcd
//! reads with two one-key range reads, whatever the queue's length), the others every entry
//! ahead.

/// How much of the queue ahead of an attempt a rule needs to see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sight {
    /// The first entry and the one just before the attempt's own.
    Ends,
    /// Every entry ahead, in order.
    All,
}

/// What a rule may ask of an entry ahead: whether it excludes everyone behind it (a writer,
/// a mutex's or an election's entry) or only writers (a reader).
pub(crate) trait Queued {
    /// Whether the entry is exclusive (a writer); a reader's entry is not.
    fn exclusive(&self) -> bool;
}

/// What a rule decides for an attempt.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decision<'a, E> {
    /// It holds.
    Holds,
    /// It waits for `on` to go; `holder` is the first entry (the holding it queues behind).
    Waits { holder: &'a E, on: &'a E },
}

/// Decides, from the entries ahead of an attempt's own (in queue order, at least what
/// [`Rule::sight`] asks for), whether it holds, and otherwise which entry it waits on.
pub(crate) trait Rule: Send + Sync {
    /// What the rule needs to see of the queue.
    fn sight(&self) -> Sight;
    /// The decision over `ahead`.
    fn decide<'a, E: Queued>(&self, ahead: &'a [E]) -> Decision<'a, E>;
}

/// The mutex: the first entry holds; the others wait, each on the one just before it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct First;

impl Rule for First {
    fn sight(&self) -> Sight {
        Sight::Ends
    }

    fn decide<'a, E: Queued>(&self, ahead: &'a [E]) -> Decision<'a, E> {
        match (ahead.first(), ahead.last()) {
            (Some(holder), Some(on)) => Decision::Waits { holder, on },
            _ => Decision::Holds,
        }
    }
}

/// A read-write lock's reader: holds when no writer is ahead (readers ahead share with it);
/// otherwise waits on the last writer ahead (Curator watches the first: both are correct,
/// the last one wakes it once instead of once per writer).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Reader;

impl Rule for Reader {
    fn sight(&self) -> Sight {
        Sight::All
    }

    fn decide<'a, E: Queued>(&self, ahead: &'a [E]) -> Decision<'a, E> {
        match (ahead.first(), ahead.iter().rev().find(|e| e.exclusive())) {
            (Some(holder), Some(on)) => Decision::Waits { holder, on },
            _ => Decision::Holds,
        }
    }
}

/// A semaphore's permit: holds when fewer than N entries are ahead; otherwise it waits, with
/// `on` the entry N places before its own. Any entry ahead that goes may let it hold, so a
/// driver waits for any of them (etcd watches the range), not for `on` alone, and for N to
/// change (a raised N lets it hold). N is the
/// semaphore's number as last read ([`Permits::set`]): a resize applies to the waiters.
#[derive(Debug)]
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub(crate) struct Permits(std::sync::atomic::AtomicUsize);

#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
impl Permits {
    /// A rule of `n` permits.
    pub(crate) fn new(n: u32) -> Self {
        Self(std::sync::atomic::AtomicUsize::new(n as usize))
    }

    /// The semaphore's number the rule goes by.
    pub(crate) fn get(&self) -> u32 {
        let n = self.0.load(std::sync::atomic::Ordering::Relaxed);
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// The semaphore's number, as read with the queue.
    pub(crate) fn set(&self, n: u32) {
        self.0
            .store(n as usize, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Rule for Permits {
    fn sight(&self) -> Sight {
        Sight::All
    }

    fn decide<'a, E: Queued>(&self, ahead: &'a [E]) -> Decision<'a, E> {
        let n = self.0.load(std::sync::atomic::Ordering::Relaxed).max(1);
        match (
            ahead.first(),
            ahead.len().checked_sub(n).map(|at| &ahead[at]),
        ) {
            (Some(holder), Some(on)) => Decision::Waits { holder, on },
            _ => Decision::Holds,
        }
    }
}

/// Which entries of a queue hold, by the rule of their kinds: the first one, then every
/// reader with no writer ahead of it other than its own owner's (a downgrade's read entry
/// sits at its write entry's place, as Curator puts it). `same(a, b)`: one owner's.
pub(crate) fn holding<E: Queued>(queue: &[E], same: impl Fn(&E, &E) -> bool) -> usize {
    let mut held = 0;
    for (at, entry) in queue.iter().enumerate() {
        let blocked = queue[..at]
            .iter()
            .any(|e| (e.exclusive() || entry.exclusive()) && !same(e, entry));
        if at > 0 && blocked {
            break;
        }
        held += 1;
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test entry: odd numbers are writers.
    impl Queued for u8 {
        fn exclusive(&self) -> bool {
            self % 2 == 1
        }
    }

    #[test]
    fn readers_wait_for_the_last_writer_ahead_only() {
        assert_eq!(Reader.decide::<u8>(&[]), Decision::Holds);
        assert_eq!(Reader.decide(&[2, 4]), Decision::Holds);
        assert_eq!(
            Reader.decide(&[2, 5, 4, 7, 6]),
            Decision::Waits { holder: &2, on: &7 }
        );
    }

    #[test]
    fn permits_hold_among_the_first_n() {
        let three = Permits::new(3);
        assert_eq!(three.decide(&[1, 2]), Decision::Holds);
        assert_eq!(
            three.decide(&[1, 2, 3, 4]),
            Decision::Waits { holder: &1, on: &2 }
        );
        three.set(5);
        assert_eq!(three.decide(&[1, 2, 3, 4]), Decision::Holds);
    }

    #[test]
    fn the_holding_prefix_is_readers_up_to_a_writer() {
        let never = |_: &u8, _: &u8| false;
        assert_eq!(holding::<u8>(&[], never), 0);
        assert_eq!(holding(&[2, 4, 5, 6], never), 2);
        assert_eq!(holding(&[5, 4], never), 1);
        assert_eq!(holding(&[5, 4], |_, _| true), 2);
    }

    #[test]
    fn the_first_holds_and_the_others_wait_on_the_one_before() {
        assert_eq!(First.decide::<u8>(&[]), Decision::Holds);
        assert_eq!(First.decide(&[1]), Decision::Waits { holder: &1, on: &1 });
        assert_eq!(
            First.decide(&[1, 5, 7]),
            Decision::Waits { holder: &1, on: &7 }
        );
    }
}
