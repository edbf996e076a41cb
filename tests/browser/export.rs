//! `eventgate timeline --out`: the .html and .svg files, opened from disk in the
//! browser, draw the same picture as the page for the same pod and range.

use anyhow::{Context, Result, ensure};

use crate::scenario::POD;
use crate::support::{eventgate, path_str};
use crate::ui::{Picture, READ, Ui};

/// What two pictures must share: the range, groups, lanes, and every mark with its
/// classes and status.
fn shape(p: &Picture) -> String {
    let mut out = format!("axis {:?}..{:?}\n", p.from, p.to);
    for g in &p.groups {
        out += &format!(
            "group {:?} {:?} restarts {:?}\n",
            g.key, g.label, g.restarts
        );
    }
    for l in &p.lanes {
        out += &format!(
            "lane {:?} {:?} {:?} in {:?}\n",
            l.id, l.container, l.pod, l.group
        );
    }
    for m in &p.marks {
        out += &format!(
            "mark {:?} {:?} {:?} status {:?} restart {:?} in {:?}\n",
            m.row, m.topic, m.classes, m.status, m.restart, m.lane
        );
    }
    for g in &p.gaps {
        out += &format!("gap {:?}..{:?}\n", g.from, g.to);
    }
    out + &format!("reconciled spans {}\n", p.reconciled_spans)
}

#[test]
fn the_exported_files_draw_the_pages_picture() -> Result<()> {
    let ui = Ui::open()?;
    let s = ui.scenario;
    let page = ui.timeline(&[("pod", POD), ("since", &s.since), ("until", &s.until)])?;
    ensure!(!page.marks.is_empty(), "the page drew no marks");
    let page = shape(&page);

    let dir = tempfile::tempdir()?;
    for name in ["web-7.html", "web-7.svg"] {
        let file = dir.path().join(name);
        let out = eventgate()
            .args(["timeline", "--db", path_str(&ui.db()), "--pod", POD])
            .args(["--since", &s.since, "--until", &s.until, "--out"])
            .arg(&file)
            .output()?;
        ensure!(
            out.status.success(),
            "eventgate timeline --out {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        ui.browser.goto(&format!("file://{}", file.display()))?;
        let read = ui.browser.script(
            &format!(
                "const svg = document.querySelector('svg.eg-timeline');\n\
                 return svg ? ({READ})(svg) : null;"
            ),
            vec![],
        )?;
        ensure!(!read.is_null(), "{name}: no svg.eg-timeline in it");
        let file_shape = shape(&Picture::from_json(read).context(name)?);
        ensure!(
            file_shape == page,
            "{name} differs from the page:\n--- page\n{page}\n--- {name}\n{file_shape}"
        );
        ui.assert_nothing_ran()?;
    }
    Ok(())
}
