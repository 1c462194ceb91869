//! Elections on etcd, in `concurrency.Election`'s layout: the leader (the key of the lowest
//! create revision in the election's range, its value the value, its create revision the
//! term), a leader's value rewritten on its own key guarded by its create revision, and a
//! task that follows the leader.
//!
//! The follower reads the range, then watches it from the revision after that read: etcd
//! sends every event from there, in order, and the follower applies each to the keys it
//! knows, so every change of leader is reported, in order (etcd's own `Observe` reports only
//! puts, and dies silently after a compaction: etcd-io/etcd#7815, #18163). A compacted or
//! cancelled watch, a broken stream, the lease's end or its keep-alives unanswered within
//! its TTL end it with an error.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use etcd_client as etcd;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use tokio::sync::mpsc;

use super::recipe::{self, Entry};
use super::session::{Fault, Session};
use super::Inner;
use crate::backend::session_service::Listed;
use crate::backend::{Feed, Leader};
use crate::error::Error;

/// How many reports a follower keeps for a reader that lags (the core keeps only changes).
const FEED_ROOM: usize = 16;

impl Inner {
    /// The key of election `name` with the lowest create revision.
    pub(super) async fn leader_entry(&self, name: &str) -> Result<Option<Listed>, Fault> {
        let dir = recipe::dir(&self.prefix, name);
        let first = recipe::first(&self.session, &dir).await?;
        Ok(first.map(|e| Listed {
            reader: false,
            path: e.key,
            owner: e.owner,
            session: e.lease,
            token: e.revision,
            age: std::time::Duration::ZERO,
        }))
    }

    /// Puts `value` on the holding's key under the lease, only while the key has create
    /// revision `token` (`concurrency.Election.Proclaim`'s guard): `Ok(false)` when it is gone.
    pub(super) async fn set_value(
        &self,
        key: &str,
        token: u64,
        value: &str,
    ) -> Result<bool, Fault> {
        let Ok(revision) = i64::try_from(token) else {
            return Ok(false);
        };
        let put = etcd::PutOptions::new().with_lease(self.session.lease);
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, revision)])
            .and_then([TxnOp::put(key, value, Some(put))]);
        match self.session.txn(txn).await {
            Ok(reply) => Ok(reply.succeeded()),
            Err(Fault::Ended) => Ok(false),
            Err(fault) => Err(fault),
        }
    }

    /// Starts the follower of election `name` with this lease's client.
    pub(super) fn follow(self: &Arc<Self>, name: &str) -> Feed {
        let (tx, rx) = mpsc::channel(FEED_ROOM);
        let follower = Follower {
            session: self.session.clone(),
            dir: recipe::dir(&self.prefix, name),
            name: name.to_owned(),
            tx,
        };
        tokio::spawn(follower.run());
        rx
    }
}

/// The keys of an election's range as the follower knows them, by create revision.
#[derive(Debug, Default)]
struct Known {
    by_revision: BTreeMap<i64, (String, String)>,
    by_key: HashMap<String, i64>,
}

impl Known {
    fn put(&mut self, key: String, revision: i64, value: String) {
        if let Some(old) = self.by_key.insert(key.clone(), revision) {
            self.by_revision.remove(&old);
        }
        self.by_revision.insert(revision, (key, value));
    }

    fn delete(&mut self, key: &[u8]) {
        let key = String::from_utf8_lossy(key);
        if let Some(old) = self.by_key.remove(key.as_ref()) {
            self.by_revision.remove(&old);
        }
    }

    /// Applies one event of the watch.
    fn apply(&mut self, event: &etcd::Event) {
        let Some(kv) = event.kv() else { return };
        match event.event_type() {
            etcd::EventType::Put => self.put(
                String::from_utf8_lossy(kv.key()).into_owned(),
                kv.create_revision(),
                String::from_utf8_lossy(kv.value()).into_owned(),
            ),
            etcd::EventType::Delete => self.delete(kv.key()),
        }
    }

    /// The leader: the key of the lowest create revision.
    fn head(&self) -> Option<Leader> {
        let (revision, (_, value)) = self.by_revision.first_key_value()?;
        Some(Leader {
            value: value.clone(),
            term: u64::try_from(*revision).ok()?,
        })
    }
}

