//! Flags several commands share: where the lock service is (`--url`, `--password`, `-v`),
//! and the lock's name (positional NAME, or `--key NAME`, the older spelling).

use std::time::Duration;

use clap::Args;

use crate::services::DEFAULT_URL;

/// Where the lock service is.
///
/// `FENCELOCK_URL` and `FENCELOCK_PASSWORD` are read here rather than by clap's `env`: a
/// value clap takes from the environment counts as given on the command line, and its usage
/// lines would then show `--url <URL>` as if it were required.
#[derive(Args, Clone)]
pub struct Connection {
    // Help text from the library's registry of services (`url_help`).
    #[arg(long, value_name = "URL", help = "The service's URL [env: FENCELOCK_URL]", long_help = crate::services::url_help())]
    url: Vec<String>,
    /// Server password (overrides one in the URL; never printed) [env: FENCELOCK_PASSWORD].
    #[arg(long)]
    password: Option<String>,
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
                    .urls()
                    .iter()
                    .map(|u| fencelock::redact_url(u))
                    .collect::<Vec<_>>(),
            )
            .field("password", &self.password().map(|_| "***"))
            .field("verbose", &self.verbose)
            .finish()
    }
}

impl Connection {
    /// The URLs: `--url`, else `FENCELOCK_URL`, else [`DEFAULT_URL`].
    pub fn urls(&self) -> Vec<String> {
        if !self.url.is_empty() {
            return self.url.clone();
        }
        match std::env::var("FENCELOCK_URL") {
            Ok(url) if !url.is_empty() => vec![url],
            _ => vec![DEFAULT_URL.to_string()],
        }
    }

    /// The password: `--password`, else `FENCELOCK_PASSWORD`.
    pub fn password(&self) -> Option<String> {
        self.password
            .clone()
            .or_else(|| std::env::var("FENCELOCK_PASSWORD").ok())
            .filter(|p| !p.is_empty())
    }

    /// Client options with `lease` as the default lease (the session timeout on ZooKeeper)
    /// and the password, if one was given.
    pub fn options(&self, lease: Duration) -> fencelock::ClientOptions {
        let options = fencelock::ClientOptions::default().default_lease(lease);
        match self.password() {
            Some(p) => options.password(p),
            None => options,
        }
    }

    /// Connects to the URLs (several: RedLock), asking for `lease` (`--lease`), or for a
    /// default one when the command has no `--lease`. Prints the problems the client found
    /// that a user must see even without `-v` (a Redis that may evict lock keys, a lease the
    /// service shortened), in the CLI's words.
    pub async fn connect(
        &self,
        lease: Option<Duration>,
    ) -> Result<fencelock::Client, fencelock::Error> {
        let urls = self.urls();
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        let options = self.options(lease.unwrap_or(Duration::from_secs(30)));
        let client = fencelock::Client::connect_all_with(&urls, options).await?;
        self.print_warnings(&client, lease.is_some());
        Ok(client)
    }

    /// Prints the client's warnings (a command without `--lease` asked for no lease: the
    /// warnings about it are left out).
    fn print_warnings(&self, client: &fencelock::Client, lease: bool) {
        for warning in client.warnings() {
            // Lease warnings concern --lease; a command without it asked for no lease.
            let about_lease = matches!(warning, fencelock::Warning::LeaseAdjusted { .. });
            if lease || !about_lease {
                let text = warning.to_string();
                eprintln!(
                    "fencelock: warning: {}",
                    text.replace("ClientOptions::default_lease", "--lease")
                );
            }
        }
    }
}

/// The lock's name for `status` and `unlock`: NAME, or `--key NAME` as `run` once took it.
#[derive(Args, Debug)]
pub struct LockName {
    /// The lock name.
    #[arg(value_name = "NAME", required_unless_present = "key")]
    name: Option<String>,
    /// The lock name (the older spelling of NAME).
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with = "name",
        hide_short_help = true
    )]
    key: Option<String>,
}

impl LockName {
    /// The name given.
    pub fn get(&self) -> &str {
        self.name.as_deref().or(self.key.as_deref()).unwrap_or("")
    }
}
