//! A filter as a parameterised SQL predicate over `events`. Each selector becomes
//! either an exact predicate (the rows it keeps are exactly those the in-memory matcher
//! keeps) or `1` with a note that the matcher must run on the rows afterwards. User
//! text only ever travels as bound parameters.
//!
//! One translation serves both stores: SQLite's audit store and a PostgreSQL one
//! (migrations/postgres), whose `events` has the same columns. They differ only in
//! spelling ([`Dialect`]): placeholders, booleans, JSON access, and the index tricks
//! SQLite's planner needs.

use std::borrow::Cow;

use super::eventpath::{Access, resolve_all};
use crate::filter::{Fields, Filter, Operator, Selector};

/// Which SQL the predicate is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    pub(crate) fn yes(self) -> &'static str {
        match self {
            Dialect::Sqlite => "1",
            Dialect::Postgres => "TRUE",
        }
    }

    pub(crate) fn no(self) -> &'static str {
        match self {
            Dialect::Sqlite => "0",
            Dialect::Postgres => "FALSE",
        }
    }

    /// The name a type_url resolves to: everything after its last `/` (as
    /// `Registry::message` reads it).
    fn type_name(self) -> &'static str {
        match self {
            // `rtrim` with every character but `/` strips the name, leaving the prefix
            // whose length is skipped.
            Dialect::Sqlite => {
                "substr(type_url, length(rtrim(type_url, replace(type_url, '/', ''))) + 1)"
            }
            Dialect::Postgres => "substring(type_url from '[^/]*$')",
        }
    }

    /// The rows the partial index `events_reconciled` holds. SQLite uses that index
    /// only for a term spelled as its WHERE clause is, with the literal (a bound value
    /// is not known when the statement is planned; the literal is this constant, never
    /// the user's text), and, without statistics, takes it for half the table: in a
    /// subquery that needs only row_ids it is the cheapest way, and the outer query
    /// looks the few rows up by row_id. PostgreSQL plans the plain term well.
    fn reconciled_rows(self) -> String {
        match self {
            Dialect::Sqlite => {
                format!("row_id IN (SELECT row_id FROM events WHERE origin = '{RECONCILED}')")
            }
            Dialect::Postgres => format!("origin = '{RECONCILED}'"),
        }
    }
}

/// A value bound to a placeholder: the only way user text reaches SQL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Param {
    Text(String),
    Integer(i64),
}

impl rusqlite::ToSql for Param {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            Param::Text(text) => text.to_sql(),
            Param::Integer(n) => n.to_sql(),
        }
    }
}

impl Param {
    /// The value as tokio-postgres binds it; its placeholder carries the type.
    pub(crate) fn postgres(&self) -> &(dyn tokio_postgres::types::ToSql + Sync) {
        match self {
            Param::Text(text) => text,
            Param::Integer(n) => n,
        }
    }
}

/// Collects the values of a statement and writes their placeholders: `?` for SQLite,
/// which numbers them in order of appearance, so values must be bound in the order
/// their placeholders appear in the text; `$n::type` for PostgreSQL, numbered in order
/// of binding (and typed, so the server never has to guess a type from the context).
#[derive(Clone, Debug)]
pub(crate) struct Binder {
    pub(crate) dialect: Dialect,
    pub(crate) params: Vec<Param>,
}

impl Binder {
    pub(crate) fn new(dialect: Dialect) -> Self {
        Self {
            dialect,
            params: Vec::new(),
        }
    }

    /// Binds `value` as text; returns its placeholder.
    pub(crate) fn text(&mut self, value: impl Into<String>) -> String {
        self.params.push(Param::Text(value.into()));
        self.placeholder("text")
    }

    /// Binds `value` as an integer; returns its placeholder.
    pub(crate) fn int(&mut self, value: i64) -> String {
        self.params.push(Param::Integer(value));
        self.placeholder("bigint")
    }

    fn placeholder(&self, type_name: &str) -> String {
        match self.dialect {
            Dialect::Sqlite => "?".to_owned(),
            Dialect::Postgres => format!("${}::{type_name}", self.params.len()),
        }
    }
}

/// A WHERE clause fragment and the values for its placeholders.
#[derive(Clone, Debug)]
pub(crate) struct Predicate {
    pub sql: String,
    pub bind: Binder,
    /// True when SQL keeps a superset and the filter must be applied to each row.
    pub recheck: bool,
}

impl Predicate {
    pub(crate) fn params(&self) -> &[Param] {
        &self.bind.params
    }
}

