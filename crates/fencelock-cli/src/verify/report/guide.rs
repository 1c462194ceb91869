//! The parts of the HTML report that explain it to a reader who has not read the code
//! (issue 23, point 12): a plain-language summary at the top, every violation in a table,
//! the recovery after each fault in milliseconds, what each figure means, and a legend that
//! matches the drawing.

use std::fmt::Write as _;

use super::{escape, Report};
use crate::verify::args::Backend;
use crate::verify::run::RunReport;

/// The backend's name as its project spells it.
pub fn title(backend: Backend) -> &'static str {
    match backend {
        Backend::Redis => "Redis",
        Backend::Redlock => "RedLock",
        Backend::Sentinel => "Redis Sentinel",
        Backend::Cluster => "Redis Cluster",
        Backend::Zookeeper => "ZooKeeper",
        Backend::Etcd => "etcd",
    }
}

fn ms(ns: u64) -> u64 {
    ns / 1_000_000
}

/// The summary at the top: what ran, the verdict in words, and how to read the rest.
pub fn intro(out: &mut String, report: &Report) {
    let run = &report.runs[0];
    let happened = run.injected.iter().filter(|i| i.happened).count();
    let secs = run.span.1.saturating_sub(run.span.0) as f64 / 1e9;
    let verdict = if !run.verdict.safe() {
        "<b class=\"bad\">Unsafe</b>: the checker found the violations listed below: two \
         holders acted at once and the protected register accepted both."
    } else if report.inconclusive {
        "<b class=\"bad\">Inconclusive</b>: no fault took effect, so nothing was tested under \
         faults (no violation was seen either). The exit status is 2."
    } else {
        "<b class=\"good\">Safe</b>: no stale write was accepted, tokens rose in the order \
         the lock was taken, and no update was lost."
    };
    let _ = write!(
        out,
        "<section class=\"intro\"><h2>What this report says</h2>\
         <p>{clients} client processes took turns holding one lock on {service} ({deployment}) \
         for {secs:.1} s, each time reading a shared counter (the <i>register</i>) and writing \
         it back plus one, along with the lock's <i>fencing token</i>. The register accepts a \
         write only if its token is at least the highest it has seen. Meanwhile {happened} of \
         {asked} scheduled faults took effect ({skipped} could not run here).</p>\
         <p>{verdict}</p>\
         <p>Two holds may <i>overlap</i> in time: a holder that was paused or cut off past its \
         lease still believes it holds the lock when the next one takes it. That is expected \
         and safe as long as the register refuses the late holder's write because its token \
         is older: such overlaps are drawn dashed and counted as fenced. Only an overlap in \
         which both writes were accepted is a violation.</p>",
        clients = report.clients,
        service = title(report.backend),
        deployment = escape(&report.deployment),
        asked = run.injected.len(),
        skipped = report.skipped.len(),
    );
    if report.runs.len() > 1 {
        out.push_str(
            "<p>The <i>negative control</i> replays the same fault schedule with fencing \
             turned off (writes carry no token check). Its red banner is expected: it shows \
             that these faults really do put two writers in front of the register, so the \
             first run's clean result is owed to the fencing tokens, not to luck.</p>",
        );
    }
    out.push_str("</section>");
}

/// Every violation of `run`, one row each, with the holders, tokens and times.
pub fn violations(out: &mut String, run: &RunReport) {
    let v = &run.verdict;
    let t = |ns: u64| format!("{:.3} s", ns.saturating_sub(run.span.0) as f64 / 1e9);
    let hold = |i: usize| {
        v.holds.get(i).map_or(String::from("?"), |h| {
            format!(
                "client {} (pid {}), token {}, held {}–{}",
                h.client,
                h.pid,
                h.token,
                t(h.acquired),
                t(h.end)
            )
        })
    };
    let mut rows = Vec::new();
    for o in v.overlaps.iter().filter(|o| !o.fenced) {
        rows.push((
            "overlap, both writes accepted",
            format!("{}<br/>{}", hold(o.holds.0), hold(o.holds.1)),
            format!("{} – {}", t(o.from), t(o.to)),
        ));
    }
    for c in v.crowds.iter().filter(|c| !c.fenced) {
        let holds: Vec<String> = c.holds.iter().map(|&i| hold(i)).collect();
        rows.push((
            "more permit holders than permits, their writes accepted",
            holds.join("<br/>"),
            t(c.at),
        ));
    }
    for &i in &v.stale_writes {
        let at = v.holds.get(i).and_then(|h| h.write_returned).unwrap_or(0);
        rows.push(("stale write accepted", hold(i), t(at)));
    }
    for b in &v.token_breaks {
        rows.push((
            "token order broken (later holder, smaller token)",
            format!("{}<br/>{}", hold(b.earlier), hold(b.later)),
            String::new(),
        ));
    }
    for b in &v.observer_breaks {
        let what = match b.what {
            "order" => "observer reported an older leader",
            _ => "observers disagree on a term's leader",
        };
        // The value is the observed participant's `<lane>/<pid>`, or another client's text.
        rows.push((
            what,
            format!(
                "client {} saw term {} ({})",
                b.client,
                b.term,
                escape(&b.value)
            ),
            t(b.t),
        ));
    }
    for l in &v.lost_updates {
        rows.push((
            "update lost",
            format!("{} (overwritten {})", hold(l.hold), l.overwritten),
            String::new(),
        ));
    }
    let _ = write!(out, "<h3>Violations: {}</h3>", escape(&run.name));
    if rows.is_empty() {
        out.push_str("<p>None.</p>");
        return;
    }
    out.push_str("<table><tr><th>violation</th><th>holders and tokens</th><th>when</th></tr>");
    for (what, who, when) in rows {
        // `who` is built from numbers and fixed words only.
        let _ = write!(out, "<tr><td>{what}</td><td>{who}</td><td>{when}</td></tr>");
    }
    out.push_str("</table>");
}

