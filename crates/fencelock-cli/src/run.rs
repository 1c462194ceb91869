//! `fencelock run`: hold a lock while a program runs, under the supervision of `held.rs`
//! (shared with `fencelock elect`): PROGRAM's whole group is gone before the lock is released,
//! and a lock lost while PROGRAM runs stops it, with 79.

use std::time::Duration;

use clap::Args;
use fencelock::{Error, Guard, LostReason, MultiGuard, Released};

use crate::held::{self, Held, HoldArgs, Signals};
use crate::{exit, init_logging, Connection};

/// Arguments of `fencelock run`, as clap reads them ([`RunArgs::resolve`] checks the rest).
#[derive(Args, Debug)]
#[command(
    override_usage = "fencelock run [OPTIONS] NAME [--] PROGRAM [ARGS]...\n       \
                            fencelock run [OPTIONS] NAME --shell [--] 'COMMAND LINE'"
)]
pub struct RunArgs {
    #[command(flatten)]
    conn: Connection,
    /// The lock name (the older spelling of NAME; PROGRAM then comes first).
    #[arg(long, value_name = "NAME", hide_short_help = true)]
    key: Option<String>,
    #[command(flatten)]
    hold: HoldArgs,
    /// The owner id of the holding (default: one that names this host, this process's id,
    /// PROGRAM and the start time, which `status` shows). Two processes given the same id
    /// are one owner to the lock: the second re-enters it. Use with care.
    #[arg(long, value_name = "ID")]
    owner: Option<String>,
    /// Hold the read (shared) side of the read-write lock NAME, beside other readers
    /// (flock's -s). A reader waits for every writer that came before it.
    #[arg(short = 's', long = "shared", conflicts_with_all = ["exclusive", "permits", "also"])]
    shared: bool,
    /// Hold the write (exclusive) side of the read-write lock NAME, alone (flock's -x). A
    /// writer waits for everyone that came before it.
    #[arg(short = 'x', long = "exclusive", conflicts_with_all = ["permits", "also"])]
    exclusive: bool,
    /// Hold one of N permits of the semaphore NAME (1 to 10000). N is stored with the
    /// semaphore while it is in use: another N is refused (exit 69).
    #[arg(long, value_name = "N", conflicts_with = "also",
          value_parser = clap::value_parser!(u32).range(1..=fencelock::MAX_PERMITS as i64))]
    permits: Option<u32>,
    /// With --permits N: store N as the semaphore's number of permits, replacing the one
    /// stored (instead of being refused when it differs). Lowering N revokes no permit
    /// already held: holders beyond the new N keep theirs until they give them back.
    #[arg(long, requires = "permits")]
    resize: bool,
    /// Also hold the lock NAME2 (repeat for more): all of them or none, taken in one global
    /// order (so never a deadlock with other runs). PROGRAM also gets FENCELOCK_TOKENS.
    #[arg(long, value_name = "NAME2")]
    also: Vec<String>,
    /// The lock name.
    #[arg(value_name = "NAME")]
    name: Option<String>,
    /// The program and its arguments. It gets FENCELOCK_KEY (NAME) and FENCELOCK_TOKEN (the
    /// fencing token of NAME's holding; with --also, FENCELOCK_TOKENS too:
    /// `NAME=TOKEN,NAME2=TOKEN,...` in the order given) in its environment, and runs in its own process group, which it does
    /// not outlive: if fencelock dies, PROGRAM is killed; when PROGRAM ends, what it left
    /// running in its group is killed before the lock is released. Every word before PROGRAM that
    /// starts with `-` must be an option (put `--` before a PROGRAM that starts with `-`).
    #[arg(trailing_var_arg = true, value_name = "PROGRAM")]
    program: Vec<String>,
}

/// What `fencelock run` takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Take {
    /// The mutex NAME (plain `run NAME`).
    Mutex,
    /// The read side of the read-write lock NAME (`-s`).
    Read,
    /// The write side of the read-write lock NAME (`-x`).
    Write,
    /// One permit of the semaphore NAME of N (`--permits N`).
    Permit(u32),
    /// NAME and these other mutexes, all or none (`--also`).
    Multi(Vec<String>),
}

