//! Each primitive's recipe, decided once from the request's kind, as Curator picks a
//! primitive's driver when it builds it: which primitive the name becomes, the rule that
//! says who holds ([`Holds`]), whether the entry shares with readers, whether an owner's
//! read side sits at its write entry's place (a downgrade), the permit count to store or
//! check, and the value the entry stores. A session service reads the recipe, never the
//! kind: it keeps only its driver and a table from [`Primitive`] to its layout (Curator's
//! node marks, etcd's keys).
//!
//! | kind            | primitive | rule                    | entry   | downgrade | N        | stores     |
//! |-----------------|-----------|-------------------------|---------|-----------|----------|------------|
//! | mutex           | mutex     | first                   | alone   | no        | no       | owner id   |
//! | election        | election  | first                   | alone   | no        | no       | its value  |
//! | read side       | rw lock   | no writer ahead         | shares  | yes       | no       | owner id   |
//! | write side      | rw lock   | first                   | own key | no        | no       | owner id   |
//! | permit of N     | semaphore | fewer than N ahead      | own key | no        | checked  | owner id   |
//! | resize to N     | semaphore | fewer than N ahead      | own key | no        | stored   | owner id   |

use super::rule::{Decision, First, Permits, Queued, Reader, Rule, Sight};
use crate::backend::{Kind, LockRequest};

/// The primitive a name is: one name, one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Primitive {
    Mutex,
    Election,
    RwLock,
    Semaphore,
}

impl Primitive {
    /// Its name in `Error::PrimitiveMismatch`'s words.
    pub(crate) fn words(self) -> &'static str {
        match self {
            Primitive::Mutex => "mutex",
            Primitive::Election => "election",
            Primitive::RwLock => "read-write lock",
            Primitive::Semaphore => "semaphore",
        }
    }
}

/// Who holds: the rule of the attempt's kind.
#[derive(Debug)]
pub(crate) enum Holds {
    /// The first entry (a mutex, an election, a writer).
    First,
    /// No writer ahead (a reader).
    Reader,
    /// Fewer than N ahead (a permit), N as last read.
    Permits(Permits),
}

impl Rule for Holds {
    fn sight(&self) -> Sight {
        match self {
            Holds::First => First.sight(),
            Holds::Reader => Reader.sight(),
            Holds::Permits(p) => p.sight(),
        }
    }

    fn decide<'a, E: Queued>(&self, ahead: &'a [E]) -> Decision<'a, E> {
        match self {
            Holds::First => First.decide(ahead),
            Holds::Reader => Reader.decide(ahead),
            Holds::Permits(p) => p.decide(ahead),
        }
    }
}

/// One attempt's recipe (see the module's table).
#[derive(Debug)]
pub(crate) struct Recipe<'a> {
    pub(crate) primitive: Primitive,
    pub(crate) holds: Holds,
    /// The entry shares with the readers around it (a reader's); every other excludes.
    pub(crate) reader: bool,
    /// An owner holding the write side takes this side at its write entry's place.
    pub(crate) downgrades: bool,
    /// The semaphore's N to check, and whether it is stored (a resize) whatever is there.
    pub(crate) permits: Option<(u32, bool)>,
    /// What the entry stores: an election's value, every other kind's owner id.
    pub(crate) value: &'a str,
}

impl<'a> Recipe<'a> {
    /// The recipe of `request`'s kind.
    pub(crate) fn of(request: &LockRequest<'a>) -> Self {
        let owner: &'a str = request.owner;
        let (primitive, holds, value) = match request.kind {
            Kind::Mutex => (Primitive::Mutex, Holds::First, owner),
            Kind::Leader { value } => (Primitive::Election, Holds::First, value),
            Kind::Read => (Primitive::RwLock, Holds::Reader, owner),
            Kind::Write => (Primitive::RwLock, Holds::First, owner),
            Kind::Permit { permits, .. } => (
                Primitive::Semaphore,
                Holds::Permits(Permits::new(permits)),
                owner,
            ),
        };
        let permits = match request.kind {
            Kind::Permit { permits, resize } => Some((permits, resize)),
            _ => None,
        };
        Self {
            primitive,
            holds,
            reader: request.kind == Kind::Read,
            downgrades: request.kind == Kind::Read,
            permits,
            value,
        }
    }

    /// One entry per owner, and the first holds: a mutex, an election (the fast path of
    /// ZooKeeper, the slot of etcd). The others make an entry per attempt.
    pub(crate) fn alone(&self) -> bool {
        matches!(self.primitive, Primitive::Mutex | Primitive::Election)
    }

    /// A semaphore's resize.
    pub(crate) fn resizes(&self) -> bool {
        self.permits.is_some_and(|(_, resize)| resize)
    }

    /// The semaphore's rule, told the stored N as it is read.
    pub(crate) fn permits_rule(&self) -> Option<&Permits> {
        match &self.holds {
            Holds::Permits(p) => Some(p),
            _ => None,
        }
    }
}
