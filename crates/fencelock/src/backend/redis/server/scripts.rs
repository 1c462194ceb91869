//! The Lua scripts (hashed once per process, sent with EVALSHA) and what their replies mean.
//! The reply parsers are plain functions of a server's reply: they never panic, whatever the
//! server sends (fuzzed below), and say what was wrong in an error string.

use std::time::Duration;

use redis::{Script, Value};

use crate::backend::redis::snapshot;
use crate::backend::redis::terms::AcquireReply;
use crate::backend::{Leader, RawStatus};
use crate::lease::Renewal;

/// A Lua script: its SHA for EVALSHA, and its source for SCRIPT LOAD after NOSCRIPT.
pub(super) struct Lua {
    pub(super) script: Script,
    pub(super) code: &'static str,
}

impl Lua {
    pub(super) fn new(code: &'static str) -> Self {
        Self {
            script: Script::new(code),
            code,
        }
    }
}

/// The scripts, hashed once per process and sent with EVALSHA.
pub(super) struct Scripts {
    pub(super) acquire: Lua,
    pub(super) release: Lua,
    pub(super) extend: Lua,
    pub(super) status: Lua,
    pub(super) force_unlock: Lua,
    pub(super) force_unlock_holder: Lua,
    pub(super) raise_fence: Lua,
    pub(super) leader: Lua,
    pub(super) proclaim: Lua,
    /// A read-write lock's side or a semaphore's permit (family.lua).
    pub(super) family_acquire: Lua,
}

/// A script's source: its parts (`.lua` files of this folder), in order. base.lua says why a
/// script is cut into parts: each script defines only the functions it needs, and its common
/// case runs before the rest are defined.
macro_rules! lua {
    ($($part:literal),+) => {
        Lua::new(concat!($(include_str!(concat!($part, ".lua"))),+))
    };
}

pub(super) fn scripts() -> &'static Scripts {
    static SCRIPTS: std::sync::OnceLock<Scripts> = std::sync::OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        acquire: lua!(
            "acquire_free",
            "base",
            "tokens",
            "holds",
            "queue",
            "acquire"
        ),
        release: lua!(
            "release_last",
            "base",
            "holds",
            "tokens",
            "queue",
            "family",
            "release"
        ),
        extend: lua!("base", "holds", "extend"),
        status: lua!("base", "status"),
        force_unlock: lua!("force_unlock"),
        force_unlock_holder: lua!("force_unlock_holder"),
        raise_fence: lua!("base", "tokens", "raise_fence"),
        leader: lua!("base", "leader"),
        proclaim: lua!("base", "holds", "proclaim"),
        family_acquire: lua!(
            "family_free",
            "base",
            "tokens",
            "holds",
            "family",
            "family_acquire"
        ),
    })
}

/// What an extend script's reply (the remaining lease, or -1) says.
pub(super) fn renewal(ttl: i64) -> Renewal {
    if ttl >= 0 {
        Renewal::Renewed
    } else {
        Renewal::NotHeld
    }
}

/// A holder's hold count: the number of hold ids in its field.
pub(super) fn hold_count(holds: &Value) -> u64 {
    match holds {
        Value::BulkString(ids) => String::from_utf8_lossy(ids).split_whitespace().count() as u64,
        _ => 0,
    }
}

/// `EVALSHA sha numkeys`, to be followed by the keys and arguments.
pub(super) fn evalsha(script: &Lua, keys: usize) -> redis::Cmd {
    // Room for a lock script's call (up to 12 arguments, lock names of a few dozen bytes)
    // from the start: growing the buffers argument by argument cost more than the rest of
    // building the call.
    let mut cmd = redis::Cmd::with_capacity(12, 384);
    cmd.arg("EVALSHA");
    cmd.arg(script.script.get_hash()).arg(keys);
    cmd
}

