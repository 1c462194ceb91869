//! `fencelock elect`: run a program while leading an election, or follow its leader.
//!
//! Campaigning, PROGRAM runs under `held.rs`'s supervision, as under `fencelock run`: its
//! whole group is gone before the leadership is resigned, and a leadership lost while it runs
//! stops it (SIGTERM, SIGKILL after `--kill-grace`, 79). With `--again` the command campaigns
//! anew after each term (PROGRAM exited, or the leadership was lost): an active/standby
//! supervisor, which a SIGINT, SIGTERM or SIGHUP ends: sent to this process, or to PROGRAM's
//! group by the terminal (Ctrl-C, a hangup: PROGRAM's group is the foreground group, and its
//! supervisor reports the signal). A standby ends at once with 128+N, a leader once PROGRAM
//! ended, with PROGRAM's status. `--observe` prints the leader and each change, one flushed
//! line each (`--json`: one JSON object a line).
//!
//! Flag combinations are checked on clap's matches ([`check_combinations`]), before anything
//! is contacted: whether a flag with a default was given matters there.

use std::io::Write;
use std::time::{Duration, Instant, SystemTime};

use clap::Args;
use fencelock::{Election, Error, Leader, Leadership};

use crate::held::{self, HoldArgs, Signals};
use crate::{exit, init_logging, Connection};

/// Arguments of `fencelock elect`.
#[derive(Args, Debug)]
#[command(
    override_usage = "fencelock elect [OPTIONS] NAME [--] PROGRAM [ARGS]...\n       \
                      fencelock elect [OPTIONS] NAME --again [--] PROGRAM [ARGS]...\n       \
                      fencelock elect [OPTIONS] NAME --observe [--json]",
    // HoldArgs speak of a lock (`run`'s words); an election is led.
    mut_arg("wait", |a| a.help("Wait at most this long to lead, up to 7d (default: forever)")),
    mut_arg("no_wait", |a| a.help("Fail at once if someone else leads (flock's -n)")),
    mut_arg("conflict_exit_code", |a| a.help("Exit status when someone else leads or the wait timed out")),
    mut_arg("lease", |a| a.help("The leadership's lease (10ms to 7d); renewed every lease/3 while PROGRAM runs")),
    mut_arg("kill_grace", |a| a.help("When the leadership is lost, how long PROGRAM gets between SIGTERM and SIGKILL (up to 7d)")),
)]
pub struct ElectArgs {
    #[command(flatten)]
    conn: Connection,
    #[command(flatten)]
    hold: HoldArgs,
    /// The value this participant advertises while it leads: one line of text, at most 4096
    /// bytes (default: HOST:PID of this process). PROGRAM gets it in FENCELOCK_VALUE.
    #[arg(long, value_name = "TEXT")]
    value: Option<String>,
    /// Campaign anew after PROGRAM exits or the leadership is lost, until SIGINT, SIGTERM or
    /// SIGHUP (also Ctrl-C or a hangup of the terminal): one of an active/standby set. A
    /// standby then exits at once with 128+N; a leader resigns once PROGRAM ended and exits
    /// with PROGRAM's status (130 for a PROGRAM that Ctrl-C ended).
    #[arg(long)]
    again: bool,
    /// Do not campaign: print the current leader (or none), then one line per change (value,
    /// term, since when, RFC 3339 UTC), each flushed. Exits 74 when it can no longer follow.
    #[arg(long)]
    observe: bool,
    /// With --observe: one JSON object per line, {"value": .., "term": .., "since": ..}, with
    /// "value" and "term" null when nobody leads.
    #[arg(long)]
    json: bool,
    /// The election's name.
    #[arg(value_name = "NAME", required = true)]
    name: Option<String>,
    /// The program and its arguments, run while this participant leads. It gets FENCELOCK_KEY
    /// (NAME), FENCELOCK_TOKEN and FENCELOCK_TERM (the term: a fencing token, strictly greater
    /// than every earlier leader's) and FENCELOCK_VALUE in its environment, and runs in its
    /// own process group, which it does not outlive (as under `fencelock run`). Every word
    /// before PROGRAM that starts with `-` must be an option.
    #[arg(trailing_var_arg = true, value_name = "PROGRAM")]
    program: Vec<String>,
}

