//! etcd's `concurrency.Mutex` layout, written for fencelock, without its slow path; and the
//! keys of read-write locks (`recipes.RWMutex`'s `read/` and `write/`) and semaphores
//! (`permit/`, N in `<prefix>/N`) in the same range (see `super`).
//!
//! A lock named N is the key range `<prefix>/N/`; an attempt puts the key
//! `<prefix>/N/<lease id in hex>` under the client's lease, only if it is absent (one
//! transaction), with the owner id as its value (`etcdctl lock` leaves it empty). An
//! election named N is the same range in `concurrency.Election`'s layout, which is the
//! mutex's: a campaign's key stores the value it advertises (`etcdctl elect N VALUE`), and
//! the lowest create revision leads. A mutex holder and a leader of one name therefore
//! exclude each other. The key
//! with the lowest create revision holds the lock. A waiter watches the deletion of the key
//! with the greatest create revision below its own, so that a release wakes one waiter, in
//! arrival order.
//!
//! etcd's own recipe watches that key *from a past revision*, which the server serves from
//! a catch-up loop that runs every 100 ms: each handoff waits up to 100 ms. Here the watch
//! starts at the current revision, and the predecessor is read again once the server has
//! confirmed the watch: a deletion before that read is seen by the read, one after it by the
//! watch. Every read that places an attempt also checks, in the same transaction, that the
//! attempt's own key is still there with its create revision (etcd-io/etcd#11456: a waiter
//! whose lease ended must not take its predecessors' deletion for the lock).

use std::sync::Arc;

use etcd_client as etcd;
use etcd_client::proto::{PbKeyValue, PbTxnOpResponse, PbTxnResponse};
use etcd_client::{Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp};
use tokio::time::Instant;

use super::session::{Fault, Session};

/// The key range of lock `name`: `<prefix>/<name>/`.
pub(crate) fn dir(prefix: &str, name: &str) -> String {
    format!("{prefix}/{name}/")
}

/// The key of this client's attempts on lock `name`.
pub(crate) fn key(prefix: &str, name: &str, lease: i64) -> String {
    format!("{}{lease:x}", dir(prefix, name))
}

/// The key of an attempt on read-write lock `name`: `<prefix>/<name>/read/<unique>` or
/// `.../write/<unique>`, as etcd's `recipes.RWMutex` names them (its unique part is the
/// time in nanoseconds; here the lease in hex and a random number, unique per attempt: a
/// client's readers each have a key of their own).
pub(crate) fn rw_key(prefix: &str, name: &str, write: bool, lease: i64) -> String {
    let side = if write { "write" } else { "read" };
    let unique: u64 = rand::random();
    format!("{}{side}/{lease:x}-{unique:016x}", dir(prefix, name))
}

/// The key of a permit of semaphore `name`: `<prefix>/<name>/permit/<lease hex>-<unique>`,
/// one per permit (a client's permits each have a key of their own).
pub(crate) fn permit_key(prefix: &str, name: &str, lease: i64) -> String {
    let unique: u64 = rand::random();
    format!("{}permit/{lease:x}-{unique:016x}", dir(prefix, name))
}

/// The key that stores name `name`'s kind (a semaphore's: its number of permits, see
/// [`Claim`]): `<prefix>/<name>`, beside (not in) the range of its entries, without a lease.
pub(crate) fn permits_key(prefix: &str, name: &str) -> String {
    format!("{prefix}/{name}")
}

/// What an attempt's transaction decides of its name's kind, in the key `<prefix>/<name>`
/// (beside the range, without a lease): the kind the name is (`mutex`, `election`,
/// `read-write lock`, or a semaphore's N in decimal). The transaction that puts the
/// attempt's key checks it, or stores it when the name is free (no kind stored, or only
/// one left by entries whose lease ended), and refuses otherwise: one name, one kind,
/// decided in the one step that enters the queue. The transaction that deletes the range's
/// last key deletes it too ([`leave`]).
pub(crate) struct Claim<'a> {
    /// The key that stores the kind.
    pub(crate) key: &'a str,
    /// The kind's value.
    pub(crate) value: &'a str,
    /// A semaphore's resize: any semaphore's N is taken over.
    pub(crate) resize: bool,
}