impl Take {
    /// What its owner id says it holds (see `owner.rs`).
    fn role(&self) -> Option<crate::owner::Role> {
        use crate::owner::Role;
        match self {
            Take::Read => Some(Role::Read),
            Take::Write => Some(Role::Write),
            Take::Permit(n) => Some(Role::Permit(*n)),
            Take::Mutex | Take::Multi(_) => None,
        }
    }

    /// What is held, in messages: `lock "k"`, `read side of lock "k"`, `a permit of
    /// semaphore "k" (of 3)`, `locks "a", "b"`.
    fn what(&self, key: &str) -> String {
        match self {
            Take::Mutex => format!("lock {key:?}"),
            Take::Read => format!("read side of lock {key:?}"),
            Take::Write => format!("write side of lock {key:?}"),
            Take::Permit(n) => format!("permit of semaphore {key:?} (of {n})"),
            Take::Multi(also) => {
                let names: Vec<String> = std::iter::once(key)
                    .chain(also.iter().map(String::as_str))
                    .map(|n| format!("{n:?}"))
                    .collect();
                format!("locks {}", names.join(", "))
            }
        }
    }
}

/// What `fencelock run` was asked to do, checked.
#[derive(Debug)]
pub struct Job {
    conn: Connection,
    key: String,
    /// What it takes of NAME (and `--also`'s names).
    take: Take,
    hold: HoldArgs,
    /// `--owner`, if given.
    owner: Option<String>,
    /// `--resize`: store `--permits N` as the semaphore's N.
    resize: bool,
    /// PROGRAM's name as the owner id shows it (with `--shell`, the line's first word).
    program_name: String,
    /// The command to run: PROGRAM and its arguments, or `sh -c LINE`.
    program: Vec<String>,
}

impl RunArgs {
    /// Checks what clap cannot: NAME and PROGRAM, `--key`, `--shell`'s one command line,
    /// `--also`'s names. The error is a usage error's text.
    pub fn resolve(self) -> Result<Job, String> {
        let take = match (self.shared, self.exclusive, self.permits) {
            (true, _, _) => Take::Read,
            (_, true, _) => Take::Write,
            (_, _, Some(n)) => Take::Permit(n),
            _ if !self.also.is_empty() => Take::Multi(self.also.clone()),
            _ => Take::Mutex,
        };
        let (key, program) = match self.key {
            // The older spelling: every positional word is PROGRAM.
            Some(key) => (key, self.name.into_iter().chain(self.program).collect()),
            None => match self.name {
                Some(name) => (name, self.program),
                None => return Err("missing the lock NAME and PROGRAM".into()),
            },
        };
        if let Take::Multi(also) = &take {
            check_also(&key, also)?;
        }
        let (program_name, program) = self.hold.command(program, &take.what(&key))?;
        Ok(Job {
            conn: self.conn,
            key,
            take,
            hold: self.hold,
            owner: self.owner,
            resize: self.resize,
            program_name,
            program,
        })
    }
}

/// `--also`'s names beside NAME: none twice, at most [`fencelock::MAX_MULTI_LOCKS`] in all,
/// each a valid name without `,` or `=` (FENCELOCK_TOKENS could not be read back).
fn check_also(key: &str, also: &[String]) -> Result<(), String> {
    let names: Vec<&str> = std::iter::once(key)
        .chain(also.iter().map(String::as_str))
        .collect();
    if names.len() > fencelock::MAX_MULTI_LOCKS {
        return Err(format!(
            "{} locks named, but a run holds at most {} at once",
            names.len(),
            fencelock::MAX_MULTI_LOCKS
        ));
    }
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            return Err(format!("lock {name:?} is named twice (NAME and --also)"));
        }
        if name.contains([',', '=']) {
            return Err(format!(
                "lock {name:?} has a ',' or '=', which FENCELOCK_TOKENS (NAME=TOKEN,...) \
                 cannot carry; with --also, name locks without them"
            ));
        }
        fencelock::validate_name(name).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// With `--key`, PROGRAM starts at the first positional word: an option after it belongs to
