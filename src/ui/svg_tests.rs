//! The SVG text: its classes and data attributes, hostile names kept inert, and
//! well-formed XML whatever the events held.

use std::collections::BTreeSet;

use super::*;
use crate::query::Reader;
use crate::testing::TempStore;
use crate::ui::picture::tests::{Life, web7, web7_query, workload};
use crate::ui::picture::{Span, build};

/// Checks that `xml` is one well-formed element: tags nest and close, attributes are
/// quoted and unique, every `&` starts a known entity, no `<` in an attribute value.
/// Returns the element names and attribute names used.
fn well_formed(xml: &str) -> Result<(BTreeSet<String>, BTreeSet<String>), String> {
    let mut names = (BTreeSet::new(), BTreeSet::new());
    let mut stack: Vec<&str> = Vec::new();
    let mut roots = 0;
    let mut rest = xml;
    let entity = |text: &str| -> Result<(), String> {
        let mut parts = text.split('&');
        parts.next();
        for part in parts {
            let name = part.split(';').next().unwrap_or("");
            let known = ["amp", "lt", "gt", "quot", "apos"].contains(&name)
                || name.strip_prefix('#').is_some_and(|n| {
                    n.parse::<u32>().is_ok()
                        || n.strip_prefix('x')
                            .is_some_and(|h| u32::from_str_radix(h, 16).is_ok())
                });
            if !known || !part.contains(';') {
                return Err(format!("bad entity near &{}", &part[..part.len().min(20)]));
            }
        }
        Ok(())
    };
    while let Some(open) = rest.find('<') {
        let text = &rest[..open];
        entity(text)?;
        if stack.is_empty() && !text.trim().is_empty() {
            return Err(format!("text outside the root: {text:?}"));
        }
        rest = &rest[open..];
        if let Some(after) = rest.strip_prefix("<!--") {
            let end = after.find("-->").ok_or("unclosed comment")?;
            rest = &after[end + 3..];
            continue;
        }
        if let Some(after) = rest.strip_prefix("</") {
            let end = after.find('>').ok_or("unclosed end tag")?;
            let name = after[..end].trim();
            match stack.pop() {
                Some(open) if open == name => {}
                other => return Err(format!("</{name}> closes {other:?}")),
            }
            rest = &after[end + 1..];
            continue;
        }
        let after = &rest[1..];
        let name_end = after
            .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
            .ok_or("unclosed tag")?;
        let name = &after[..name_end];
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_alphanumeric() || "-_:.".contains(c))
        {
            return Err(format!("bad tag name {name:?}"));
        }
        if stack.is_empty() {
            roots += 1;
        }
        names.0.insert(name.to_lowercase());
        let mut attrs = &after[name_end..];
        let mut seen = Vec::new();
        loop {
            attrs = attrs.trim_start();
            if let Some(r) = attrs.strip_prefix("/>") {
                rest = r;
                break;
            }
            if let Some(r) = attrs.strip_prefix('>') {
                stack.push(name);
                rest = r;
                break;
            }
            let eq = attrs
                .find('=')
                .ok_or(format!("attribute without value in <{name}"))?;
            let attr = attrs[..eq].trim();
            if attr.is_empty() || attr.contains(|c: char| c.is_whitespace() || "<>\"'/".contains(c))
            {
                return Err(format!("bad attribute name {attr:?} in <{name}"));
            }
            if seen.contains(&attr) {
                return Err(format!("attribute {attr} twice in <{name}"));
            }
            seen.push(attr);
            names.1.insert(attr.to_lowercase());
            let value = &attrs[eq + 1..];
            let quote = value.chars().next().filter(|q| *q == '"' || *q == '\'');
            let quote = quote.ok_or(format!("unquoted {attr} in <{name}"))?;
            let end = value[1..].find(quote).ok_or("unclosed attribute value")?;
            let text = &value[1..1 + end];
            if text.contains('<') {
                return Err(format!("< in the value of {attr}"));
            }
            entity(text)?;
            attrs = &value[end + 2..];
        }
    }
    entity(rest)?;
    match (stack.is_empty(), roots, rest.trim().is_empty()) {
        (true, 1, true) => Ok(names),
        _ => Err(format!("unclosed {stack:?}, {roots} roots")),
    }
}