impl Claim<'_> {
    /// The comparisons that hold when the name is this kind already.
    fn same(&self) -> Vec<Compare> {
        match self.resize {
            // A semaphore's value is its N in decimal: it starts with a digit.
            true => vec![
                Compare::value(self.key, CompareOp::Greater, "/"),
                Compare::value(self.key, CompareOp::Less, ":"),
            ],
            false => vec![Compare::value(self.key, CompareOp::Equal, self.value)],
        }
    }
}

/// The stored kind's value as `Error::PrimitiveMismatch` names it, and the N of a
/// semaphore.
pub(crate) fn kind_of(value: &str) -> (&str, Option<u32>) {
    match value.trim().parse::<u32>() {
        Ok(n) => ("semaphore", Some(n)),
        Err(_) => (value, None),
    }
}

/// The semaphore's stored number in `key`, if any.
pub(crate) async fn stored_permits(session: &Session, key: &str) -> Result<Option<u32>, Fault> {
    let txn = Txn::new().and_then([TxnOp::get(key, None)]);
    let reply = session.txn(txn).await?;
    Ok(ranges(&reply.0)?
        .into_iter()
        .next()
        .and_then(|r| r.into_iter().next())
        .and_then(|e| e.owner.trim().parse().ok()))
}

/// The primitive a key of a name's range belongs to, in `Error::PrimitiveMismatch`'s
/// words: `read/` and `write/` keys are a read-write lock's, a key of one segment a mutex's
/// or an election's (their layouts are one: they exclude each other).
pub(crate) fn primitive_of(dir: &str, key: &str) -> &'static str {
    let suffix = key.strip_prefix(dir).unwrap_or(key);
    if suffix.starts_with("read/") || suffix.starts_with("write/") {
        "read-write lock"
    } else if suffix.starts_with("permit/") {
        "semaphore"
    } else if !suffix.contains('/') {
        "mutex or election"
    } else {
        "another primitive"
    }
}

/// Whether a key of range `dir` is a read-write lock's reader (`<dir>read/<unique>`).
pub(crate) fn is_reader(dir: &str, key: &str) -> bool {
    key.strip_prefix(dir)
        .is_some_and(|suffix| suffix.starts_with("read/"))
}

/// One key of a lock's range, as fencelock uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) key: String,
    /// The owner id (empty for `etcdctl lock`).
    pub(crate) owner: String,
    pub(crate) revision: i64,
    pub(crate) lease: i64,
    /// A read-write lock's reader (set where the range is known, see [`ahead`]).
    pub(crate) reader: bool,
}

/// A read-write lock's reader shares; every other key (a writer, a mutex's, an election's)
/// is exclusive.
impl crate::backend::queue::rule::Queued for Entry {
    fn exclusive(&self) -> bool {
        !self.reader
    }
}

impl Entry {
    fn from(kv: &PbKeyValue) -> Self {
        Self {
            key: String::from_utf8_lossy(&kv.key).into_owned(),
            owner: String::from_utf8_lossy(&kv.value).into_owned(),
            revision: kv.create_revision,
            lease: kv.lease,
            reader: false,
        }
    }
}

/// An owner id as status shows it: the id, or the lease for keys of other clients
/// (`etcdctl lock`) that store none.
pub(crate) fn owner_or_lease(owner: &str, lease: i64) -> String {
    match owner.is_empty() {
        true => format!("etcd lease {lease:x}"),
        false => owner.to_owned(),
    }
}

