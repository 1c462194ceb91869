//! The hidden `fencelock verify-client`: one client process of a verify run. It loops until
//! its deadline: acquire; read the fenced register; hold for a random time; write the value
//! read plus one with its token; release. Every step is recorded on the shared monotonic
//! clock. It writes even when it has lost the lock: it stands for a program paused between
//! its last check and its write, which is the case fencing is for.
//!
//! With `--primitive election` it campaigns instead (its value `<lane>/<pid>`), writes with
//! its term and resigns; and for the whole run it observes the election, recording each
//! leader its observer reports. The lock family (`family.rs`): with `rwlock` each attempt
//! takes the write side (one in three, seeded) or the read side, and a reader ends with a
//! checked read instead of a write; with `semaphore` it takes a permit, enters the register
//! of N fenced slots, writes it, and leaves it before giving the permit back; with `multi` it takes two locks and writes each one's
//! register with that lock's token. Events of a reader, or of a multi-lock's second lock,
//! carry their part (`events.rs`).

use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use clap::Args;
use fencelock::fenced::{FencedRegister, FencedWrite};
use fencelock::{
    Client, ClientOptions, Election, Error, Guard, Leadership, Lock, MultiGuard, MultiLock, RwLock,
    Semaphore,
};
use redis::aio::MultiplexedConnection;
use tokio_util::sync::CancellationToken;

use super::family;
use crate::verify::args::{multi_name, Primitive, MULTI_LOCKS};
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
    /// The semaphore's number of permits (`--primitive semaphore`).
    #[arg(long, default_value_t = 1)]
    pub permits: u32,
}

/// What a client contends for: a lock, an election (with the value it advertises), a
/// read-write lock, a semaphore, or a multi-lock.
enum Contender {
    Lock(Box<Lock>),
    Election(Election, String),
    Rw(Box<RwLock>),
    Permit(Box<Semaphore>),
    Multi(Box<MultiLock>),
}

/// What a client holds: a lock's guard (a writer's, a permit's), a reader's guard, an
/// election's leadership (its term is its token), or a multi-lock's guard.
enum Holding {
    Guard(Guard),
    Reading(Guard),
    Leading(Leadership),
    All(MultiGuard),
}

/// One holding of an attempt: its part (see `Event::part`), token and lost signal.
struct Part {
    part: u8,
    token: u64,
    lost: CancellationToken,
}

impl Contender {
    /// The parts an attempt concerns (`reader`: a read-write lock's attempt reads).
    fn parts(&self, reader: bool) -> Vec<u8> {
        match self {
            Contender::Multi(_) => (0..MULTI_LOCKS).collect(),
            Contender::Rw(_) if reader => vec![1],
            _ => vec![0],
        }
    }

    async fn acquire_timeout(&self, wait: Duration, reader: bool) -> Result<Holding, Error> {
        match self {
            Contender::Lock(lock) => lock.acquire_timeout(wait).await.map(Holding::Guard),
            Contender::Election(election, value) => election
                .campaign_timeout(value, wait)
                .await
                .map(Holding::Leading),
            Contender::Rw(rw) if reader => {
                rw.read().acquire_timeout(wait).await.map(Holding::Reading)
            }
            Contender::Rw(rw) => rw.write().acquire_timeout(wait).await.map(Holding::Guard),
            Contender::Permit(s) => s.acquire_timeout(wait).await.map(Holding::Guard),
            Contender::Multi(m) => m.acquire_timeout(wait).await.map(Holding::All),
        }
    }
}

impl Holding {
    /// Its holdings, by part; `names` are a multi-lock's names by part.
    fn parts(&self, names: &[String]) -> Vec<Part> {
        let one = |part, g: &Guard| Part {
            part,
            token: g.fencing_token(),
            lost: g.lost_token(),
        };
        match self {
            Holding::Guard(g) => vec![one(0, g)],
            Holding::Reading(g) => vec![one(1, g)],
            Holding::Leading(l) => vec![Part {
                part: 0,
                token: l.term(),
                lost: l.lost_token(),
            }],
            Holding::All(m) => m
                .guards()
                .iter()
                .map(|g| {
                    let part = names.iter().position(|n| n == g.name()).unwrap_or(0);
                    one(part as u8, g)
                })
                .collect(),
        }
    }

