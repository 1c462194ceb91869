//! The report: `report.json` with every event, and `report.html`, self-contained (inline
//! CSS and SVG, no external resources), with the run and its negative control side by side.

mod guide;
mod svg;

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::args::{Backend, Primitive};
use super::faults::{Planned, Skipped};
use super::run::RunReport;
use super::words::Contended;

/// Everything a verify produced.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The command line that produced it.
    pub command: String,
    /// The backend.
    pub backend: Backend,
    /// What the clients contended for.
    pub primitive: Primitive,
    /// A semaphore's number of permits (none for the other primitives).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// What the servers were.
    pub deployment: String,
    /// The seed.
    pub seed: u64,
    /// Client processes.
    pub clients: usize,
    /// The lease (ms).
    pub lease_ms: u64,
    /// The liveness bound (ms).
    pub liveness_bound_ms: u64,
    /// The fault schedule (the same for every run).
    pub schedule: Vec<Planned>,
    /// No fault happened in the run: whatever the checks say, nothing was tested under
    /// faults (exit status 2).
    pub inconclusive: bool,
    /// Faults asked for that could not run, with the reason.
    pub skipped: Vec<Skipped>,
    /// The run, then its negative control.
    pub runs: Vec<RunReport>,
}

impl Report {
    /// What the clients contended for.
    pub fn contended(&self) -> Contended {
        Contended {
            primitive: self.primitive,
            permits: self.permits.unwrap_or(1),
        }
    }
}

/// Whether no fault happened in `run` (none ran, or none took effect).
pub fn inconclusive(run: &RunReport) -> bool {
    !run.injected.iter().any(|i| i.happened)
}

/// Writes `report.json` and `report.html` into `dir`.
pub fn write(dir: &Path, report: &Report) -> std::io::Result<()> {
    let json = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("report.json"), json)?;
    std::fs::write(dir.join("report.html"), html(report))
}