/// The key-values of each range answer of a transaction, in order; other answers are
/// empty. A reply without its answer is malformed (never a panic).
fn ranges(reply: &PbTxnResponse) -> Result<Vec<Vec<Entry>>, Fault> {
    reply
        .responses
        .iter()
        .map(|op| match &op.response {
            Some(PbTxnOpResponse::ResponseRange(r)) => Ok(r.kvs.iter().map(Entry::from).collect()),
            Some(_) => Ok(Vec::new()),
            None => Err(Fault::Malformed("a transaction answer without its result")),
        })
        .collect()
}

/// The revision a reply was read at.
fn revision(reply: &etcd::TxnResponse) -> Result<i64, Fault> {
    let header = reply
        .header()
        .ok_or(Fault::Malformed("a reply without a header"))?;
    Ok(header.revision())
}

/// The attempt's key as put, and the queue around it as the same transaction read it.
pub(crate) struct Created {
    /// The key's create revision.
    pub(crate) revision: i64,
    /// The key with the lowest create revision once the key was put (the attempt's own when
    /// the lock was free).
    pub(crate) holder: Entry,
    /// The key just before the attempt's own (the newest before the put), if any.
    pub(crate) before: Option<Entry>,
}

/// The query for the key of the lock's range with the lowest (`Ascend`) or the highest
/// (`Descend`) create revision.
fn end_of_queue(order: SortOrder) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, order)
        .with_limit(1)
}

/// What an attempt's transaction came to: its key put, or the name another kind's.
pub(crate) enum Entered {
    Created(Created),
    /// The name is another kind (the stored kind's value), or another semaphore's N.
    Refused(String),
}

/// The branch a transaction (nested in its failure branches) took: whether it succeeded,
/// and its answers.
fn taken(mut reply: &PbTxnResponse) -> (bool, &PbTxnResponse) {
    loop {
        if reply.succeeded {
            return (true, reply);
        }
        match reply.responses.first().and_then(|r| r.response.as_ref()) {
            Some(PbTxnOpResponse::ResponseTxn(inner)) => reply = inner,
            _ => return (false, reply),
        }
    }
}

/// Puts the attempt's key if it is absent, and reads in the same transaction the key just
/// before it (the newest before the put) and the holder after it: on a free lock the attempt
/// holds it after one round trip, and a waiter knows what to watch. The name's kind is
/// decided in the same transaction ([`Claim`]): the key is put only when the name is this
/// kind, or free (no kind stored, or the range empty), which stores the kind; otherwise
/// nothing is put. A key already there is this client's (the lease is in its name): left by
/// a give-back that failed, or made by a try whose reply was lost. It is deleted (only that
/// revision of it) and the put tried again, so that every holding gets a fresh token and a
/// place at the end of the queue.
pub(crate) async fn create(
    session: &Session,
    dir: &str,
    key: &str,
    owner: &str,
    claim: &Claim<'_>,
) -> Result<Entered, Fault> {
    let enter = |store: bool| {
        let put = TxnOp::put(
            key,
            owner,
            Some(etcd::PutOptions::new().with_lease(session.lease)),
        );
        let mut ops = vec![
            TxnOp::get(dir, Some(end_of_queue(SortOrder::Descend))),
            put,
            TxnOp::get(dir, Some(end_of_queue(SortOrder::Ascend))),
        ];
        if store {
            ops.push(TxnOp::put(claim.key, claim.value, None));
        }
        ops
    };
    let fresh = || Compare::create_revision(key, CompareOp::Equal, 0);
    for _ in 0..4 {
        let empty = Compare::create_revision(dir, CompareOp::Equal, 0).with_prefix();
        let unmarked = Compare::create_revision(claim.key, CompareOp::Equal, 0);
        let last = Txn::new()
            .when([fresh(), empty])
            .and_then(enter(true))
            .or_else([TxnOp::get(key, None), TxnOp::get(claim.key, None)]);
        let free = Txn::new()
            .when([fresh(), unmarked])
            .and_then(enter(true))
            .or_else([TxnOp::txn(last)]);
        let mut same = claim.same();
        same.push(fresh());
        let txn = Txn::new()
            .when(same)
            .and_then(enter(claim.resize))
            .or_else([TxnOp::txn(free)]);
        let reply = session.txn(txn).await?;
        let (succeeded, answers) = taken(&reply.0);
        let mut found = ranges(answers)?.into_iter().map(|r| r.into_iter().next());
        if succeeded {
            let before = found.next().flatten();
            let holder = found.nth(1).flatten();
            let holder = holder.ok_or(Fault::Malformed("the lock's range is empty after a put"))?;
            return Ok(Entered::Created(Created {
                revision: revision(&reply)?,
                holder,
                before,
            }));
        }
        match (found.next().flatten(), found.next().flatten()) {
            (Some(old), _) => {
                delete(session, key, Some(old.revision)).await?;
            }
            (None, Some(kind)) => return Ok(Entered::Refused(kind.owner)),
            (None, None) => {}
        }
    }
    Err(Fault::Malformed(
        "the attempt's key stayed in place after four deletes",
    ))
}