/// An acquire script's reply: `{1, hold count, token}` or `{0, remaining lease in ms}`.
pub(super) fn parse_acquire(reply: &[Value], queued: bool) -> Result<AcquireReply, String> {
    match reply {
        [Value::Int(1), Value::Int(count), token] => Ok(AcquireReply::Acquired {
            token: parse_token(token)?,
            count: u64::try_from(*count).map_err(|_| format!("negative hold count {count}"))?,
        }),
        [Value::Int(0), Value::Int(pttl)] => Ok(AcquireReply::Held {
            remaining: u64::try_from(*pttl).ok().map(Duration::from_millis),
            undo: false,
            queued,
        }),
        other => Err(format!("acquire replied {}", brief(other))),
    }
}

/// An acquire script's refusal, which changed nothing: the name is used as another primitive
/// (`{-1, what}`: `mutex`, `election`, `rw`, `sem:N`), a semaphore of another N (`{-2, N}`), or
/// a read -> write upgrade (`{-3}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Refusal {
    Kind(String),
    Permits(u32),
    Upgrade,
}

/// The refusal an acquire script's reply says, if it is one.
pub(super) fn parse_refusal(reply: &[Value]) -> Option<Refusal> {
    match reply {
        [Value::Int(-1), Value::BulkString(found)] => {
            Some(Refusal::Kind(String::from_utf8_lossy(found).into_owned()))
        }
        [Value::Int(-2), Value::Int(n)] => Some(Refusal::Permits(u32::try_from(*n).unwrap_or(0))),
        [Value::Int(-3)] => Some(Refusal::Upgrade),
        _ => None,
    }
}

/// The public word for what a name is used as, from a script's refusal (`=k`'s text).
pub(super) fn primitive_word(found: &str) -> &'static str {
    match found {
        "rw" => "read-write lock",
        "election" => "election",
        f if f.starts_with("sem") => "semaphore",
        _ => "mutex",
    }
}

/// A fencing token: decimal text (or an integer) in `u64`.
pub(super) fn parse_token(value: &Value) -> Result<u64, String> {
    let parsed = match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok().and_then(|s| s.parse().ok()),
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    parsed.ok_or_else(|| format!("fencing token {}", brief(std::slice::from_ref(value))))
}

/// A leader script's reply: `{token, value or nil, remaining lease in ms (-1: no expiry)}`,
/// or `{}` when nobody holds the lock. The leader, and how long its lease has left (`None`:
/// no expiry). A value that is not UTF-8 (written by another tool) is read lossily; a holder
/// without one (a mutex's) advertises the empty value.
pub(super) fn parse_leader(reply: &[Value]) -> Result<Option<(Leader, Option<Duration>)>, String> {
    let (token, value, pttl) = match reply {
        [] => return Ok(None),
        [token, value, Value::Int(pttl)] => (token, value, *pttl),
        other => return Err(format!("leader replied {}", brief(other))),
    };
    let value = match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::Nil | Value::Boolean(false) => String::new(),
        other => {
            return Err(format!(
                "leader's value {}",
                brief(std::slice::from_ref(other))
            ))
        }
    };
    let leader = Leader {
        value,
        term: parse_token(token)?,
    };
    // -2: the lock expired between the two reads of the script (it cannot: a script is
    // atomic), -1: no expiry.
    match pttl {
        -2 => Ok(None),
        _ => Ok(Some((
            leader,
            u64::try_from(pttl).ok().map(Duration::from_millis),
        ))),
    }
}

