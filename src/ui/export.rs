//! `/ui/api/export?format=jsonl|csv&...`: the view's events as a download. JSON lines
//! are `eventgate query --format json`'s lines; CSV has a header row, RFC 4180
//! quoting, and cells that a spreadsheet would run as a formula made inert.

use http::{Response, header};
use serde_json::Value;

use std::time::Instant;

use crate::query::{Query, Reader, RowRange};
use crate::render;

use super::api::regex_memory;
use super::params::Params;
use super::reads::{self, ReadError, expired, too_long};
use super::{Body, Ui, UiError, whole};

/// The most rows one export holds; beyond it the download ends there and says so in
/// its `X-Eventgate-Truncated` header.
pub(crate) const MAX_ROWS: u64 = 100_000;
/// The most bytes one export holds (it is built in memory, at most two at once).
const MAX_BYTES: usize = 64 << 20;

/// The CSV columns, and where each is in the event's JSON.
const COLUMNS: [(&str, &[&str]); 14] = [
    ("row", &[]),
    ("timestamp", &["timestamp"]),
    ("node", &["node"]),
    ("namespace", &["namespace"]),
    ("topic", &["topic"]),
    ("pod_namespace", &["pod", "namespace"]),
    ("pod", &["pod", "name"]),
    ("container", &["container", "name"]),
    ("origin", &["origin"]),
    ("source", &["source"]),
    ("id", &["id"]),
    ("seq", &["seq"]),
    ("labels", &["container", "labels"]),
    ("event", &["event"]),
];

#[derive(Clone, Copy)]
enum Format {
    Jsonl,
    Csv,
}

pub(super) async fn export(ui: &Ui, query: &str) -> Result<Response<Body>, UiError> {
    let params = Params::parse(query);
    let format = match params.get("format").map(str::trim) {
        None | Some("jsonl") => Format::Jsonl,
        Some("csv") => Format::Csv,
        Some(other) => {
            return Err(UiError::BadParam {
                param: "format",
                message: format!("format must be jsonl or csv (got {other:?})"),
            });
        }
    };
    let query = params.query(regex_memory(ui))?;
    let (text, rows, truncated) = reads::read(ui, move |reader, deadline| {
        collect(reader, &query, format, deadline, MAX_ROWS)
    })
    .await?;
    let (content_type, name) = match format {
        Format::Jsonl => ("application/x-ndjson", "eventgate-events.jsonl"),
        Format::Csv => ("text/csv; charset=utf-8", "eventgate-events.csv"),
    };
    let mut response = whole(content_type, text);
    let headers = response.headers_mut();
    if let Ok(value) = format!("attachment; filename=\"{name}\"").parse() {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    headers.insert("x-eventgate-rows", rows.into());
    let note = format!(
        "the export stops after {rows} rows (at most {MAX_ROWS}, {} MiB); narrow the time range or the filter for the rest",
        MAX_BYTES >> 20
    );
    if truncated && let Ok(value) = note.parse() {
        headers.insert("x-eventgate-truncated", value);
    }
    Ok(response)
}

/// The export's text: at most `max_rows` rows (and about `MAX_BYTES`), how many it
/// holds, and whether more matched.
fn collect(
    reader: &Reader,
    query: &Query,
    format: Format,
    deadline: Instant,
    max_rows: u64,
) -> Result<(String, u64, bool), ReadError> {
    let mut out = String::new();
    if let Format::Csv = format {
        let header: Vec<&str> = COLUMNS.iter().map(|(name, _)| *name).collect();
        out.push_str(&header.join(","));
        out.push_str("\r\n");
    }
    let query = Query {
        limit: Some(max_rows + 1),
        ..query.clone()
    };
    let (mut rows, mut truncated, mut late) = (0u64, false, false);
    reader.each(&query, RowRange::ALL, |stored| {
        if rows >= max_rows || out.len() >= MAX_BYTES {
            truncated = true;
            return false;
        }
        if expired(deadline) {
            late = true;
            return false;
        }
        let line = render::stored_event_json(&stored.event, stored.source.as_deref());
        match format {
            Format::Jsonl => out.push_str(&line),
            Format::Csv => csv_row(&mut out, stored.row_id, &line),
        }
        out.push_str(match format {
            Format::Jsonl => "\n",
            Format::Csv => "\r\n",
        });
        rows += 1;
        true
    })?;
    if late {
        return Err(ReadError::Ui(too_long()));
    }
    Ok((out, rows, truncated))
}

/// One CSV record (without its line end) of an event's JSON line.
fn csv_row(out: &mut String, row_id: i64, line: &str) {
    let event: Value = serde_json::from_str(line).unwrap_or(Value::Null);
    for (i, (_, path)) in COLUMNS.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let value = match path.is_empty() {
            true => row_id.to_string(),
            false => cell_text(path.iter().try_fold(&event, |v, key| v.get(key))),
        };
        push_cell(out, &value);
    }
}

