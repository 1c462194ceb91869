//! `fencelock demo`: worker processes under `fencelock run` contend for one lock and update a
//! record that checks fencing tokens; then a holder is frozen past its lease (or, on
//! ZooKeeper, its session), and another is killed; last, the leader of an active/standby pair
//! under `fencelock elect --again` is frozen, the standby takes over, and the thawed leader's
//! late write is refused by its term. Everything runs on throwaway local servers started
//! through the test kit: the lock on the chosen backend, the record on Redis.
//!
//! - `service`: the backends ([`Backend`]) and their throwaway servers.
//! - `stage`: the holder processes (`run`, or `elect --again`; started, awaited, frozen and
//!   killed by PID) and the output.
//! - `scenes`: the scenes and the summary.
//! - `worker`: the hidden `demo-worker`, which reads and writes the record (once, or as an
//!   active service until the end of its term: `--serve`).

mod scenes;
mod service;
mod stage;
mod worker;

use std::io::IsTerminal;

use clap::Args;

use crate::exit;
pub use service::Backend;
use stage::{Stage, Started, Ui};
pub use worker::{worker, WorkerArgs};

/// Arguments of `fencelock demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// The service the lock lives on (the record stays on a throwaway Redis).
    #[arg(long, value_enum, default_value_t = Backend::Redis)]
    backend: Backend,
    /// Worker processes contending in the first scene (2 to 64: contention needs two).
    #[arg(long, default_value_t = 4, value_parser = in_range(2, 64))]
    workers: usize,
    /// Lock acquisitions per worker in the first scene (1 to 1000).
    #[arg(long, default_value_t = 6, value_parser = in_range(1, 1000))]
    rounds: usize,
}

/// A parser of whole numbers from `min` to `max`.
fn in_range(min: usize, max: usize) -> impl Fn(&str) -> Result<usize, String> + Clone {
    move |s: &str| match s.parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a whole number from {min} to {max}")),
    }
}

/// Runs `fencelock demo`.
pub async fn demo(args: DemoArgs) -> u8 {
    let ui = Ui {
        tty: std::io::stdout().is_terminal(),
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("fencelock demo: cannot find my own executable: {e}");
            return exit::CANNOT_EXECUTE;
        }
    };
    let (service, record) = match service::start(args.backend).await {
        Ok(servers) => servers,
        Err(e) => {
            eprintln!("fencelock demo: {e}");
            return exit::CONNECTION;
        }
    };
    ui.line(&format!(
        "fencelock demo: the lock lives on {} at {}, the record on Redis at {} \
         (throwaway local servers; the record accepts a write only with a current fencing token)",
        service.name,
        service.url,
        record.url()
    ));
    let stage = Stage {
        exe,
        service,
        record,
        started: Started::default(),
        ui,
    };
    let outcome = tokio::select! {
        r = scenes::play(&stage, &args) => r,
        _ = tokio::signal::ctrl_c() => Err("interrupted".to_owned()),
    };
    stage.started.kill_all();
    match outcome {
        Ok(0) => 0,
        Ok(_) => 1,
        Err(e) => {
            stage.ui.line(&format!("fencelock demo: {e}"));
            1
        }
    }
}