/// A status script's reply: `{pttl, last token, {field, value, ...}, TIME, {owner, place,
/// ...}}`.
pub(super) fn parse_status(reply: &[Value]) -> Result<RawStatus, String> {
    let [Value::Int(pttl), last, Value::Array(fields), Value::Array(time), Value::Array(queue)] =
        reply
    else {
        return Err(format!("status replied {}", brief(reply)));
    };
    let last_token = match last {
        Value::Nil | Value::Boolean(false) => None,
        v => Some(parse_token(v)?),
    };
    let now_us =
        server_micros(time).ok_or_else(|| format!("status: server time {}", brief(time)))?;
    let mut pairs = Vec::with_capacity(fields.len() / 2);
    for pair in fields.chunks(2) {
        let [Value::BulkString(field), value] = pair else {
            return Err(format!("status: lock field {}", brief(pair)));
        };
        let value = match value {
            Value::BulkString(v) => String::from_utf8_lossy(v).into_owned(),
            _ => String::new(),
        };
        pairs.push((String::from_utf8_lossy(field).into_owned(), value));
    }
    let remaining = u64::try_from(*pttl).ok().map(Duration::from_millis);
    let snap = snapshot::read(&pairs, remaining, now_us);
    let mut status = RawStatus::free();
    status.last_token = last_token;
    status.current_token = snap.token;
    // A read-write lock's or semaphore's holding past its own deadline (family.lua) is gone,
    // though the next script has not dropped it yet.
    status.held = !snap.holders.is_empty();
    status.remaining = remaining.filter(|_| status.held);
    status.owners = snap
        .holders
        .iter()
        .map(|h| (h.owner.clone(), h.holds))
        .collect();
    if status.current_token.is_none() {
        status.current_token = snap.holders.iter().filter_map(|h| h.token).max();
    }
    status.kind = snap.kind;
    status.permits = snap.permits;
    status.leader = snap.leader;
    status.holders = snap.holders;
    for pair in queue.chunks(2) {
        let (owner, place) = match pair {
            [Value::BulkString(owner), Value::BulkString(place)] => (owner, Some(place)),
            [Value::BulkString(owner), Value::Nil | Value::Boolean(false)] => (owner, None),
            _ => return Err(format!("status: queue entry {}", brief(pair))),
        };
        let place = place.map(|p| String::from_utf8_lossy(p));
        if status.kind.is_none() {
            status.kind = place.as_deref().map(snapshot::place_kind);
        }
        status.waiters.push(crate::backend::redis::places::waiter(
            String::from_utf8_lossy(owner).into_owned(),
            place.as_deref(),
            now_us,
        ));
    }
    Ok(status)
}

/// `TIME`'s reply (seconds and microseconds, as text) in microseconds.
fn server_micros(time: &[Value]) -> Option<u64> {
    let number = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse::<u64>().ok(),
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    match time {
        [secs, micros] => number(secs)
            .zip(number(micros))
            .and_then(|(s, us)| s.checked_mul(1_000_000)?.checked_add(us)),
        _ => None,
    }
}

