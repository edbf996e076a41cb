//! A filter as a parameterised SQL predicate over `events`. Each selector becomes
//! either an exact predicate (the rows it keeps are exactly those the in-memory matcher
//! keeps) or `1` with a note that the matcher must run on the rows afterwards. User
//! text only ever travels as bound parameters.

use std::borrow::Cow;

use rusqlite::types::Value;

use super::eventpath::{Access, resolve_all};
use crate::filter::{Fields, Filter, Operator, Selector};

/// A WHERE clause fragment and the values for its `?` placeholders, in order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Predicate {
    pub sql: String,
    pub params: Vec<Value>,
    /// True when SQL keeps a superset and the filter must be applied to each row.
    pub recheck: bool,
}

/// The name a type_url resolves to: everything after its last `/` (as
/// `Registry::message` reads it). `rtrim` with every character but `/` strips the
/// name, leaving the prefix whose length is skipped.
const TYPE_NAME: &str = "substr(type_url, length(rtrim(type_url, replace(type_url, '/', ''))) + 1)";

pub(crate) fn translate(filter: &Filter) -> Predicate {
    let mut out = Predicate::default();
    let mut alternatives = Vec::new();
    for conjunction in filter.alternatives() {
        let mut terms = Vec::new();
        for selector in conjunction.selectors() {
            match selector_sql(selector, &mut out.params) {
                Some(sql) => terms.push(sql),
                None => out.recheck = true,
            }
        }
        alternatives.push(match terms.is_empty() {
            true => "1".to_owned(),
            false => format!("({})", terms.join(" AND ")),
        });
    }
    out.sql = match alternatives.is_empty() {
        true => "1".to_owned(),
        false => format!("({})", alternatives.join(" OR ")),
    };
    out
}

/// A field adaptor with nothing in it: what the matcher sees for fields no event has.
struct NoFields;

impl Fields for NoFields {
    fn field(&self, _: &[String]) -> Option<Cow<'_, str>> {
        None
    }
}

fn constant(selector: &Selector) -> String {
    match selector.matches(&NoFields) {
        true => "1".to_owned(),
        false => "0".to_owned(),
    }
}

/// `None` when SQL cannot answer exactly (regular expressions, topic globs, paths
/// through a nested `Any`).
fn selector_sql(selector: &Selector, params: &mut Vec<Value>) -> Option<String> {
    if selector.value_is_lossy() {
        return Some(constant(selector));
    }
    match selector.path.first().map(String::as_str) {
        Some(column @ ("topic" | "namespace")) => column_sql(column, selector, params),
        Some("origin") => origin_sql(selector, params),
        Some("origin_clock") => origin_clock_sql(selector, params),
        Some("reconciled_from") => reconciled_from_sql(selector, params),
        Some("reason") => reason_sql(selector, params),
        Some("pod" | "container") => workload_sql(selector, params),
        Some("node") => node_sql(selector, params),
        Some("event") => event_sql(selector, params),
        _ => Some(constant(selector)),
    }
}

/// `topic` and `namespace` are present when non-empty, so an absent field and `""`
/// compare alike for `!=`; written so the (column, timestamp) indexes apply.
fn column_sql(column: &str, selector: &Selector, params: &mut Vec<Value>) -> Option<String> {
    match selector.op {
        Operator::Present => Some(format!("{column} <> ''")),
        Operator::Equal if selector.is_topic_glob() => None,
        Operator::Equal if selector.value.is_empty() => Some("0".to_owned()),
        Operator::Equal => {
            params.push(Value::Text(selector.value.clone()));
            Some(format!("{column} = ?"))
        }
        Operator::NotEqual => {
            params.push(Value::Text(selector.value.clone()));
            Some(format!("{column} <> ?"))
        }
        Operator::Matches => None,
    }
}

