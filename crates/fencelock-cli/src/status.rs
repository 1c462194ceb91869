//! `fencelock status [NAME]` and `fencelock unlock NAME --force|--holder ID`.
//!
//! Without NAME, `status` lists every name that has a holding or a waiter under the URL's
//! prefix, a page at a time from the service (bounded memory whatever the count), as text
//! blocks or as one JSON document printed as it goes.

use std::io::{BufRead, IsTerminal, Write};
use std::time::{Duration, SystemTime};

use clap::Args;
use fencelock::{LockKind, LockStatus};

use crate::args::LockName;
use crate::show::Service;
use crate::{exit, init_logging, parse_duration, Connection};

/// The exit status section of `fencelock status --help`.
pub const STATUS_TABLE: &str = "\
EXIT STATUS:
  0    NAME: held (a semaphore: all N permits held; an election: someone leads);
       without NAME: at least one name listed (after --older-than and --kind)
  1    NAME: free (a semaphore: at least one permit free; an election: nobody leads);
       without NAME: nothing listed
  64   usage error (bad flag or flag value)
  69   connection or configuration error (server down or not that service, bad URL,
       password needed or refused, RedLock asked to list every lock)";

/// The exit status section of `fencelock unlock --help`.
pub const UNLOCK_TABLE: &str = "\
EXIT STATUS:
  0    removed, or there was nothing to remove (the message says which)
  1    not confirmed at the prompt
  64   usage error (bad flag or name; no --yes while stdin is not a terminal)
  69   connection or configuration error (server down or not that service, bad URL,
       password needed or refused)";

/// Arguments of `fencelock status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    conn: Connection,
    /// The lock name; without it, every lock, read-write lock, semaphore and election
    /// under the URL's prefix is listed.
    #[arg(value_name = "NAME")]
    name: Option<String>,
    /// The lock name (the older spelling of NAME).
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with = "name",
        hide_short_help = true
    )]
    key: Option<String>,
    /// Print JSON instead of text (without NAME: one document, {"locks": [...]}).
    #[arg(long)]
    json: bool,
    /// Without NAME: list only holdings held longer than DURATION (e.g. 10m), for alerts
    /// from cron (exit 0 when some are listed, 1 when none).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    older_than: Option<Duration>,
    /// Without NAME: list only names used as KIND.
    #[arg(long, value_name = "KIND", value_parser = ["mutex", "rwlock", "semaphore", "election"])]
    kind: Option<String>,
}

/// Arguments of `fencelock unlock`.
#[derive(Args, Debug)]
pub struct UnlockArgs {
    #[command(flatten)]
    conn: Connection,
    #[command(flatten)]
    lock: LockName,
    /// Delete the lock whoever holds it: every holding (every reader, every permit) and the
    /// wait queue. Each holder, if alive, is told at once (within a second; a Redis Cluster's
    /// holder at its next renewal) and its PROGRAM is stopped; waiters are woken.
    #[arg(long, required_unless_present = "holder")]
    force: bool,
    /// Remove only the holding of owner ID (as `status` shows it: one permit, one reader, the
    /// writer, the holder, the leader); its holder is told at once, waiters are woken.
    #[arg(long, value_name = "ID")]
    holder: Option<String>,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    yes: bool,
}

async fn connect(conn: &Connection) -> Result<fencelock::Client, u8> {
    init_logging(conn.verbose);
    conn.connect(None)
        .await
        .map_err(|e| crate::explain::report_connect(&e, conn))
}

/// Closes the client, so that nothing it opened outlives the command (an etcd lease).
async fn close(client: fencelock::Client) {
    if let Err(e) = client.close().await {
        eprintln!("fencelock: warning: {e}");
    }
}

/// Runs `fencelock status`: see [`STATUS_TABLE`].
pub async fn status(args: StatusArgs) -> u8 {
    let name = args.name.clone().or(args.key.clone());
    if name.is_some() && (args.older_than.is_some() || args.kind.is_some()) {
        eprintln!("fencelock: --older-than and --kind filter the listing: leave out NAME");
        return exit::USAGE;
    }
    let client = match connect(&args.conn).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let code = match &name {
        Some(name) => one(&client, &args, name).await,
        None => list(&client, &args).await,
    };
    close(client).await;
    code
}

/// `status NAME`.
async fn one(client: &fencelock::Client, args: &StatusArgs, name: &str) -> u8 {
    let status = match client.status(name).await {
        Ok(s) => s,
        Err(e) => return crate::explain::report(&e, &args.conn),
    };
    let service = Service::of(&args.conn.urls());
    if args.json {
        outln!("{}", crate::show::json(&status, service));
    } else {
        crate::show::text(&status, service);
    }
    // As `test`: 0 when held (a semaphore: full), 1 when free.
    if crate::show::full(&status) {
        0
    } else {
        1
    }
}

/// What a listing keeps of a status: `None` when the filters drop it; else the status with
/// only the holdings held longer than `--older-than`.
fn kept(mut status: LockStatus, args: &StatusArgs, now: SystemTime) -> Option<LockStatus> {
    if let Some(kind) = args.kind.as_deref() {
        if status.kind != LockKind::from_word(kind) {
            return None;
        }
    }
    if let Some(older) = args.older_than {
        status
            .holders
            .retain(|h| h.held_for(now).is_some_and(|d| d > older));
        if status.holders.is_empty() {
            return None;
        }
    }
    Some(status)
}

