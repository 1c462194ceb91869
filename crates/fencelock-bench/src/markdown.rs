//! docs/PERFORMANCE-rslock.md from the JSON report.

use std::fmt::Write;

use serde_json::Value;

use crate::libs::Variant;

/// `fencelock figure / rslock figure` in each round (the same run), then the median.
fn ratio(r: &Value, variant: Variant, key: &str, higher_is_better: bool) -> f64 {
    let runs = |v: Variant| r[v.name()]["runs"].as_array().cloned().unwrap_or_default();
    let (ours, theirs) = (runs(variant), runs(Variant::Rslock));
    let mut ratios: Vec<f64> = ours
        .iter()
        .zip(&theirs)
        .filter_map(|(a, b)| {
            let (a, b) = (a[key].as_f64()?, b[key].as_f64()?);
            Some(if higher_is_better { a / b } else { b / a })
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN)
}

fn med(r: &Value, variant: Variant, key: &str) -> f64 {
    r[variant.name()]["median"][key]
        .as_f64()
        .unwrap_or(f64::NAN)
}

/// The per-command breakdown of a variant's first run, e.g. "evalsha 2, get 1, …".
fn breakdown(r: &Value, variant: Variant) -> String {
    let Some(map) = r[variant.name()]["median"]["server_commands"].as_object() else {
        return String::new();
    };
    map.iter()
        .map(|(k, v)| format!("{k} {:.2}", v.as_f64().unwrap_or(0.0)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A throughput table: pairs/s, p50 (if measured), ratio to rslock, commands per pair.
fn throughput(md: &mut String, r: &Value, title: &str, note: &str) {
    let _ = writeln!(md, "## {title}\n");
    if !note.is_empty() {
        let _ = writeln!(md, "{note}\n");
    }
    md.push_str("| library | pairs/s | pair p50 (µs) | **ratio to rslock** (median of rounds) | server CPU / pair (µs) | in scripts / pair (µs) | server commands / pair |\n|---|---|---|---|---|---|---|\n");
    for v in Variant::ALL {
        let ratio = match v {
            Variant::Rslock => "1".to_owned(),
            _ => format!("**{:.2}×**", ratio(r, v, "pairs_per_sec", true)),
        };
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.0} | {ratio} | {:.1} | {:.1} | {:.2} ({}) |",
            v.name(),
            med(r, v, "pairs_per_sec"),
            med(r, v, "pair_p50_us"),
            med(r, v, "server_cpu_us_per_op"),
            med(r, v, "server_script_us_per_op"),
            med(r, v, "server_commands_per_op"),
            breakdown(r, v)
        );
    }
    md.push('\n');
}

fn contended(md: &mut String, r: &Value) {
    md.push_str("## 8 clients on one key, one worker each, 1 ms holds\n\n");
    md.push_str(
        "Handoff gap: from the holder sending its release to the next holder's acquire returning. \
                 rslock polls every 0–2 ms (`set_retry(3, 2 ms)`; its default is 200 ms). \
                 Fairness: most / fewest acquisitions of one client. Overlaps must be 0.\n\n",
    );
    md.push_str("| library | acquisitions/s | handoff gap p50 / p99 (µs) | **gap p50, rslock / this** | wait p99 (µs) | fairness (max/min) | server CPU / acquisition (µs) | server commands / acquisition | overlaps |\n|---|---|---|---|---|---|---|---|---|\n");
    for v in Variant::ALL {
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.0} / {:.0} | {:.2} | {:.0} | {:.2} | {:.1} | {:.2} ({}) | {} |",
            v.name(),
            med(r, v, "acquisitions_per_sec"),
            med(r, v, "handoff_gap_p50_us"),
            med(r, v, "handoff_gap_p99_us"),
            ratio(r, v, "handoff_gap_p50_us", false),
            med(r, v, "wait_p99_us"),
            med(r, v, "fairness_max_over_min"),
            med(r, v, "server_cpu_us_per_op"),
            med(r, v, "server_commands_per_op"),
            breakdown(r, v),
            med(r, v, "overlaps"),
        );
    }
    md.push('\n');
}

