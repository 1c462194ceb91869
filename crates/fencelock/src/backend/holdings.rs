//! Re-entry, counted in the client, for the services whose lock entry belongs to a session
//! (ZooKeeper's node, etcd's key under the client's lease): per (lock, owner), the node or
//! key this client holds (its path), its token, and one id per hold (each guard's), so that
//! a stale guard never gives back a newer holding. A read-write lock's owner may hold both
//! sides at once (a downgrade), each its own node or key: the read side is a holding of its
//! own, keyed apart ([`Side`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::{Held, Kind, LockRequest, Released};
use crate::background::Background;
use crate::error::Error;
use crate::lease::{LeaseState, LostReason};

/// One holding: a lock node (key) of this session and the holds (guards) over it.
struct Holding {
    path: String,
    token: u64,
    holds: Vec<(u64, Weak<LeaseState>)>,
    /// The node's delete is on its way: no re-entry into it.
    closing: bool,
}

/// Which of an owner's holdings of one name: a read-write lock's read side, or the one
/// holding of every other kind (a mutex, an election, a write side, a permit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Side {
    /// The read side of a read-write lock.
    Read,
    /// Every other kind's holding.
    One,
}

impl Side {
    /// The side an acquire of `kind` takes.
    pub(crate) fn of(kind: Kind<'_>) -> Self {
        match kind {
            Kind::Read => Side::Read,
            _ => Side::One,
        }
    }
}

/// What giving back one hold does.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The hold is not (any more) one of this owner's holding.
    NotHeld,
    /// Holds are left.
    StillHeld(u64),
    /// It was the last hold of a holding whose entry the owner's other side keeps: that
    /// holding ended, its entry stays.
    Shared,
    /// It was the last hold: delete this node, then settle the holding
    /// ([`Holdings::settle`]).
    Last(Closing),
}

/// A holding whose last hold was given back: its node (key) is to be deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Closing {
    pub(crate) name: String,
    pub(crate) side: Side,
    pub(crate) owner: Arc<str>,
    pub(crate) path: String,
    pub(crate) token: u64,
}

/// Every holding of the client's session. One owner may have several holdings of one side
/// at once: two of its first acquires that ran together each made an entry (no re-entry
/// was there to find), and each keeps its own, named by its holds: a record is never
/// overwritten, so no guard is left without one.
#[derive(Default)]
pub(crate) struct Holdings {
    map: Mutex<HashMap<Key, Vec<Holding>>>,
}

/// A holding's key: lock, owner, side.
type Key = (String, Arc<str>, Side);
type Map = HashMap<Key, Vec<Holding>>;

fn key(name: &str, owner: &Arc<str>, side: Side) -> Key {
    (name.to_owned(), owner.clone(), side)
}

/// Both sides, the one holding of every other kind first.
const SIDES: [Side; 2] = [Side::One, Side::Read];

/// The owner's first holding of `side` in `map` that `matches`.
fn find<'m>(
    map: &'m mut Map,
    (name, owner, side): (&str, &Arc<str>, Side),
    matches: impl Fn(&Holding) -> bool,
) -> Option<&'m mut Holding> {
    map.get_mut(&key(name, owner, side))?
        .iter_mut()
        .find(|h| matches(h))
}

/// Removes the owner's holdings of `side` that `matches`, and the key once none is left.
fn remove(
    map: &mut Map,
    (name, owner, side): (&str, &Arc<str>, Side),
    matches: impl Fn(&Holding) -> bool,
) -> Vec<Holding> {
    let key = key(name, owner, side);
    let Some(list) = map.get_mut(&key) else {
        return Vec::new();
    };
    let (gone, kept) = std::mem::take(list).into_iter().partition(|h| matches(h));
    *list = kept;
    if list.is_empty() {
        map.remove(&key);
    }
    gone
}

impl Holdings {
    fn map(&self) -> std::sync::MutexGuard<'_, Map> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Re-enters the owner's holding, if it has one that is not being deleted: `make` builds
    /// the new hold's lease from the holding's token. Returns it and the hold count.
    pub(crate) fn reenter(
        &self,
        side: (&str, &Arc<str>, Side),
        make: impl FnOnce(u64) -> (u64, Arc<LeaseState>),
    ) -> Option<(Arc<LeaseState>, u64)> {
        let mut map = self.map();
        let holding = find(&mut map, side, |h| !h.closing)?;
        let (id, lease) = make(holding.token);
        holding.holds.push((id, Arc::downgrade(&lease)));
        Some((lease, holding.holds.len() as u64))
    }

