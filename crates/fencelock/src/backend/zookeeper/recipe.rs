//! Apache Curator's `InterProcessMutex` and `LeaderLatch` layouts, written for fencelock.
//!
//! A lock named N is the node `<base>/N` (a container node); each attempt creates an
//! ephemeral sequential child `_c_<guid>-lock-<10 digits>` holding the owner id. The lowest
//! sequence holds the lock; a waiter watches only the node just before its own, so a release
//! wakes one waiter, in arrival order. Creation is protected: after a lost reply, the attempt
//! finds its node again by its GUID (and its `ephemeralOwner`), never making a second one.
//!
//! An election named N is the same folder with `LeaderLatch`'s mark: each campaign creates
//! `_c_<guid>-latch-<10 digits>` holding the value it advertises, and the lowest `latch-`
//! sequence leads. The two marks are two queues that ignore each other (Curator's recipes do
//! not look at the other's nodes), so an attempt that finds the other kind's node ahead of
//! its own fails (see `super::driver`).
//!
//! A read-write lock named N is the same folder with `InterProcessReadWriteLock`'s nodes:
//! `_c_<guid>-__READ__<10 digits>` and `_c_<guid>-__WRIT__<10 digits>`, one queue sorted by
//! sequence across both kinds. A reader holds when no writer is ahead of it, a writer when it
//! is first. A writer that takes the read side (a downgrade) creates, as Curator does since
//! CURATOR-621, a plain ephemeral `_c_<guid>-__READ__<its write node's 10 digits>`: the read
//! node sits at the write node's place, so no writer that queued meanwhile gets ahead of it.

use std::sync::Arc;

use tokio::time::Instant;
use zookeeper_client as zk;

use super::session::Session;
use crate::backend::queue::recipe::{Primitive, Recipe};

/// Whether a request failed with the connection (lost, silent past the response timeout, or
/// found dead by `zookeeper-client`, which reports that and I/O failures as `Custom`), not
/// with an answer: the request may or may not have run, and the session may well live on.
pub(crate) fn connection_lost(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::ConnectionLoss | zk::Error::Timeout | zk::Error::Custom(_)
    )
}

/// The ACL of every node fencelock creates.
const ACLS: zk::Acls<'static> = zk::Acls::anyone_all();

/// How a child's name ends before its sequence: its kind, as Curator names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mark {
    /// A mutex's attempt (`InterProcessMutex`): `-lock-`.
    Lock,
    /// An election's participant (`LeaderLatch`): `-latch-`.
    Latch,
    /// A read-write lock's reader (`InterProcessReadWriteLock`): `-__READ__`.
    Read,
    /// A read-write lock's writer: `-__WRIT__` (Curator's name: as long as `__READ__`).
    Write,
    /// A semaphore's lease (`InterProcessSemaphoreV2`, in its `leases` folder): `-lease-`.
    Lease,
}

/// Every mark, in the order a child's name is tried against them.
const MARKS: [Mark; 5] = [
    Mark::Lock,
    Mark::Latch,
    Mark::Read,
    Mark::Write,
    Mark::Lease,
];

/// The children of a semaphore's folder (`InterProcessSemaphoreV2`): its mutex and its
/// leases. A folder that has them is a semaphore.
pub(crate) const SEMAPHORE_CHILDREN: [&str; 2] = ["locks", "leases"];

impl Mark {
    /// The mark of an attempt of `recipe`: the layout table from primitive to node.
    pub(crate) fn of(recipe: &Recipe<'_>) -> Self {
        match (recipe.primitive, recipe.reader) {
            (Primitive::Election, _) => Mark::Latch,
            (Primitive::RwLock, true) => Mark::Read,
            (Primitive::RwLock, false) => Mark::Write,
            // A permit's queue is the semaphore's mutex (`semaphore`).
            (Primitive::Mutex | Primitive::Semaphore, _) => Mark::Lock,
        }
    }