/// Escapes text for HTML and SVG.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The verdict of one run in one line, in the words of what it contended for.
pub fn verdict_line(run: &RunReport, contended: Contended) -> String {
    let v = &run.verdict;
    let safety = if v.safe() { "SAFE" } else { "VIOLATIONS" };
    let liveness = if v.live() {
        "live"
    } else {
        "NOT LIVE within the bound"
    };
    format!(
        "{}{}: {safety}, {liveness}: {}; {} overlapping pairs{} ({} unfenced), {} stale writes \
         accepted, {} token-order breaks, {} lost updates, {} acquires of unknown outcome, \
         observer breaks {}; faults {}/{} happened",
        run.name,
        if run.fencing { "" } else { " (no fencing)" },
        contended.counts(v.tally()),
        v.overlaps.len(),
        match v.crowds.is_empty() {
            true => String::new(),
            false => format!(" and {} crowds past N permits", v.crowds.len()),
        },
        v.unfenced_overlaps(),
        v.stale_writes.len(),
        v.token_breaks.len(),
        v.updates_lost(),
        v.unknown_acquires,
        v.observer_breaks.len(),
        run.injected.iter().filter(|i| i.happened).count(),
        run.injected.len()
    )
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:24px;color:#1c2430;line-height:1.45}\
h1{font-size:22px}h2{font-size:18px;margin-top:28px}h3{font-size:16px}\
.intro{max-width:70em}.intro p{margin:6px 0}\
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #d5d9df;padding:4px 10px;text-align:left;font-size:14px;vertical-align:top}\
th{background:#f0f2f5}.bad{color:#c62828;font-weight:600}.good{color:#2e7d32;font-weight:600}\
.verdict{font-size:15px;padding:10px 14px;border-radius:6px;margin:6px 0}\
.verdict.good{background:#e8f5e9}.verdict.bad{background:#ffebee}.verdict .note{font-weight:400;color:#37474f}\
code{background:#f0f2f5;padding:1px 4px;border-radius:3px;overflow-wrap:anywhere}\
dl.figures{max-width:70em;font-size:14px}dl.figures dt{font-weight:600;margin-top:6px}dl.figures dd{margin-left:18px}\
svg.timeline{width:100%;height:auto;max-width:none}\
svg .tick{font-size:10px;fill:#607080;text-anchor:middle}svg .lane-label{font-size:12px;fill:#37474f}\
svg .token{font-size:10px;fill:#fff;font-family:monospace}svg .fault-label{font-size:11px;font-weight:600}\
svg .kill-mark{font-size:12px;fill:#d32f2f;font-weight:700}\
svg .violation{stroke:#d50000;stroke-width:2.5}\
svg .overlap-fenced{stroke:#ef6c00;stroke-width:1.5;stroke-dasharray:4 3}\
.legend span{display:inline-block;margin-right:14px;font-size:13px}\
.sw{display:inline-block;width:14px;height:10px;margin-right:4px;vertical-align:middle;box-sizing:border-box}\
@media print{body{margin:0;font-size:12px}*{-webkit-print-color-adjust:exact;print-color-adjust:exact}\
h2{break-after:avoid}table,svg,.verdict,.legend{break-inside:avoid}}";

/// The HTML report.
pub fn html(report: &Report) -> String {
    let mut out = String::new();
    let service = guide::title(report.backend);
    let contended = report.contended();
    let what = contended.title();
    let _ = write!(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"/>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/><title>fencelock \
         verify: {what} on {service}</title><style>{STYLE}</style></head><body><h1>fencelock \
         verify: {what} on {}</h1>\
         <p>{service} · {what} · seed {} · {} clients · lease {} ms · liveness bound {} ms</p>\
         <p><code>{}</code></p>",
        escape(&report.deployment),
        report.seed,
        report.clients,
        report.lease_ms,
        report.liveness_bound_ms,
        escape(&report.command)
    );
    guide::intro(&mut out, report);
    for run in &report.runs {
        let class = if run.verdict.safe() { "good" } else { "bad" };
        let note = match run.fencing {
            false => " <span class=\"note\">(negative control: red is expected)</span>",
            true if report.inconclusive => {
                " <span class=\"note\">(inconclusive: no fault took effect)</span>"
            }
            true => "",
        };
        let _ = write!(
            out,
            "<div class=\"verdict {class}\">{}{note}</div>",
            escape(&verdict_line(run, contended))
        );
    }
    summary(&mut out, report);
    guide::figures(&mut out, contended);
    for run in &report.runs {
        guide::violations(&mut out, run, contended);
    }
    guide::recoveries(&mut out, report);
    faults(&mut out, report);
    out.push_str("<h2>Timelines</h2>");
    guide::legend(&mut out, contended);
    for run in &report.runs {
        let _ = write!(
            out,
            "<h3>{}{}</h3>{}",
            escape(&run.name),
            if run.fencing {
                " (fenced)"
            } else {
                " (no fencing)"
            },
            svg::timeline(run, report.clients, contended)
        );
    }
    out.push_str("</body></html>\n");
    out
}

/// The checks, one row each, one column per run: the run and its control side by side.
fn summary(out: &mut String, report: &Report) {
    out.push_str("<h2>Checks</h2><table><tr><th>check</th>");
    for run in &report.runs {
        let fencing = if run.fencing { "fenced" } else { "no fencing" };
        let _ = write!(out, "<th>{} ({fencing})</th>", escape(&run.name));
    }
    out.push_str("</tr>");
    for (name, cell) in rows(report.contended()) {
        let _ = write!(out, "<tr><td>{}</td>", escape(&name));
        for run in &report.runs {
            let (text, good) = cell(run);
            let class = if good { "good" } else { "bad" };
            let _ = write!(out, "<td class=\"{class}\">{}</td>", escape(&text));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
}

/// A cell of the checks table: its text, and whether it is good.
type Cell = fn(&RunReport) -> (String, bool);

/// The rows of the checks table that apply to `c`, named in its words.
fn rows(c: Contended) -> Vec<(String, Cell)> {
    let mut rows: Vec<(String, Cell)> = vec![
        (c.holds().to_owned(), |r| {
            (r.verdict.holds.len().to_string(), true)
        }),
        (format!("(a) {} (unfenced)", c.overlaps()), |r| {
            let v = &r.verdict;
            let n = v.unfenced_overlaps();
            (
                format!("{} ({n})", v.overlaps.len() + v.crowds.len()),
                n == 0,
            )
        }),
        ("(b) stale writes accepted".to_owned(), |r| {
            let n = r.verdict.stale_writes.len();
            (n.to_string(), n == 0)
        }),
        ("(c) token-order breaks".to_owned(), |r| {
            let n = r.verdict.token_breaks.len();
            (n.to_string(), n == 0)
        }),
    ];
    if c.primitive != Primitive::Semaphore {
        rows.push(("(d) lost updates".to_owned(), |r| {
            let n = r.verdict.updates_lost();
            (n.to_string(), n == 0)
        }));
    }
    rows.push(("(e) acquires of unknown outcome".to_owned(), |r| {
        (r.verdict.unknown_acquires.to_string(), true)
    }));
    rows.push((format!("(f) {} again after each fault", c.taken()), |r| {
        let v = &r.verdict;
        let ok = v.recoveries.iter().filter(|x| x.ok == Some(true)).count();
        let unmeasured = v.recoveries.iter().filter(|x| x.ok.is_none()).count();
        (
            format!("{ok}/{} ({unmeasured} not measured)", v.recoveries.len()),
            v.live(),
        )
    }));
    if c.primitive == Primitive::Election {
        rows.push((
            "(g) election observers' reports out of order or naming another leader".to_owned(),
            |r| {
                let v = &r.verdict;
                let n = v.observer_breaks.len();
                (format!("{n} of {} reports", v.observed), n == 0)
            },
        ));
    }
    rows.push((format!("{} taken / refused", c.writes()), |r| {
        let w = r.verdict.writes;
        (format!("{} / {}", w.0, w.1), true)
    }));
    if c.primitive == Primitive::Rwlock {
        rows.push((
            "readers' checked reads standing / refused".to_owned(),
            |r| {
                let w = r.verdict.reads;
                (format!("{} / {}", w.0, w.1), true)
            },
        ));
    }
    rows
}

/// The faults: what happened in each run with its evidence, and what was skipped.
fn faults(out: &mut String, report: &Report) {
    out.push_str("<h2>Faults</h2><table><tr><th>run</th><th>fault</th><th>at</th><th>target</th><th>happened</th><th>evidence</th></tr>");
    for run in &report.runs {
        for f in &run.injected {
            let at = f.start.saturating_sub(run.span.0) as f64 / 1e9;
            let (class, yes) = if f.happened {
                ("good", "yes")
            } else {
                ("bad", "no")
            };
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{at:.2} s</td><td>{}</td><td class=\"{class}\">{yes}</td><td>{}</td></tr>",
                escape(&run.name),
                escape(&f.fault.name()),
                escape(&f.target),
                escape(&f.evidence)
            );
        }
    }
    out.push_str("</table>");
    for run in &report.runs {
        if let Some(state) = &run.servers_after {
            let _ = write!(
                out,
                "<p>After the {}: {}.</p>",
                escape(&run.name),
                escape(state)
            );
        }
    }
    if !report.skipped.is_empty() {
        out.push_str("<p>Skipped:</p><table><tr><th>fault</th><th>reason</th></tr>");
        for s in &report.skipped {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td></tr>",
                escape(&s.fault),
                escape(&s.reason)
            );
        }
        out.push_str("</table>");
    }
}