    /// The start of an attempt: while the session is `live`, a re-entry into this owner's
    /// holding (`Ok(Some)`, with a hold made by `lease` from the holding's token). Otherwise
    /// the session must be usable (`usable`), and when it was not heard from within its
    /// timeout an owner that holds the lock is refused (`unheard`): its holding may be gone,
    /// and a second node or key of this owner would queue behind it. A read-write lock's
    /// owner that holds only the read side and asks for the write side is refused
    /// (`Error::UpgradeRefused`): its writer would wait for its own reader. (A holding whose
    /// release failed, in a live session, is no reason to refuse: its node or key is deleted
    /// again in the background, and a new one waits for that.) `Ok(None)`: a new attempt.
    pub(crate) fn start(
        &self,
        live: bool,
        usable: Result<(), Error>,
        request: &LockRequest<'_>,
        lease: impl FnOnce(u64) -> Arc<LeaseState>,
        unheard: impl FnOnce() -> Error,
    ) -> Result<Option<Held>, Error> {
        let (name, owner) = (&request.lock.name, request.owner);
        let side = Side::of(request.kind);
        if live {
            let made = |token| {
                let lease = lease(token);
                (lease.hold.id, lease)
            };
            if let Some((lease, count)) = self.reenter((name, owner, side), made) {
                return Ok(Some(Held { lease, count }));
            }
        }
        if request.kind == Kind::Write && self.map().contains_key(&key(name, owner, Side::Read)) {
            return Err(Error::UpgradeRefused {
                lock: name.clone(),
                owner: owner.to_string(),
            });
        }
        usable?;
        if !live && self.holds(name, owner) {
            return Err(unheard());
        }
        Ok(None)
    }

    /// A new holding with its first hold, beside the owner's others (see [`Holdings`]).
    /// Those of its side being deleted go: a new entry of the owner's that holds shows
    /// theirs gone or going, and their late settlement must find nothing to end (on etcd
    /// the new key is the old one's, with another token).
    pub(crate) fn insert(
        &self,
        side: (&str, &Arc<str>, Side),
        path: String,
        lease: &Arc<LeaseState>,
    ) {
        let holding = Holding {
            path,
            token: lease.hold.token,
            holds: vec![(lease.hold.id, Arc::downgrade(lease))],
            closing: false,
        };
        let mut map = self.map();
        remove(&mut map, side, |h| h.closing);
        let (name, owner, side) = side;
        map.entry(key(name, owner, side)).or_default().push(holding);
    }

    /// The node or key and the token of the owner's live (not closing) holding of `side`,
    /// if any: a downgrade puts its read entry at its write entry's place (ZooKeeper), or
    /// keeps the write entry as its own (etcd, see [`Holdings::give_back`]).
    pub(crate) fn path(&self, name: &str, owner: &Arc<str>, side: Side) -> Option<(String, u64)> {
        let mut map = self.map();
        let holding = find(&mut map, (name, owner, side), |h| !h.closing)?;
        Some((holding.path.clone(), holding.token))
    }

    /// Gives back hold `id` (`None`: the newest of the owner's first holding, the write side
    /// before the read side) of the owner's holdings of `name`. The last hold of a holding
    /// whose entry the owner's other side holds too (an etcd downgrade's read side keeps the
    /// write key) ends that holding only: the entry stays for the other side, which deletes
    /// it with its own last hold.
    pub(crate) fn give_back(&self, name: &str, owner: &Arc<str>, id: Option<u64>) -> Step {
        let mut map = self.map();
        let has = |h: &Holding| id.is_none_or(|id| h.holds.iter().any(|(i, _)| *i == id));
        let side = SIDES
            .into_iter()
            .find(|side| find(&mut map, (name, owner, *side), has).is_some());
        let Some(side) = side else {
            return Step::NotHeld;
        };
        let Some(holding) = find(&mut map, (name, owner, side), has) else {
            return Step::NotHeld;
        };
        if holding.closing {
            // Its last hold was given back already (a guard dropped after a failed release
            // comes here): one delete, and one settlement, per holding.
            return Step::NotHeld;
        }
        let at = match id {
            Some(id) => holding.holds.iter().position(|(h, _)| *h == id),
            None => holding.holds.len().checked_sub(1),
        };
        let Some(at) = at else {
            return Step::NotHeld;
        };
        if holding.holds.len() > 1 {
            holding.holds.remove(at);
            return Step::StillHeld(holding.holds.len() as u64);
        }
        let (path, token) = (holding.path.clone(), holding.token);
        let other = match side {
            Side::One => Side::Read,
            Side::Read => Side::One,
        };
        let same = |h: &Holding| h.path == path && h.token == token && !h.closing;
        if find(&mut map, (name, owner, other), same).is_some() {
            remove(&mut map, (name, owner, side), same);
            return Step::Shared;
        }
        let Some(holding) = find(&mut map, (name, owner, side), same) else {
            return Step::NotHeld;
        };
        holding.closing = true;
        Step::Last(Closing {
            name: name.to_owned(),
            side,
            owner: owner.clone(),
            path,
            token,
        })
    }

