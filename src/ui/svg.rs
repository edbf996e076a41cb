//! The timeline picture as SVG text: the same text in the page, in a `.svg` file and
//! inside the `.html` file. Presentation attributes only (no `<style>`, no `style=`,
//! no script, no links): the page's CSP forbids inline styles, and a picture must
//! draw the same everywhere. Every text that came from an event is escaped.

use std::fmt::Write;

use chrono::{DateTime, Utc};

use super::picture::{ExitClass, Group, Kind, Lane, LaneGroup, Mark, Picture, Span, Truncated};

mod frame;
use frame::{axis, legend};

const WIDTH: f64 = 1200.0;
/// Where the plot begins: the lane labels are left of it.
const PLOT_LEFT: f64 = 300.0;
const PLOT_RIGHT: f64 = 1185.0;
const LANE: f64 = 22.0;
/// The axis labels' row.
const TOP: f64 = 34.0;
const LEGEND: f64 = 46.0;
/// Characters of a label shown at most; the whole text is in its tooltip.
const LABEL_CHARS: usize = 44;

const LIFE: &str = "#e2e2e2";
const RUNNING: &str = "#8fbce6";
const EXIT_ZERO: &str = "#5f8f67";
const EXIT_NONZERO: &str = "#e67e22";
const EXIT_UNCOUNTED: &str = "#a0a0a0";
const EXIT_137: &str = "#d62828";
const EXIT_OOM: &str = "#6a1b9a";
const START: &str = "#2b6cb0";
const RESTART: &str = "#b7791f";
const RECONCILED: &str = "#fbe7a1";
const GAP: &str = "#8a8a8a";

pub(crate) fn render(picture: &Picture) -> String {
    let lanes: usize = picture.groups.iter().map(|g| g.lanes.len() + 1).sum();
    let extra = if picture.truncated.is_some() {
        LANE
    } else {
        0.0
    };
    let plot_bottom = TOP + 6.0 + (lanes.max(1) as f64) * LANE;
    let height = plot_bottom + LEGEND + extra + 8.0;
    let x = Scale {
        from: picture.from,
        to: picture.to.max(picture.from + 1),
    };
    let mut out = String::with_capacity(4096 + lanes * 1024);
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" class="eg-timeline" data-from="{}" data-to="{}" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="11"><defs><pattern id="eg-gap-hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="6" stroke="{GAP}" stroke-width="2" stroke-opacity="0.6"/></pattern></defs><rect class="background" x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>"##,
        picture.from, picture.to
    );
    for span in &picture.reconciled {
        band(
            &mut out,
            "reconciled-span",
            span,
            &x,
            plot_bottom,
            RECONCILED,
        );
    }
    axis(&mut out, &x, plot_bottom);
    let mut y = TOP + 6.0;
    for group in &picture.groups {
        y = draw_group(&mut out, group, picture.grouped_by, &x, y);
    }
    if picture.groups.is_empty() {
        let _ = write!(
            out,
            r##"<text class="empty" x="{PLOT_LEFT}" y="{}" fill="#555555">no events in this range</text>"##,
            y + 15.0
        );
    }
    // On top, but letting clicks through to the marks under them.
    for span in &picture.gaps {
        band(&mut out, "gap", span, &x, plot_bottom, "url(#eg-gap-hatch)");
    }
    let mut y = plot_bottom + 8.0;
    if let Some(cut) = picture.truncated {
        let _ = write!(
            out,
            r##"<text class="truncated" x="8" y="{}" fill="{EXIT_137}">{}</text>"##,
            y + 12.0,
            escape(&truncated_note(cut))
        );
        y += LANE;
    }
    legend(&mut out, y);
    out.push_str("</svg>");
    out
}

/// Unix milliseconds to x within the plot.
struct Scale {
    from: i64,
    to: i64,
}

impl Scale {
    fn x(&self, ms: i64) -> f64 {
        let share =
            (ms.clamp(self.from, self.to) - self.from) as f64 / (self.to - self.from) as f64;
        PLOT_LEFT + share * (PLOT_RIGHT - PLOT_LEFT)
    }

    fn inside(&self, ms: i64) -> bool {
        (self.from..=self.to).contains(&ms)
    }
}