fn callgrind(md: &mut String, r: &Value) {
    md.push_str("## Client-side cost of one uncontended pair (valgrind)\n\n");
    md.push_str("The benchmark runs itself under `valgrind --tool=callgrind` and `--tool=dhat` with 200 and \
                 with 1200 pairs (multi-thread runtime, the server outside valgrind) and divides the \
                 difference by 1000: start-up and connecting cancel out. Instruction counts do not \
                 depend on the machine's load.\n\n");
    md.push_str("| library | instructions / pair | heap allocations / pair |\n|---|---|---|\n");
    for v in Variant::ALL {
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.1} |",
            v.name(),
            r[v.name()]["instructions_per_pair"]
                .as_f64()
                .unwrap_or(f64::NAN),
            r[v.name()]["allocations_per_pair"]
                .as_f64()
                .unwrap_or(f64::NAN),
        );
    }
    md.push('\n');
}

/// The server's instructions per pair (redis-server under callgrind).
fn server_callgrind(md: &mut String, r: &Value) {
    md.push_str("## Server-side cost of one uncontended pair (valgrind)\n\n");
    md.push_str("`redis-server` runs under `valgrind --tool=callgrind`; each library makes 200 and then \
                 1200 pairs against a fresh server, and the difference in the server's instructions \
                 is divided by 1000: start-up, connecting and loading scripts cancel out. It counts \
                 everything the server does for a pair: reading and parsing requests, running \
                 scripts and the commands inside them, writing replies.\n\n");
    md.push_str("| library | server instructions / pair | ratio to rslock |\n|---|---|---|\n");
    let rslock = r[Variant::Rslock.name()]["server_instructions_per_pair"].as_f64();
    for v in Variant::ALL {
        let ins = r[v.name()]["server_instructions_per_pair"].as_f64();
        let ratio = ins.zip(rslock).map_or(f64::NAN, |(i, base)| i / base);
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.2} |",
            v.name(),
            ins.unwrap_or(f64::NAN),
            ratio
        );
    }
    md.push('\n');
}

/// What a script call costs the server, one call at a time.
fn script_costs(md: &mut String, costs: &[Value]) {
    md.push_str("## Where the server's time goes: one script call at a time\n\n");
    md.push_str("`redis-benchmark -c 1` (no pipelining) sends each script to the same server, after \
                 the scenarios; µs inside `EVALSHA` per call, from `INFO commandstats`. A Lua call \
                 has a fixed cost, and each command a script runs adds to it: fencelock's \
                 acquire of a free lock runs five (`EXISTS`, `TIME`, the counter's `SET … PX … GET`, \
                 `HSET`, `PEXPIRE`) \
                 and its release two (`HMGET`, `DEL`), where rslock sends a plain `SET NX PX` and a \
                 two-command release.\n\n| script | µs per call |\n|---|---|\n");
    for cost in costs {
        let what = cost["script"].as_str().unwrap_or("?");
        let us = cost["us_per_call"].as_f64().unwrap_or(f64::NAN);
        let _ = writeln!(md, "| {what} | {us:.1} |");
    }
    md.push('\n');
}