    /// The node of a [`Step::Last`] is gone: that holding ends, and no other (on etcd a newer
    /// holding has the same key, with another token). Returns whether it was still there.
    pub(crate) fn end(&self, closing: &Closing) -> bool {
        let mut map = self.map();
        let same = |h: &Holding| h.closing && h.path == closing.path && h.token == closing.token;
        let side = (closing.name.as_str(), &closing.owner, closing.side);
        !remove(&mut map, side, same).is_empty()
    }

    /// Settles a [`Step::Last`] with the outcome of its delete (`Ok(true)`: deleted,
    /// `Ok(false)`: gone already, with its session or by a forced unlock). A failed delete
    /// leaves the holding closed: its node may be gone (the reply was lost, and another client
    /// may hold the lock by now), so it is never re-entered; the caller deletes it again in
    /// the background ([`delete_later`]) and a new acquire of the owner makes a new node.
    pub(crate) fn settle<E>(
        &self,
        closing: &Closing,
        deleted: Result<bool, E>,
    ) -> Result<Released, E> {
        if deleted.is_ok() {
            self.end(closing);
        }
        deleted.map(|done| match done {
            true => Released::Released,
            false => Released::NotHeld,
        })
    }

    /// The holding of node `path` with `token` is gone without our delete (a forced unlock):
    /// its holds are lost. Matched by its token too, never by the path alone: on etcd a newer
    /// holding of the owner has the same key. Returns whether a holding was removed.
    pub(crate) fn vanished(&self, name: &str, owner: &Arc<str>, path: &str, token: u64) -> bool {
        let holdings: Vec<Holding> = {
            let mut map = self.map();
            let same = |h: &Holding| h.path == path && h.token == token && !h.closing;
            SIDES
                .into_iter()
                .flat_map(|side| remove(&mut map, (name, owner, side), same))
                .collect()
        };
        let removed = !holdings.is_empty();
        for (_, lease) in holdings.into_iter().flat_map(|h| h.holds) {
            if let Some(lease) = lease.upgrade() {
                lease.fire_lost(LostReason::Deleted);
            }
        }
        removed
    }

    /// Every holding that is not being deleted: (lock, owner, path, token).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn all(&self) -> Vec<(String, Arc<str>, String, u64)> {
        let map = self.map();
        map.iter()
            .flat_map(|((n, o, _), list)| list.iter().map(move |h| (n, o, h)))
            .filter(|(_, _, h)| !h.closing)
            .map(|(n, o, h)| (n.clone(), o.clone(), h.path.clone(), h.token))
            .collect()
    }

    /// Whether the owner holds the node `path` and is not deleting it.
    #[cfg_attr(not(feature = "zookeeper"), allow(dead_code))]
    pub(crate) fn live(&self, name: &str, owner: &Arc<str>, path: &str) -> bool {
        let mut map = self.map();
        let same = |h: &Holding| h.path == path && !h.closing;
        SIDES
            .into_iter()
            .any(|side| find(&mut map, (name, owner, side), same).is_some())
    }

    /// The owner's hold count on the node `path`, if this client holds it.
    pub(crate) fn count(&self, name: &str, path: &str) -> Option<u64> {
        let map = self.map();
        map.iter()
            .filter(|((n, _, _), _)| n == name)
            .flat_map(|(_, list)| list)
            .find(|h| h.path == path)
            .map(|h| h.holds.len() as u64)
    }

    /// Whether this client holds the lock as `owner`.
    pub(crate) fn holds(&self, name: &str, owner: &Arc<str>) -> bool {
        let map = self.map();
        SIDES
            .into_iter()
            .any(|side| map.contains_key(&key(name, owner, side)))
    }
}