/// The flags that only a campaign takes, as clap names them and as the user spells them.
const CAMPAIGN_ONLY: [(&str, &str); 9] = [
    ("value", "--value"),
    ("no_wait", "-n/--no-wait"),
    ("wait", "--wait"),
    ("wait_seconds", "-w"),
    ("lease", "--lease"),
    ("conflict_exit_code", "--conflict-exit-code"),
    ("kill_grace", "--kill-grace"),
    ("shell", "--shell"),
    ("again", "--again"),
];

/// Refuses the combinations that make no sense, in the CLI's words, before anything is
/// contacted. On the matches, since a flag with a default given or not matters.
pub fn check_combinations(m: &clap::ArgMatches) -> Result<(), clap::Error> {
    use clap::parser::ValueSource;
    let given = |id: &str| m.value_source(id) == Some(ValueSource::CommandLine);
    let refuse = |message: String| {
        Err(clap::Error::raw(
            clap::error::ErrorKind::ArgumentConflict,
            format!("{message}\n"),
        ))
    };
    if given("observe") {
        if given("program") {
            return refuse(
                "--observe only follows the election's leader and runs no PROGRAM: drop \
                 PROGRAM, or drop --observe to campaign and run it while leading"
                    .into(),
            );
        }
        if let Some((_, flag)) = CAMPAIGN_ONLY.iter().find(|(id, _)| given(id)) {
            return refuse(format!(
                "{flag} is for a campaign, but --observe only follows the leader: drop {flag}, \
                 or drop --observe to campaign"
            ));
        }
    } else if given("json") {
        return refuse("--json goes with --observe (one JSON object per leader change)".into());
    }
    if given("again") {
        if let Some(flag) = ["no_wait", "wait", "wait_seconds"]
            .into_iter()
            .find(|id| given(id))
        {
            let flag = CAMPAIGN_ONLY
                .iter()
                .find(|(id, _)| *id == flag)
                .map_or("", |f| f.1);
            return refuse(format!(
                "--again campaigns until it leads, every time, but {flag} gives up waiting: \
                 give one or the other"
            ));
        }
    }
    Ok(())
}

/// A campaign, checked.
#[derive(Debug)]
struct Campaign {
    conn: Connection,
    name: String,
    hold: HoldArgs,
    value: String,
    again: bool,
    /// The command to run: PROGRAM and its arguments, or `sh -c LINE`.
    program: Vec<String>,
}

/// What `fencelock elect` was asked to do.
#[derive(Debug)]
enum Mode {
    Campaign(Campaign),
    Observe {
        conn: Connection,
        name: String,
        json: bool,
    },
}

impl ElectArgs {
    /// Checks what clap cannot: PROGRAM (`--shell`'s one line), the value's length. The error
    /// is a usage error's text.
    fn resolve(self) -> Result<Mode, String> {
        let name = self.name.unwrap_or_default();
        if self.observe {
            let (conn, json) = (self.conn, self.json);
            return Ok(Mode::Observe { conn, name, json });
        }
        let what = format!("the leadership of election {name:?} (or --observe to follow it)");
        let (_, program) = self.hold.command(self.program, &what)?;
        let value = self
            .value
            .unwrap_or_else(|| format!("{}:{}", crate::owner::host_name(), std::process::id()));
        if value.contains(char::is_control) {
            return Err(format!(
                "--value {value:?} has a control character (a newline, a tab): an election's \
                 value is one line of text, as `--observe` prints one line per change"
            ));
        }
        if value.len() > fencelock::MAX_VALUE_LEN {
            return Err(format!(
                "--value is {} bytes long; an election value is at most {} bytes",
                value.len(),
                fencelock::MAX_VALUE_LEN
            ));
        }
        Ok(Mode::Campaign(Campaign {
            conn: self.conn,
            name,
            hold: self.hold,
            value,
            again: self.again,
            program,
        }))
    }
}

