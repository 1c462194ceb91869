//! clap's "unexpected argument" in the CLI's words, where a user meant something clap cannot
//! know: a negative value (`run --permits -1`, `run --wait -1`: clap reads `-1` as an unknown
//! option), or a flag of `run` given to `elect` (`elect -s`, `elect --permits 3`). The message
//! names the option and says what is wrong; clap's tip (`--password` for `-s`, `-- -1`) would
//! lead the user elsewhere.

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// `e` reworded when it is one of the cases above; otherwise `e` as clap made it. `argv` is
/// the command line (the program's name first).
pub fn reword(e: clap::Error, argv: &[String]) -> clap::Error {
    if e.kind() != ErrorKind::UnknownArgument {
        return e;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return e;
    };
    let Some(subcommand) = argv.get(1) else {
        return e;
    };
    let message = match negative(arg, argv) {
        Some(option) => format!(
            "{option} was given {}, a negative value: {option} takes {}",
            given(arg, argv),
            takes(option)
        ),
        None if subcommand == "elect" => match not_for_elections(arg) {
            Some(why) => format!("`fencelock elect` has no {arg}: {why}"),
            None => return e,
        },
        None => return e,
    };
    crate::command_error(subcommand, ErrorKind::ValueValidation, &message)
}

/// The option before `arg` when `arg` is a negative number that clap took for an option.
fn negative<'a>(arg: &str, argv: &'a [String]) -> Option<&'a str> {
    let digit = arg
        .strip_prefix('-')?
        .starts_with(|c: char| c.is_ascii_digit() || c == '.');
    if !digit {
        return None;
    }
    let at = argv.iter().position(|w| w.starts_with(arg))?;
    let option = argv.get(at.checked_sub(1)?)?;
    option.starts_with('-').then_some(option.as_str())
}

/// The word on the command line that clap cut `arg` from (`-5s` for `-5`).
fn given<'a>(arg: &'a str, argv: &'a [String]) -> &'a str {
    argv.iter()
        .find(|w| w.starts_with(arg))
        .map_or(arg, String::as_str)
}

/// What `option` takes, in its help's words.
fn takes(option: &str) -> &'static str {
    match option {
        "--permits" => "a number of permits from 1 to 10000",
        "-w" => "a number of seconds from 0 to 7 days (fractions allowed)",
        "--wait" | "--lease" | "--kill-grace" | "--duration" => {
            "a duration such as 500ms, 2s or 1m, at most 7d"
        }
        "--conflict-exit-code" => "an exit status from 0 to 255",
        _ => "no negative value",
    }
}

/// Why `run`'s flag `arg` has no place in an election, if it is one of them.
fn not_for_elections(arg: &str) -> Option<&'static str> {
    Some(match arg {
        "-s" | "--shared" | "-x" | "--exclusive" => {
            "an election has one leader, not readers and writers; `fencelock run -s` or \
             `run -x` takes a side of a read-write lock"
        }
        "--permits" => {
            "an election has one leader; `fencelock run --permits N` takes one of N permits \
             of a semaphore"
        }
        "--also" => "an election is led under one name; `fencelock run --also` holds several locks",
        "--owner" => "each campaign is a participant of its own, with an owner id of its own",
        _ => return None,
    })
}
