//! The timeline of one run as an inline SVG: one lane per client (waiting, holding, paused,
//! killed), the faults as bands across the lanes, token numbers on the holds, writes marked,
//! and the violations outlined in red.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use super::escape;
use crate::verify::args::Primitive;
use crate::verify::check::{Hold, Write};
use crate::verify::events::Kind;
use crate::verify::run::RunReport;
use crate::verify::words::Contended;

const LEFT: f64 = 70.0;
const WIDTH: f64 = 1000.0;
const TOP: f64 = 46.0;
const LANE: f64 = 30.0;
const BAR: f64 = 20.0;

/// Positions on the drawing.
struct Scale {
    start: u64,
    end: u64,
}

impl Scale {
    fn x(&self, t: u64) -> f64 {
        let span = (self.end - self.start).max(1) as f64;
        LEFT + (t.clamp(self.start, self.end) - self.start) as f64 / span * WIDTH
    }
    fn w(&self, from: u64, to: u64) -> f64 {
        (self.x(to) - self.x(from)).max(1.0)
    }
    fn lane_y(&self, lane: usize) -> f64 {
        TOP + lane as f64 * LANE
    }
    fn secs(&self, t: u64) -> f64 {
        t.saturating_sub(self.start) as f64 / 1e9
    }
}

/// The SVG for one run with `lanes` clients.
pub fn timeline(run: &RunReport, lanes: usize, c: Contended) -> String {
    let s = Scale {
        start: run.span.0,
        end: run.span.1.max(run.span.0 + 1),
    };
    let height = TOP + lanes as f64 * LANE + 40.0;
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{}" height="{height}" viewBox="0 0 {} {height}" role="img"><title>{} timeline</title>"#,
        LEFT + WIDTH + 10.0,
        LEFT + WIDTH + 10.0,
        escape(&run.name)
    );
    out.push_str(DEFS);
    axis(&mut out, &s, lanes);
    faults(&mut out, &s, run, lanes);
    for lane in 0..lanes {
        lane_group(&mut out, &s, run, lane, c);
    }
    violations(&mut out, &s, run, c);
    out.push_str("</svg>");
    out
}

const DEFS: &str = r##"<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#b39ddb"/><line x1="0" y1="0" x2="0" y2="6" stroke="#5e35b1" stroke-width="3"/></pattern></defs>"##;

fn axis(out: &mut String, s: &Scale, lanes: usize) {
    let total = s.secs(s.end);
    let step = [1.0, 2.0, 5.0, 10.0, 30.0, 60.0]
        .into_iter()
        .find(|st| total / st <= 12.0)
        .unwrap_or(120.0);
    let bottom = s.lane_y(lanes) + 4.0;
    let mut t = 0.0;
    while t <= total {
        let x = LEFT + t / total.max(1e-9) * WIDTH;
        let _ = write!(
            out,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{bottom}" stroke="#e3e6ea"/><text x="{x:.1}" y="{:.1}" class="tick">{t:.0} s</text>"##,
            bottom + 14.0
        );
        t += step;
    }
}

fn faults(out: &mut String, s: &Scale, run: &RunReport, lanes: usize) {
    let height = lanes as f64 * LANE;
    for (i, f) in run.injected.iter().enumerate() {
        let (x, w) = (s.x(f.start), s.w(f.start, f.end));
        let color = if f.happened { "#d32f2f" } else { "#9e9e9e" };
        let y = if i % 2 == 0 { 14.0 } else { 30.0 };
        let _ = write!(
            out,
            r#"<g class="fault"><title>{}: {}</title><rect x="{x:.1}" y="{TOP}" width="{w:.1}" height="{height}" fill="{color}" fill-opacity="0.10" stroke="{color}" stroke-opacity="0.5"/><text x="{x:.1}" y="{y}" class="fault-label" fill="{color}">⚡ {}</text></g>"#,
            escape(&f.fault.name()),
            escape(&f.evidence),
            escape(&f.fault.name())
        );
    }
}

/// Waiting spans (acquire call to return) of one lane.
fn waits(run: &RunReport, lane: usize) -> Vec<(u64, u64)> {
    let mut calls: HashMap<(u32, u64), u64> = HashMap::new();
    let mut spans = Vec::new();
    for e in run.events.iter().filter(|e| e.client == lane) {
        match e.kind {
            Kind::AcquireCall { attempt } => {
                calls.insert((e.pid, attempt), e.t);
            }
            Kind::Acquired { attempt, .. }
            | Kind::NotAcquired { attempt, .. }
            | Kind::AcquireUnknown { attempt, .. } => {
                if let Some(t) = calls.remove(&(e.pid, attempt)) {
                    spans.push((t, e.t));
                }
            }
            _ => {}
        }
    }
    spans
}

