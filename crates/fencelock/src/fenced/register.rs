//! A fenced register on Redis.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, RedisResult, Value};

use super::FencedWrite;
use crate::error::InputError;

static WRITE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("register.lua")));

/// A value in Redis that accepts a write only with a fencing token at least as high as the
/// highest it has accepted.
///
/// The register is one hash key (fields `value` and `token`), so it works on one server, with
/// Sentinel and on Cluster alike. It is written by one Lua script, so the check and the write
/// cannot be separated by another writer. It is independent of the lock service: the lock may
/// live on ZooKeeper or etcd and the register on Redis.
///
/// ```no_run
/// # async fn demo(guard: &fencelock::Guard) -> Result<(), Box<dyn std::error::Error>> {
/// use fencelock::fenced::FencedRegister;
///
/// let redis = redis::Client::open("redis://127.0.0.1:6379")?;
/// let mut conn = redis.get_multiplexed_async_connection().await?;
/// let register = FencedRegister::new("orders:42:state")?;
/// let written = register.write(&mut conn, guard.fencing_token(), b"paid").await?;
/// if !written.is_accepted() {
///     // A later holder has written: this holder lost the lock while it worked.
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FencedRegister {
    key: String,
}

/// A register's value with the token of the write that stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fenced {
    /// The value.
    pub value: Vec<u8>,
    /// The token it was written with: the highest the register has accepted.
    pub token: u64,
}

impl FencedRegister {
    /// The register at `key` (not empty, at most [`crate::MAX_NAME_LEN`] bytes).
    pub fn new(key: &str) -> Result<Self, InputError> {
        crate::validate_name(key)?;
        Ok(Self {
            key: key.to_owned(),
        })
    }

    /// The register's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Writes `value` if `token` is at least the highest token the register has accepted,
    /// and records `token`; otherwise writes nothing and says which token was higher.
    pub async fn write<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        token: u64,
        value: &[u8],
    ) -> RedisResult<FencedWrite> {
        let reply: Value = WRITE
            .key(&self.key)
            .arg(token.to_string())
            .arg(value)
            .invoke_async(conn)
            .await?;
        parse_write(&reply)
    }

    /// The value and the token it was written with; `None` before the first write.
    pub async fn read<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
    ) -> RedisResult<Option<Fenced>> {
        let reply: Value = redis::cmd("HMGET")
            .arg(&self.key)
            .arg("value")
            .arg("token")
            .query_async(conn)
            .await?;
        parse_read(&reply)
    }
}

fn bad(what: &str, reply: &Value) -> RedisError {
    RedisError::from((
        ErrorKind::UnexpectedReturnType,
        "unexpected reply from a fenced register",
        format!("{what}: {reply:?}"),
    ))
}

fn token(value: &Value) -> Option<u64> {
    match value {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

/// The write script's reply: `{'accepted'|'rejected', token}`.
fn parse_write(reply: &Value) -> RedisResult<FencedWrite> {
    let Value::Array(items) = reply else {
        return Err(bad("the write script", reply));
    };
    let (verdict, highest) = match items.as_slice() {
        [Value::BulkString(v), t] => (v.as_slice(), token(t)),
        _ => return Err(bad("the write script", reply)),
    };
    match (verdict, highest) {
        (b"accepted", Some(_)) => Ok(FencedWrite::Accepted),
        (b"rejected", Some(h)) => Ok(FencedWrite::Rejected { highest: Some(h) }),
        _ => Err(bad("the write script", reply)),
    }
}

/// `HMGET value token`: both nil before the first write.
fn parse_read(reply: &Value) -> RedisResult<Option<Fenced>> {
    let Value::Array(items) = reply else {
        return Err(bad("HMGET", reply));
    };
    match items.as_slice() {
        [Value::Nil, Value::Nil] => Ok(None),
        [Value::BulkString(v), t] => match token(t) {
            Some(token) => Ok(Some(Fenced {
                value: v.clone(),
                token,
            })),
            None => Err(bad("HMGET", reply)),
        },
        _ => Err(bad("HMGET", reply)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn replies_map_to_outcomes() {
        let accepted = Value::Array(vec![bulk("accepted"), bulk("7")]);
        assert_eq!(parse_write(&accepted).unwrap(), FencedWrite::Accepted);
        let rejected = Value::Array(vec![bulk("rejected"), bulk("18446744073709551615")]);
        assert_eq!(
            parse_write(&rejected).unwrap(),
            FencedWrite::Rejected {
                highest: Some(u64::MAX)
            }
        );
        assert!(parse_write(&Value::Array(vec![bulk("rejected"), bulk("x")])).is_err());
        assert_eq!(
            parse_read(&Value::Array(vec![Value::Nil, Value::Nil])).unwrap(),
            None
        );
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Nil),
            any::<i64>().prop_map(Value::Int),
            proptest::collection::vec(any::<u8>(), 0..24).prop_map(Value::BulkString),
            "[a-z0-9]{0,12}".prop_map(Value::SimpleString),
        ];
        leaf.prop_recursive(2, 8, 4, |inner| {
            proptest::collection::vec(inner, 0..4).prop_map(Value::Array)
        })
    }

    proptest! {
        /// Whatever a server answers, parsing it returns, never panics.
        #[test]
        fn any_reply_parses_without_panic(reply in value()) {
            let _ = parse_write(&reply);
            let _ = parse_read(&reply);
        }
    }
}