/// Runs `fencelock elect`; returns the exit status.
pub async fn elect(args: ElectArgs) -> u8 {
    let mode = match args.resolve() {
        Ok(mode) => mode,
        Err(message) => return crate::usage_error("elect", &message),
    };
    let (conn, name, lease) = match &mode {
        Mode::Campaign(c) => (&c.conn, &c.name, Some(c.hold.lease)),
        Mode::Observe { conn, name, .. } => (conn, name, None),
    };
    init_logging(conn.verbose);
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => {
            errln!("fencelock: cannot handle signals: {e}");
            return exit::CONNECTION;
        }
    };
    if let Err(e) = fencelock::validate_name(name) {
        return crate::explain::report(&e.into(), conn);
    }
    let client = tokio::select! {
        c = conn.connect(lease) => match c {
            Ok(c) => c,
            Err(e) => return crate::explain::report_connect(&e, conn),
        },
        sig = signals.next() => return 128 + sig as u8,
    };
    let code = match &mode {
        Mode::Campaign(c) => lead(&client, c, &mut signals).await,
        Mode::Observe { json, .. } => {
            observe(&client.election(name), conn, *json, &mut signals).await
        }
    };
    // Let a resignation (or a withdrawn campaign) reach the servers before this process exits.
    if let Err(e) = client.close().await {
        errln!("fencelock: warning: {e}");
    }
    code
}

/// The shortest time between two campaigns of `--again`: a PROGRAM that fails at once is
/// started at most once a second.
const PACE: Duration = Duration::from_secs(1);

