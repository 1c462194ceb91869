//! Apache Curator's `InterProcessMutex` layout, written for fencelock.
//!
//! A lock named N is the node `<base>/N` (a container node); each attempt creates an
//! ephemeral sequential child `_c_<guid>-lock-<10 digits>` holding the owner id. The lowest
//! sequence holds the lock; a waiter watches only the node just before its own, so a release
//! wakes one waiter, in arrival order. Creation is protected: after a lost reply, the attempt
//! finds its node again by its GUID (and its `ephemeralOwner`), never making a second one.

use std::sync::Arc;

use tokio::time::Instant;
use zookeeper_client as zk;

use super::session::Session;

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

/// How a lock child's name ends before its sequence.
const LOCK_MARK: &str = "lock-";

/// The sequence number of a lock child, as Curator sorts them (after the last `lock-`).
pub(crate) fn sequence(child: &str) -> Option<u64> {
    let at = child.rfind(LOCK_MARK)? + LOCK_MARK.len();
    let digits = &child[at..];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The lock children in sequence order (other children are not locks: left out).
pub(crate) fn sorted(children: Vec<String>) -> Vec<String> {
    let mut locks: Vec<(u64, String)> = children
        .into_iter()
        .filter_map(|c| sequence(&c).map(|s| (s, c)))
        .collect();
    locks.sort();
    locks.into_iter().map(|(_, c)| c).collect()
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

/// The lock's children in queue order, listed with a watch on the folder: it fires at the
/// next change of the queue (a node created or deleted).
pub(crate) struct Listing {
    pub(crate) children: Vec<String>,
    pub(crate) watcher: zk::OneshotWatcher,
}

/// Lists the lock's children, watching the folder.
pub(crate) async fn list(session: &Session, dir: &str) -> Result<Listing, zk::Error> {
    let (children, watcher) = session.call(|zk| zk.list_and_watch_children(dir)).await?;
    Ok(Listing {
        children: sorted(children),
        watcher,
    })
}

/// The sequence number at the end of a lock node's path (`-1` if none).
pub(crate) fn seq_of(path: &str) -> i64 {
    sequence(path)
        .and_then(|s| i64::try_from(s).ok())
        .unwrap_or(-1)
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
    owner: &str,
    list: bool,
) -> Result<(Node, Option<Listing>), zk::Error> {
    let prefix = format!("{dir}/_c_{guid}-{LOCK_MARK}");
    let mode = zk::CreateMode::EphemeralSequential.with_acls(ACLS);
    let mut tries = 0;
    loop {
        tries += 1;
        let sent = Instant::now();
        let created = session.zk.create(&prefix, owner.as_bytes(), &mode);
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
                    .map(|(children, watcher)| Listing {
                        children: sorted(children),
                        watcher,
                    });
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

/// Waits until `watcher` fires, the session ends, or `deadline` passes (`false`).
pub(crate) async fn wait_for(
    session: &Arc<Session>,
    watcher: zk::OneshotWatcher,
    deadline: Option<Instant>,
) -> Result<bool, zk::Error> {
    let until = async {
        match deadline {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = watcher.changed() => Ok(true),
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
            sorted(children),
            [
                "_c_a-lock-0000000003",
                "_c_b-lock-0000000012",
                "_c_c-lock-0000000100"
            ]
        );
        assert_eq!(sequence("_c_x-lock-0000000007"), Some(7));
        assert_eq!(sequence("lock-12a"), None);
    }

    #[test]
    fn guids_look_like_uuids() {
        let g = guid();
        assert_eq!(g.len(), 36);
        assert_eq!(g.matches('-').count(), 4);
        assert_ne!(g, guid());
    }
}