/// The task that follows one election's leader.
struct Follower {
    session: Arc<Session>,
    dir: String,
    name: String,
    tx: mpsc::Sender<Result<Option<Leader>, Error>>,
}

impl Follower {
    /// Follows until the receiver is dropped (quietly), or until it cannot (an error sent).
    async fn run(self) {
        let why = tokio::select! {
            why = self.follow() => why,
            () = self.tx.closed() => return,
            () = self.session.holds.ended.cancelled() => "the client's etcd lease ended".into(),
            () = self.session.stopped() => "the client closed its etcd lease".into(),
            () = self.unheard() => "no keep-alive answered within the lease's TTL".into(),
        };
        let error = Error::Unavailable {
            lock: Some(self.name.clone()),
            server: self.session.server.clone(),
            detail: format!("etcd: {why}: the election's follower stopped"),
        };
        let _ = self.tx.send(Err(error)).await;
    }

    /// Resolves once no keep-alive was answered within the lease's TTL (minus the drift),
    /// after one was while this follower ran: the connection may be gone, and with it the
    /// watch's events. A follower started with a lease that is unheard but has not ended
    /// (the client keeps handing it out until it ends) waits for a keep-alive's answer,
    /// following meanwhile, rather than stop at once: a caller that follows anew after the
    /// error would otherwise spin until then.
    async fn unheard(&self) {
        let every = (self.session.ttl / 4).max(std::time::Duration::from_millis(10));
        while !self.session.holds.is_live() {
            tokio::time::sleep(every).await;
        }
        while self.session.holds.is_live() {
            tokio::time::sleep(every).await;
        }
    }

    /// Reads the range, reports its head, then applies the watch's events from the next
    /// revision, reporting each change of head. Returns why it stopped.
    async fn follow(&self) -> String {
        let (entries, revision) = match recipe::entries_at(&self.session, &self.dir).await {
            Ok(read) => read,
            Err(fault) => return fault.to_string(),
        };
        let mut known = Known::default();
        for Entry {
            key,
            owner,
            revision,
            ..
        } in entries
        {
            known.put(key, revision, owner);
        }
        let mut last = known.head();
        if self.tx.send(Ok(last.clone())).await.is_err() {
            return String::new();
        }
        let mut stream = match self.watch(revision + 1).await {
            Ok(stream) => stream,
            Err(fault) => return fault.to_string(),
        };
        loop {
            let reply = match stream.message().await {
                Ok(Some(reply)) => reply,
                Ok(None) => return "the watch stream ended".into(),
                Err(e) => return format!("the watch failed: {e}"),
            };
            if reply.compact_revision() > 0 {
                return format!("compacted to revision {}", reply.compact_revision());
            }
            if reply.canceled() {
                return format!("the watch was cancelled: {}", reply.cancel_reason());
            }
            for event in reply.events() {
                known.apply(event);
                let head = known.head();
                if head != last {
                    last = head.clone();
                    if self.tx.send(Ok(head)).await.is_err() {
                        return String::new();
                    }
                }
            }
        }
    }

    /// Watches the election's range from `revision`.
    async fn watch(&self, revision: i64) -> Result<etcd::WatchStream, Fault> {
        let options = etcd::WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision);
        self.session
            .call(|mut c| {
                let (dir, options) = (self.dir.clone(), options.clone());
                async move { c.watch(dir, Some(options)).await }
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_create_revision_leads() {
        let mut known = Known::default();
        assert_eq!(known.head(), None);
        known.put("e/b".into(), 7, "b".into());
        known.put("e/a".into(), 5, "a".into());
        assert_eq!(known.head().map(|l| l.term), Some(5));
        known.put("e/a".into(), 5, "a2".into());
        assert_eq!(known.head().map(|l| l.value), Some("a2".into()));
        known.delete(b"e/a");
        assert_eq!(
            known.head().map(|l| (l.term, l.value)),
            Some((7, "b".into()))
        );
        known.delete(b"e/b");
        assert_eq!(known.head(), None);
    }
}