/// What SQL makes of one selector.
enum Answer {
    /// Exactly the rows the matcher keeps.
    Exact(String),
    /// A superset of them: the matcher decides.
    Superset(String),
    /// Every row: the matcher decides.
    Unknown,
}

/// `filter` as a predicate in SQLite's SQL.
#[cfg(any(test, feature = "bench"))]
pub(crate) fn translate(filter: &Filter) -> Predicate {
    translate_with(filter, Binder::new(Dialect::Sqlite))
}

/// `filter` as a predicate, its values bound after those `bind` already holds.
pub(crate) fn translate_with(filter: &Filter, mut bind: Binder) -> Predicate {
    let d = bind.dialect;
    let mut recheck = false;
    let mut alternatives = Vec::new();
    for conjunction in filter.alternatives() {
        let mut terms = Vec::new();
        for selector in conjunction.selectors() {
            match selector_sql(selector, &mut bind) {
                Answer::Exact(sql) => terms.push(sql),
                Answer::Superset(sql) => {
                    terms.push(sql);
                    recheck = true;
                }
                Answer::Unknown => recheck = true,
            }
        }
        alternatives.push(match terms.is_empty() {
            true => d.yes().to_owned(),
            false => format!("({})", terms.join(" AND ")),
        });
    }
    let sql = match alternatives.is_empty() {
        true => d.yes().to_owned(),
        false => format!("({})", alternatives.join(" OR ")),
    };
    Predicate { sql, bind, recheck }
}

/// A field adaptor with nothing in it: what the matcher sees for fields no event has.
struct NoFields;

impl Fields for NoFields {
    fn field(&self, _: &[String]) -> Option<Cow<'_, str>> {
        None
    }
}

fn constant(selector: &Selector, d: Dialect) -> String {
    match selector.matches(&NoFields) {
        true => d.yes().to_owned(),
        false => d.no().to_owned(),
    }
}

/// `Unknown` when SQL cannot answer exactly (regular expressions, topic globs, paths
/// through a nested `Any`).
fn selector_sql(selector: &Selector, bind: &mut Binder) -> Answer {
    let d = bind.dialect;
    if selector.value_is_lossy() {
        return Answer::Exact(constant(selector, d));
    }
    // PostgreSQL's text holds no NUL character, so such a value cannot be bound; no
    // stored text holds one either, but what `!=` and presence make of that is the
    // matcher's to say.
    if d == Dialect::Postgres
        && (selector.value.contains('\0') || selector.path.iter().any(|p| p.contains('\0')))
    {
        return Answer::Unknown;
    }
    let exact = match selector.path.first().map(String::as_str) {
        Some(column @ ("topic" | "namespace")) => column_sql(column, selector, bind),
        Some("origin") => origin_sql(selector, bind),
        Some("origin_clock") => origin_clock_sql(selector, bind),
        Some("reconciled_from") => reconciled_from_sql(selector, bind),
        Some("reason") => reason_sql(selector, bind),
        Some("pod" | "container") => workload_sql(selector, bind),
        Some("node") => node_sql(selector, bind),
        Some("event") => return event_sql(selector, bind),
        _ => Some(constant(selector, d)),
    };
    exact.map_or(Answer::Unknown, Answer::Exact)
}

/// `topic` and `namespace` are present when non-empty, so an absent field and `""`
/// compare alike for `!=`; written so the (column, timestamp) indexes apply.
fn column_sql(column: &str, selector: &Selector, bind: &mut Binder) -> Option<String> {
    match selector.op {
        Operator::Present => Some(format!("{column} <> ''")),
        Operator::Equal if selector.is_topic_glob() => None,
        Operator::Equal if selector.value.is_empty() => Some(bind.dialect.no().to_owned()),
        Operator::Equal => Some(format!("{column} = {}", bind.text(&selector.value))),
        Operator::NotEqual => Some(format!("{column} <> {}", bind.text(&selector.value))),
        Operator::Matches => None,
    }
}

/// `origin` is always present (`live`, `reconciled` or `repeat`; the column is NOT
/// NULL).
fn origin_sql(selector: &Selector, bind: &mut Binder) -> Option<String> {
    let d = bind.dialect;
    match selector.op {
        Operator::Present => Some(d.yes().to_owned()),
        Operator::Equal if selector.value.is_empty() => Some(d.no().to_owned()),
        Operator::Equal if selector.value == RECONCILED => Some(d.reconciled_rows()),
        Operator::Equal => Some(format!("origin = {}", bind.text(&selector.value))),
        Operator::NotEqual => Some(format!("origin <> {}", bind.text(&selector.value))),
        Operator::Matches => None,
    }
}