    /// The text before the sequence.
    pub(crate) fn text(self) -> &'static str {
        match self {
            Mark::Lock => "lock-",
            Mark::Latch => "latch-",
            Mark::Read => "__READ__",
            Mark::Write => "__WRIT__",
            Mark::Lease => "lease-",
        }
    }

    /// The primitive whose queue the mark's nodes are, in `Error::PrimitiveMismatch`'s
    /// words: the nodes of one primitive are one queue, another's are refused.
    pub(crate) fn primitive(self) -> &'static str {
        match self {
            Mark::Lock => "mutex",
            Mark::Latch => "election",
            Mark::Read | Mark::Write => "read-write lock",
            Mark::Lease => "semaphore",
        }
    }

    /// The mark and sequence number of a child, if it is a queue's node.
    pub(crate) fn of_child(child: &str) -> Option<(Mark, u64)> {
        MARKS
            .into_iter()
            .find_map(|m| sequence(child, m).map(|seq| (m, seq)))
    }
}

/// The primitive a child of a lock's folder belongs to (`"semaphore"` for the folders of
/// `InterProcessSemaphoreV2`), if it is one fencelock knows.
pub(crate) fn primitive_of(child: &str) -> Option<&'static str> {
    if SEMAPHORE_CHILDREN.contains(&child) {
        return Some("semaphore");
    }
    Mark::of_child(child).map(|(m, _)| m.primitive())
}

