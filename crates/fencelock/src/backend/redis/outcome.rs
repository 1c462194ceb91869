//! What each server of a RedLock set answered, as the source of `Error::Quorum`.

use std::time::Duration;

/// What one server of a RedLock set answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ServerOutcome {
    /// The server granted the lock with this token.
    Granted {
        /// `host:port`.
        server: String,
        /// The token it issued.
        token: u64,
    },
    /// Another owner holds the lock on this server.
    Held {
        /// `host:port`.
        server: String,
        /// That owner's remaining lease there.
        remaining: Option<Duration>,
    },
    /// The request failed.
    Failed {
        /// `host:port`.
        server: String,
        /// Why.
        error: String,
    },
    /// No answer had arrived when the attempt was decided.
    NoReply {
        /// `host:port`.
        server: String,
    },
}

impl std::fmt::Display for ServerOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Granted { server, token } => write!(f, "{server}: granted (token {token})"),
            Self::Held { server, remaining } => {
                write!(f, "{server}: held by another owner ({remaining:?} left)")
            }
            Self::Failed { server, error } => write!(f, "{server}: {error}"),
            Self::NoReply { server } => write!(f, "{server}: no reply yet"),
        }
    }
}

/// Every server's answer, as the source of an `Error::Quorum`.
#[derive(Debug)]
pub(crate) struct Outcomes(pub(crate) Vec<ServerOutcome>);

impl std::fmt::Display for Outcomes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join("; "))
    }
}

impl std::error::Error for Outcomes {}
