//! The picture's frame: the time axis in UTC and the legend.

use std::fmt::Write;

use chrono::{DateTime, Utc};

use super::{
    EXIT_137, EXIT_NONZERO, EXIT_OOM, EXIT_UNCOUNTED, EXIT_ZERO, GAP, LIFE, PLOT_LEFT, PLOT_RIGHT,
    RECONCILED, RESTART, RUNNING, START, Scale, TOP, escape,
};

/// Tick steps to choose from, in milliseconds: at most ten ticks on the axis.
const STEPS: [i64; 18] = [
    1_000,
    5_000,
    10_000,
    30_000,
    60_000,
    300_000,
    600_000,
    1_800_000,
    3_600_000,
    10_800_000,
    21_600_000,
    43_200_000,
    86_400_000,
    172_800_000,
    604_800_000,
    2_592_000_000,
    7_776_000_000,
    31_536_000_000,
];

pub(super) fn axis(out: &mut String, x: &Scale, bottom: f64) {
    let span = x.to - x.from;
    let step = STEPS
        .iter()
        .copied()
        .find(|s| span / s <= 10)
        // Beyond years (events stamped centuries apart): ten ticks whatever the span.
        .unwrap_or_else(|| (span / 10).max(1));
    let format = match step {
        s if s < 60_000 => "%H:%M:%S",
        s if s < 86_400_000 => "%m-%d %H:%M",
        _ => "%Y-%m-%d",
    };
    let _ = write!(
        out,
        r##"<g class="axis"><text x="8" y="{}" fill="#555555">time (UTC)</text><line x1="{PLOT_LEFT}" y1="{TOP}" x2="{PLOT_RIGHT}" y2="{TOP}" stroke="#999999"/>"##,
        TOP - 14.0
    );
    let mut tick = x.from.div_euclid(step) * step;
    if tick < x.from {
        tick += step;
    }
    while tick <= x.to {
        let at = x.x(tick);
        let label = DateTime::<Utc>::from_timestamp_millis(tick)
            .map(|t| t.format(format).to_string())
            .unwrap_or_default();
        let _ = write!(
            out,
            r##"<line x1="{at:.1}" y1="{TOP}" x2="{at:.1}" y2="{bottom:.1}" stroke="#eeeeee"/><text x="{at:.1}" y="{}" text-anchor="middle" fill="#333333">{}</text>"##,
            TOP - 14.0,
            escape(&label)
        );
        tick += step;
    }
    out.push_str("</g>");
}

pub(super) fn legend(out: &mut String, y: f64) {
    let _ = write!(out, r#"<g class="legend">"#);
    let items: [(&str, &str, &str); 15] = [
        ("life", LIFE, "rect"),
        ("running", RUNNING, "rect"),
        ("create", "#ffffff", "ring"),
        ("start", START, "dot"),
        ("restart", RESTART, "dot"),
        ("exit 0", EXIT_ZERO, "dot"),
        ("exit non-zero", EXIT_NONZERO, "dot"),
        ("exit 137", EXIT_137, "dot"),
        ("sandbox exit", EXIT_UNCOUNTED, "dot"),
        ("OOM kill", EXIT_OOM, "dot"),
        ("OOM event", EXIT_OOM, "diamond"),
        ("delete", "#333333", "rect"),
        ("gap", GAP, "rect"),
        ("reconciled", RECONCILED, "rect"),
        ("other", "#999999", "rect"),
    ];
    for (i, (label, fill, shape)) in items.iter().enumerate() {
        let (col, row) = (i % 8, i / 8);
        let lx = 20.0 + col as f64 * 145.0;
        let ly = y + row as f64 * 18.0 + 10.0;
        let swatch = match *shape {
            "dot" => format!(
                r#"<circle cx="{:.1}" cy="{ly:.1}" r="5" fill="{fill}"/>"#,
                lx + 5.0
            ),
            "ring" => format!(
                r##"<circle cx="{:.1}" cy="{ly:.1}" r="4" fill="{fill}" stroke="#555555"/>"##,
                lx + 5.0
            ),
            "diamond" => format!(
                r#"<polygon points="{0:.1},{1:.1} {2:.1},{ly:.1} {0:.1},{3:.1} {4:.1},{ly:.1}" fill="{fill}" stroke="{EXIT_137}"/>"#,
                lx + 5.0,
                ly - 6.0,
                lx + 10.0,
                ly + 6.0,
                lx
            ),
            _ => format!(
                r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="10" fill="{fill}"/>"#,
                ly - 5.0
            ),
        };
        let _ = write!(
            out,
            r##"{swatch}<text x="{:.1}" y="{:.1}" fill="#333333">{label}</text>"##,
            lx + 18.0,
            ly + 4.0
        );
    }
    out.push_str("</g>");
}