/// PROGRAM, but clap took it as fencelock's. Refused, with the way out.
pub fn check_key_order(matches: &clap::ArgMatches) -> Result<(), clap::Error> {
    use clap::parser::ValueSource;
    let (Some(_), Some(first)) = (matches.get_raw("key"), matches.index_of("name")) else {
        return Ok(());
    };
    let late = matches.ids().find(|id| {
        matches.value_source(id.as_str()) == Some(ValueSource::CommandLine)
            && matches
                .indices_of(id.as_str())
                .is_some_and(|mut i| i.any(|i| i > first))
            && !matches!(id.as_str(), "name" | "program")
    });
    match late {
        Some(id) => Err(clap::Error::raw(
            clap::error::ErrorKind::ArgumentConflict,
            format!(
                "with --key, PROGRAM starts at its first word, but the option {} came after \
                 it; put `--` before PROGRAM so that its own options reach it\n",
                match id.as_str() {
                    "wait_seconds" => "-w".to_string(),
                    id => format!("--{}", id.replace('_', "-")),
                }
            ),
        )),
        None => Ok(()),
    }
}

/// Runs `fencelock run`; returns the exit status.
pub async fn run(args: RunArgs) -> u8 {
    let args = match args.resolve() {
        Ok(job) => job,
        Err(message) => return crate::usage_error("run", &message),
    };
    init_logging(args.conn.verbose);
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fencelock: cannot handle signals: {e}");
            return exit::CONNECTION;
        }
    };
    if let Err(e) = fencelock::validate_name(&args.key) {
        return crate::explain::report(&e.into(), &args.conn);
    }
    let client = tokio::select! {
        c = args.conn.connect(Some(args.hold.lease)) => match c {
            Ok(c) => c,
            Err(e) => return crate::explain::report_connect(&e, &args.conn),
        },
        sig = signals.next() => return 128 + sig as u8,
    };
    let code = hold_and_run(&client, &args, &mut signals).await;
    // A RedLock release is decided by a majority; let it reach the other servers too before
    // this process exits, and say so if it could not.
    if let Err(e) = client.close().await {
        // The error says what a server may keep, and until when.
        eprintln!("fencelock: warning: {e}");
    }
    code
}

/// A handle on what `run` takes.
enum Handle {
    /// A mutex, or one side of a read-write lock.
    Lock(fencelock::Lock),
    /// A semaphore: one permit.
    Permit(fencelock::Semaphore),
    /// NAME and `--also`'s names.
    Multi(fencelock::MultiLock),
}

/// What PROGRAM runs under: one guard, or a multi-lock's.
enum Holding {
    One(Guard),
    All(MultiGuard),
}

/// Not taken at once: the lock found held, and what its holder's lease was.
struct Busy {
    name: String,
    remaining: Option<Duration>,
}

impl Handle {
    /// The handle for `job`, acquiring as `owner`.
    fn new(client: &fencelock::Client, job: &Job, owner: &str) -> Handle {
        let key = job.key.as_str();
        match &job.take {
            Take::Mutex => Handle::Lock(client.lock(key).with_owner(owner)),
            Take::Read => Handle::Lock(client.rw_lock(key).with_owner(owner).read().clone()),
            Take::Write => Handle::Lock(client.rw_lock(key).with_owner(owner).write().clone()),
            Take::Permit(n) => {
                let semaphore = client.semaphore(key, *n).with_owner(owner);
                Handle::Permit(match job.resize {
                    true => semaphore.resize(),
                    false => semaphore,
                })
            }
            Take::Multi(also) => {
                let names: Vec<&str> = std::iter::once(key)
                    .chain(also.iter().map(String::as_str))
                    .collect();
                Handle::Multi(client.multi_lock(&names).with_owner(owner))
            }
        }
    }