#[test]
fn the_checker_refuses_what_is_not_well_formed() {
    assert!(well_formed(r#"<a b="1"><c/>x &amp; y</a>"#).is_ok());
    for bad in [
        "<a><b></a></b>",
        r#"<a b="<"/>"#,
        "<a>&nbsp;</a>",
        "<a b=1/>",
        r#"<a b="1" b="2"/>"#,
        "<a/><b/>",
        "<a>",
    ] {
        assert!(well_formed(bad).is_err(), "{bad}");
    }
}

fn picture() -> String {
    let store = TempStore::with(&web7());
    let reader = Reader::open(store.path()).unwrap();
    render(&build(&reader, &web7_query()).unwrap())
}

#[test]
fn marks_carry_their_kind_exit_class_status_and_restart() {
    let svg = picture();
    well_formed(&svg).unwrap();
    assert!(
        svg.starts_with(
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="eg-timeline" data-from=""#
        )
    );
    for expected in [
        r#"<g class="axis">"#,
        r#"<g class="group" data-group="shop/web-7">"#,
        r#"<text class="restarts" data-restarts="5" "#,
        r#"<g class="lane" data-pod="shop/web-7" data-container="sandbox" data-container-id="sb1">"#,
        r#"<g class="lane" data-pod="shop/web-7" data-container="nginx" data-container-id="c1">"#,
        r#"class="mark mark-exit exit-nonzero" data-row="5" data-topic="/tasks/exit" data-status="1""#,
        r#"class="mark mark-exit exit-oom" data-row="9" data-topic="/tasks/exit" data-status="137""#,
        r#"class="mark mark-exit exit-oom" data-row="11" "#,
        r#"class="mark mark-exit exit-137" data-row="14" "#,
        r#"class="mark mark-exit exit-zero" data-row="16" "#,
        r#"class="mark mark-start restart" data-row="7" data-topic="/tasks/start" data-restart="1""#,
        r#"class="mark mark-oom" data-row="8" "#,
        r#"class="mark mark-create" data-row="3" "#,
        r#"class="mark mark-delete" data-row="6" "#,
        r#"<rect class="life" "#,
        r#"<rect class="running" "#,
        r#"<g class="legend">"#,
    ] {
        assert!(svg.contains(expected), "{expected} in {svg}");
    }
    assert!(!svg.contains("class=\"truncated\""));
}

#[test]
fn gaps_reconciled_spans_and_truncation_are_drawn() {
    let mut picture = build(
        &Reader::open(TempStore::with(&web7()).path()).unwrap(),
        &web7_query(),
    )
    .unwrap();
    let (from, to) = (picture.from + 1000, picture.from + 3000);
    picture.gaps.push(Span { from, to });
    picture.reconciled.push(Span {
        from,
        to: from + 500,
    });
    picture.truncated = Some(crate::ui::picture::Truncated {
        drawn: 5,
        total: 17,
        from: picture.from,
    });
    let svg = render(&picture);
    well_formed(&svg).unwrap();
    assert!(svg.contains(&format!(
        r#"<rect class="gap" data-from="{from}" data-to="{to}""#
    )));
    assert!(svg.contains(r#"<rect class="reconciled-span" data-from=""#));
    assert!(svg.contains(r#"<text class="truncated" "#));
    assert!(
        svg.contains(&format!(
            "truncated: drew the newest 5 of 17 events, from {}; narrow the time range or the filter",
            when(picture.from)
        )),
        "{svg}"
    );
}

/// Names and labels that try to break out of the SVG stay text.
#[test]
fn hostile_names_are_escaped_and_the_picture_stays_well_formed() {
    let hostile = [
        "<script>alert(1)</script>",
        "javascript:alert(1)",
        r#"" onload="alert(1)"#,
        "' onclick='alert(1)",
        "a&b\u{1}\u{FFFF}]]>",
    ];
    let mut life = Life::new();
    for (i, name) in hostile.iter().enumerate() {
        let pod = Some(workload(name, name, Some(name)));
        let id = format!("{name}-{i}");
        life.add("/containers/create", &json_id(&id), pod.clone());
        life.add("/tasks/start", &json_container(&id), pod.clone());
        life.add("/tasks/oom", &json_container(&id), pod.clone());
        let exit = serde_json::json!({"container_id": id, "id": id, "exit_status": 137});
        life.add("/tasks/exit", &exit.to_string(), pod.clone());
    }
    let store = TempStore::with(&life.events);
    let reader = Reader::open(store.path()).unwrap();
    let mut q = web7_query();
    q.pod = None;
    let picture = build(&reader, &q).unwrap();
    assert_eq!(picture.groups.len(), hostile.len());
    let svg = render(&picture);
    let (elements, attributes) = well_formed(&svg).unwrap();
    assert!(!svg.to_lowercase().contains("<script"));
    let allowed: BTreeSet<String> = [
        "svg", "defs", "pattern", "line", "rect", "g", "text", "title", "circle", "polygon",
    ]
    .map(String::from)
    .into();
    assert!(elements.is_subset(&allowed), "{elements:?}");
    for attribute in &attributes {
        assert!(
            !attribute.starts_with("on") && !attribute.contains("href") && attribute != "style",
            "{attribute}"
        );
    }
    assert!(svg.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(svg.contains(r#"data-container="&quot; onload=&quot;alert(1)""#));
}

fn json_id(id: &str) -> String {
    serde_json::json!({"id": id}).to_string()
}

fn json_container(id: &str) -> String {
    serde_json::json!({"container_id": id}).to_string()
}

#[test]
fn escape_covers_the_five_and_controls() {
    assert_eq!(
        escape(r#"<a href="x">&'"#),
        "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
    );
    assert_eq!(escape("a\u{0}b\u{FFFE}"), "a\u{FFFD}b\u{FFFD}");
}

/// Events stamped millennia apart still get a handful of ticks.
#[test]
fn the_axis_has_at_most_a_dozen_ticks_whatever_the_range() {
    for (from, to) in [
        (0, 1),
        (0, 1_000),
        (1_714_557_600_000, 1_714_557_600_000 + 7 * 86_400_000),
        (-8_000_000_000_000_000, 8_000_000_000_000_000),
    ] {
        let svg = render(&crate::ui::picture::Picture {
            from,
            to,
            ..Default::default()
        });
        well_formed(&svg).unwrap();
        let ticks = svg.matches("text-anchor=\"middle\"").count();
        assert!((1..=12).contains(&ticks), "{from}..{to}: {ticks} ticks");
    }
}