/// The end of the keys that start with `dir` (etcd's prefix end).
fn prefix_end(dir: &str) -> Vec<u8> {
    let mut end = dir.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Deletes the entry `key` of range `dir` if it still has create revision `revision` (any
/// key without one), and, in the same transaction, the name's kind (`kind`, see [`Claim`])
/// when it was the range's last key: a semaphore's N goes with its last permit. `true` if
/// the key was deleted.
pub(crate) async fn leave(
    session: &Session,
    dir: &str,
    kind: &str,
    key: &str,
    revision: Option<i64>,
) -> Result<bool, Fault> {
    let compare = match revision {
        Some(rev) => Compare::create_revision(key, CompareOp::Equal, rev),
        None => Compare::create_revision(key, CompareOp::Greater, 0),
    };
    // Every comparison of a transaction reads the state before it: "nothing but this key".
    let after = format!("{key}\0");
    let alone = Txn::new()
        .when([
            Compare::create_revision(dir, CompareOp::Equal, 0).with_range(key),
            Compare::create_revision(after, CompareOp::Equal, 0).with_range(prefix_end(dir)),
        ])
        .and_then([TxnOp::delete(kind, None)]);
    let txn = Txn::new()
        .when([compare])
        .and_then([TxnOp::delete(key, None), TxnOp::txn(alone)]);
    let reply = session.txn(txn).await?;
    Ok(reply.succeeded())
}

/// Deletes `key` if it still has create revision `revision` (any key without one): `true`
/// if it was deleted.
pub(crate) async fn delete(
    session: &Session,
    key: &str,
    revision: Option<i64>,
) -> Result<bool, Fault> {
    let compare = match revision {
        Some(rev) => Compare::create_revision(key, CompareOp::Equal, rev),
        None => Compare::create_revision(key, CompareOp::Greater, 0),
    };
    let txn = Txn::new()
        .when([compare])
        .and_then([TxnOp::delete(key, None)]);
    let reply = session.txn(txn).await?;
    Ok(reply.succeeded())
}

/// Where an attempt stands in the lock's queue.
#[derive(Debug)]
pub(crate) enum Place {
    /// Its key has the lowest create revision: it holds the lock.
    Holder,
    /// It waits: the holder's key and the key just before its own.
    Behind { holder: Entry, before: Entry },
}

/// Reads, in one transaction, the holder and the key just before the attempt's own, if the
/// attempt's key still has create revision `mine`; `None` if it is gone.
pub(crate) async fn place(
    session: &Session,
    dir: &str,
    key: &str,
    mine: i64,
) -> Result<Option<Place>, Fault> {
    let before = GetOptions::new()
        .with_prefix()
        .with_max_create_revision(mine - 1)
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_limit(1);
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, mine)])
        .and_then([
            TxnOp::get(dir, Some(end_of_queue(SortOrder::Ascend))),
            TxnOp::get(dir, Some(before)),
        ]);
    let reply = session.txn(txn).await?;
    if !reply.succeeded() {
        return Ok(None);
    }
    let mut found = ranges(&reply.0)?.into_iter().map(|r| r.into_iter().next());
    let (holder, before) = (found.next().flatten(), found.next().flatten());
    Ok(Some(match (holder, before) {
        (Some(holder), Some(before)) if holder.revision < mine => Place::Behind { holder, before },
        (Some(holder), _) if holder.revision == mine => Place::Holder,
        _ => {
            return Err(Fault::Malformed(
                "the lock's keys do not include the attempt's own",
            ))
        }
    }))
}