    /// One attempt.
    async fn try_take(&self, key: &str) -> Result<Result<Holding, Busy>, Error> {
        let busy = |remaining: fencelock::Contended| Busy {
            name: key.to_owned(),
            remaining: remaining.remaining_lease,
        };
        Ok(match self {
            Handle::Lock(lock) => lock.try_acquire().await?.map(Holding::One).map_err(busy),
            Handle::Permit(s) => s.try_acquire().await?.map(Holding::One).map_err(busy),
            Handle::Multi(m) => m.try_acquire().await?.map(Holding::All).map_err(|b| Busy {
                name: b.name,
                remaining: b.contended.remaining_lease,
            }),
        })
    }

    /// Waits at most `wait` (`None`: for ever).
    async fn take(&self, wait: Option<Duration>) -> Result<Holding, Error> {
        Ok(match (self, wait) {
            (Handle::Lock(l), Some(w)) => Holding::One(l.acquire_timeout(w).await?),
            (Handle::Lock(l), None) => Holding::One(l.acquire().await?),
            (Handle::Permit(s), Some(w)) => Holding::One(s.acquire_timeout(w).await?),
            (Handle::Permit(s), None) => Holding::One(s.acquire().await?),
            (Handle::Multi(m), Some(w)) => Holding::All(m.acquire_timeout(w).await?),
            (Handle::Multi(m), None) => Holding::All(m.acquire().await?),
        })
    }
}

impl Holding {
    /// The fencing token of lock `name`'s holding.
    fn token(&self, name: &str) -> u64 {
        match self {
            Holding::One(guard) => guard.fencing_token(),
            Holding::All(guard) => guard.fencing_token(name).unwrap_or(0),
        }
    }
}

impl Held for Holding {
    async fn lost(&self) {
        match self {
            Holding::One(guard) => Held::lost(guard).await,
            Holding::All(guard) => Held::lost(guard).await,
        }
    }
    fn is_held(&self) -> bool {
        match self {
            Holding::One(guard) => Held::is_held(guard),
            Holding::All(guard) => Held::is_held(guard),
        }
    }
    fn lost_reason(&self) -> Option<LostReason> {
        match self {
            Holding::One(guard) => Held::lost_reason(guard),
            Holding::All(guard) => Held::lost_reason(guard),
        }
    }
    async fn give_back(self) -> fencelock::Result<Released> {
        match self {
            Holding::One(guard) => Held::give_back(guard).await,
            Holding::All(guard) => Held::give_back(guard).await,
        }
    }
}

/// Takes what `args` asks for as asked (`--no-wait`, `--wait`, or waiting for ever); `None`
/// when it is held by someone else or the wait timed out (said on stderr).
async fn acquire(
    client: &fencelock::Client,
    handle: &Handle,
    args: &Job,
) -> Result<Option<Holding>, Error> {
    if args.hold.no_wait {
        match handle.try_take(&args.key).await? {
            Ok(holding) => Ok(Some(holding)),
            Err(busy) => {
                let facts = holder(client, &busy.name, busy.remaining).await;
                eprintln!("fencelock: {}{facts}", busy_words(&args.take, &busy.name));
                if let Take::Multi(_) = args.take {
                    eprintln!("fencelock: none of {} was taken", args.take.what(&args.key));
                }
                Ok(None)
            }
        }
    } else if let Some(wait) = args.hold.wait_bound() {
        match handle.take(Some(wait)).await {
            Ok(holding) => Ok(Some(holding)),
            Err(Error::Timeout { .. }) => {
                let wait = humantime::format_duration(wait);
                eprintln!("fencelock: {} after {wait}", timeout_words(args));
                Ok(None)
            }
            Err(e) => Err(e),
        }
    } else {
        handle.take(None).await.map(Some)
    }
}

/// Why `-n` found `name` busy, in the words of what was asked.
fn busy_words(take: &Take, name: &str) -> String {
    match take {
        Take::Read => format!("lock {name:?} is held for writing, or a writer waits for it"),
        Take::Permit(_) => format!("semaphore {name:?} has no free permit"),
        Take::Mutex | Take::Write | Take::Multi(_) => {
            format!("lock {name:?} is held by someone else")
        }
    }
}