/// The sequence number of a child of kind `mark`, as Curator sorts them (after the last
/// mark).
pub(crate) fn sequence(child: &str, mark: Mark) -> Option<u64> {
    let mark = mark.text();
    let at = child.rfind(mark)? + mark.len();
    let digits = &child[at..];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The children of `mark`'s primitive in sequence order (other children are left out).
pub(crate) fn sorted(children: Vec<String>, mark: Mark) -> Vec<String> {
    split(children, mark).0
}

/// The queue's children of every kind in sequence order (other children are left out).
pub(crate) fn sorted_all(children: Vec<String>) -> Vec<String> {
    let mut all: Vec<(u64, String)> = children
        .into_iter()
        .filter_map(|c| Mark::of_child(&c).map(|(_, s)| (s, c)))
        .collect();
    all.sort();
    all.into_iter().map(|(_, c)| c).collect()
}

/// The children of `mark`'s primitive in sequence order (a read-write lock's readers and
/// writers together, as Curator sorts them), and another primitive's first child with its
/// sequence, if any (a semaphore's `locks`/`leases` folders count as sequence 0: ahead of
/// every node).
pub(crate) fn split(children: Vec<String>, mark: Mark) -> (Vec<String>, Option<(u64, String)>) {
    let mut mine: Vec<(u64, String)> = Vec::new();
    let mut other: Option<(u64, String)> = None;
    for child in children {
        let found = match Mark::of_child(&child) {
            Some((m, seq)) if m.primitive() == mark.primitive() => {
                mine.push((seq, child));
                continue;
            }
            Some((_, seq)) => seq,
            None if SEMAPHORE_CHILDREN.contains(&child.as_str()) => 0,
            None => continue,
        };
        if other.as_ref().is_none_or(|(s, _)| found < *s) {
            other = Some((found, child));
        }
    }
    mine.sort();
    (mine.into_iter().map(|(_, c)| c).collect(), other)
}

/// A fresh GUID in the form Curator uses (a random UUID).
pub(crate) fn guid() -> String {
    let v: u128 = rand::random();
    let h = format!("{v:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// A node this session created: its path, its creation zxid (the fencing token) and its
/// sequence number (`-1` if the name has none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Node {
    pub(crate) path: String,
    pub(crate) czxid: i64,
    pub(crate) seq: i64,
}

impl Node {
    /// The node's name within the lock's folder.
    pub(crate) fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

/// Creates the lock's folder (a container) and, if missing, the base path.
async fn make_dir(session: &Session, dir: &str) -> Result<(), zk::Error> {
    let container = zk::CreateMode::Container.with_acls(ACLS);
    match session.call(|zk| zk.create(dir, &[], &container)).await {
        Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
        Err(zk::Error::NoNode) => {
            let base = dir.rsplit_once('/').map_or("/", |(b, _)| b);
            let persistent = zk::CreateMode::Persistent.with_acls(ACLS);
            session.call(|zk| zk.mkdir(base, &persistent)).await?;
            match session.call(|zk| zk.create(dir, &[], &container)).await {
                Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// The queue's children (of one kind) in order, listed with a watch on the folder: it fires
/// at the next change of the folder (a node created or deleted).
pub(crate) struct Listing {
    pub(crate) children: Vec<String>,
    /// The other kind's first child, with its sequence (see [`split`]).
    pub(crate) other: Option<(u64, String)>,
    pub(crate) watcher: zk::OneshotWatcher,
}

impl Listing {
    fn new(children: Vec<String>, mark: Mark, watcher: zk::OneshotWatcher) -> Self {
        let (children, other) = split(children, mark);
        Self {
            children,
            other,
            watcher,
        }
    }
}

/// Lists the folder's children of kind `mark`, watching the folder.
pub(crate) async fn list(session: &Session, dir: &str, mark: Mark) -> Result<Listing, zk::Error> {
    let (children, watcher) = session.call(|zk| zk.list_and_watch_children(dir)).await?;
    Ok(Listing::new(children, mark, watcher))
}

/// The sequence number at the end of a lock or latch node's path (`-1` if none).
pub(crate) fn seq_of(path: &str) -> i64 {
    Mark::of_child(path)
        .and_then(|(_, s)| i64::try_from(s).ok())
        .unwrap_or(-1)
}

/// What an attempt's node is: its kind, and the data it stores (the owner id, or the value
/// a participant advertises).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry<'a> {
    pub(crate) mark: Mark,
    pub(crate) data: &'a [u8],
}

/// Creates the attempt's node and, if `list`, lists the queue in one round trip: the listing
/// is sent right behind the create, and a session's requests run in order, so it shows the
/// new node (three requests per uncontended pair: create, list, delete; two without the
/// listing, see `quiet`). Creation is protected: after a lost reply, the node is found by
/// its GUID (ours only if its `ephemeralOwner` is this session) before trying again. The
/// listing is `None` when it was not asked for or could not be read with the create.
pub(crate) async fn create(
    session: &Session,
    dir: &str,
    guid: &str,
    entry: Entry<'_>,
    list: bool,
) -> Result<(Node, Option<Listing>), zk::Error> {
    let prefix = format!("{dir}/_c_{guid}-{}", entry.mark.text());
    let mode = zk::CreateMode::EphemeralSequential.with_acls(ACLS);
    let mut tries = 0;
    loop {
        tries += 1;
        let sent = Instant::now();
        let created = session.zk.create(&prefix, entry.data, &mode);
        let listed = list.then(|| session.zk.list_and_watch_children(dir));
        let listed = async {
            match listed {
                Some(listed) => Some(session.answer(sent, listed).await),
                None => None,
            }
        };
        let (created, listed) = tokio::join!(session.answer(sent, created), listed);
        match created {
            Ok((stat, seq)) => {
                let node = Node {
                    path: format!("{prefix}{seq}"),
                    czxid: stat.czxid,
                    seq: seq.into_i64(),
                };
                let listing = listed
                    .and_then(Result::ok)
                    .map(|(children, watcher)| Listing::new(children, entry.mark, watcher));
                return Ok((node, listing));
            }
            Err(zk::Error::NoNode) if tries < 4 => make_dir(session, dir).await?,
            Err(e) if connection_lost(&e) => {
                // Requests of one session run in order: this listing runs after the create,
                // so it sees the node if the create ran.
                if let Some(node) = find(session, dir, guid).await? {
                    return Ok((node, None));
                }
                if tries >= 3 {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Creates a downgrade's read node: a plain ephemeral `_c_<guid>-__READ__<digits>`, with
/// `digits` its write node's sequence (Curator's `getSortingSequence`). Protected as
/// [`create`] is: after a lost reply, found again by its GUID.
pub(crate) async fn create_at(
    session: &Session,
    dir: &str,
    guid: &str,
    data: &[u8],
    digits: &str,
) -> Result<Node, zk::Error> {
    let path = format!("{dir}/_c_{guid}-{}{digits}", Mark::Read.text());
    let mode = zk::CreateMode::Ephemeral.with_acls(ACLS);
    for _ in 0..3 {
        match session.call(|zk| zk.create(&path, data, &mode)).await {
            Ok((stat, _)) => {
                let seq = seq_of(&path);
                return Ok(Node {
                    path,
                    czxid: stat.czxid,
                    seq,
                });
            }
            Err(e) if connection_lost(&e) => {
                if let Some(node) = find(session, dir, guid).await? {
                    return Ok(node);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Err(zk::Error::ConnectionLoss)
}

/// The node of attempt `guid` that this session owns, if there is one.
pub(crate) async fn find(
    session: &Session,
    dir: &str,
    guid: &str,
) -> Result<Option<Node>, zk::Error> {
    let mark = format!("_c_{guid}-");
    let children = match session.call(|zk| zk.list_children(dir)).await {
        Err(zk::Error::NoNode) => return Ok(None),
        other => other?,
    };
    for child in children.into_iter().filter(|c| c.starts_with(&mark)) {
        let path = format!("{dir}/{child}");
        match session.call(|zk| zk.get_data(&path)).await {
            Ok((_, stat)) if stat.ephemeral_owner == session.id => {
                let seq = seq_of(&path);
                return Ok(Some(Node {
                    path,
                    czxid: stat.czxid,
                    seq,
                }));
            }
            Ok(_) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// Removes what attempt `guid` may have left: its node if known, else whatever node of this
/// session carries its GUID. A node already gone is fine.
pub(crate) async fn undo(
    session: &Session,
    dir: &str,
    guid: &str,
    node: Option<&str>,
) -> Result<(), zk::Error> {
    let path = match node {
        Some(path) => path.to_owned(),
        None => match find(session, dir, guid).await? {
            Some(node) => node.path,
            None => return Ok(()),
        },
    };
    match session.call(|zk| zk.delete(&path, None)).await {
        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
        Err(e) => Err(e),
    }
}

/// [`undo`], tried again after a connection loss or a response timeout for as long as the
/// session lives: a node left by an attempt nobody waits for would otherwise keep the lock,
/// once it is the lowest, held by nobody until the session ends. A session that ended took
/// the node with it.
pub(crate) async fn undo_until_done(
    session: &Session,
    dir: &str,
    guid: &str,
    node: Option<&str>,
    pause: std::time::Duration,
) -> Result<(), zk::Error> {
    loop {
        match undo(session, dir, guid, node).await {
            Err(e) if connection_lost(&e) && !session.holds.ended.is_cancelled() => {
                tokio::time::sleep(pause).await
            }
            Err(_) if session.holds.ended.is_cancelled() => return Ok(()),
            done => return done,
        }
    }
}

/// The node a waiter waits on, read with a watch that fires when it changes (normally, when it
/// is deleted); `None` if it is gone already.
pub(crate) struct Watched {
    pub(crate) data: Vec<u8>,
    pub(crate) stat: zk::Stat,
    pub(crate) watcher: zk::OneshotWatcher,
}

/// When semaphore folder `dir` was made: the lowest creation zxid of its `locks` and
/// `leases` folders, and that folder's path; `None` without either.
pub(crate) async fn made(session: &Session, dir: &str) -> Result<Option<(i64, String)>, zk::Error> {
    let sent = Instant::now();
    let paths = SEMAPHORE_CHILDREN.map(|c| format!("{dir}/{c}"));
    let stats = paths.clone().map(|p| session.zk.check_stat(&p));
    let [locks, leases] = stats;
    let (locks, leases) = tokio::join!(session.answer(sent, locks), session.answer(sent, leases));
    let mut made = None;
    for (stat, path) in [locks?, leases?].into_iter().zip(paths) {
        if let Some(stat) = stat {
            if made.as_ref().is_none_or(|(z, _)| stat.czxid < *z) {
                made = Some((stat.czxid, path));
            }
        }
    }
    Ok(made)
}

/// Reads `path` with a watch.
pub(crate) async fn watch(session: &Session, path: &str) -> Result<Option<Watched>, zk::Error> {
    match session.call(|zk| zk.get_and_watch_data(path)).await {
        Ok((data, stat, watcher)) => Ok(Some(Watched {
            data,
            stat,
            watcher,
        })),
        Err(zk::Error::NoNode) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Waits until `fired` (a watch's `changed()`, or several) resolves, the session ends, or
/// `deadline` passes (`false`).
pub(crate) async fn wait_for(
    session: &Arc<Session>,
    fired: impl std::future::Future,
    deadline: Option<Instant>,
) -> Result<bool, zk::Error> {
    let until = async {
        match deadline {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = fired => Ok(true),
        _ = session.holds.ended.cancelled() => Err(zk::Error::SessionExpired),
        _ = until => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_sort_by_sequence_as_curator_does() {
        let children = vec![
            "_c_b-lock-0000000012".to_owned(),
            "other".to_owned(),
            "_c_a-lock-0000000003".to_owned(),
            "x-lock-".to_owned(),
            "_c_c-lock-0000000100".to_owned(),
        ];
        assert_eq!(
            sorted(children, Mark::Lock),
            [
                "_c_a-lock-0000000003",
                "_c_b-lock-0000000012",
                "_c_c-lock-0000000100"
            ]
        );
        assert_eq!(sequence("_c_x-lock-0000000007", Mark::Lock), Some(7));
        assert_eq!(sequence("lock-12a", Mark::Lock), None);
    }

    #[test]
    fn latches_and_locks_are_two_kinds() {
        let children = vec![
            "_c_b-latch-0000000012".to_owned(),
            "_c_a-lock-0000000003".to_owned(),
            "_c_c-latch-0000000001".to_owned(),
            "_c_d-lock-0000000002".to_owned(),
        ];
        let (latches, other) = split(children, Mark::Latch);
        assert_eq!(latches, ["_c_c-latch-0000000001", "_c_b-latch-0000000012"]);
        assert_eq!(other, Some((2, "_c_d-lock-0000000002".to_owned())));
        assert_eq!(
            sorted_all(vec![
                "_c_b-latch-0000000012".to_owned(),
                "x".to_owned(),
                "_c_a-lock-0000000003".to_owned(),
            ]),
            ["_c_a-lock-0000000003", "_c_b-latch-0000000012"]
        );
        assert_eq!(sequence("_c_x-latch-0000000007", Mark::Lock), None);
        assert_eq!(seq_of("/f/_c_x-latch-0000000007"), 7);
        assert_eq!(seq_of("/f/_c_x-lock-0000000008"), 8);
    }

    #[test]
    fn readers_and_writers_are_one_queue_and_other_primitives_are_found() {
        let children = vec![
            "_c_b-__WRIT__0000000012".to_owned(),
            "_c_a-__READ__0000000003".to_owned(),
            "_c_c-__READ__0000000012".to_owned(),
            "_c_d-lock-0000000007".to_owned(),
        ];
        let (mine, other) = split(children, Mark::Read);
        assert_eq!(
            mine,
            [
                "_c_a-__READ__0000000003",
                "_c_b-__WRIT__0000000012",
                "_c_c-__READ__0000000012"
            ]
        );
        assert_eq!(other, Some((7, "_c_d-lock-0000000007".to_owned())));
        let (_, other) = split(vec!["leases".to_owned()], Mark::Write);
        assert_eq!(other, Some((0, "leases".to_owned())));
        assert_eq!(primitive_of("leases"), Some("semaphore"));
        assert_eq!(
            primitive_of("_c_x-__WRIT__0000000001"),
            Some("read-write lock")
        );
        assert_eq!(seq_of("/f/_c_x-__READ__0000000009"), 9);
    }

    #[test]
    fn guids_look_like_uuids() {
        let g = guid();
        assert_eq!(g.len(), 36);
        assert_eq!(g.matches('-').count(), 4);
        assert_ne!(g, guid());
    }
}