/// Spans between an event of one kind and the next of another, per process: paused
/// (Paused to Resumed) and dead (Killed to the lane's next Start).
fn spans(
    run: &RunReport,
    lane: usize,
    open: fn(&Kind) -> bool,
    close: fn(&Kind) -> bool,
) -> Vec<(u64, u64)> {
    let mut from = None;
    let mut out = Vec::new();
    for e in run.events.iter().filter(|e| e.client == lane) {
        if open(&e.kind) && from.is_none() {
            from = Some(e.t);
        } else if close(&e.kind) {
            if let Some(f) = from.take() {
                out.push((f, e.t));
            }
        }
    }
    if let Some(f) = from {
        out.push((f, run.span.1));
    }
    out
}

fn lane_group(out: &mut String, s: &Scale, run: &RunReport, lane: usize, c: Contended) {
    let y = s.lane_y(lane);
    let mid = y + LANE / 2.0 - 2.0;
    let _ = write!(
        out,
        r##"<g class="lane" data-client="{lane}"><rect x="{LEFT}" y="{:.1}" width="{WIDTH}" height="{BAR}" fill="#f6f7f9"/><text x="4" y="{:.1}" class="lane-label">client {lane}</text>"##,
        y + 3.0,
        mid + 4.0
    );
    for (a, b) in waits(run, lane) {
        let _ = write!(
            out,
            r##"<rect class="waiting" x="{:.1}" y="{:.1}" width="{:.1}" height="6" fill="#b0bec5"><title>waiting {:.2}–{:.2} s</title></rect>"##,
            s.x(a),
            mid - 1.0,
            s.w(a, b),
            s.secs(a),
            s.secs(b)
        );
    }
    for h in run.verdict.holds.iter().filter(|h| h.client == lane) {
        let who = c.holding(h.part, h.token, &run.locks);
        hold(
            out,
            s,
            h,
            y,
            &who,
            c.primitive == Primitive::Rwlock && h.part == 1,
        );
    }
    let paused = spans(run, lane, |k| *k == Kind::Paused, |k| *k == Kind::Resumed);
    for (a, b) in paused {
        let _ = write!(
            out,
            r#"<rect class="paused" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="url(#hatch)" fill-opacity="0.85"><title>paused (SIGSTOP) {:.2}–{:.2} s</title></rect>"#,
            s.x(a),
            // Inside the hold's bar, so that the hold's colour (its write's fate) shows
            // around the pause.
            y + 8.0,
            s.w(a, b),
            BAR - 10.0,
            s.secs(a),
            s.secs(b)
        );
    }
    let dead = spans(run, lane, |k| *k == Kind::Killed, |k| *k == Kind::Start);
    for (a, b) in dead {
        let _ = write!(
            out,
            r##"<rect class="killed" x="{:.1}" y="{:.1}" width="{:.1}" height="{BAR}" fill="#212121"><title>killed (SIGKILL) at {:.2} s; respawned at {:.2} s</title></rect><text x="{:.1}" y="{:.1}" class="kill-mark">✕</text>"##,
            s.x(a),
            y + 3.0,
            s.w(a, b),
            s.secs(a),
            s.secs(b),
            s.x(a) - 4.0,
            y + 1.0
        );
    }
    for e in run.events.iter().filter(|e| e.client == lane) {
        if let Kind::Lost { token, .. } = e.kind {
            let x = s.x(e.t);
            let _ = write!(
                out,
                r##"<path class="lost" d="M{x:.1},{:.1} l-4,-7 h8 z" fill="#ff6f00"><title>lost() fired for token {token} at {:.2} s</title></path>"##,
                y + 3.0,
                s.secs(e.t)
            );
        }
    }
    out.push_str("</g>");
}

