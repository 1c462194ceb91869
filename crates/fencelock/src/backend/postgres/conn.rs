//! Connections to PostgreSQL (or a proxy in front of it) with `tokio-postgres`: the link
//! that every operation's transaction goes through, opened again when it broke, and the
//! faults a request can meet.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, NoTls, SimpleQueryMessage, SimpleQueryRow};

use super::url::PgTarget;
use crate::options::ClientOptions;

/// Why a request to PostgreSQL failed.
#[derive(Debug)]
pub(crate) enum Fault {
    /// No reply within the response timeout (or no connection within the connect timeout).
    Timeout,
    /// The client or the server reported an error.
    Pg(tokio_postgres::Error),
    /// The server answered in a shape fencelock does not expect.
    Malformed(&'static str),
    /// The client's lease ended (expired, or deleted by a forced unlock of the client).
    Ended,
}

impl Fault {
    /// Whether trying again later may work: no reply, no connection, a server shutting down
    /// or starting, a transaction the server chose to abort (deadlock, serialization).
    pub(crate) fn transient(&self) -> bool {
        match self {
            Fault::Timeout => true,
            Fault::Pg(e) if e.is_closed() => true,
            Fault::Pg(e) => match e.code() {
                None => e.as_db_error().is_none(),
                Some(code) => {
                    code.code().starts_with("08")
                        || [
                            SqlState::ADMIN_SHUTDOWN,
                            SqlState::CRASH_SHUTDOWN,
                            SqlState::CANNOT_CONNECT_NOW,
                            SqlState::T_R_SERIALIZATION_FAILURE,
                            SqlState::T_R_DEADLOCK_DETECTED,
                            SqlState::TOO_MANY_CONNECTIONS,
                        ]
                        .contains(code)
                }
            },
            Fault::Malformed(_) | Fault::Ended => false,
        }
    }

    /// Whether the server refused the credentials or their permissions.
    pub(crate) fn denied(&self) -> bool {
        let Fault::Pg(e) = self else { return false };
        e.code().is_some_and(|code| {
            [
                SqlState::INVALID_PASSWORD,
                SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
                SqlState::INSUFFICIENT_PRIVILEGE,
            ]
            .contains(code)
        })
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Timeout => write!(f, "no reply within the response timeout"),
            // The server's own words (message, detail), not only the error's kind.
            Fault::Pg(e) => match e.as_db_error() {
                Some(db) => write!(f, "{}: {}", db.code().code(), db.message()),
                None => write!(f, "{e}"),
            },
            Fault::Malformed(what) => write!(f, "malformed reply: {what}"),
            Fault::Ended => write!(f, "the client's lease expired or was deleted"),
        }
    }
}

/// The client configuration for `target`: plain text (see `url::SslMode`), the connect
/// timeout, the password from the options over the URL's, `application_name=fencelock`
/// (a startup parameter PgBouncer passes by default: nothing needs
/// `ignore_startup_parameters`).
pub(crate) fn config(target: &PgTarget, options: &ClientOptions) -> Config {
    let mut config = Config::new();
    config
        .user(&target.user)
        .host(&target.host)
        .port(target.port)
        .dbname(&target.database)
        .application_name("fencelock")
        .ssl_mode(tokio_postgres::config::SslMode::Disable)
        .connect_timeout(options.connect_timeout);
    let password = options.password.as_ref().map(|p| p.0.as_str());
    if let Some(password) = password.or(target.password.as_deref()) {
        config.password(password);
    }
    config
}

/// Opens a connection whose messages (notices, notifications) are dropped, its task
/// running until the client is dropped or the connection breaks.
pub(crate) async fn open(config: &Config, bound: Duration) -> Result<Client, Fault> {
    let connecting = tokio::time::timeout(bound, config.connect(NoTls));
    let (client, connection) = connecting
        .await
        .map_err(|_| Fault::Timeout)?
        .map_err(Fault::Pg)?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "PostgreSQL connection ended");
        }
    });
    Ok(client)
}

/// The connection every operation's transaction goes through, opened again on the next
/// request once it broke or a request on it got no reply in time.
pub(crate) struct Link {
    config: Config,
    connect_timeout: Duration,
    response_timeout: Duration,
    client: tokio::sync::Mutex<Option<Arc<Client>>>,
}

impl Link {
    /// Opens the connection.
    pub(crate) async fn open(config: Config, options: &ClientOptions) -> Result<Self, Fault> {
        let client = open(&config, options.connect_timeout).await?;
        Ok(Self {
            config,
            connect_timeout: options.connect_timeout,
            response_timeout: options.response_timeout,
            client: tokio::sync::Mutex::new(Some(Arc::new(client))),
        })
    }

    /// The open connection, or a new one.
    async fn client(&self) -> Result<Arc<Client>, Fault> {
        let mut slot = self.client.lock().await;
        match slot.as_ref() {
            Some(client) if !client.is_closed() => Ok(client.clone()),
            _ => {
                let client = Arc::new(open(&self.config, self.connect_timeout).await?);
                *slot = Some(client.clone());
                Ok(client)
            }
        }
    }

    /// Forgets `client` (if it is still the link's), so that the next request opens another.
    async fn forget(&self, client: &Arc<Client>) {
        let mut slot = self.client.lock().await;
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, client)) {
            *slot = None;
        }
    }

    /// Runs `sql` (one or more statements: one implicit transaction) and returns the rows
    /// of all its statements, in order, bounded by the response timeout. A request without
    /// a reply in time may still have been carried out: it is never sent again here.
    pub(crate) async fn run(&self, sql: &str) -> Result<Vec<SimpleQueryRow>, Fault> {
        Ok(self.run_each(sql).await?.into_iter().flatten().collect())
    }

    /// [`Link::run`], with the rows of each statement apart.
    pub(crate) async fn run_each(&self, sql: &str) -> Result<Vec<Vec<SimpleQueryRow>>, Fault> {
        let client = self.client().await?;
        match tokio::time::timeout(self.response_timeout, client.simple_query(sql)).await {
            Ok(Ok(messages)) => {
                let (mut each, mut rows) = (Vec::new(), Vec::new());
                for message in messages {
                    match message {
                        SimpleQueryMessage::Row(row) => rows.push(row),
                        SimpleQueryMessage::CommandComplete(_) => {
                            each.push(std::mem::take(&mut rows))
                        }
                        _ => {}
                    }
                }
                Ok(each)
            }
            Ok(Err(e)) => {
                if e.is_closed() {
                    self.forget(&client).await;
                }
                Err(Fault::Pg(e))
            }
            Err(_) => {
                // The connection may be stuck (a paused server, a lost route): a new one
                // for the next request, rather than queueing behind this one.
                self.forget(&client).await;
                Err(Fault::Timeout)
            }
        }
    }
}

/// Column `at` of `row` as an `i64`.
pub(crate) fn int(row: &SimpleQueryRow, at: usize) -> Result<i64, Fault> {
    row.get(at)
        .and_then(|v| v.parse().ok())
        .ok_or(Fault::Malformed("expected an integer column"))
}

/// Column `at` of `row` as text (`None`: SQL NULL).
pub(crate) fn opt_text(row: &SimpleQueryRow, at: usize) -> Option<String> {
    row.get(at).map(str::to_owned)
}