/// Gives back hold `id` (`None`: the owner's newest) of the owner's holding in `holdings`;
/// the last one deletes the holding's node or key with `delete` (which settles the holding,
/// [`Holdings::settle`]). A delete that fails, or whose caller stops waiting for it (a release
/// future dropped or timed out before the server answered: the request may never have left),
/// goes on in the background ([`delete_later`]) until the node or key is gone or the session
/// ends; the holding is never re-entered meanwhile (it is closing).
pub(crate) async fn give_back<I, F, Fut, E>(
    service: &Arc<I>,
    holdings: &Holdings,
    background: &Background,
    hold: (&str, &Arc<str>, Option<u64>),
    delete: F,
) -> Result<Released, E>
where
    I: Send + Sync + 'static,
    F: Fn(Arc<I>, Closing) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<Released, E>> + Send,
{
    let (name, owner, id) = hold;
    let closing = match holdings.give_back(name, owner, id) {
        Step::NotHeld => return Ok(Released::NotHeld),
        Step::StillHeld(count) => return Ok(Released::StillHeld { count }),
        Step::Shared => return Ok(Released::Released),
        Step::Last(closing) => closing,
    };
    let later = {
        let (weak, closing, delete) = (Arc::downgrade(service), closing.clone(), delete.clone());
        move || {
            delete_later(background, weak, move |service| {
                let done = delete(service, closing.clone());
                async move { done.await.is_ok() }
            });
        }
    };
    let mut unfinished = Unfinished(Some(later));
    let released = delete(service.clone(), closing).await;
    if released.is_ok() {
        unfinished.0 = None;
    }
    released
}

/// What to do if a closing holding's delete did not succeed: run when dropped so (it failed,
/// or its future was dropped), unless cleared.
struct Unfinished<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> Drop for Unfinished<F> {
    fn drop(&mut self) {
        if let Some(later) = self.0.take() {
            later();
        }
    }
}

/// How long a background delete pauses between tries.
const DELETE_AGAIN: Duration = Duration::from_millis(100);

/// Tries `delete` again (a holding's node or key whose delete failed) until it says it is
/// done: deleted, gone already, or gone with the session or lease that ended; `delete` ends
/// the holding then ([`Holdings::settle`]). Runs as the client's tracked background work, so
/// that `Client::close` waits for it (and says so if it is still under way); holds the
/// service only by `Weak`, so it stops when the client goes (the session, and the node, go
/// with it).
pub(crate) fn delete_later<I, F, Fut>(background: &Background, service: Weak<I>, delete: F)
where
    I: Send + Sync + 'static,
    F: Fn(Arc<I>) -> Fut + Send + 'static,
    Fut: Future<Output = bool> + Send,
{
    background.finish(async move {
        loop {
            let Some(service) = service.upgrade() else {
                return;
            };
            if delete(service).await {
                return;
            }
            tokio::time::sleep(DELETE_AGAIN).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::lease::Hold;
    use crate::name::LockName;

    fn lease(id: u64, token: u64) -> Arc<LeaseState> {
        let hold = Hold {
            lock: Arc::new(LockName::new("l").unwrap()),
            owner: "o".into(),
            lease: Duration::from_secs(10),
            renew: false,
            id,
            token,
        };
        let later = Instant::now() + Duration::from_secs(10);
        Arc::new(LeaseState::new(hold, later, later))
    }

    /// A holding whose delete failed is closed: no re-entry, no second delete; and the late
    /// end of its delete leaves a newer holding with the same key (etcd) alone.
    #[tokio::test]
    async fn a_closing_holding_is_neither_reentered_nor_given_back_twice() {
        let (holdings, owner) = (Holdings::default(), Arc::<str>::from("o"));
        let first = lease(1, 100);
        holdings.insert(("l", &owner, Side::One), "key".into(), &first);
        let Step::Last(closing) = holdings.give_back("l", &owner, Some(1)) else {
            panic!("the only hold is the last");
        };
        let failed: Result<bool, ()> = Err(());
        assert_eq!(holdings.settle(&closing, failed), Err(()));
        let side = ("l", &owner, Side::One);
        assert!(holdings.reenter(side, |_| unreachable!()).is_none());
        assert_eq!(holdings.give_back("l", &owner, Some(1)), Step::NotHeld);
        assert_eq!(holdings.give_back("l", &owner, None), Step::NotHeld);
        let second = lease(2, 200);
        holdings.insert(("l", &owner, Side::One), "key".into(), &second);
        assert!(
            !holdings.end(&closing),
            "the old delete ends only its own holding"
        );
        assert!(holdings.live("l", &owner, "key"));
        assert_eq!(
            holdings.give_back("l", &owner, Some(2)),
            Step::Last(Closing {
                name: "l".into(),
                side: Side::One,
                owner: owner.clone(),
                path: "key".into(),
                token: 200,
            })
        );
    }
}
