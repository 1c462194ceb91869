//! What the servers say: command counts (`INFO commandstats`, commands run inside scripts
//! included) and `redis-benchmark` references.

use std::collections::BTreeMap;
use std::process::Command;

use fencelock_testkit::RedisServer;

/// Commands the measurement itself sends, left out of the counts.
const OURS: [&str; 6] = [
    "info",
    "config|get",
    "client|setinfo",
    "hello",
    "flushall",
    "ping",
];

/// Calls per command, as `INFO commandstats` counts them (a script's calls included).
pub type Counts = BTreeMap<String, u64>;

/// The server's command counts now.
pub fn counts(server: &RedisServer) -> Counts {
    let info = server
        .command(&["INFO", "commandstats"])
        .ok()
        .and_then(|r| r.text())
        .unwrap_or_default();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .filter(|(name, _)| !OURS.contains(&name.as_str()))
        .collect()
}

/// Time the server spent inside scripts so far, in µs: `EVALSHA`'s `usec` in `INFO
/// commandstats`, which includes the commands the scripts ran (a plain `SET NX PX` is not
/// in it).
pub fn script_us(server: &RedisServer) -> f64 {
    let info = server
        .command(&["INFO", "commandstats"])
        .ok()
        .and_then(|r| r.text())
        .unwrap_or_default();
    info.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("cmdstat_evalsha:")?;
            let usec = rest.split(',').find_map(|f| f.strip_prefix("usec="))?;
            usec.parse::<f64>().ok()
        })
        .sum()
}

/// The server's CPU time so far (user + system), in µs, from `INFO cpu`.
pub fn cpu_us(server: &RedisServer) -> f64 {
    let info = server
        .command(&["INFO", "cpu"])
        .ok()
        .and_then(|r| r.text())
        .unwrap_or_default();
    info.lines()
        .filter_map(|l| {
            let (name, value) = l.split_once(':')?;
            let counted = name == "used_cpu_sys" || name == "used_cpu_user";
            counted.then(|| value.trim().parse::<f64>().ok()).flatten()
        })
        .sum::<f64>()
        * 1e6
}

/// What ran between two snapshots, per command, divided by `per` (pairs or acquisitions).
pub fn per(before: &Counts, after: &Counts, per: u64) -> BTreeMap<String, f64> {
    after
        .iter()
        .filter_map(|(name, calls)| {
            let n = calls - before.get(name).copied().unwrap_or(0);
            (n > 0).then(|| (name.clone(), n as f64 / per.max(1) as f64))
        })
        .collect()
}

/// The sum of a per-command breakdown.
pub fn total(breakdown: &BTreeMap<String, f64>) -> f64 {
    breakdown.values().sum()
}

/// Requests per second from `redis-benchmark -c clients` (CSV output) against `server`.
pub fn redis_benchmark(server: &RedisServer, clients: u32, requests: u32, command: &[&str]) -> f64 {
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &server.port().to_string()])
        .args(["-c", &clients.to_string(), "-n", &requests.to_string()])
        .args(["-r", "1000000", "--csv"])
        .args(command)
        .output()
        .expect("redis-benchmark (apt-get install redis-tools)");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .nth(1)
        .unwrap_or_else(|| panic!("redis-benchmark said {text}"));
    let rps = line.split(',').nth(1).expect("a rate").trim_matches('"');
    rps.parse().expect("a number")
}

/// fencelock's acquire script, as the library sends it (its parts in scripts.rs's order).
const FENCELOCK_ACQUIRE: &str = concat!(
    include_str!("../../fencelock/src/backend/redis/server/base.lua"),
    include_str!("../../fencelock/src/backend/redis/server/tokens.lua"),
    include_str!("../../fencelock/src/backend/redis/server/acquire_free.lua"),
    include_str!("../../fencelock/src/backend/redis/server/holds.lua"),
    include_str!("../../fencelock/src/backend/redis/server/queue.lua"),
    include_str!("../../fencelock/src/backend/redis/server/acquire.lua")
);

/// What one script call costs the server, one call at a time (`redis-benchmark -c 1`, no
/// pipelining, so caches are as cold as in the scenarios): µs inside `EVALSHA` per call, from
/// `INFO commandstats`. Where an uncontended pair's server time goes: the call itself, each
/// command a script runs, and fencelock's acquire on a fresh lock. Resets the server's
/// statistics: run it after the scenarios.
pub fn script_costs(server: &RedisServer, requests: u32) -> Vec<(&'static str, f64)> {
    let key = "cost:{__rand_int__}";
    let fence = "cost:{__rand_int__}:fence";
    let probes: [(&str, &str, Vec<&str>); 5] = [
        ("`return 1` (any script call)", "return 1", vec!["1", key]),
        (
            "one `PTTL` from a script",
            "redis.call('PTTL', KEYS[1]) return 1",
            vec!["1", key],
        ),
        (
            "one `PTTL` and one `SET` from a script",
            "redis.call('PTTL', KEYS[1]) redis.call('SET', KEYS[2], 1) return 1",
            vec!["2", key, fence],
        ),
        (
            "the compare-and-delete release (rslock's)",
            UNLOCK,
            vec!["1", key, "v"],
        ),
        (
            "fencelock's acquire of a free lock",
            FENCELOCK_ACQUIRE,
            // The common case's arguments (acquire.lua): four keys, then owner, lease, attempt
            // id, the counter's horizon (ms), and no proposed token.
            vec![
                "4",
                key,
                fence,
                "cost:{__rand_int__}:queue",
                "cost:{__rand_int__}:waiting",
                "owner",
                "10000",
                "__rand_int__",
                "86400000",
                "",
            ],
        ),
    ];
    probes
        .into_iter()
        .map(|(what, code, args)| {
            let sha = server
                .command(&["SCRIPT", "LOAD", code])
                .ok()
                .and_then(|r| r.text())
                .expect("SCRIPT LOAD");
            server.command(&["CONFIG", "RESETSTAT"]).expect("RESETSTAT");
            let mut command = vec!["EVALSHA", sha.as_str()];
            command.extend(args);
            redis_benchmark(server, 1, requests, &command);
            let calls = counts(server).get("evalsha").copied().unwrap_or(0);
            (what, script_us(server) / calls.max(1) as f64)
        })
        .collect()
}

/// The compare-and-delete release every `SET NX PX` lock uses (rslock's, too).
const UNLOCK: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                      return redis.call('DEL', KEYS[1]) else return 0 end";

/// The raw two-round-trip ceiling of one pair with one connection: `SET NX PX`, then the
/// compare-and-delete script by `EVALSHA`, each measured by `redis-benchmark -c 1`.
/// Returns (SET rps, EVALSHA rps, pairs/s).
pub fn two_round_trips(server: &RedisServer, requests: u32) -> (f64, f64, f64) {
    let sha = server
        .command(&["SCRIPT", "LOAD", UNLOCK])
        .expect("SCRIPT LOAD")
        .text()
        .expect("a SHA");
    let key = "raw:__rand_int__";
    let set = redis_benchmark(server, 1, requests, &["SET", key, "v", "NX", "PX", "10000"]);
    let del = redis_benchmark(server, 1, requests, &["EVALSHA", &sha, "1", key, "v"]);
    (set, del, 1.0 / (1.0 / set + 1.0 / del))
}