const RECONCILED: &str = "reconciled";

/// `origin_clock` is present for reconciled rows only (NULL for live ones).
fn origin_clock_sql(selector: &Selector, bind: &mut Binder) -> Option<String> {
    let d = bind.dialect;
    match selector.op {
        Operator::Present => Some("(origin_clock IS NOT NULL)".to_owned()),
        Operator::Equal if selector.value.is_empty() => Some(d.no().to_owned()),
        Operator::Equal => Some(format!(
            "coalesce(origin_clock = {}, {})",
            bind.text(&selector.value),
            d.no()
        )),
        Operator::NotEqual => Some(format!(
            "(coalesce(origin_clock, '') <> {})",
            bind.text(&selector.value)
        )),
        Operator::Matches => None,
    }
}

/// `reconciled_from` is present for reconciled rows only. Reconciled rows stored
/// before the column (schema version 12) have it NULL and read back as containerd's,
/// which they all were: the value compared is the column or, for them, `containerd`.
/// Only reconciled rows can have one, so `==` and presence read the rows the partial
/// index `events_reconciled` holds (as `origin==reconciled` does) and compare only
/// those.
fn reconciled_from_sql(selector: &Selector, bind: &mut Binder) -> Option<String> {
    const FROM: &str = "coalesce(reconciled_from, 'containerd')";
    let d = bind.dialect;
    let reconciled = d.reconciled_rows();
    match selector.op {
        Operator::Present => Some(reconciled),
        Operator::Equal if selector.value.is_empty() => Some(d.no().to_owned()),
        Operator::Equal => Some(format!(
            "({reconciled} AND {FROM} = {})",
            bind.text(&selector.value)
        )),
        // Live rows have no witness: `!=` keeps them whatever the value.
        Operator::NotEqual => Some(format!(
            "(CASE WHEN origin = '{RECONCILED}' THEN {FROM} ELSE '' END <> {})",
            bind.text(&selector.value)
        )),
        Operator::Matches => None,
    }
}

/// `reason` is NULL unless the manager gave one, as the matcher then finds the field
/// absent; an empty reason is stored as `''` and present, as the matcher has it.
/// Only the first component counts, as for `origin`.
fn reason_sql(selector: &Selector, bind: &mut Binder) -> Option<String> {
    match selector.op {
        Operator::Present => Some("(reason IS NOT NULL)".to_owned()),
        // NULL is false to WHERE, and the translation never negates a term.
        Operator::Equal => Some(format!("reason = {}", bind.text(&selector.value))),
        Operator::NotEqual => Some(format!(
            "(coalesce(reason, '') <> {})",
            bind.text(&selector.value)
        )),
        Operator::Matches => None,
    }
}

/// `node` is NULL where unknown (rows stored before the column), as the matcher then
/// finds the field absent. Only the first component counts, as for `namespace`.
fn node_sql(selector: &Selector, bind: &mut Binder) -> Option<String> {
    match selector.op {
        Operator::Present => Some("(node IS NOT NULL)".to_owned()),
        // Bare, so that `node = ?` can use the partial index `events_node`; NULL is
        // false to WHERE, and the translation never negates a term.
        Operator::Equal => Some(format!("node = {}", bind.text(&selector.value))),
        Operator::NotEqual => Some(format!(
            "(coalesce(node, '') <> {})",
            bind.text(&selector.value)
        )),
        Operator::Matches => None,
    }
}

/// The workload's fields ([`crate::event::WORKLOAD_FIELDS`]), each NULL where the
/// container's record said nothing (and for rows without a workload), as the matcher
/// then finds the field absent. Only the first two components name a column; further
/// ones are ignored, as the matcher ignores them, except after `container.labels`,
/// where they are the label's key, dots and all.
fn workload_sql(selector: &Selector, bind: &mut Binder) -> Option<String> {
    let d = bind.dialect;
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
        _ => return Some(constant(selector, d)),
    };
    // The regex is the matcher's; SQL keeps every row.
    if selector.op == Operator::Matches {
        return None;
    }
    let value = match (column, d) {
        // json_each, not json_extract: a key may hold any character, and a JSON path
        // would have to quote it. Its `key` is the key unescaped, compared as a bound
        // value.
        ("labels", Dialect::Sqlite) => format!(
            "(SELECT j.value FROM json_each(labels) AS j WHERE j.key = {})",
            bind.text(path[2..].join("."))
        ),
        // jsonb's `->>` takes the key as a value, any character in it.
        ("labels", Dialect::Postgres) => format!("(labels ->> {})", bind.text(path[2..].join("."))),
        (column, _) => column.to_owned(),
    };
    Some(match selector.op {
        Operator::Present => format!("({value} IS NOT NULL)"),
        // A bare comparison, not wrapped in coalesce, so that `pod_name = ?` can use
        // the `events_pod` index (it implies the index's `pod_name IS NOT NULL`). Its
        // NULL for a row without the field is false to WHERE, since the translation
        // never negates a term.
        Operator::Equal => format!("{value} = {}", bind.text(&selector.value)),
        Operator::NotEqual => format!("(coalesce({value}, '') <> {})", bind.text(&selector.value)),
        Operator::Matches => return None,
    })
}

