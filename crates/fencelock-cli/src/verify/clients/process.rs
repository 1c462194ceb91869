//! The hidden `fencelock verify-client`: one client process of a verify run. It loops until
//! its deadline: acquire; read the fenced register; hold for a random time; write the value
//! read plus one with its token; release. Every step is recorded on the shared monotonic
//! clock. It writes even when it has lost the lock: it stands for a program paused between
//! its last check and its write, which is the case fencing is for.
//!
//! With `--primitive election` it campaigns instead (its value `<lane>/<pid>`), writes with
//! its term and resigns; and for the whole run it observes the election, recording each
//! leader its observer reports.

use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use clap::Args;
use fencelock::fenced::{FencedRegister, FencedWrite};
use fencelock::{Client, ClientOptions, Election, Error, Guard, Leadership, Lock, Released};
use redis::aio::MultiplexedConnection;
use tokio_util::sync::CancellationToken;

use crate::verify::args::Primitive;
use crate::verify::events::{now, Kind, Recorder};
use crate::verify::rng::Rng;
use crate::{exit, parse_duration};

static UNFENCED: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("unfenced.lua")));

/// Arguments of the hidden `fencelock verify-client`.
#[derive(Args, Debug)]
pub struct ClientArgs {
    /// The lock service (several for RedLock).
    #[arg(long, required = true)]
    pub url: Vec<String>,
    /// The Redis of the fenced register.
    #[arg(long)]
    pub register: String,
    /// The register's key.
    #[arg(long)]
    pub register_key: String,
    /// The lock's name.
    #[arg(long)]
    pub lock: String,
    /// The lease (ZooKeeper: the session timeout).
    #[arg(long, value_parser = parse_duration)]
    pub lease: Duration,
    /// The longest hold between read and write.
    #[arg(long, value_parser = parse_duration)]
    pub hold_max: Duration,
    /// This client's lane.
    #[arg(long)]
    pub client: usize,
    /// Seed of the hold times (the fleet gives each lane and each respawn its own).
    #[arg(long)]
    pub seed: u64,
    /// The event file (appended to).
    #[arg(long)]
    pub events: PathBuf,
    /// Stop at this time, in ns on CLOCK_MONOTONIC.
    #[arg(long)]
    pub until: u64,
    /// Write without the token check, and record whether the check would have refused.
    #[arg(long)]
    pub no_fencing: bool,
    /// What to contend for.
    #[arg(long, value_enum, default_value_t = Primitive::Mutex)]
    pub primitive: Primitive,
}

/// What a client contends for: a lock, or an election (with the value it advertises).
enum Contender {
    Lock(Box<Lock>),
    Election(Election, String),
}

/// What a client holds: a lock's guard, or an election's leadership (its term is its token).
enum Holding {
    Guard(Guard),
    Leading(Leadership),
}

impl Contender {
    async fn acquire_timeout(&self, wait: Duration) -> Result<Holding, Error> {
        match self {
            Contender::Lock(lock) => lock.acquire_timeout(wait).await.map(Holding::Guard),
            Contender::Election(election, value) => election
                .campaign_timeout(value, wait)
                .await
                .map(Holding::Leading),
        }
    }
}

impl Holding {
    fn token(&self) -> u64 {
        match self {
            Holding::Guard(g) => g.fencing_token(),
            Holding::Leading(l) => l.term(),
        }
    }

    fn lost_token(&self) -> CancellationToken {
        match self {
            Holding::Guard(g) => g.lost_token(),
            Holding::Leading(l) => l.lost_token(),
        }
    }

    async fn release(self) -> Result<Released, Error> {
        match self {
            Holding::Guard(g) => g.release().await,
            Holding::Leading(l) => l.resign().await,
        }
    }
}