/// Reads, in one transaction, every key of the range with a create revision below `mine`
/// (in queue order), if the attempt's key still has create revision `mine`; `None` if it is
/// gone. A read-write lock's attempt needs them all: a reader holds with no writer ahead.
pub(crate) async fn ahead(
    session: &Session,
    dir: &str,
    key: &str,
    mine: i64,
) -> Result<Option<Vec<Entry>>, Fault> {
    let all = GetOptions::new()
        .with_prefix()
        .with_max_create_revision(mine - 1)
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, mine)])
        .and_then([TxnOp::get(dir, Some(all))]);
    let reply = session.txn(txn).await?;
    if !reply.succeeded() {
        return Ok(None);
    }
    let mut entries = ranges(&reply.0)?.into_iter().next().unwrap_or_default();
    for entry in &mut entries {
        entry.reader = is_reader(dir, &entry.key);
    }
    Ok(Some(entries))
}

/// A watch of one key's deletion, in place on the server (for a permit: of any deletion in
/// the range, and of any change of the semaphore's N).
pub(crate) struct Deletion {
    stream: etcd::WatchStream,
    resized: Option<etcd::WatchStream>,
}

/// What a permit's waiter saw at its last look, for [`wait_for_any`].
pub(crate) struct Seen<'a> {
    /// The attempt's own key, and its create revision.
    pub(crate) key: &'a str,
    pub(crate) mine: i64,
    /// How many keys were ahead of it.
    pub(crate) ahead: usize,
    /// The key that stores the semaphore's N, and the N the look went by.
    pub(crate) permits_key: &'a str,
    pub(crate) n: u32,
}

impl Deletion {
    /// Watches `key` for deletion from the current revision, and waits until the server has
    /// confirmed the watch; then reads the key: `None` when it no longer has create revision
    /// `revision` (already deleted: nothing to wait for).
    pub(crate) async fn watch(
        session: &Session,
        key: &str,
        revision: i64,
    ) -> Result<Option<Self>, Fault> {
        let options = etcd::WatchOptions::new().with_filters([etcd::WatchFilterType::NoPut]);
        let stream = confirmed(session, key, options).await?;
        let txn = Txn::new().when([Compare::create_revision(key, CompareOp::Equal, revision)]);
        let reply = session.txn(txn).await?;
        Ok(reply.succeeded().then_some(Self {
            stream,
            resized: None,
        }))
    }