fn event_sql(selector: &Selector, bind: &mut Binder) -> Answer {
    let d = bind.dialect;
    if selector.op == Operator::Matches {
        return Answer::Unknown;
    }
    let Ok(found) = resolve_all(&selector.path[1..]) else {
        return Answer::Unknown;
    };
    if found.is_empty() {
        return Answer::Exact(constant(selector, d));
    }
    // The field's value, or NULL when the adaptor would report it absent; `event` is
    // NULL exactly when the payload could not be decoded, so the JSON access gives
    // NULL.
    let mut value = format!("(CASE {}", d.type_name());
    for (type_name, access) in found {
        value.push_str(&format!(" WHEN {} THEN ", bind.text(type_name)));
        match (access, d) {
            (Access::String { json_path }, Dialect::Sqlite) => {
                value.push_str(&format!(
                    "NULLIF(json_extract(event, {}), '')",
                    bind.text(json_path)
                ));
            }
            (Access::String { json_path }, Dialect::Postgres) => {
                let text = jsonb_path(&json_path, bind, "->>");
                value.push_str(&format!("NULLIF({text}, '')"));
            }
            // json_type spells booleans exactly as the adaptor does.
            (Access::Bool { json_path }, Dialect::Sqlite) => {
                value.push_str(&format!("json_type(event, {})", bind.text(json_path)));
            }
            // A boolean's text is `true` or `false`, as json_type spells it.
            (Access::Bool { json_path }, Dialect::Postgres) => {
                value.push_str(&jsonb_path(&json_path, bind, "->>"));
            }
            (Access::Label { map_path, key }, Dialect::Sqlite) => {
                let map = bind.text(map_path);
                value.push_str(&format!(
                    "(SELECT j.value FROM json_each(event, {map}) AS j WHERE j.key = {} AND j.type = 'text')",
                    bind.text(key)
                ));
            }
            // A label present with a string value (as json_each's `text` type);
            // PostgreSQL's placeholders may be used twice.
            (Access::Label { map_path, key }, Dialect::Postgres) => {
                let map = jsonb_path(&map_path, bind, "->");
                let key = bind.text(key);
                value.push_str(&format!(
                    "(CASE jsonb_typeof({map} -> {key}) WHEN 'string' THEN {map} ->> {key} END)"
                ));
            }
        }
    }
    value.push_str(" END)");
    let term = match selector.op {
        Operator::Present => format!("({value} IS NOT NULL)"),
        Operator::Equal => format!(
            "coalesce({value} = {}, {})",
            bind.text(&selector.value),
            d.no()
        ),
        Operator::NotEqual => format!("(coalesce({value}, '') <> {})", bind.text(&selector.value)),
        Operator::Matches => return Answer::Unknown,
    };
    match d {
        Dialect::Sqlite => Answer::Exact(term),
        // The PostgreSQL writer leaves `event` NULL for a decoded event whose JSON
        // holds a NUL character (jsonb cannot): such a row is kept for the matcher,
        // which reads the payload itself.
        Dialect::Postgres => Answer::Superset(format!(
            "({term} OR (event IS NULL AND type_url IS NOT NULL))"
        )),
    }
}

/// `event -> $a -> $b ->> $c` for the JSON path `$.a.b.c` (`last` is the last
/// operator: `->>` for text, `->` for the value), each key a bound value. The paths
/// come from [`resolve_all`], whose keys are proto field names (identifiers).
fn jsonb_path(json_path: &str, bind: &mut Binder, last: &str) -> String {
    let keys: Vec<&str> = json_path
        .strip_prefix("$.")
        .unwrap_or(json_path)
        .split('.')
        .collect();
    let mut out = "event".to_owned();
    for (i, key) in keys.iter().enumerate() {
        let op = if i + 1 == keys.len() { last } else { "->" };
        out.push_str(&format!(" {op} {}", bind.text(*key)));
    }
    out
}
