//! The timeline picture as one self-contained HTML file: a header saying what it
//! shows, the SVG inline, and a table of every mark. No script at all, and a CSP
//! that would refuse one: the file is opened from disk or a mail, far from the
//! gateway, and event text in it is hostile input like anywhere else.

use std::fmt::Write;

use super::picture::{Lane, Picture};
use super::svg::{self, escape};

/// The file's CSP: nothing loads, nothing runs; the inline style below and the
/// SVG's own drawing are all it needs.
pub(crate) const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:";

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#111}\
h1{font-size:1.3em;margin:0 0 .3em}\
.meta{margin:.2em 0;color:#333}\
.truncated{color:#b00020;font-weight:bold}\
.picture{overflow-x:auto;border:1px solid #ddd;margin:1em 0}\
table{border-collapse:collapse;font-size:.85em}\
th,td{border-bottom:1px solid #e5e5e5;padding:.2em .6em;text-align:left;vertical-align:top}\
th{background:#f4f4f4}\
td.what{font-family:monospace}";

pub(crate) fn render(picture: &Picture, title: &str) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\
         <meta name=\"referrer\" content=\"no-referrer\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n<header><h1>{}</h1>",
        escape(title),
        escape(title)
    );
    if let Some(pod) = &picture.pod {
        let _ = write!(
            out,
            "<p class=\"meta pod\">pod {}</p>",
            escape(&pod.to_string())
        );
    }
    let _ = write!(
        out,
        "<p class=\"meta range\">from {} to {}</p>",
        escape(&svg::when(picture.from)),
        escape(&svg::when(picture.to))
    );
    let c = picture.counts;
    let _ = write!(
        out,
        "<p class=\"meta counts\">restarts {}, OOM events {}, non-zero exits {} \
         (status 137: {}, OOM kills: {}); {} events, {} gaps</p>",
        c.restarts,
        c.ooms,
        c.nonzero_exits,
        c.killed,
        c.oom_killed,
        picture.rows,
        picture.gaps.len()
    );
    if let Some(cut) = picture.truncated {
        let _ = write!(
            out,
            "<p class=\"meta truncated\">{}</p>",
            escape(&svg::truncated_note(cut))
        );
    }
    out.push_str("</header>\n<div class=\"picture\">");
    out.push_str(&svg::render(picture));
    out.push_str("</div>\n<h2>Marks</h2>\n<table class=\"marks\"><thead><tr><th>time (UTC)</th>\
         <th>group</th><th>container</th><th>what</th><th>origin</th><th>row</th></tr></thead><tbody>\n");
    let mut rows: Vec<(&str, &Lane, &super::picture::Mark)> = picture
        .groups
        .iter()
        .flat_map(|g| {
            g.lanes
                .iter()
                .flat_map(move |l| l.marks.iter().map(move |m| (g.key.as_str(), l, m)))
        })
        .collect();
    rows.sort_by_key(|(_, _, m)| (m.at, m.row));
    for (group, lane, mark) in rows {
        let container = match lane.container.as_str() {
            "" => lane.container_id.clone(),
            name => format!("{name} {}", lane.container_id),
        };
        let _ = writeln!(
            out,
            "<tr class=\"mark-row\"><td>{}</td><td>{}</td><td>{}</td><td class=\"what\">{}</td>\
             <td>{}</td><td>{}</td></tr>",
            escape(&svg::when(mark.at)),
            escape(group),
            escape(&container),
            escape(&svg::what(mark)),
            escape(&mark.origin),
            mark.row
        );
    }
    out.push_str("</tbody></table>\n</body></html>\n");
    out
}

#[cfg(test)]
#[path = "document_tests.rs"]
mod tests;
