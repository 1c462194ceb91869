//! `fencelock status` and `fencelock unlock --force`.

use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use clap::Args;
use serde_json::json;

use crate::args::LockName;
use crate::exit;
use crate::{init_logging, Connection};

/// Arguments of `fencelock status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    conn: Connection,
    #[command(flatten)]
    lock: LockName,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of `fencelock unlock`.
#[derive(Args, Debug)]
pub struct UnlockArgs {
    #[command(flatten)]
    conn: Connection,
    #[command(flatten)]
    lock: LockName,
    /// Required: delete the lock whoever holds it. Its holder, if alive, learns of it at its
    /// next renewal; waiters are woken at once.
    #[arg(long, required = true)]
    force: bool,
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

/// Runs `fencelock status`.
pub async fn status(args: StatusArgs) -> u8 {
    let client = match connect(&args.conn).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let status = match client.status(args.lock.get()).await {
        Ok(s) => s,
        Err(e) => return crate::explain::report(&e, &args.conn),
    };
    let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
    if args.json {
        let owners: Vec<_> = status
            .owners
            .iter()
            .map(|(owner, count)| json!({ "owner": owner, "hold_count": count }))
            .collect();
        let waiters: Vec<_> = status
            .waiters
            .iter()
            .map(|w| {
                json!({
                    "owner": w.owner,
                    "age_ms": ms(Some(w.age)),
                    "window_ms": ms(Some(w.window)),
                    "remaining_ms": ms(Some(w.remaining)),
                    "expired": w.expired,
                    "unreadable": w.unreadable,
                })
            })
            .collect();
        let out = json!({
            "name": status.name,
            "held": status.held,
            "owners": owners,
            "remaining_lease_ms": ms(status.remaining_lease),
            "fencing_token": status.fencing_token,
            "last_token": status.last_token,
            "waiters": waiters,
        });
        outln!("{out}");
        return 0;
    }
    if status.held {
        outln!("lock {:?} is held", status.name);
        for (owner, count) in &status.owners {
            outln!("  owner:           {owner} (hold count {count})");
        }
        match status.remaining_lease {
            Some(d) => outln!(
                "  remaining lease: {}",
                humantime::format_duration(round_ms(d))
            ),
            None => outln!("  remaining lease: no expiry"),
        }
        if let Some(token) = status.fencing_token {
            outln!("  fencing token:   {token}");
        }
    } else {
        outln!("lock {:?} is free", status.name);
        match status.last_token {
            Some(token) => outln!("  last fencing token: {token}"),
            None => outln!("  never taken"),
        }
    }
    if args.conn.urls().len() > 1 {
        outln!("  waiters:         not tracked (RedLock keeps no wait queue)");
    } else {
        print_waiters(&status.waiters);
    }
    0
}

/// The wait queue: a header `  waiters:         none` or
/// `  waiters:         N in arrival order[ (E expired[, U unreadable])]`, then one line per
/// place in arrival order, owners padded to one width:
/// `    N. OWNER  age AGE, valid for LEFT` (the window has time left),
/// `    N. OWNER  age AGE, expired AGO ago` (the release will skip it: a dead waiter), or
/// `    N. OWNER  unreadable: WHY`. Durations in humantime form, whole milliseconds.
/// Documented in the README; tests parse it.
fn print_waiters(waiters: &[fencelock::Waiter]) {
    if waiters.is_empty() {
        outln!("  waiters:         none");
        return;
    }
    let unreadable = waiters.iter().filter(|w| w.unreadable.is_some()).count();
    let expired = waiters
        .iter()
        .filter(|w| w.expired && w.unreadable.is_none())
        .count();
    let mut counts = Vec::new();
    if expired > 0 {
        counts.push(format!("{expired} expired"));
    }
    if unreadable > 0 {
        counts.push(format!("{unreadable} unreadable"));
    }
    out!("  waiters:         {} in arrival order", waiters.len());
    if counts.is_empty() {
        outln!();
    } else {
        outln!(" ({})", counts.join(", "));
    }
    let human = |d: Duration| humantime::format_duration(round_ms(d)).to_string();
    let width = waiters.iter().map(|w| w.owner.len()).max().unwrap_or(0);
    for (i, w) in waiters.iter().enumerate() {
        let state = match &w.unreadable {
            Some(why) => format!("unreadable: {why}"),
            None if w.expired => format!(
                "age {}, expired {} ago",
                human(w.age),
                human(w.age.saturating_sub(w.window))
            ),
            None => format!("age {}, valid for {}", human(w.age), human(w.remaining)),
        };
        outln!("    {}. {:<width$}  {state}", i + 1, w.owner);
    }
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

/// Runs `fencelock unlock --force`.
pub async fn unlock(args: UnlockArgs) -> u8 {
    debug_assert!(args.force, "clap requires --force");
    if let Err(e) = fencelock::validate_name(args.lock.get()) {
        eprintln!("fencelock: {e}");
        return exit::USAGE;
    }
    let client = match connect(&args.conn).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    if !args.yes {
        let held = match client.status(args.lock.get()).await {
            Ok(s) => s,
            Err(e) => return crate::explain::report(&e, &args.conn),
        };
        if !held.held {
            outln!("lock {:?} is not held; nothing to remove", args.lock.get());
            return 0;
        }
        let owners: Vec<String> = held.owners.iter().map(|(o, _)| o.clone()).collect();
        if !std::io::stdin().is_terminal() {
            eprintln!(
                "fencelock: refusing to delete lock {:?} without --yes (stdin is not a terminal)",
                args.lock.get()
            );
            return exit::USAGE;
        }
        eprint!(
            "Delete lock {:?} held by {}? [y/N] ",
            args.lock.get(),
            owners.join(", ")
        );
        let _ = std::io::stderr().flush();
        let answer = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).map(|_| line)
        })
        .await;
        let yes = matches!(answer, Ok(Ok(line)) if matches!(line.trim(), "y" | "Y" | "yes"));
        if !yes {
            eprintln!("fencelock: not deleted");
            return 1;
        }
    }
    let result = client.force_unlock(args.lock.get()).await;
    // With RedLock, let the deletion reach every server before exiting.
    if let Err(e) = client.close().await {
        eprintln!("fencelock: warning: {e}");
    }
    match result {
        Ok(removed) if removed.is_empty() => {
            outln!("lock {:?} was not held; nothing removed", args.lock.get());
            0
        }
        Ok(removed) => {
            for (owner, count) in removed {
                outln!(
                    "removed lock {:?} held by {owner} (hold count {count}); waiters woken",
                    args.lock.get()
                );
            }
            0
        }
        Err(e) => crate::explain::report(&e, &args.conn),
    }
}