fn cell_text(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    }
}

/// RFC 4180: a cell holding a comma, quote or line break is quoted, quotes doubled. A
/// cell a spreadsheet would take for a formula (`=`, `+`, `-`, `@`, or a tab or
/// carriage return before one) starts with `'`, so it is shown, not run.
fn push_cell(out: &mut String, text: &str) {
    let formula = text.starts_with(['=', '+', '-', '@', '\t', '\r']);
    let quoted = formula || text.contains([',', '"', '\r', '\n']);
    if quoted {
        out.push('"');
    }
    if formula {
        out.push('\'');
    }
    for c in text.chars() {
        if c == '"' {
            out.push('"');
        }
        out.push(c);
    }
    if quoted {
        out.push('"');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(text: &str) -> String {
        let mut out = String::new();
        push_cell(&mut out, text);
        out
    }

    #[test]
    fn cells_are_quoted_as_rfc_4180_says() {
        assert_eq!(cell("plain"), "plain");
        assert_eq!(cell("a,b"), "\"a,b\"");
        assert_eq!(cell("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(cell("two\nlines"), "\"two\nlines\"");
        assert_eq!(cell(""), "");
    }

    #[test]
    fn formulas_are_made_inert() {
        assert_eq!(cell("=1+2"), "\"'=1+2\"");
        assert_eq!(cell("+cmd"), "\"'+cmd\"");
        assert_eq!(cell("-2"), "\"'-2\"");
        assert_eq!(cell("@SUM(A1)"), "\"'@SUM(A1)\"");
        assert_eq!(cell("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(cell("a=1"), "a=1");
    }

    #[test]
    fn an_export_stops_at_its_row_cap_and_says_so() {
        let events: Vec<_> = (1..=3).map(|i| crate::testing::event(i).build()).collect();
        let store = crate::testing::TempStore::with(&events);
        let reader = Reader::open(store.path()).unwrap();
        let later = Instant::now() + std::time::Duration::from_secs(60);
        let all = Query::default();
        let (text, rows, truncated) = collect(&reader, &all, Format::Jsonl, later, 2).unwrap();
        assert_eq!((rows, truncated, text.lines().count()), (2, true, 2));
        let (text, rows, truncated) = collect(&reader, &all, Format::Csv, later, 3).unwrap();
        assert_eq!((rows, truncated, text.lines().count()), (3, false, 4));
        let past = Instant::now();
        assert!(collect(&reader, &all, Format::Jsonl, past, 3).is_err());
    }

    #[test]
    fn a_row_takes_its_cells_from_the_event_json() {
        let mut out = String::new();
        let line = r#"{"container":{"labels":{"k":"=x"},"name":"web"},"event":{"a":1},"id":"i","namespace":"default","node":null,"origin":"live","pod":{"name":"p","namespace":"n"},"seq":3,"source":"publish","timestamp":"2024-01-01T00:00:00Z","topic":"/t"}"#;
        csv_row(&mut out, 7, line);
        assert_eq!(
            out,
            "7,2024-01-01T00:00:00Z,,default,/t,n,p,web,live,publish,i,3,\"{\"\"k\"\":\"\"=x\"\"}\",\"{\"\"a\"\":1}\""
        );
    }
}