fn band(out: &mut String, class: &str, span: &Span, x: &Scale, bottom: f64, fill: &str) {
    let (left, right) = (x.x(span.from), x.x(span.to));
    let _ = write!(
        out,
        r#"<rect class="{class}" data-from="{}" data-to="{}" x="{left:.1}" y="{TOP}" width="{:.1}" height="{:.1}" fill="{fill}" pointer-events="none"/>"#,
        span.from,
        span.to,
        (right - left).max(1.0),
        bottom - TOP
    );
}

fn draw_group(out: &mut String, group: &LaneGroup, by: Group, x: &Scale, mut y: f64) -> f64 {
    let _ = write!(
        out,
        r##"<g class="group" data-group="{}"><line x1="0" y1="{y:.1}" x2="{WIDTH}" y2="{y:.1}" stroke="#cccccc"/><text class="group-label" x="8" y="{:.1}" font-weight="bold" fill="#111111">{}<title>{}</title></text>"##,
        escape(&group.key),
        y + 15.0,
        escape(&shorten(&group.key)),
        escape(&group.key)
    );
    if let Some(c) = group.counts {
        let _ = write!(
            out,
            r##"<text class="restarts" data-restarts="{0}" x="{PLOT_LEFT}" y="{1:.1}" fill="{RESTART}">{0} restarts</text><text class="counts" x="{2:.1}" y="{1:.1}" fill="#555555">OOM events {3}, non-zero exits {4} (status 137: {5}, OOM-killed: {6})</text>"##,
            c.restarts,
            y + 15.0,
            PLOT_LEFT + 90.0,
            c.ooms,
            c.nonzero_exits,
            c.killed,
            c.oom_killed
        );
    }
    y += LANE;
    for lane in &group.lanes {
        draw_lane(out, lane, by, x, y);
        y += LANE;
    }
    out.push_str("</g>");
    y
}

fn draw_lane(out: &mut String, lane: &Lane, by: Group, x: &Scale, y: f64) {
    let pod = lane.pod.as_ref().map(|p| p.to_string()).unwrap_or_default();
    let short_id: String = lane.container_id.chars().take(12).collect();
    let name = match lane.container.as_str() {
        "" => "-",
        name => name,
    };
    let label = match (by, &lane.pod) {
        (Group::Pod, _) | (_, None) => format!("{name} {short_id}"),
        (_, Some(p)) => format!("{} {name} {short_id}", p.name),
    };
    let mid = y + LANE / 2.0;
    let _ = write!(
        out,
        r##"<g class="lane" data-pod="{}" data-container="{}" data-container-id="{}"><text class="lane-label" x="20" y="{:.1}" fill="#222222">{}<title>{}</title></text>"##,
        escape(&pod),
        escape(&lane.container),
        escape(&lane.container_id),
        mid + 4.0,
        escape(&shorten(label.trim_end())),
        escape(&format!("{pod} {name} {}", lane.container_id)),
    );
    let (left, right) = (x.x(lane.life.from), x.x(lane.life.to));
    let _ = write!(
        out,
        r#"<rect class="life" x="{left:.1}" y="{:.1}" width="{:.1}" height="10" fill="{LIFE}"/>"#,
        mid - 5.0,
        (right - left).max(1.0)
    );
    for run in &lane.running {
        let (left, right) = (x.x(run.from), x.x(run.to));
        let _ = write!(
            out,
            r#"<rect class="running" x="{left:.1}" y="{:.1}" width="{:.1}" height="10" fill="{RUNNING}"/>"#,
            mid - 5.0,
            (right - left).max(1.0)
        );
    }
    for mark in lane.marks.iter().filter(|m| x.inside(m.at)) {
        draw_mark(out, mark, x.x(mark.at), mid);
    }
    out.push_str("</g>");
}