/// `origin` is always present (`live` or `reconciled`; the column is NOT NULL).
fn origin_sql(selector: &Selector, params: &mut Vec<Value>) -> Option<String> {
    match selector.op {
        Operator::Present => Some("1".to_owned()),
        Operator::Equal if selector.value.is_empty() => Some("0".to_owned()),
        // The partial index `events_reconciled` holds only these rows. SQLite uses
        // it only for a term spelled as its WHERE clause is, with the literal (a bound
        // value is not known when the statement is planned; the literal is this
        // constant, never the user's text), and, without statistics, takes it for
        // half the table: in a subquery that needs only row_ids it is the cheapest
        // way, and the outer query looks the few rows up by row_id.
        Operator::Equal if selector.value == RECONCILED => Some(format!(
            "row_id IN (SELECT row_id FROM events WHERE origin = '{RECONCILED}')"
        )),
        Operator::Equal => {
            params.push(Value::Text(selector.value.clone()));
            Some("origin = ?".to_owned())
        }
        Operator::NotEqual => {
            params.push(Value::Text(selector.value.clone()));
            Some("origin <> ?".to_owned())
        }
        Operator::Matches => None,
    }
}

const RECONCILED: &str = "reconciled";

/// `origin_clock` is present for reconciled rows only (NULL for live ones).
fn origin_clock_sql(selector: &Selector, params: &mut Vec<Value>) -> Option<String> {
    match selector.op {
        Operator::Present => Some("(origin_clock IS NOT NULL)".to_owned()),
        Operator::Equal if selector.value.is_empty() => Some("0".to_owned()),
        Operator::Equal => {
            params.push(Value::Text(selector.value.clone()));
            Some("coalesce(origin_clock = ?, 0)".to_owned())
        }
        Operator::NotEqual => {
            params.push(Value::Text(selector.value.clone()));
            Some("(coalesce(origin_clock, '') <> ?)".to_owned())
        }
        Operator::Matches => None,
    }
}

/// `reconciled_from` is present for reconciled rows only. Reconciled rows stored
/// before the column (schema version 12) have it NULL and read back as containerd's,
/// which they all were: the value compared is the column or, for them, `containerd`.
/// Only reconciled rows can have one, so `==` and presence read the rows the partial
/// index `events_reconciled` holds (as `origin==reconciled` does) and compare only
/// those.
fn reconciled_from_sql(selector: &Selector, params: &mut Vec<Value>) -> Option<String> {
    const FROM: &str = "coalesce(reconciled_from, 'containerd')";
    let reconciled = format!("row_id IN (SELECT row_id FROM events WHERE origin = '{RECONCILED}')");
    match selector.op {
        Operator::Present => Some(reconciled),
        Operator::Equal if selector.value.is_empty() => Some("0".to_owned()),
        Operator::Equal => {
            params.push(Value::Text(selector.value.clone()));
            Some(format!("({reconciled} AND {FROM} = ?)"))
        }
        // Live rows have no witness: `!=` keeps them whatever the value.
        Operator::NotEqual => {
            params.push(Value::Text(selector.value.clone()));
            Some(format!(
                "(CASE WHEN origin = '{RECONCILED}' THEN {FROM} ELSE '' END <> ?)"
            ))
        }
        Operator::Matches => None,
    }
}

/// `reason` is NULL unless the manager gave one, as the matcher then finds the field
/// absent; an empty reason is stored as `''` and present, as the matcher has it.
/// Only the first component counts, as for `origin`.
fn reason_sql(selector: &Selector, params: &mut Vec<Value>) -> Option<String> {
    match selector.op {
        Operator::Present => Some("(reason IS NOT NULL)".to_owned()),
        // NULL is false to WHERE, and the translation never negates a term.
        Operator::Equal => {
            params.push(Value::Text(selector.value.clone()));
            Some("reason = ?".to_owned())
        }
        Operator::NotEqual => {
            params.push(Value::Text(selector.value.clone()));
            Some("(coalesce(reason, '') <> ?)".to_owned())
        }
        Operator::Matches => None,
    }
}

/// `node` is NULL where unknown (rows stored before the column), as the matcher then
/// finds the field absent. Only the first component counts, as for `namespace`.
fn node_sql(selector: &Selector, params: &mut Vec<Value>) -> Option<String> {
    match selector.op {
        Operator::Present => Some("(node IS NOT NULL)".to_owned()),
        // Bare, so that `node = ?` can use the partial index `events_node`; NULL is
        // false to WHERE, and the translation never negates a term.
        Operator::Equal => {
            params.push(Value::Text(selector.value.clone()));
            Some("node = ?".to_owned())
        }
        Operator::NotEqual => {
            params.push(Value::Text(selector.value.clone()));
            Some("(coalesce(node, '') <> ?)".to_owned())
        }
        Operator::Matches => None,
    }
}

