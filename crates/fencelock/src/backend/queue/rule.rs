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
    #[allow(dead_code)]
    All,
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
    fn decide<'a, E>(&self, ahead: &'a [E]) -> Decision<'a, E>;
}

/// The mutex: the first entry holds; the others wait, each on the one just before it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct First;

impl Rule for First {
    fn sight(&self) -> Sight {
        Sight::Ends
    }

    fn decide<'a, E>(&self, ahead: &'a [E]) -> Decision<'a, E> {
        match (ahead.first(), ahead.last()) {
            (Some(holder), Some(on)) => Decision::Waits { holder, on },
            _ => Decision::Holds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