fn draw_mark(out: &mut String, mark: &Mark, cx: f64, cy: f64) {
    let mut classes = format!("mark mark-{}", kind_name(mark.kind));
    let mut data = format!(
        r#" data-row="{}" data-topic="{}""#,
        mark.row,
        escape(&mark.topic)
    );
    if let (Some(class), Some(status)) = (mark.exit, mark.status) {
        classes.push(' ');
        classes.push_str(match class {
            ExitClass::Zero => "exit-zero",
            ExitClass::Uncounted => "exit-uncounted",
            ExitClass::NonZero => "exit-nonzero",
            ExitClass::Killed => "exit-137",
            ExitClass::OomKilled => "exit-oom",
        });
        let _ = write!(data, r#" data-status="{status}""#);
    }
    if let Some(n) = mark.restart {
        classes.push_str(" restart");
        let _ = write!(data, r#" data-restart="{n}""#);
    }
    if mark.reconciled {
        classes.push_str(" reconciled");
    }
    let shape = match (mark.kind, mark.exit) {
        (Kind::Create, _) => format!(
            r##"<circle cx="{cx:.1}" cy="{cy:.1}" r="4" fill="#ffffff" stroke="#555555"/>"##
        ),
        (Kind::Start, _) => {
            let fill = if mark.restart.is_some() {
                RESTART
            } else {
                START
            };
            format!(
                r#"<polygon points="{:.1},{:.1} {:.1},{cy:.1} {:.1},{:.1}" fill="{fill}"/>"#,
                cx - 4.0,
                cy - 6.0,
                cx + 5.0,
                cx - 4.0,
                cy + 6.0
            )
        }
        (Kind::Exit, class) => {
            let fill = match class {
                Some(ExitClass::NonZero) => EXIT_NONZERO,
                Some(ExitClass::Killed) => EXIT_137,
                Some(ExitClass::OomKilled) => EXIT_OOM,
                Some(ExitClass::Uncounted) => EXIT_UNCOUNTED,
                _ => EXIT_ZERO,
            };
            format!(r##"<circle cx="{cx:.1}" cy="{cy:.1}" r="5" fill="{fill}" stroke="#ffffff"/>"##)
        }
        (Kind::Oom, _) => format!(
            r#"<polygon points="{cx:.1},{:.1} {:.1},{cy:.1} {cx:.1},{:.1} {:.1},{cy:.1}" fill="{EXIT_OOM}" stroke="{EXIT_137}"/>"#,
            cy - 7.0,
            cx + 6.0,
            cy + 7.0,
            cx - 6.0
        ),
        (Kind::Delete, _) => format!(
            r##"<rect x="{:.1}" y="{:.1}" width="3" height="14" fill="#333333"/>"##,
            cx - 1.5,
            cy - 7.0
        ),
        (Kind::Other, _) => format!(
            r##"<rect x="{:.1}" y="{:.1}" width="2" height="8" fill="#999999"/>"##,
            cx - 1.0,
            cy - 4.0
        ),
    };
    let _ = write!(
        out,
        r#"<g class="{classes}"{data}>{shape}<title>{} {} ({})</title></g>"#,
        escape(&when(mark.at)),
        escape(&what(mark)),
        escape(&mark.origin)
    );
}

/// What a truncated picture says of itself, in the SVG and the document alike.
pub(crate) fn truncated_note(cut: Truncated) -> String {
    format!(
        "truncated: drew the newest {} of {} events, from {}; narrow the time range or the filter",
        cut.drawn,
        cut.total,
        when(cut.from)
    )
}

/// A time in UTC to the millisecond.
pub(crate) fn when(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string())
        .unwrap_or_else(|| format!("{ms} ms"))
}

/// What a mark stands for: its topic, an exit's status and class, a restart's number.
pub(crate) fn what(mark: &Mark) -> String {
    let mut what = mark.topic.clone();
    if let (Some(class), Some(status)) = (mark.exit, mark.status) {
        let words = match class {
            ExitClass::Zero => "",
            ExitClass::Uncounted => " (the sandbox's; not counted)",
            ExitClass::NonZero => " (non-zero)",
            ExitClass::Killed => ": killed (SIGKILL)",
            ExitClass::OomKilled => ": OOM-killed",
        };
        let _ = write!(what, " status {status}{words}");
    }
    if let Some(n) = mark.restart {
        let _ = write!(what, ": restart {n}");
    }
    what
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Create => "create",
        Kind::Start => "start",
        Kind::Exit => "exit",
        Kind::Oom => "oom",
        Kind::Delete => "delete",
        Kind::Other => "other",
    }
}

/// At most [`LABEL_CHARS`] characters, an ellipsis when cut.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(LABEL_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// `text` safe inside XML (and HTML) text and double- or single-quoted attributes:
/// the five special characters as entities, and the characters XML 1.0 does not
/// allow at all (most C0 controls, lone surrogates cannot occur in a `str`, U+FFFE
/// and U+FFFF) replaced, so hostile text cannot make the document ill-formed.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
#[path = "svg_tests.rs"]
mod tests;