/// Records every leader the election's observer reports until the process ends; an observer
/// that can no longer follow is recorded and follows anew.
async fn observe(election: Election, rec: Recorder) {
    let mut observer = loop {
        match election.observe().await {
            Ok(observer) => break observer,
            Err(e) => {
                rec.record(Kind::ObserveFailed {
                    error: e.to_string(),
                });
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    loop {
        match observer.changed().await {
            Ok(leader) => rec.record(Kind::Observed {
                term: leader.as_ref().map(|l| l.term),
                value: leader.map(|l| l.value),
            }),
            Err(e) => {
                rec.record(Kind::ObserveFailed {
                    error: e.to_string(),
                });
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// What one client works with.
struct Ctx {
    args: ClientArgs,
    rec: Recorder,
    contender: Contender,
    register: FencedRegister,
    conn: MultiplexedConnection,
    rng: Rng,
}

/// Runs one verify client.
pub async fn client(args: ClientArgs) -> u8 {
    let rec = match Recorder::open(&args.events, args.client) {
        Ok(rec) => rec,
        Err(e) => {
            eprintln!("verify-client: cannot open {}: {e}", args.events.display());
            return exit::CANNOT_EXECUTE;
        }
    };
    rec.record(Kind::Start);
    let mut options = ClientOptions::default().default_lease(args.lease);
    if let Ok(password) = std::env::var("FENCELOCK_PASSWORD") {
        options = options.password(password);
    }
    let urls: Vec<&str> = args.url.iter().map(String::as_str).collect();
    let connected = Client::connect_all_with(&urls, options).await;
    let conn = match redis::Client::open(args.register.as_str()) {
        Ok(c) => c.get_multiplexed_async_connection().await,
        Err(e) => Err(e),
    };
    let (client, conn, register) = match (connected, conn, FencedRegister::new(&args.register_key))
    {
        (Ok(client), Ok(conn), Ok(register)) => (client, conn, register),
        (client, conn, register) => {
            eprintln!(
                "verify-client {}: cannot start: {:?} {:?} {:?}",
                args.client,
                client.err(),
                conn.err(),
                register.err()
            );
            return exit::CONNECTION;
        }
    };
    let contender = match args.primitive {
        Primitive::Mutex => Contender::Lock(Box::new(client.lock(&args.lock))),
        Primitive::Election => {
            let election = client.election(&args.lock);
            tokio::spawn(observe(election.clone(), rec.clone()));
            let value = format!("{}/{}", args.client, std::process::id());
            Contender::Election(election, value)
        }
    };
    let mut ctx = Ctx {
        contender,
        rng: Rng::new(args.seed),
        args,
        rec,
        register,
        conn,
    };
    let mut attempt = 0;
    while now() < ctx.args.until {
        attempt += 1;
        one_hold(&mut ctx, attempt).await;
        // A short gap lets the others in.
        tokio::time::sleep(Duration::from_millis(ctx.rng.below(20))).await;
    }
    ctx.rec.record(Kind::Exit);
    let _ = client.close().await;
    0
}

/// One acquisition and its critical section.
async fn one_hold(ctx: &mut Ctx, attempt: u64) {
    ctx.rec.record(Kind::AcquireCall { attempt });
    let left = Duration::from_nanos(ctx.args.until.saturating_sub(now()));
    let wait = left.clamp(Duration::from_millis(100), Duration::from_secs(3));
    let guard = match ctx.contender.acquire_timeout(wait).await {
        Ok(guard) => guard,
        Err(e) => {
            let error = e.to_string();
            let kind = match e {
                // Gave up waiting on a holder, or refused before any I/O: surely not taken.
                Error::Timeout { .. } | Error::InvalidInput(_) => {
                    Kind::NotAcquired { attempt, error }
                }
                _ => Kind::AcquireUnknown { attempt, error },
            };
            ctx.rec.record(kind);
            // A server that is down answers at once: do not spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            return;
        }
    };
    let token = guard.token();
    ctx.rec.record(Kind::Acquired { attempt, token });
    let lost = guard.lost_token();
    let rec = ctx.rec.clone();
    let watcher = tokio::spawn(async move {
        lost.cancelled().await;
        rec.record(Kind::Lost { attempt, token });
    });
    let read = ctx.register.read(&mut ctx.conn).await;
    let (value, written_with) = match &read {
        Ok(Some(f)) => (
            std::str::from_utf8(&f.value)
                .ok()
                .and_then(|v| v.parse::<u64>().ok()),
            Some(f.token),
        ),
        _ => (None, None),
    };
    ctx.rec.record(Kind::Read {
        attempt,
        value,
        token: written_with,
    });
    if read.is_ok() {
        let hold = ctx.rng.below(ctx.args.hold_max.as_millis() as u64);
        tokio::time::sleep(Duration::from_millis(hold)).await;
        write(ctx, attempt, token, value.unwrap_or(0) + 1).await;
    }
    // Stop watching first: a release ends the guard's life, which is not a loss.
    watcher.abort();
    let ok = guard.release().await.is_ok();
    ctx.rec.record(Kind::Released { attempt, ok });
}

/// Writes `value` with `token`, fenced or not, and records the outcome.
async fn write(ctx: &mut Ctx, attempt: u64, token: u64, value: u64) {
    ctx.rec.record(Kind::WriteCall {
        attempt,
        token,
        value,
    });
    let text = value.to_string();
    let kind = if ctx.args.no_fencing {
        let stale: redis::RedisResult<i64> = UNFENCED
            .key(ctx.register.key())
            .arg(token.to_string())
            .arg(&text)
            .invoke_async(&mut ctx.conn)
            .await;
        match stale {
            Ok(stale) => Kind::WriteAccepted {
                attempt,
                token,
                value,
                stale: stale == 1,
            },
            Err(e) => Kind::WriteFailed {
                attempt,
                token,
                error: e.to_string(),
            },
        }
    } else {
        match ctx
            .register
            .write(&mut ctx.conn, token, text.as_bytes())
            .await
        {
            Ok(FencedWrite::Rejected { highest }) => Kind::WriteRejected {
                attempt,
                token,
                highest,
            },
            Ok(_) => Kind::WriteAccepted {
                attempt,
                token,
                value,
                stale: false,
            },
            Err(e) => Kind::WriteFailed {
                attempt,
                token,
                error: e.to_string(),
            },
        }
    };
    ctx.rec.record(kind);
}