/// The longest pause between campaigns that failed (`--again`), doubling from [`PACE`].
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Campaigns, runs PROGRAM while leading, resigns; again and again with `--again`. Returns
/// the exit status.
async fn lead(client: &fencelock::Client, c: &Campaign, signals: &mut Signals) -> u8 {
    let election = client.election(&c.name);
    let mut backoff = PACE;
    loop {
        let leadership = tokio::select! {
            r = campaign(&election, c) => match r {
                Ok(Some(leadership)) => leadership,
                Ok(None) => return c.hold.conflict_exit_code,
                Err(e) if c.again && retryable(&e) => {
                    errln!(
                        "fencelock: campaign for election {:?} failed: {}; trying again in {}",
                        c.name,
                        crate::explain::explain(&e, &c.conn, false),
                        humantime::format_duration(backoff)
                    );
                    if let Some(sig) = pause(backoff, signals).await {
                        return 128 + sig as u8;
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
                Err(e) => return crate::explain::report(&e, &c.conn),
            },
            sig = signals.next() => {
                // The dropped campaign withdraws its participant (the client's close waits).
                errln!("fencelock: {sig} while campaigning in election {:?}; gave up", c.name);
                return 128 + sig as u8;
            }
        };
        backoff = PACE;
        let started = Instant::now();
        let ran = lead_once(c, leadership, signals).await;
        if let (true, Some(sig)) = (c.again, ran.signalled) {
            errln!(
                "fencelock: {sig} ended the term in election {:?} (exit status {}); not \
                 campaigning again",
                c.name,
                ran.code
            );
        }
        if !c.again || ran.signalled.is_some() {
            return ran.code;
        }
        errln!(
            "fencelock: term over in election {:?} (exit status {}); campaigning again",
            c.name,
            ran.code
        );
        if let Some(sig) = pause(PACE.saturating_sub(started.elapsed()), signals).await {
            return 128 + sig as u8;
        }
    }
}

/// Runs PROGRAM under `leadership` (one term); resigns after.
async fn lead_once(c: &Campaign, leadership: Leadership, signals: &mut Signals) -> held::Ran {
    let term = leadership.term().to_string();
    tracing::debug!(election = %c.name, %term, "leading; starting PROGRAM");
    let env = vec![
        ("FENCELOCK_KEY", c.name.clone()),
        ("FENCELOCK_TOKEN", term.clone()),
        ("FENCELOCK_TERM", term),
        ("FENCELOCK_VALUE", c.value.clone()),
    ];
    let what = format!("leadership of election {:?}", c.name);
    let spec = c.hold.spec(&c.conn, what, "leader", &c.program, env);
    held::run_held(&spec, leadership, signals).await
}

/// Waits `how_long`, or until a SIGINT, SIGTERM or SIGHUP (returned).
async fn pause(how_long: Duration, signals: &mut Signals) -> Option<nix::sys::signal::Signal> {
    tokio::select! {
        _ = tokio::time::sleep(how_long) => None,
        sig = signals.next() => Some(sig),
    }
}

/// Whether `--again` tries a failed campaign again: the service was unreachable or lost the
/// participant; not a refusal that the next try would meet too.
fn retryable(e: &Error) -> bool {
    matches!(
        e,
        Error::Unavailable { .. }
            | Error::Server { .. }
            | Error::Protocol { .. }
            | Error::Quorum { .. }
            | Error::LockLost { .. }
            | Error::Timeout { .. }
            | Error::Unfinished { .. }
    )
}

/// Campaigns as asked (`--no-wait`, `--wait`, or waiting for ever); `None` when someone else
/// leads or the wait timed out (said on stderr).
async fn campaign(election: &Election, c: &Campaign) -> Result<Option<Leadership>, Error> {
    if c.hold.no_wait {
        match election.try_campaign(&c.value).await? {
            Ok(leadership) => Ok(Some(leadership)),
            Err(_) => {
                let leader = match election.leader().await {
                    Ok(Some(l)) => format!(": {} (term {})", l.value, l.term),
                    _ => String::new(),
                };
                errln!(
                    "fencelock: election {:?} has another leader{leader}",
                    c.name
                );
                Ok(None)
            }
        }
    } else if let Some(wait) = c.hold.wait_bound() {
        match election.campaign_timeout(&c.value, wait).await {
            Ok(leadership) => Ok(Some(leadership)),
            Err(Error::Timeout { .. }) => {
                errln!(
                    "fencelock: election {:?} still has another leader after {}",
                    c.name,
                    humantime::format_duration(wait)
                );
                Ok(None)
            }
            Err(e) => Err(e),
        }
    } else {
        election.campaign(&c.value).await.map(Some)
    }
}

/// Prints the leader and each change until the observer fails (74), stdout is closed (0), or a
/// signal comes (128+N).
async fn observe(election: &Election, conn: &Connection, json: bool, signals: &mut Signals) -> u8 {
    let mut observer = tokio::select! {
        o = election.observe() => match o {
            Ok(o) => o,
            Err(e) => return crate::explain::report(&e, conn),
        },
        sig = signals.next() => return 128 + sig as u8,
    };
    let mut reported = false;
    loop {
        let changed = tokio::select! {
            c = observer.changed() => c,
            sig = signals.next() => return 128 + sig as u8,
        };
        match changed {
            Ok(leader) => {
                if print_leader(leader.as_ref(), json).is_err() {
                    // The reader went away (`| head -1`): stop quietly, as other tools do.
                    return 0;
                }
                reported = true;
            }
            // Nothing followed yet: the service cannot follow at all (or refuses to).
            Err(e) if !reported => return crate::explain::report(&e, conn),
            Err(e) => {
                errln!(
                    "fencelock: can no longer follow election {:?}: {}",
                    election.name(),
                    crate::explain::explain(&e, conn, false)
                );
                return exit::OBSERVE_ENDED;
            }
        }
    }
}

/// `value` on one line: a value with control characters has them escaped as Rust escapes them
/// (`\n`, `\u{1b}`) and its backslashes doubled, so that it reads back unambiguously; any
/// other value is printed as it is.
fn one_line(value: &str) -> String {
    if !value.contains(char::is_control) {
        return value.to_string();
    }
    value
        .chars()
        .map(|c| match c {
            '\\' => "\\\\".to_string(),
            c if c.is_control() => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// One line for `leader` (observed now), flushed.
fn print_leader(leader: Option<&Leader>, json: bool) -> std::io::Result<()> {
    let since = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
    let line = match (json, leader) {
        (true, _) => serde_json::json!({
            "value": leader.map(|l| &l.value),
            "term": leader.map(|l| l.term),
            "since": since,
        })
        .to_string(),
        // A value another client set may hold a newline: escaped, to keep one line a change.
        (false, Some(l)) => format!(
            "leader: {}, term {}, since {since}",
            one_line(&l.value),
            l.term
        ),
        (false, None) => format!("leader: none, since {since}"),
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()
}