/// A reply for an error message, cut to a bounded length.
fn brief(reply: &[Value]) -> String {
    const MAX: usize = 200;
    let mut text = format!("{reply:?}");
    if text.len() > MAX {
        let mut cut = MAX;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    text
}

#[cfg(test)]
mod fuzz {
    //! Arbitrary server replies: the parsers never panic, accept only their documented
    //! shapes, and keep their error text bounded.

    use proptest::prelude::*;
    use redis::Value;

    use super::*;

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Nil),
            Just(Value::Okay),
            prop_oneof![
                Just(i64::MIN),
                Just(-2i64),
                Just(-1),
                Just(0),
                Just(1),
                Just(i64::MAX),
                any::<i64>()
            ]
            .prop_map(Value::Int),
            "(=token|=holds|[0-9]{1,21}|-?[0-9]{1,3}|[0-9]{1,20}( [0-9]{1,20}){0,3})"
                .prop_map(|s| Value::BulkString(s.into_bytes())),
            prop::collection::vec(any::<u8>(), 0..24).prop_map(Value::BulkString),
            any::<String>().prop_map(Value::SimpleString),
            any::<f64>().prop_map(Value::Double),
            any::<bool>().prop_map(Value::Boolean),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(Value::Map),
                prop::collection::vec(inner, 0..4).prop_map(Value::Set),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        #[test]
        fn acquire_replies(reply in prop::collection::vec(value(), 0..5), queued: bool) {
            match parse_acquire(&reply, queued) {
                Ok(AcquireReply::Acquired { .. }) => {
                    prop_assert!(matches!(reply.as_slice(), [Value::Int(1), Value::Int(n), _] if *n >= 0));
                }
                Ok(AcquireReply::Held { .. }) => {
                    prop_assert!(matches!(reply.as_slice(), [Value::Int(0), Value::Int(_)]));
                }
                Err(e) => prop_assert!(e.len() < 300),
            }
        }

        #[test]
        fn tokens(v in value()) {
            if let Ok(t) = parse_token(&v) {
                let text = t.to_string();
                let same = matches!(&v, Value::Int(n) if *n >= 0)
                    || matches!(&v, Value::BulkString(b) if b == text.as_bytes() || std::str::from_utf8(b).ok().and_then(|s| s.parse::<u64>().ok()) == Some(t));
                prop_assert!(same);
            }
        }

        #[test]
        fn leader_replies(reply in prop::collection::vec(value(), 0..5)) {
            match parse_leader(&reply) {
                Ok(Some(_)) => prop_assert!(matches!(reply.as_slice(), [_, _, Value::Int(_)])),
                Ok(None) => prop_assert!(reply.is_empty() || matches!(reply.as_slice(), [_, _, Value::Int(-2)])),
                Err(e) => prop_assert!(e.len() < 300),
            }
        }

        #[test]
        fn status_replies(reply in prop::collection::vec(value(), 0..6)) {
            if let Err(e) = parse_status(&reply) {
                prop_assert!(e.len() < 300);
            }
        }

        #[test]
        fn renewals_and_hold_counts(v in value(), ttl: i64) {
            let _ = hold_count(&v);
            prop_assert_eq!(renewal(ttl) == Renewal::Renewed, ttl >= 0);
        }
    }

    #[test]
    fn refusals_parse_and_other_replies_are_none() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(
            parse_refusal(&[Value::Int(-1), bulk("sem:3")]),
            Some(Refusal::Kind("sem:3".into()))
        );
        assert_eq!(
            parse_refusal(&[Value::Int(-2), Value::Int(3)]),
            Some(Refusal::Permits(3))
        );
        assert_eq!(parse_refusal(&[Value::Int(-3)]), Some(Refusal::Upgrade));
        assert_eq!(parse_refusal(&[Value::Int(0), Value::Int(5)]), None);
        assert_eq!(primitive_word("rw"), "read-write lock");
        assert_eq!(primitive_word("sem:"), "semaphore");
        assert_eq!(primitive_word("election"), "election");
        assert_eq!(primitive_word("mutex"), "mutex");
    }

    #[test]
    fn a_family_status_drops_holdings_past_their_deadlines() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        // Server time 1700000000.000005 s: the first holding (from ...000 s for 30 s) is
        // live, the second (from 1699999000 s for 1.5 s) is past its deadline.
        let reply = vec![
            Value::Int(29000),
            bulk("42"),
            Value::Array(vec![
                bulk("=k"),
                bulk("rw"),
                bulk("a:1"),
                bulk("7"),
                bulk("=h:a:1"),
                bulk("41 1700000000000000 30000"),
                bulk("b:1"),
                bulk("8 9"),
                bulk("=h:b:1"),
                bulk("40 1699999000000000 1500 9"),
            ]),
            Value::Array(vec![bulk("1700000000"), bulk("5")]),
            Value::Array(vec![]),
        ];
        let status = parse_status(&reply).unwrap();
        assert_eq!(status.owners, vec![("a:1".to_string(), 1)]);
        assert!(status.held);
    }

    #[test]
    fn a_well_formed_status_parses() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = vec![
            Value::Int(1500),
            bulk("42"),
            Value::Array(vec![
                bulk("owner:1"),
                bulk("7 9"),
                bulk("=token"),
                bulk("42"),
            ]),
            Value::Array(vec![bulk("1700000000"), bulk("5")]),
            Value::Array(vec![bulk("waiter:2"), bulk("11 5000 1699999999000005")]),
        ];
        let status = parse_status(&reply).unwrap();
        assert_eq!(status.owners, vec![("owner:1".to_string(), 2)]);
        assert_eq!(status.current_token, Some(42));
        assert_eq!(status.waiters.len(), 1);
    }
}