/// Draws hold `h` (`who`: its role and token; `reader`: a read-write lock's reader, whose
/// checked read is no write).
fn hold(out: &mut String, s: &Scale, h: &Hold, y: f64, who: &str, reader: bool) {
    let (fill, what) = match (reader, h.write) {
        (false, Write::Accepted { stale: true, .. }) => ("#c62828", "stale write accepted"),
        (false, Write::Accepted { .. }) => ("#2e7d32", "write accepted"),
        (false, Write::Rejected) => ("#ef8f00", "write rejected (stale token)"),
        (false, Write::Failed) => ("#6d4c41", "write failed"),
        (false, Write::None) => ("#78909c", "no write"),
        (true, Write::Accepted { stale: true, .. }) => (
            "#c62828",
            "checked read taken although a later writer wrote",
        ),
        (true, Write::Accepted { .. }) => ("#1565c0", "checked read: its view stood"),
        (true, Write::Rejected) => ("#ffb74d", "checked read refused: a later writer wrote"),
        (true, Write::Failed) => ("#6d4c41", "checked read failed"),
        (true, Write::None) => ("#78909c", "no checked read"),
    };
    let (x, w) = (s.x(h.acquired), s.w(h.acquired, h.end));
    let _ = write!(
        out,
        r#"<rect class="holding" x="{x:.1}" y="{:.1}" width="{w:.1}" height="{BAR}" fill="{fill}" rx="2"><title>{} held {:.2}–{:.2} s: {what}</title></rect>"#,
        y + 3.0,
        escape(who),
        s.secs(h.acquired),
        s.secs(h.end)
    );
    // Tokens from Redis are long (microseconds): the last digits tell neighbours apart, the
    // whole token is in the tooltip.
    let full = h.token.to_string();
    let label = if full.len() > 5 {
        format!("…{}", &full[full.len() - 4..])
    } else {
        full
    };
    if w >= 6.5 * label.chars().count() as f64 + 4.0 {
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{:.1}" class="token">{label}</text>"#,
            x + 2.0,
            y + 17.0
        );
    }
}

/// A stretch of overlap of one hold: from, to (ns), and the other holder's token.
type Stretch = (u64, u64, u64);

fn violations(out: &mut String, s: &Scale, run: &RunReport, c: Contended) {
    let v = &run.verdict;
    let outline = |out: &mut String, h: &Hold, from: u64, to: u64, class: &str, why: &str| {
        let _ = write!(
            out,
            r#"<rect class="{class}" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="none"><title>{}</title></rect>"#,
            s.x(from) - 1.0,
            s.lane_y(h.client) + 1.0,
            s.w(from, to) + 2.0,
            BAR + 4.0,
            escape(why)
        );
    };
    // One outline per hold and stretch of overlap: a paused holder overlaps every holder
    // that came while it slept, and its lane would be drawn over once per pair.
    let mut spans: BTreeMap<(usize, bool), Vec<Stretch>> = BTreeMap::new();
    let who = |h: &Hold| c.holding(h.part, h.token, &run.locks);
    for o in &v.overlaps {
        for (me, other) in [(o.holds.0, o.holds.1), (o.holds.1, o.holds.0)] {
            let token = v.holds[other].token;
            spans
                .entry((me, o.fenced))
                .or_default()
                .push((o.from, o.to, token));
        }
    }
    for ((i, fenced), mut list) in spans {
        list.sort_unstable();
        let h = &v.holds[i];
        let (class, what) = if fenced {
            ("overlap-fenced", "overlap, fenced off")
        } else {
            ("violation", "VIOLATION: overlap, both writes accepted")
        };
        for (from, to, tokens) in merge(&list) {
            let why = format!("{what}: {} with token {tokens}", who(h));
            outline(out, h, from, to, class, &why);
        }
    }
    let lost = v.lost_updates.iter().map(|l| l.hold);
    for i in v.stale_writes.iter().copied().chain(lost) {
        let h = &v.holds[i];
        let at = h.write_returned.unwrap_or(h.end);
        let why = format!(
            "VIOLATION: the write of {} (stale, or overwrote updates it had not read)",
            who(h)
        );
        outline(out, h, h.acquired, at, "violation", &why);
    }
}

/// Merges sorted `(from, to, token)` stretches less than 100 ms apart (a handover between
/// two later holders), listing the other holders' tokens.
fn merge(list: &[Stretch]) -> Vec<(u64, u64, String)> {
    let mut merged: Vec<(u64, u64, Vec<u64>)> = Vec::new();
    for &(from, to, token) in list {
        match merged.last_mut() {
            Some(last) if from <= last.1 + 100_000_000 => {
                last.1 = last.1.max(to);
                last.2.push(token);
            }
            _ => merged.push((from, to, vec![token])),
        }
    }
    merged
        .into_iter()
        .map(|(from, to, tokens)| {
            let tokens: Vec<String> = tokens.iter().map(u64::to_string).collect();
            (from, to, tokens.join(", "))
        })
        .collect()
}