    async fn release(self) -> Result<(), Error> {
        match self {
            Holding::Guard(g) | Holding::Reading(g) => g.release().await.map(drop),
            Holding::Leading(l) => l.resign().await.map(drop),
            Holding::All(m) => m.release().await.map(drop),
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
    /// The registers, by part (one but with a multi-lock: a reader reads the writers').
    registers: Vec<FencedRegister>,
    /// A multi-lock's names, by part.
    names: Vec<String>,
    conn: MultiplexedConnection,
    rng: Rng,
}

impl Ctx {
    /// Where `part`'s family write (a checked read, a permit's) goes.
    fn target(&mut self, part: u8) -> family::Target<'_> {
        family::Target {
            rec: self.rec.part(part),
            conn: &mut self.conn,
            key: self.registers[0].key(),
            fenced: !self.args.no_fencing,
        }
    }
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
    let parts = match args.primitive {
        Primitive::Multi => MULTI_LOCKS,
        _ => 1,
    };
    let registers: Result<Vec<FencedRegister>, _> = (0..parts)
        .map(|p| FencedRegister::new(&multi_name(&args.register_key, p)))
        .collect();
    let (client, conn, registers) = match (connected, conn, registers) {
        (Ok(client), Ok(conn), Ok(registers)) => (client, conn, registers),
        (client, conn, registers) => {
            eprintln!(
                "verify-client {}: cannot start: {:?} {:?} {:?}",
                args.client,
                client.err(),
                conn.err(),
                registers.err()
            );
            return exit::CONNECTION;
        }
    };
    let names: Vec<String> = (0..parts).map(|p| multi_name(&args.lock, p)).collect();
    let contender = contender(&client, &args, &rec, &names);
    let mut ctx = Ctx {
        contender,
        registers,
        names,
        rng: Rng::new(args.seed),
        args,
        rec,
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

/// What the client contends for, as its arguments say (an election is also observed).
fn contender(client: &Client, args: &ClientArgs, rec: &Recorder, names: &[String]) -> Contender {
    match args.primitive {
        Primitive::Mutex => Contender::Lock(Box::new(client.lock(&args.lock))),
        Primitive::Election => {
            let election = client.election(&args.lock);
            tokio::spawn(observe(election.clone(), rec.clone()));
            let value = format!("{}/{}", args.client, std::process::id());
            Contender::Election(election, value)
        }
        Primitive::Rwlock => Contender::Rw(Box::new(client.rw_lock(&args.lock))),
        Primitive::Semaphore => {
            Contender::Permit(Box::new(client.semaphore(&args.lock, args.permits)))
        }
        Primitive::Multi => {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            Contender::Multi(Box::new(client.multi_lock(&names)))
        }
    }
}

/// Records `kind` as an event of each of `parts`.
fn record_each(rec: &Recorder, parts: &[u8], kind: impl Fn() -> Kind) {
    for &part in parts {
        rec.part(part).record(kind());
    }
}

/// One acquisition and its critical section.
async fn one_hold(ctx: &mut Ctx, attempt: u64) {
    // A read-write lock's attempt writes one time in three.
    let reader = matches!(ctx.contender, Contender::Rw(_)) && ctx.rng.below(3) != 0;
    let parts = ctx.contender.parts(reader);
    record_each(&ctx.rec, &parts, || Kind::AcquireCall { attempt });
    let left = Duration::from_nanos(ctx.args.until.saturating_sub(now()));
    let wait = left.clamp(Duration::from_millis(100), Duration::from_secs(3));
    let holding = match ctx.contender.acquire_timeout(wait, reader).await {
        Ok(holding) => holding,
        Err(e) => {
            let error = e.to_string();
            // Gave up waiting on a holder, or refused before any I/O: surely not taken.
            let surely = matches!(e, Error::Timeout { .. } | Error::InvalidInput(_));
            record_each(&ctx.rec, &parts, || match surely {
                true => Kind::NotAcquired {
                    attempt,
                    error: error.clone(),
                },
                false => Kind::AcquireUnknown {
                    attempt,
                    error: error.clone(),
                },
            });
            // A server that is down answers at once: do not spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            return;
        }
    };
    let held = holding.parts(&ctx.names);
    let mut watchers = Vec::new();
    for p in &held {
        let (rec, token) = (ctx.rec.part(p.part), p.token);
        rec.record(Kind::Acquired { attempt, token });
        let lost = p.lost.clone();
        watchers.push(tokio::spawn(async move {
            lost.cancelled().await;
            rec.record(Kind::Lost { attempt, token });
        }));
    }
    // A permit holding's slot in the register (see `permits.lua`).
    let slot = (ctx.args.primitive == Primitive::Semaphore)
        .then(|| held.first().map(|p| p.token))
        .flatten();
    if let Some(token) = slot {
        let permits = ctx.args.permits;
        family::enter(ctx.target(0), permits, token).await;
    }
    critical_section(ctx, attempt, &held).await;
    // Stop watching first: a release ends the guard's life, which is not a loss.
    watchers.iter().for_each(|w| w.abort());
    if let Some(token) = slot {
        // The slot goes before the permit, so that a slot is never held without one.
        family::leave(ctx.target(0), token).await;
    }
    let ok = holding.release().await.is_ok();
    let parts: Vec<u8> = held.iter().map(|p| p.part).collect();
    record_each(&ctx.rec, &parts, || Kind::Released { attempt, ok });
}

/// Reads each part's register, holds for a random time, and writes each (a reader: its
/// checked read).
async fn critical_section(ctx: &mut Ctx, attempt: u64, held: &[Part]) {
    let mut values = Vec::new();
    for p in held {
        let register = &ctx.registers[usize::from(p.part).min(ctx.registers.len() - 1)];
        let read = register.read(&mut ctx.conn).await;
        let (value, written_with) = match &read {
            Ok(Some(f)) => (
                std::str::from_utf8(&f.value)
                    .ok()
                    .and_then(|v| v.parse::<u64>().ok()),
                Some(f.token),
            ),
            _ => (None, None),
        };
        ctx.rec.part(p.part).record(Kind::Read {
            attempt,
            value,
            token: written_with,
        });
        if read.is_err() {
            return;
        }
        values.push(value.unwrap_or(0));
    }
    let hold = ctx.rng.below(ctx.args.hold_max.as_millis() as u64);
    tokio::time::sleep(Duration::from_millis(hold)).await;
    for (p, value) in held.iter().zip(values) {
        let primitive = ctx.args.primitive;
        let to = ctx.target(p.part);
        match (primitive, p.part) {
            (Primitive::Rwlock, 1) => family::checked_read(to, attempt, p.token).await,
            (Primitive::Semaphore, _) => {
                family::permit_write(to, attempt, p.token, value + 1).await
            }
            _ => write(ctx, attempt, p.part, p.token, value + 1).await,
        }
    }
}

/// Writes `value` with `token` to `part`'s register, fenced or not, and records the outcome.
async fn write(ctx: &mut Ctx, attempt: u64, part: u8, token: u64, value: u64) {
    let rec = ctx.rec.part(part);
    let register = &ctx.registers[usize::from(part).min(ctx.registers.len() - 1)];
    rec.record(Kind::WriteCall {
        attempt,
        token,
        value,
    });
    let text = value.to_string();
    let kind = if ctx.args.no_fencing {
        let stale: redis::RedisResult<i64> = UNFENCED
            .key(register.key())
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
        match register.write(&mut ctx.conn, token, text.as_bytes()).await {
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
    rec.record(kind);
}
