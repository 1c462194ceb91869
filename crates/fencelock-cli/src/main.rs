//! `fencelock`: run a program while holding a distributed lock, inspect locks, clear stale ones,
//! and a demo that shows why it is safe.

mod demo;
mod duration;
mod exit;
mod procs;
mod run;
mod status;
mod ui;
mod verify;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

pub use duration::parse_duration;

#[derive(Parser)]
#[command(
    name = "fencelock",
    version,
    about = "Distributed locks with fencing tokens, on Redis, ZooKeeper or etcd"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where the lock service is.
#[derive(Args, Clone)]
pub struct Connection {
    /// Where the locks live: redis://host:6379[/db], redis+cluster://host:port,host:port,...,
    /// redis+sentinel://host:port,host:port,.../master-name, ZooKeeper:
    /// zk://host:port[,host:port...][/base/path] (the session timeout is the lease), or etcd:
    /// etcd://[user@]host:port[,host:port...][/prefix] (the client's lease TTL is the lease,
    /// in whole seconds). Give --url several times (an odd number of redis:// URLs) for
    /// RedLock over independent servers.
    // The text is also the --help text, where the URL forms' brackets are plain brackets.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, env = "FENCELOCK_URL", default_value = "redis://127.0.0.1:6379")]
    pub url: Vec<String>,
    /// Server password (overrides one in the URL; never printed).
    #[arg(long, env = "FENCELOCK_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// Log what happens (acquire, renewals, release) to stderr.
    #[arg(long, short)]
    pub verbose: bool,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field(
                "url",
                &self
                    .url
                    .iter()
                    .map(|u| fencelock::redact_url(u))
                    .collect::<Vec<_>>(),
            )
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("verbose", &self.verbose)
            .finish()
    }
}

impl Connection {
    /// Client options with `lease` as the default lease (the session timeout on ZooKeeper)
    /// and the password, if one was given.
    pub fn options(&self, lease: Duration) -> fencelock::ClientOptions {
        let options = fencelock::ClientOptions::default().default_lease(lease);
        match &self.password {
            Some(p) => options.password(p),
            None => options,
        }
    }

    /// Connects to the URLs (several: RedLock).
    pub async fn connect(&self, lease: Duration) -> Result<fencelock::Client, fencelock::Error> {
        let urls: Vec<&str> = self.url.iter().map(String::as_str).collect();
        fencelock::Client::connect_all_with(&urls, self.options(lease)).await
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run PROGRAM while holding the lock NAME; release it when PROGRAM exits.
    #[command(after_help = exit::TABLE)]
    Run(run::RunArgs),
    /// Show whether a lock is held, by whom, for how long, its last fencing token, and the
    /// waiters queued for it (with the age of each place; expired places are dead waiters).
    Status(status::StatusArgs),
    /// Delete a lock whoever holds it (for a lock you know is stale), and wake its waiters.
    Unlock(status::UnlockArgs),
    /// Show on throwaway local servers what the lock promises: exclusion, fencing, takeover.
    Demo(demo::DemoArgs),
    /// One worker of the demo (used by `fencelock demo`).
    #[command(hide = true)]
    DemoWorker(demo::WorkerArgs),
    /// Check what holds on a deployment under faults: client processes contend for a lock
    /// and write a fenced register while faults come on a seeded schedule; a checker reads
    /// the history; a report (JSON, HTML) shows it. Exit status 0 only when every safety
    /// check passed.
    Verify(verify::VerifyArgs),
    /// One client of `fencelock verify`.
    #[command(hide = true)]
    VerifyClient(verify::ClientArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { exit::USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fencelock: cannot start the runtime: {e}");
            return ExitCode::from(exit::CONNECTION);
        }
    };
    let code = runtime.block_on(async move {
        match cli.command {
            Command::Run(args) => run::run(args).await,
            Command::Status(args) => status::status(args).await,
            Command::Unlock(args) => status::unlock(args).await,
            Command::Demo(args) => demo::demo(args).await,
            Command::DemoWorker(args) => demo::worker(args).await,
            Command::Verify(args) => verify::verify(args).await,
            Command::VerifyClient(args) => verify::client(args).await,
        }
    });
    // Do not wait for blocking tasks (a stdin read) to finish.
    runtime.shutdown_timeout(Duration::from_millis(100));
    ExitCode::from(code)
}

/// Turns on `tracing` output to stderr for `--verbose`.
pub fn init_logging(verbose: bool) {
    if verbose {
        use std::io::IsTerminal;
        let _ = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("FENCELOCK_LOG")
                    .unwrap_or_else(|_| "fencelock=debug,fencelock_cli=debug".into()),
            )
            .try_init();
    }
}
