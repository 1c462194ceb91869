//! `fencelock status` and `fencelock unlock --force`.

use std::io::{BufRead, IsTerminal, Write};

use clap::Args;

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

/// Runs `fencelock status`: 0 when the lock is held, 1 when it is free.
pub async fn status(args: StatusArgs) -> u8 {
    let client = match connect(&args.conn).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let status = match client.status(args.lock.get()).await {
        Ok(s) => s,
        Err(e) => return crate::explain::report(&e, &args.conn),
    };
    let service = crate::show::Service::of(&args.conn.urls());
    if args.json {
        outln!("{}", crate::show::json(&status, service));
    } else {
        crate::show::text(&status, service);
    }
    // As `test`: 0 when held, 1 when free.
    if status.held {
        0
    } else {
        1
    }
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
        let owners: Vec<String> = held
            .owners
            .iter()
            .map(|(o, _)| match crate::owner::parse(o) {
                Some(origin) => format!("{} [{o}]", origin.describe()),
                None => o.clone(),
            })
            .collect();
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