/// What a wait that timed out found.
fn timeout_words(args: &Job) -> String {
    let key = &args.key;
    match &args.take {
        Take::Mutex | Take::Write => format!("lock {key:?} still held by someone else"),
        Take::Read => format!("lock {key:?} still held for writing, or a writer still before us"),
        Take::Permit(_) => format!("semaphore {key:?} still has no free permit"),
        Take::Multi(_) => format!("{} still not all free; none is held", args.take.what(key)),
    }
}

/// Who holds lock `name` and for how long, as far as its status says (one more request, on
/// the conflict path only): ` (held by HOST, pid PID (PROGRAM), since …; lease left: 27s)`,
/// each holder of a shared lock with its role (`as reader`).
async fn holder(client: &fencelock::Client, name: &str, remaining: Option<Duration>) -> String {
    let Ok(status) = client.status(name).await else {
        return String::new();
    };
    let mut facts: Vec<String> = status
        .owners
        .iter()
        .filter_map(|(owner, _)| crate::owner::parse(owner))
        .map(|origin| match origin.role {
            Some(role) => format!("held by {} as {}", origin.describe(), role.word()),
            None => format!("held by {}", origin.describe()),
        })
        .collect();
    if let Some(left) = remaining.or(status.remaining_lease) {
        let left = Duration::from_millis(left.as_millis() as u64);
        facts.push(format!("lease left: {}", humantime::format_duration(left)));
    }
    match facts.is_empty() {
        true => String::new(),
        false => format!(" ({})", facts.join("; ")),
    }
}

/// PROGRAM's environment: FENCELOCK_KEY, FENCELOCK_TOKEN (NAME's), and with `--also`
/// FENCELOCK_TOKENS (`NAME=TOKEN,NAME2=TOKEN,...`, in the order given).
fn environment(args: &Job, holding: &Holding) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("FENCELOCK_KEY", args.key.clone()),
        ("FENCELOCK_TOKEN", holding.token(&args.key).to_string()),
    ];
    if let Take::Multi(also) = &args.take {
        let tokens: Vec<String> = std::iter::once(&args.key)
            .chain(also)
            .map(|name| format!("{name}={}", holding.token(name)))
            .collect();
        env.push(("FENCELOCK_TOKENS", tokens.join(",")));
    }
    env
}

/// Acquires the lock, runs PROGRAM under it, releases it; returns the exit status.
async fn hold_and_run(client: &fencelock::Client, args: &Job, signals: &mut Signals) -> u8 {
    let owner = match &args.owner {
        Some(owner) => owner.clone(),
        // PROGRAM's own name, not `sh` (--shell).
        None => crate::owner::for_run(&args.program_name, client.id(), args.take.role()),
    };
    let handle = Handle::new(client, args, &owner);
    let holding = tokio::select! {
        r = acquire(client, &handle, args) => match r {
            Ok(Some(holding)) => holding,
            Ok(None) => return args.hold.conflict_exit_code,
            Err(e) => return crate::explain::report(&e, &args.conn),
        },
        sig = signals.next() => {
            // The dropped attempt may have reached the server. The owner id is this process's
            // alone, so an owner-checked release leaves no lock behind.
            give_up(client, args, &owner).await;
            eprintln!("fencelock: {sig} while waiting for {}; gave up", args.take.what(&args.key));
            return 128 + sig as u8;
        }
    };
    tracing::debug!(key = %args.key, token = holding.token(&args.key), "acquired; starting PROGRAM");
    let env = environment(args, &holding);
    let what = args.take.what(&args.key);
    let spec = args
        .hold
        .spec(&args.conn, what, "holder", &args.program, env);
    held::run_held(&spec, holding, signals).await.code
}

/// After a signal while waiting: an owner-checked release of every name asked for, bounded.
async fn give_up(client: &fencelock::Client, args: &Job, owner: &str) {
    let mut names = vec![args.key.as_str()];
    if let Take::Multi(also) = &args.take {
        names.extend(also.iter().map(String::as_str));
    }
    let releases = names
        .into_iter()
        .map(|name| async move { client.lock(name).with_owner(owner).release().await });
    let all = futures_util::future::join_all(releases);
    let _ = tokio::time::timeout(Duration::from_secs(2), all).await;
}