/// How long after each fault healed the lock was taken again, in milliseconds.
pub fn recoveries(out: &mut String, report: &Report) {
    out.push_str(
        "<h2>Recovery after each fault</h2><p>The time from the moment a fault healed to \
         the next time any client acquired the lock. It must stay within the liveness bound \
         (",
    );
    let _ = write!(
        out,
        "{} ms: three leases plus room for a leader election on a busy machine).</p>\
         <table><tr><th>run</th><th>fault healed at</th><th>lock taken again after</th>\
         <th>within the bound</th></tr>",
        report.liveness_bound_ms
    );
    for run in &report.runs {
        for r in &run.verdict.recoveries {
            let at = r.healed.saturating_sub(run.span.0) as f64 / 1e9;
            let (after, ok) = match (r.after, r.ok) {
                (Some(a), Some(true)) => (format!("{} ms", ms(a)), "<td class=\"good\">yes</td>"),
                (Some(a), _) => (format!("{} ms", ms(a)), "<td class=\"bad\">no</td>"),
                (None, Some(false)) => ("never".into(), "<td class=\"bad\">no</td>"),
                (None, _) => ("not measured (the run ended first)".into(), "<td>–</td>"),
            };
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{at:.3} s</td><td>{after}</td>{ok}</tr>",
                escape(&run.name)
            );
        }
    }
    out.push_str("</table>");
}

/// What each figure of the checks table means.
pub const FIGURES: &str = "<dl class=\"figures\">\
<dt>holds</dt><dd>Times a client acquired the lock.</dd>\
<dt>(a) overlapping pairs of holds, or crowds past N permits (unfenced)</dt><dd>Pairs of \
holds that were both live at some moment; in brackets, those where the register accepted both \
writes. Fenced overlaps are safe; unfenced ones are violations. A read-write lock's readers \
share: only pairs with a writer count, and a reader's checked read (refused once a later \
writer wrote) stands for its write. A semaphore of N counts crowds instead: moments when more \
than N holds were live, unfenced when more than N of their writes were accepted. A \
multi-lock is checked lock by lock.</dd>\
<dt>(b) stale writes accepted</dt><dd>Writes the register took from a holder whose token was \
already superseded.</dd>\
<dt>(c) token-order breaks</dt><dd>A later holder got a smaller token than an earlier one.</dd>\
<dt>(d) lost updates</dt><dd>Increments of the counter that a later write overwrote.</dd>\
<dt>(e) acquires of unknown outcome</dt><dd>Acquire calls whose answer never came back (the \
client was killed, or the call failed on the network): the lock may or may not have been \
taken. Not a violation; the lease of such a hold runs out by itself.</dd>\
<dt>(f) lock acquired again after each fault</dt><dd>Faults after which the lock was taken \
again within the liveness bound (the table below gives each time in ms); a fault healed too \
close to the end of the run is not measured.</dd>\
<dt>writes taken / refused</dt><dd>Writes the register accepted, and refused as stale.</dd>\
</dl>";

/// The legend: every mark the timeline draws, drawn the same way.
pub const LEGEND: &str = "<p class=\"legend\">\
<span><i class=\"sw\" style=\"background:#b0bec5;height:6px\"></i>waiting for the lock</span>\
<span><i class=\"sw\" style=\"background:#2e7d32\"></i>holding, write accepted (token inside)</span>\
<span><i class=\"sw\" style=\"background:#ef8f00\"></i>holding, write refused as stale</span>\
<span><i class=\"sw\" style=\"background:#c62828\"></i>holding, stale write accepted</span>\
<span><i class=\"sw\" style=\"background:#6d4c41\"></i>holding, write failed</span>\
<span><i class=\"sw\" style=\"background:#78909c\"></i>holding, no write</span>\
<span><i class=\"sw\" style=\"background:repeating-linear-gradient(45deg,#b39ddb 0 3px,#5e35b1 3px 5px)\"></i>paused (SIGSTOP)</span>\
<span><i class=\"sw\" style=\"background:#212121\"></i><b style=\"color:#d32f2f\">✕</b> killed (SIGKILL)</span>\
<span><b style=\"color:#ff6f00\">▼</b> lost() fired</span>\
<span><i class=\"sw\" style=\"border:2px solid #d50000\"></i>violation</span>\
<span><i class=\"sw\" style=\"border:2px dashed #ef6c00\"></i>overlap fenced off (safe)</span>\
<span><i class=\"sw\" style=\"background:rgba(211,47,47,.15);border:1px solid #d32f2f\"></i>⚡ fault that happened</span>\
<span><i class=\"sw\" style=\"background:rgba(158,158,158,.15);border:1px solid #9e9e9e\"></i>⚡ fault that did not take effect</span></p>";
