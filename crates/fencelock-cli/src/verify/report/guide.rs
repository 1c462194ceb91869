//! The parts of the HTML report that explain it to a reader who has not read the code
//! (issue 23, point 12): a plain-language summary at the top, every violation in a table,
//! the recovery after each fault in milliseconds, what each figure means, and a legend that
//! matches the drawing.

use std::fmt::Write as _;

use super::{escape, Report};
use crate::verify::args::{Backend, Primitive};
use crate::verify::check::Hold;
use crate::verify::run::RunReport;
use crate::verify::words::Contended;

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
    let c = report.contended();
    let verdict = if !run.verdict.safe() {
        format!(
            "<b class=\"bad\">Unsafe</b>: the checker found the violations listed below: {}",
            match c.primitive {
                Primitive::Semaphore =>
                    "more permit holders acted at once than there are \
                     permits, and the register accepted their writes.",
                _ => "two holders acted at once and the protected register accepted both.",
            }
        )
    } else if report.inconclusive {
        "<b class=\"bad\">Inconclusive</b>: no fault took effect, so nothing was tested under \
         faults (no violation was seen either). The exit status is 2."
            .to_owned()
    } else {
        "<b class=\"good\">Safe</b>: no stale write was accepted, tokens rose in the order \
         they were granted, and no update was lost."
            .to_owned()
    };
    let _ = write!(
        out,
        "<section class=\"intro\"><h2>What this report says</h2>\
         <p>{clients} client processes {story} on {service} ({deployment}) for {secs:.1} s. \
         {register} Meanwhile {happened} of {asked} scheduled faults took effect ({skipped} \
         could not run here).</p><p>{verdict}</p><p>{overlap}</p>",
        clients = report.clients,
        story = story(c, &run.locks),
        register = register(c),
        overlap = overlap(c),
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

/// What the clients did, in the primitive's words (`locks`: the lock's names by part).
fn story(c: Contended, locks: &[String]) -> String {
    let names: Vec<String> = locks
        .iter()
        .map(|l| format!("<code>{}</code>", escape(l)))
        .collect();
    let rw = "a register (a shared counter) and writing it back plus one, along with the \
              fencing token of what they held";
    match c.primitive {
        Primitive::Mutex => format!("took turns holding one lock, each time reading {rw},"),
        Primitive::Election => format!(
            "took turns leading one election (campaign, lead, resign), each leader reading \
             {rw} (its term),"
        ),
        Primitive::Rwlock => "shared one read-write lock: writers held it alone, each reading \
             a register (a shared counter) and writing it back plus one with their token; \
             readers held it together, each reading the register and ending with a \
             <i>checked read</i> (its view still stands unless a writer with a later token \
             wrote),"
            .to_owned(),
        Primitive::Semaphore => format!(
            "shared {}: up to {} held a permit at once, each reading {rw},",
            c.title(),
            c.permits
        ),
        Primitive::Multi => format!(
            "took the locks {} together (a multi-lock), each time reading each lock's register \
             and writing it back plus one with that lock's own token,",
            names.join(" and ")
        ),
    }
}

/// How the register fences, in the primitive's words.
fn register(c: Contended) -> String {
    match c.primitive {
        Primitive::Semaphore => format!(
            "The register has {n} fenced slots: a permit holding takes one when it is granted \
             and gives it back before its permit, and a write is accepted only while its \
             holding has its slot. When the semaphore grants a permit while all {n} slots are \
             taken, a holding in them has ended without saying so (its lease ran out): the \
             lowest tokens lose their slots, and their late writes are refused.",
            n = c.permits
        ),
        Primitive::Rwlock => "The register accepts a writer's write only if its token is at \
             least the highest it has seen; a reader's checked read is refused once a later \
             writer wrote."
            .to_owned(),
        _ => "The register accepts a write only if its token is at least the highest it has \
              seen."
            .to_owned(),
    }
}

/// Why overlaps are expected and when they are safe, in the primitive's words.
fn overlap(c: Contended) -> String {
    let late = "a holder that was paused or cut off past its lease still believes it holds";
    match c.primitive {
        Primitive::Semaphore => format!(
            "More than {n} permit holders may be live at once (a <i>crowd</i>): {late} its \
             permit when another is granted it. That is expected and safe as long as the \
             register refuses the late holder's write: such crowds are counted as fenced. \
             Only a crowd in which more than {n} writes were accepted is a violation.",
            n = c.permits
        ),
        Primitive::Election => format!(
            "Two terms may <i>overlap</i> in time: {late} its leadership when the next leader \
             is elected. That is expected and safe as long as the register refuses the old \
             leader's write because its term is older: such overlaps are drawn dashed and \
             counted as fenced. Only an overlap in which both writes were accepted is a \
             violation."
        ),
        _ => format!(
            "Two holds may <i>overlap</i> in time: {late} the lock when the next one takes \
             it{share}. That is expected and safe as long as the register refuses the late \
             holder's write because its token is older: such overlaps are drawn dashed and \
             counted as fenced. Only an overlap in which both writes were accepted is a \
             violation.",
            share = match c.primitive {
                Primitive::Rwlock => " (readers share, so only pairs with a writer count)",
                Primitive::Multi => " (each lock of the multi-lock is checked on its own)",
                _ => "",
            }
        ),
    }
}

/// A hold, for a table: client, its role in the primitive, the token (a multi-lock's with
/// its lock's name), and when.
pub fn describe(run: &RunReport, c: Contended, h: &Hold) -> String {
    let t = |ns: u64| format!("{:.3} s", ns.saturating_sub(run.span.0) as f64 / 1e9);
    format!(
        "client {} (pid {}), {}, held {}–{}",
        h.client,
        h.pid,
        escape(&c.holding(h.part, h.token, &run.locks)),
        t(h.acquired),
        t(h.end)
    )
}

/// Every violation of `run`, one row each, with the holders, tokens and times.
pub fn violations(out: &mut String, run: &RunReport, c: Contended) {
    let v = &run.verdict;
    let t = |ns: u64| format!("{:.3} s", ns.saturating_sub(run.span.0) as f64 / 1e9);
    let hold = |i: usize| {
        v.holds
            .get(i)
            .map_or(String::from("?"), |h| describe(run, c, h))
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
        // `who` is built from numbers, fixed words and escaped lock names only.
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

/// What the holds row counts.
fn holds_meaning(c: Contended) -> &'static str {
    match c.primitive {
        Primitive::Election => "Terms: times a participant was elected leader.",
        Primitive::Rwlock => {
            "Times a client took the read side (a reader) or the write side \
             (a writer)."
        }
        Primitive::Semaphore => "Times a client took a permit.",
        Primitive::Multi => {
            "Times a client took a lock, counted per lock (each acquisition \
             of the multi-lock holds each of its locks)."
        }
        Primitive::Mutex => "Times a client acquired the lock.",
    }
}

/// What check (a) counts.
fn overlaps_meaning(c: Contended) -> String {
    match c.primitive {
        Primitive::Semaphore => format!(
            "Moments when more than {n} permit holders were live at once; in brackets, those \
             when the register accepted more than {n} of their writes (violations). Fenced \
             crowds are safe.",
            n = c.permits
        ),
        Primitive::Rwlock => "Pairs of holds with a writer that were both live at some moment \
             (readers share); in brackets, those where the register accepted both (a reader's \
             checked read stands for its write). Fenced overlaps are safe; unfenced ones are \
             violations."
            .to_owned(),
        _ => "Pairs of holds that were both live at some moment; in brackets, those where the \
             register accepted both writes. Fenced overlaps are safe; unfenced ones are \
             violations."
            .to_owned(),
    }
}

/// What each figure of the checks table means, under the names the table gives them.
pub fn figures(out: &mut String, c: Contended) {
    let holds = holds_meaning(c);
    let a = overlaps_meaning(c);
    let mut rows: Vec<(String, String)> = vec![
        (c.holds().to_owned(), holds.to_owned()),
        (format!("(a) {} (unfenced)", c.overlaps()), a),
        (
            "(b) stale writes accepted".to_owned(),
            match c.primitive {
                Primitive::Semaphore => "Writes the register took from a permit holding that \
                     had lost its slot (the register's own word, in the negative control)."
                    .to_owned(),
                _ => "Writes the register took from a holder whose token was already \
                     superseded."
                    .to_owned(),
            },
        ),
        (
            "(c) token-order breaks".to_owned(),
            "A later holder got a smaller token than an earlier one.".to_owned(),
        ),
    ];
    if c.primitive != Primitive::Semaphore {
        rows.push((
            "(d) lost updates".to_owned(),
            "Increments of the counter that a later write overwrote.".to_owned(),
        ));
    }
    rows.push((
        "(e) acquires of unknown outcome".to_owned(),
        "Acquire calls whose answer never came back (the client was killed, or the call failed \
         on the network): it may or may not have been granted. Not a violation; the lease of \
         such a hold runs out by itself."
            .to_owned(),
    ));
    rows.push((
        format!("(f) {} again after each fault", c.taken()),
        "Faults after which it happened within the liveness bound (the table below gives each \
         time in ms); a fault healed too close to the end of the run is not measured."
            .to_owned(),
    ));
    if c.primitive == Primitive::Election {
        rows.push((
            "(g) election observers' reports out of order or naming another leader".to_owned(),
            "Reports of the clients' observers that went back in term, or named another \
             leader for a term than the participant elected."
                .to_owned(),
        ));
    }
    rows.push((
        format!("{} taken / refused", c.writes()),
        "Writes the register accepted, and refused as stale.".to_owned(),
    ));
    if c.primitive == Primitive::Rwlock {
        rows.push((
            "readers' checked reads standing / refused".to_owned(),
            "Readers' checked reads whose view still stood, and those refused because a \
             later writer had written. They are not writes."
                .to_owned(),
        ));
    }
    out.push_str("<dl class=\"figures\">");
    for (dt, dd) in rows {
        let _ = write!(out, "<dt>{}</dt><dd>{dd}</dd>", escape(&dt));
    }
    out.push_str("</dl>");
}

/// The legend: every mark the timeline draws, drawn the same way, in the primitive's words.
pub fn legend(out: &mut String, c: Contended) {
    let (wait, hold) = match c.primitive {
        Primitive::Election => ("campaigning", "leading"),
        Primitive::Semaphore => ("waiting for a permit", "holding a permit"),
        Primitive::Rwlock => ("waiting for the read or write side", "writer"),
        Primitive::Multi => ("waiting for the locks", "holding the locks"),
        Primitive::Mutex => ("waiting for the lock", "holding"),
    };
    let _ = write!(
        out,
        "<p class=\"legend\">\
<span><i class=\"sw\" style=\"background:#b0bec5;height:6px\"></i>{wait}</span>\
<span><i class=\"sw\" style=\"background:#2e7d32\"></i>{hold}, write accepted (token inside)</span>\
<span><i class=\"sw\" style=\"background:#ef8f00\"></i>{hold}, write refused as stale</span>\
<span><i class=\"sw\" style=\"background:#c62828\"></i>{hold}, stale write accepted</span>\
<span><i class=\"sw\" style=\"background:#6d4c41\"></i>{hold}, write failed</span>\
<span><i class=\"sw\" style=\"background:#78909c\"></i>{hold}, no write</span>"
    );
    if c.primitive == Primitive::Rwlock {
        out.push_str(
            "<span><i class=\"sw\" style=\"background:#1565c0\"></i>reader, its checked read \
             stood</span><span><i class=\"sw\" style=\"background:#ffb74d\"></i>reader, \
             checked read refused (a later writer wrote)</span>",
        );
    }
    out.push_str(LEGEND_REST);
}

/// The legend's marks that every primitive shares.
const LEGEND_REST: &str = "\
<span><i class=\"sw\" style=\"background:repeating-linear-gradient(45deg,#b39ddb 0 3px,#5e35b1 3px 5px)\"></i>paused (SIGSTOP)</span>\
<span><i class=\"sw\" style=\"background:#212121\"></i><b style=\"color:#d32f2f\">✕</b> killed (SIGKILL)</span>\
<span><b style=\"color:#ff6f00\">▼</b> lost() fired</span>\
<span><i class=\"sw\" style=\"border:2px solid #d50000\"></i>violation</span>\
<span><i class=\"sw\" style=\"border:2px dashed #ef6c00\"></i>overlap fenced off (safe)</span>\
<span><i class=\"sw\" style=\"background:rgba(211,47,47,.15);border:1px solid #d32f2f\"></i>⚡ fault that happened</span>\
<span><i class=\"sw\" style=\"background:rgba(158,158,158,.15);border:1px solid #9e9e9e\"></i>⚡ fault that did not take effect</span></p>";
