//! Exit codes of the `fencelock` command, and how errors map to them.

use fencelock::{Error, InputError};

/// A command-line usage error: a bad flag or flag value (sysexits EX_USAGE).
pub const USAGE: u8 = 64;
/// The server could not be reached, refused the password, or the URL is unusable
/// (sysexits EX_UNAVAILABLE).
pub const CONNECTION: u8 = 69;
/// Default for "the lock is held by someone else" and for `--wait` timeouts (sysexits
/// EX_TEMPFAIL, as `flock -n` users expect). Changed with `--conflict-exit-code`.
pub const CONFLICT: u8 = 75;
/// The lock was lost while PROGRAM ran; PROGRAM was stopped. Outside the sysexits range.
pub const LOCK_LOST: u8 = 79;
/// `elect --observe` can no longer follow the election (its connection or session was lost,
/// the service compacted what it watched): sysexits EX_IOERR.
pub const OBSERVE_ENDED: u8 = 74;
/// PROGRAM could not be executed (permission), as in shells.
pub const CANNOT_EXECUTE: u8 = 126;
/// PROGRAM was not found, as in shells.
pub const NOT_FOUND: u8 = 127;

/// The table printed by `fencelock run --help`; README.md has it for every command.
pub const TABLE: &str = "\
EXIT STATUS:
  PROGRAM's own status    PROGRAM ran and exited
  128+N                   PROGRAM (or, while waiting, fencelock) was killed by signal N
  64                      usage error (bad flag or flag value, unknown option before PROGRAM)
  69                      connection or configuration error (server down or not that service,
                          bad URL or URL count, password needed or refused, access denied;
                          the service offers no read-write lock or semaphore; NAME is in use
                          as another primitive, or as a semaphore of another --permits N)
  75                      lock held by someone else (-n/--no-wait; with --also, nothing was
                          taken) or the wait timed out (change with --conflict-exit-code)
  79                      the lock (any of them with --also) was lost before PROGRAM ended;
                          PROGRAM was stopped
  126 / 127               PROGRAM could not be executed / was not found";

/// The table printed by `fencelock elect --help`.
pub const ELECT_TABLE: &str = "\
ENVIRONMENT OF PROGRAM:
  FENCELOCK_KEY           NAME
  FENCELOCK_TOKEN         the term (also in FENCELOCK_TERM): a fencing token, strictly greater
                          than every earlier leader's of this election
  FENCELOCK_VALUE         the value advertised (--value)

EXIT STATUS:
  PROGRAM's own status    PROGRAM ran and exited (--again: the last PROGRAM's, when a SIGINT,
                          SIGTERM or SIGHUP, or Ctrl-C or a hangup of the terminal, ended
                          its term)
  128+N                   PROGRAM (or, while campaigning, as a standby between terms, or
                          observing, fencelock) was killed by signal N
  64                      usage error (bad flag, flag value or combination, unknown option
                          before PROGRAM)
  69                      connection or configuration error (as for `run`), or the service
                          does not hold elections
  74                      --observe: can no longer follow the election (connection or session
                          lost); the lines printed up to then stand
  75                      someone else leads (-n/--no-wait) or the wait timed out
                          (change with --conflict-exit-code)
  79                      the leadership was lost before PROGRAM ended; PROGRAM was stopped
  126 / 127               PROGRAM could not be executed / was not found";

/// The table printed by `fencelock demo --help`.
pub const DEMO_TABLE: &str = "\
EXIT STATUS:
  0                       every scene ran and showed no violation
  1                       a violation, or a scene could not be carried out (or Ctrl-C)
  64                      usage error (bad flag or flag value)
  69                      the throwaway servers could not start (is redis-server installed?
                          zookeeper, etcd for --backend)
  126                     fencelock could not find its own executable to start the workers";

/// The table printed by `fencelock verify --help`.
pub const VERIFY_TABLE: &str = "\
EXIT STATUS:
  0                       every safety check passed, and at least one fault took effect
  1                       safety violations, or a run that could not be carried out (or
                          Ctrl-C)
  2                       inconclusive: no fault happened (all skipped or none took effect)
  64                      usage error (bad flag, flag value or combination)
  69                      the servers cannot start, or --url cannot be reached
  126                     fencelock could not find its own executable to start the clients";

/// The exit status that stands for a program's: its own code, or 128+N when signal N killed
/// it (as shells report it).
pub fn program_status(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => 128u8.saturating_add(sig as u8),
        (None, None) => CANNOT_EXECUTE,
    }
}

/// The exit code for a library error.
pub fn for_error(e: &Error) -> u8 {
    match e {
        Error::InvalidInput(InputError::InvalidUrl { .. } | InputError::DuplicateServer { .. }) => {
            CONNECTION
        }
        Error::InvalidInput(_) => USAGE,
        Error::LockLost { .. } => LOCK_LOST,
        _ => CONNECTION,
    }
}