/// What a run of many lock names leaves on the server, during and after the fence horizon.
fn footprint(md: &mut String, f: &Value) {
    let n = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let _ = writeln!(
        md,
        "## Footprint: {:.0} lock names, each taken and released once (fencelock, fence horizon {:.0} s)\n",
        n(&f["names"]),
        n(&f["horizon_secs"]),
    );
    md.push_str("| when | keys | used_memory (bytes) |\n|---|---|---|\n");
    for (when, key) in [
        ("empty server (client connected, scripts loaded)", "empty"),
        ("right after the run", "during"),
        ("after the horizon", "after_horizon"),
    ] {
        let _ = writeln!(
            md,
            "| {when} | {:.0} | {:.0} |",
            n(&f[key]["keys"]),
            n(&f[key]["used_memory"]),
        );
    }
    let _ = writeln!(
        md,
        "\nAfter the horizon / empty: **{:.3}** (target: within 1 %). {:.0} pairs/s over 64 tasks.\n",
        n(&f["after_over_empty"]),
        n(&f["pairs_per_sec"]),
    );
}

/// The whole page.
pub fn render(r: &Value) -> String {
    let mut md = String::from("# fencelock beside rslock\n\n");
    md.push_str("Generated by `cargo run --release --manifest-path crates/fencelock-bench/Cargo.toml -- --callgrind --markdown docs/PERFORMANCE-rslock.md` \
                 (raw numbers: `target/bench-rslock.json`). Both libraries run the same scenarios, driven the \
                 same way, against the same `redis-server`s started by the test kit, in the same run, on a \
                 tokio multi-thread runtime (2 worker threads on this 2-core machine). The libraries take \
                 turns, in an order that rotates every round; each ratio is the median over the rounds of \
                 the ratio within a round. `fencelock_fixed`: a fixed 10 s lease; `fencelock_watchdog`: the \
                 default, a lease the watchdog renews; rslock has no watchdog and always runs with a 10 s TTL. \
                 Server commands are counted from `INFO commandstats`, so the commands a script runs \
                 (`HGET`, `PEXPIRE`, …) count too; server CPU is `INFO cpu` (user + system) over the \
                 run, divided by the pairs; \"in scripts\" is the server's time inside `EVALSHA` \
                 (its `usec` in `INFO commandstats`, the commands a script runs included; rslock's \
                 plain `SET NX PX` is not in it). Ratios above 1 mean fencelock is faster.\n\n");
    let c = &r["ceiling"];
    let ceiling = c["pairs_per_sec"].as_f64().unwrap_or(f64::NAN);
    let _ = writeln!(
        md,
        "Raw two-round-trip ceiling (`redis-benchmark -c 1`): `SET NX PX` {:.0}/s, `EVALSHA` compare-and-delete {:.0}/s: **{ceiling:.0} pairs/s**.\n",
        c["set_nx_px_rps"].as_f64().unwrap_or(f64::NAN),
        c["evalsha_compare_and_delete_rps"].as_f64().unwrap_or(f64::NAN),
    );
    if r["uncontended"].is_object() {
        let u = &r["uncontended"];
        throughput(
            &mut md,
            u,
            "Uncontended acquire + release, one task, one client",
            "",
        );
        for v in [Variant::Fixed, Variant::Watchdog, Variant::Rslock] {
            let _ = writeln!(
                md,
                "- {} / ceiling: **{:.2}**",
                v.name(),
                med(u, v, "pairs_per_sec") / ceiling
            );
        }
        md.push('\n');
    }
    if r["distinct"].is_object() {
        throughput(
            &mut md,
            &r["distinct"],
            "64 tasks on distinct keys, one client",
            "",
        );
    }
    if r["contended"].is_object() {
        contended(&mut md, &r["contended"]);
    }
    if r["redlock"].is_object() {
        throughput(
            &mut md,
            &r["redlock"],
            "RedLock over 5 servers, one task, one client",
            "Commands are summed over the five servers.",
        );
    }
    if r["footprint"].is_object() {
        footprint(&mut md, &r["footprint"]);
    }
    if let Some(costs) = r["script_costs"].as_array() {
        script_costs(&mut md, costs);
    }
    if r["server_callgrind"].is_object() {
        server_callgrind(&mut md, &r["server_callgrind"]);
    }
    if r["callgrind"].is_object() {
        callgrind(&mut md, &r["callgrind"]);
    }
    md
}