/// `status` without NAME: every name, as it is read.
async fn list(client: &fencelock::Client, args: &StatusArgs) -> u8 {
    let service = Service::of(&args.conn.urls());
    let mut listing = client.list();
    let (mut listed, mut unknown_age) = (0u64, 0u64);
    if args.json {
        out!(
            "{{\"service\":\"{}\",\"locks\":[",
            format!("{service:?}").to_lowercase()
        );
    }
    while let Some(next) = listing.next().await {
        let status = match next {
            Ok(s) => s,
            Err(e) => {
                if args.json {
                    outln!("]}}");
                }
                return crate::explain::report(&e, &args.conn);
            }
        };
        if args.older_than.is_some() {
            unknown_age += status.holders.iter().filter(|h| h.since.is_none()).count() as u64;
        }
        let Some(status) = kept(status, args, SystemTime::now()) else {
            continue;
        };
        if args.json {
            let comma = if listed > 0 { "," } else { "" };
            out!("{comma}\n{}", crate::show::json(&status, service));
        } else {
            if listed > 0 {
                outln!();
            }
            crate::show::text(&status, service);
        }
        listed += 1;
    }
    if args.json {
        outln!("\n]}}");
    } else if listed == 0 {
        eprintln!("fencelock: nothing listed");
    }
    if unknown_age > 0 {
        eprintln!(
            "fencelock: warning: {unknown_age} holding(s) of unknown age left out of \
             --older-than (etcd keeps no time with a key)"
        );
    }
    if listed > 0 {
        0
    } else {
        1
    }
}

/// What `unlock` removes, in words: `the permit … of semaphore "s"`, `2 permit(s) of
/// semaphore "s" (held by …)`.
fn what_goes(status: &LockStatus, holder: Option<&str>) -> String {
    let name = &status.name;
    let who = |owner: &str| match crate::owner::parse(owner) {
        Some(origin) => format!("{} [{owner}]", origin.describe()),
        None => owner.to_string(),
    };
    if let Some(id) = holder {
        let role = status
            .holders
            .iter()
            .find(|h| h.owner == id)
            .map_or("holding", |h| h.role.word());
        let kind = status.kind.map_or("lock", LockKind::word);
        return format!("the {role} {} of {kind} {name:?}", who(id));
    }
    let n = status.holders.len();
    let owners: Vec<String> = status.holders.iter().map(|h| who(&h.owner)).collect();
    let owners = owners.join(", ");
    match status.kind {
        Some(LockKind::Semaphore) => {
            format!("{n} permit(s) of semaphore {name:?} (held by {owners})")
        }
        Some(LockKind::ReadWrite) => {
            format!("{n} holding(s) of read-write lock {name:?} ({owners})")
        }
        Some(LockKind::Election) => format!("the leader of election {name:?} ({owners})"),
        _ => format!("lock {name:?} held by {owners}"),
    }
}

/// Asks before removing `what`; `Err(code)` when not confirmed.
async fn confirm(what: &str) -> Result<(), u8> {
    if !std::io::stdin().is_terminal() {
        eprintln!("fencelock: refusing to remove {what} without --yes (stdin is not a terminal)");
        return Err(exit::USAGE);
    }
    eprint!("Remove {what}? [y/N] ");
    let _ = std::io::stderr().flush();
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).map(|_| line)
    })
    .await;
    let yes = matches!(answer, Ok(Ok(line)) if matches!(line.trim(), "y" | "Y" | "yes"));
    if !yes {
        eprintln!("fencelock: not removed");
        return Err(1);
    }
    Ok(())
}

/// Runs `fencelock unlock --force|--holder ID`: see [`UNLOCK_TABLE`].
pub async fn unlock(args: UnlockArgs) -> u8 {
    let name = args.lock.get().to_owned();
    if let Err(e) = fencelock::validate_name(&name) {
        eprintln!("fencelock: {e}");
        return exit::USAGE;
    }
    let client = match connect(&args.conn).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let code = unlock_with(&client, &args, &name).await;
    // With RedLock, let the deletion reach every server before exiting.
    close(client).await;
    code
}

/// `unlock` on a connected client: what goes, asked for unless `--yes`, then removed.
async fn unlock_with(client: &fencelock::Client, args: &UnlockArgs, name: &str) -> u8 {
    let holder = args.holder.as_deref();
    let status = match client.status(name).await {
        Ok(s) => s,
        Err(e) => return crate::explain::report(&e, &args.conn),
    };
    let what = what_goes(&status, holder);
    let held = match holder {
        Some(id) => status.holders.iter().any(|h| h.owner == id),
        None => status.held,
    };
    if !held {
        let whose = holder.map_or(String::new(), |id| format!(" by {id}"));
        outln!("lock {name:?} is not held{whose}; nothing to remove");
        return 0;
    }
    if !args.yes {
        if let Err(code) = confirm(&what).await {
            return code;
        }
    }
    let result = match holder {
        Some(id) => client.force_unlock_holder(name, id).await,
        None => client.force_unlock(name).await,
    };
    match result {
        Ok(removed) if removed.is_empty() => {
            outln!("lock {name:?} was not held; nothing removed");
            0
        }
        Ok(removed) => {
            let holds: u64 = removed.iter().map(|(_, n)| n).sum();
            outln!("removed {what} (hold count {holds}); waiters woken");
            0
        }
        Err(e) => crate::explain::report(&e, &args.conn),
    }
}