    /// Watches range `dir` for any deletion, and the semaphore's N for any change, from the
    /// current revision, and waits until the server has confirmed both watches; then reads
    /// the keys of the range below the attempt's create revision and N again: `None` when
    /// fewer keys than it saw are left or N changed (look again), or when its own key is
    /// gone. A permit waits so: any key ahead that goes may let it hold, and so may a raised
    /// N (stored outside the range, and put, not deleted). The keys are read, not counted:
    /// etcd's count-only range ignores `max_create_revision` and counts the whole range
    /// (the waiter's own key and every key behind it), which hid a deletion between the look
    /// and the watch (a waiter that never held).
    pub(crate) async fn watch_range(
        session: &Session,
        dir: &str,
        seen: &Seen<'_>,
    ) -> Result<Option<Self>, Fault> {
        let deletions = etcd::WatchOptions::new()
            .with_prefix()
            .with_filters([etcd::WatchFilterType::NoPut]);
        let (stream, resized) = tokio::try_join!(
            confirmed(session, dir, deletions),
            confirmed(session, seen.permits_key, etcd::WatchOptions::new()),
        )?;
        let below = GetOptions::new()
            .with_prefix()
            .with_max_create_revision(seen.mine - 1)
            .with_keys_only();
        let txn = Txn::new()
            .when([Compare::create_revision(
                seen.key,
                CompareOp::Equal,
                seen.mine,
            )])
            .and_then([
                TxnOp::get(dir, Some(below)),
                TxnOp::get(seen.permits_key, None),
            ]);
        let reply = session.txn(txn).await?;
        if !reply.succeeded() {
            return Ok(None);
        }
        let mut found = ranges(&reply.0)?.into_iter();
        let ahead = found.next().map_or(0, |keys| keys.len());
        let n = found.next().and_then(|r| r.into_iter().next());
        let n = n.and_then(|e| e.owner.trim().parse::<u32>().ok());
        let same = ahead >= seen.ahead && n.is_none_or(|n| n == seen.n);
        Ok(same.then_some(Self {
            stream,
            resized: Some(resized),
        }))
    }

    /// Waits for the deletion, or a change of N (`true`), or for a watch to end (`false`:
    /// the caller reads again).
    pub(crate) async fn gone(self) -> bool {
        let Self {
            mut stream,
            resized,
        } = self;
        let Some(mut resized) = resized else {
            return deleted(&mut stream).await;
        };
        tokio::select! {
            gone = deleted(&mut stream) => gone,
            changed = resized.message() => matches!(changed, Ok(Some(r)) if !r.canceled()),
        }
    }
}

/// Waits on `stream` for a deletion (`true`), or for the watch to end (`false`).
async fn deleted(stream: &mut etcd::WatchStream) -> bool {
    loop {
        match stream.message().await {
            Ok(Some(reply)) if !reply.canceled() => {
                let deleted = reply
                    .events()
                    .iter()
                    .any(|e| e.event_type() == etcd::EventType::Delete);
                if deleted {
                    return true;
                }
            }
            _ => return false,
        }
    }
}

/// A watch of `key` with `options`, once the server has confirmed it.
async fn confirmed(
    session: &Session,
    key: &str,
    options: etcd::WatchOptions,
) -> Result<etcd::WatchStream, Fault> {
    let mut stream = session
        .call(|mut c| {
            let (key, options) = (key.to_owned(), options.clone());
            async move { c.watch(key, Some(options)).await }
        })
        .await?;
    let confirmed = tokio::time::timeout(session.response_timeout, stream.message()).await;
    match confirmed {
        Ok(Ok(Some(reply))) if reply.created() && !reply.canceled() => Ok(stream),
        Ok(Err(e)) => Err(Fault::Etcd(e)),
        Err(_) => Err(Fault::Timeout),
        Ok(_) => Err(Fault::Malformed("the watch was not created")),
    }
}

/// How a wait for the key before one's own ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// That key (that create revision) is gone.
    Gone,
    /// The watch ended without telling: read again.
    Again,
    /// The deadline passed.
    Deadline,
}

/// Waits until the key `before` (create revision `revision`) is deleted, the session ends
/// (an error), or `deadline` passes. A key already gone returns at once.
pub(crate) async fn wait_for(
    session: &Arc<Session>,
    before: &Entry,
    deadline: Option<Instant>,
) -> Result<Wake, Fault> {
    let deletion = Deletion::watch(session, &before.key, before.revision).await?;
    wait_on(session, deletion, deadline).await
}

/// Waits until a key of range `dir` ahead of the attempt's own is deleted or the
/// semaphore's N changes (`seen`: what its last look saw), its own key is found gone, the
/// session ends (an error), or `deadline` passes.
pub(crate) async fn wait_for_any(
    session: &Arc<Session>,
    dir: &str,
    seen: &Seen<'_>,
    deadline: Option<Instant>,
) -> Result<Wake, Fault> {
    let deletion = Deletion::watch_range(session, dir, seen).await?;
    wait_on(session, deletion, deadline).await
}