/// The workload's fields ([`crate::event::WORKLOAD_FIELDS`]), each NULL where the
/// container's record said nothing (and for rows without a workload), as the matcher
/// then finds the field absent. Only the first two components name a column; further
/// ones are ignored, as the matcher ignores them, except after `container.labels`,
/// where they are the label's key, dots and all.
fn workload_sql(selector: &Selector, params: &mut Vec<Value>) -> Option<String> {
    let path = &selector.path;
    let column = match (path[0].as_str(), path.get(1).map(String::as_str)) {
        ("pod", Some("name")) => "pod_name",
        ("pod", Some("namespace")) => "pod_namespace",
        ("pod", Some("uid")) => "pod_uid",
        ("container", Some("name")) => "container_name",
        ("container", Some("kind")) => "container_kind",
        // Stored NULL when the record has none, as the field is then absent.
        ("container", Some("image")) => "image",
        ("container", Some("labels")) if path.len() > 2 => "labels",
        _ => return Some(constant(selector)),
    };
    // The regex is the matcher's; SQL keeps every row.
    if selector.op == Operator::Matches {
        return None;
    }
    let value = match column {
        // json_each, not json_extract: a key may hold any character, and a JSON path
        // would have to quote it. Its `key` is the key unescaped, compared as a bound
        // value.
        "labels" => {
            params.push(Value::Text(path[2..].join(".")));
            "(SELECT j.value FROM json_each(labels) AS j WHERE j.key = ?)"
        }
        column => column,
    };
    Some(match selector.op {
        Operator::Present => format!("({value} IS NOT NULL)"),
        // A bare comparison, not wrapped in coalesce, so that `pod_name = ?` can use
        // the `events_pod` index (it implies the index's `pod_name IS NOT NULL`). Its
        // NULL for a row without the field is false to WHERE, since the translation
        // never negates a term.
        Operator::Equal => {
            params.push(Value::Text(selector.value.clone()));
            format!("{value} = ?")
        }
        Operator::NotEqual => {
            params.push(Value::Text(selector.value.clone()));
            format!("(coalesce({value}, '') <> ?)")
        }
        Operator::Matches => return None,
    })
}

fn event_sql(selector: &Selector, params: &mut Vec<Value>) -> Option<String> {
    if selector.op == Operator::Matches {
        return None;
    }
    let found = resolve_all(&selector.path[1..]).ok()?;
    if found.is_empty() {
        return Some(constant(selector));
    }
    // The field's value, or NULL when the adaptor would report it absent; `event` is
    // NULL exactly when the payload could not be decoded, so json_extract gives NULL.
    let mut value = format!("(CASE {TYPE_NAME}");
    for (type_name, access) in found {
        value.push_str(" WHEN ? THEN ");
        params.push(Value::Text(type_name));
        match access {
            Access::String { json_path } => {
                value.push_str("NULLIF(json_extract(event, ?), '')");
                params.push(Value::Text(json_path));
            }
            Access::Bool { json_path } => {
                // json_type spells booleans exactly as the adaptor does.
                value.push_str("json_type(event, ?)");
                params.push(Value::Text(json_path));
            }
            Access::Label { map_path, key } => {
                value.push_str(
                    "(SELECT j.value FROM json_each(event, ?) AS j WHERE j.key = ? AND j.type = 'text')",
                );
                params.push(Value::Text(map_path));
                params.push(Value::Text(key));
            }
        }
    }
    value.push_str(" END)");
    Some(match selector.op {
        Operator::Present => format!("({value} IS NOT NULL)"),
        Operator::Equal => {
            params.push(Value::Text(selector.value.clone()));
            format!("coalesce({value} = ?, 0)")
        }
        Operator::NotEqual => {
            params.push(Value::Text(selector.value.clone()));
            format!("(coalesce({value}, '') <> ?)")
        }
        Operator::Matches => return None,
    })
}
