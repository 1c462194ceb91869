//! What `status` and a listing read of etcd's layout (read only): the kind a lock's range is
//! used as (`read/`, `write/`, `permit/` keys; a one-segment key is a mutex's or an
//! election's, which share `concurrency`'s layout: a fencelock mutex's key stores its owner
//! id, `etcdctl lock`'s nothing, an election's the participant's value), a semaphore's N,
//! and the names under the prefix, a page at a time. etcd keeps no time with a key: a
//! holding's start and a waiter's age are not known.

use etcd_client::GetOptions;

use super::recipe;
use super::Inner;
use crate::backend::session_service::{Listed, SessionLocks};
use crate::error::Error;
use crate::status::LockKind;

/// How many keys one page of a listing reads.
const PAGE: i64 = 1000;

/// Whether `value` is an owner id as fencelock makes them (`<client id hex>:...`).
fn owner_id(value: &str) -> bool {
    value.split_once(':').is_some_and(|(client, _)| {
        client.len() == 32 && client.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

impl Inner {
    /// The kind lock `name`'s entries say it is used as.
    pub(super) fn entry_kind(&self, name: &str, entries: &[Listed]) -> Option<LockKind> {
        let dir = recipe::dir(&self.prefix, name);
        let first = entries.first()?;
        match recipe::primitive_of(&dir, &first.path) {
            "read-write lock" => Some(LockKind::ReadWrite),
            "semaphore" => Some(LockKind::Semaphore),
            "mutex or election" if first.owner.is_empty() || owner_id(&first.owner) => {
                Some(LockKind::Mutex)
            }
            "mutex or election" => Some(LockKind::Election),
            _ => None,
        }
    }

    /// Semaphore `name`'s stored N.
    pub(super) async fn key_permits(&self, name: &str) -> Result<Option<u32>, Error> {
        let key = recipe::permits_key(&self.prefix, name);
        let n = recipe::stored_permits(&self.session, &key).await;
        n.map_err(|e| self.fail(Some(name), e))
    }

    /// A page of the names with keys in their range under the prefix, from `cursor` (the
    /// key the previous page stopped at). A name's range `<prefix>/<name>/` is contiguous in
    /// key order and ends before `<prefix>/<name>0`, where the next page starts: no name is
    /// listed twice, none left out.
    pub(super) async fn range_names(
        &self,
        cursor: Option<&str>,
    ) -> Result<(Vec<String>, Option<String>), Error> {
        let base = format!("{}/", self.prefix);
        let start = cursor.map_or(base.clone(), str::to_owned);
        let end = format!("{}0", self.prefix);
        let options = GetOptions::new()
            .with_range(end)
            .with_keys_only()
            .with_limit(PAGE);
        let reply = self
            .session
            .call(|mut c| {
                let (start, options) = (start.clone(), options.clone());
                async move { c.get(start, Some(options)).await }
            })
            .await
            .map_err(|e| self.fail(None, e))?;
        let mut names: Vec<String> = Vec::new();
        for kv in reply.kvs() {
            let key = String::from_utf8_lossy(kv.key());
            let Some((name, _)) = key.strip_prefix(&base).and_then(|r| r.split_once('/')) else {
                continue;
            };
            if names.last().map(String::as_str) != Some(name) {
                names.push(name.to_owned());
            }
        }
        let next = match reply.more() {
            true => names.last().map(|n| format!("{base}{n}0")),
            false => None,
        };
        Ok((names, next))
    }
}