/// Waits on a confirmed watch (`None`: the deletion came already).
async fn wait_on(
    session: &Arc<Session>,
    deletion: Option<Deletion>,
    deadline: Option<Instant>,
) -> Result<Wake, Fault> {
    let Some(deletion) = deletion else {
        return Ok(Wake::Gone);
    };
    let until = async {
        match deadline {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        gone = deletion.gone() => Ok(if gone { Wake::Gone } else { Wake::Again }),
        _ = session.holds.ended.cancelled() => Err(Fault::Ended),
        _ = until => Ok(Wake::Deadline),
    }
}

/// The lock's keys in queue order (create revision).
pub(crate) async fn entries(session: &Session, dir: &str) -> Result<Vec<Entry>, Fault> {
    Ok(entries_at(session, dir).await?.0)
}

/// The range's keys in queue order (create revision), and the revision they were read at.
pub(crate) async fn entries_at(session: &Session, dir: &str) -> Result<(Vec<Entry>, i64), Fault> {
    let all = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let reply = session
        .call(|mut c| {
            let (dir, all) = (dir.to_owned(), all.clone());
            async move { c.get(dir, Some(all)).await }
        })
        .await?;
    let header = reply
        .header()
        .ok_or(Fault::Malformed("a reply without a header"))?;
    let entries = reply
        .kvs()
        .iter()
        .map(|kv| Entry {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            owner: String::from_utf8_lossy(kv.value()).into_owned(),
            revision: kv.create_revision(),
            lease: kv.lease(),
            reader: false,
        })
        .collect();
    Ok((entries, header.revision()))
}

/// The range's key with the lowest create revision (the holder, the leader), if any.
pub(crate) async fn first(session: &Session, dir: &str) -> Result<Option<Entry>, Fault> {
    let reply = session
        .call(|mut c| {
            let (dir, first) = (dir.to_owned(), end_of_queue(SortOrder::Ascend));
            async move { c.get(dir, Some(first)).await }
        })
        .await?;
    Ok(reply.kvs().first().map(|kv| Entry {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        owner: String::from_utf8_lossy(kv.value()).into_owned(),
        revision: kv.create_revision(),
        lease: kv.lease(),
        reader: false,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_keys_follow_etcds_rwmutex() {
        let r = rw_key("/fencelock", "rw", false, 0x1f);
        let d = dir("/fencelock", "rw");
        assert!(r.starts_with("/fencelock/rw/read/1f-"), "{r}");
        assert!(is_reader(&d, &r));
        let w = rw_key("/fencelock", "rw", true, 0x1f);
        assert!(
            w.starts_with("/fencelock/rw/write/1f-") && !is_reader(&d, &w),
            "{w}"
        );
        assert_ne!(w, rw_key("/fencelock", "rw", true, 0x1f));
        assert_eq!(primitive_of(&d, &w), "read-write lock");
        assert_eq!(primitive_of(&d, "/fencelock/rw/694d"), "mutex or election");
        let d = dir("/fencelock", "read");
        assert_eq!(
            primitive_of(&d, "/fencelock/read/694d"),
            "mutex or election"
        );
    }

    #[test]
    fn keys_follow_etcds_mutex() {
        assert_eq!(dir("/fencelock", "job"), "/fencelock/job/");
        assert_eq!(
            key("/fencelock", "job", 0x694d_8a1b_2c3d),
            "/fencelock/job/694d8a1b2c3d"
        );
    }

    #[test]
    fn owners_without_an_id_are_named_by_lease() {
        assert_eq!(owner_or_lease("", 255), "etcd lease ff");
        assert_eq!(owner_or_lease("o", 255), "o");
    }
}
