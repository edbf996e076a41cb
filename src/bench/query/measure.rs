//! The measured queries: each through `query::Reader::each` (the SQL translation,
//! the Rust recheck when there is one, every row decoded to a `StoredEvent`; no
//! output formatting), and the same SQL text with the same parameters run by plain
//! rusqlite reading the same columns into owned values, alternating run by run.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use rusqlite::{Connection, OpenFlags};

use super::BenchError;
use super::generate::{Generator, Params, START_SECS};
use crate::filter::Filter;
use crate::filter::quote;
use crate::query::pods::PodName;
use crate::query::{Query, Reader, RowRange};
use crate::ui::picture::{self, Group, PictureError, PictureQuery};
use crate::ui::svg;

/// The picture's row cap, as `eventgate timeline` has it by default.
const PICTURE_MAX_ROWS: u64 = 100_000;

/// One query of the table.
#[derive(Clone, Debug)]
pub(crate) struct Case {
    pub name: &'static str,
    /// The filter as typed on the `eventgate query` command line.
    pub filter: String,
    pub since: Option<SystemTime>,
    pub until: Option<SystemTime>,
    pub limit: Option<u64>,
    /// Reads every row of the store (its rows/s is reported).
    pub full_scan: bool,
}

impl Case {
    pub(crate) fn query(&self) -> Result<Query, BenchError> {
        let filter = Filter::parse(&self.filter).map_err(|e| BenchError::Failed {
            what: format!("filter {}: {e}", self.filter),
        })?;
        Ok(Query {
            filter,
            since: self.since,
            until: self.until,
            limit: self.limit,
        })
    }

    /// The arguments of the equivalent `eventgate query` command.
    pub(crate) fn command_line(&self) -> String {
        let mut out = format!("'{}'", self.filter);
        let time = |t: SystemTime| crate::query::time::stored_form(t).replace(".000000000", "");
        if let Some(since) = self.since {
            out.push_str(&format!(" --since {}", time(since)));
        }
        if let Some(until) = self.until {
            out.push_str(&format!(" --until {}", time(until)));
        }
        if let Some(limit) = self.limit {
            out.push_str(&format!(" --limit {limit}"));
        }
        out
    }
}

/// The hour the range queries read: the one starting half-way through the store.
pub(crate) fn measured_hour(params: &Params) -> (SystemTime, SystemTime) {
    let offset = (params.span_secs / 2) / 3600 * 3600;
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs((START_SECS + offset) as u64);
    (start, start + Duration::from_secs(3600))
}

pub(crate) fn cases(params: &Params) -> Vec<Case> {
    let (from, to) = measured_hour(params);
    let case = |name, filter: &str, range: bool, limit: Option<u64>, full_scan| Case {
        name,
        filter: filter.to_owned(),
        since: range.then_some(from),
        until: range.then_some(to),
        limit,
        full_scan,
    };
    vec![
        case("topic + 1 h", r#"topic=="/tasks/exit""#, true, None, false),
        case("namespace + 1 h", "namespace==k8s.io", true, None, false),
        case(
            "namespace (80%), first 100",
            "namespace==k8s.io",
            false,
            Some(100),
            false,
        ),
        case(
            "namespace (1.5%), first 100",
            "namespace==ci",
            false,
            Some(100),
            false,
        ),
        case(
            "event field (json_extract)",
            &format!("event.container_id=={}", params.container_id(7)),
            false,
            None,
            true,
        ),
        case("regex (Rust recheck)", "topic~=exit$", false, None, true),
    ]
    .into_iter()
    .chain(pod_case(params))
    .collect()
}

/// `query --pod` over the whole span: the first pod's rows, by the filter `--pod`
/// narrows to.
pub(crate) fn pod_case(params: &Params) -> Option<Case> {
    let pod = Generator::new(params).measured_pod()?;
    Some(Case {
        name: "pod timeline rows (query --pod)",
        filter: pod_filter_text(&pod),
        since: None,
        until: None,
        limit: None,
        full_scan: false,
    })
}

/// What one case measured.
#[derive(Clone, Debug)]
pub(crate) struct Measured {
    pub case: Case,
    pub eventgate: Vec<Duration>,
    pub raw: Vec<Duration>,
    /// Rows `eventgate query` returns.
    pub rows: u64,
    /// Rows the SQL returns (more than `rows` when the recheck drops some).
    pub raw_rows: u64,
    /// SQLite's EXPLAIN QUERY PLAN of the SQL.
    pub plan: String,
}

pub(crate) fn median(durations: &[Duration]) -> Duration {
    let mut sorted = durations.to_vec();
    sorted.sort();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

pub(crate) fn max(durations: &[Duration]) -> Duration {
    durations.iter().copied().max().unwrap_or_default()
}

/// A plain rusqlite program's read connection to the same file.
pub(crate) fn raw_connection(db: &Path) -> Result<Connection, BenchError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    Connection::open_with_flags(db, flags).map_err(|source| BenchError::Sqlite {
        what: "opening the store read-only",
        source,
    })
}

fn sqlite(what: &'static str) -> impl Fn(rusqlite::Error) -> BenchError {
    move |source| BenchError::Sqlite { what, source }
}

/// Runs the SQL `query` translates to, reading every column `Reader` reads.
pub(crate) fn raw_run(conn: &Connection, query: &Query) -> Result<u64, BenchError> {
    let plan = query.plan(RowRange::ALL);
    let mut stmt = conn
        .prepare_cached(&plan.sql)
        .map_err(sqlite("preparing the query"))?;
    let mut cursor = stmt
        .query(rusqlite::params_from_iter(plan.params.iter()))
        .map_err(sqlite("running the query"))?;
    let mut rows = 0u64;
    let read = sqlite("reading a row");
    while let Some(row) = cursor.next().map_err(&read)? {
        let columns: (i64, i64, String, Option<String>, String, String, String) = (
            row.get(0).map_err(&read)?,
            row.get(1).map_err(&read)?,
            row.get(2).map_err(&read)?,
            row.get(3).map_err(&read)?,
            row.get(4).map_err(&read)?,
            row.get(5).map_err(&read)?,
            row.get(6).map_err(&read)?,
        );
        let rest: (Option<String>, Option<Vec<u8>>, Option<String>) = (
            row.get(7).map_err(&read)?,
            row.get(8).map_err(&read)?,
            row.get(9).map_err(&read)?,
        );
        std::hint::black_box((columns, rest));
        rows += 1;
    }
    Ok(rows)
}

/// Runs the query through the reader `eventgate query` uses; the rows are decoded
/// and dropped.
pub(crate) fn eventgate_run(reader: &Reader, query: &Query) -> Result<u64, BenchError> {
    let mut rows = 0u64;
    reader.each(query, RowRange::ALL, |stored| {
        std::hint::black_box(&stored);
        rows += 1;
        true
    })?;
    Ok(rows)
}

pub(crate) fn explain(conn: &Connection, query: &Query) -> Result<String, BenchError> {
    let plan = query.plan(RowRange::ALL);
    let mut stmt = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {}", plan.sql))
        .map_err(sqlite("explaining the query"))?;
    let details = stmt
        .query_map(rusqlite::params_from_iter(plan.params.iter()), |row| {
            row.get::<_, String>(3)
        })
        .map_err(sqlite("explaining the query"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sqlite("explaining the query"))?;
    Ok(details.join("; "))
}

/// One warm-up run of each side (so the file is in the page cache and statements are
/// prepared), then `runs` timed runs alternating eventgate and raw.
pub(crate) fn measure(db: &Path, case: &Case, runs: usize) -> Result<Measured, BenchError> {
    let query = case.query()?;
    let reader = Reader::open(db)?;
    let raw = raw_connection(db)?;
    let plan = explain(&raw, &query)?;
    let rows = eventgate_run(&reader, &query)?;
    let raw_rows = raw_run(&raw, &query)?;
    let mut measured = Measured {
        case: case.clone(),
        eventgate: Vec::with_capacity(runs),
        raw: Vec::with_capacity(runs),
        rows,
        raw_rows,
        plan,
    };
    alternate(
        &mut measured,
        runs,
        || eventgate_run(&reader, &query),
        || raw_run(&raw, &query),
    )?;
    check(
        &measured,
        !crate::query::sql::translate(&query.filter).recheck,
    )?;
    Ok(measured)
}

/// What `query --pod NAME --pod-namespace NS` narrows to (`pods::pod_filter`), as typed.
fn pod_filter_text(pod: &PodName) -> String {
    format!(
        "pod.name=={},pod.namespace=={}",
        quote(&pod.name),
        quote(&pod.namespace)
    )
}

/// The pod's timeline picture as `/ui` and `eventgate timeline` make it (a read-only
/// connection opened, as each `/ui` read opens its own; the rows read, the gaps looked
/// up, the lanes laid out, the SVG written), next to plain rusqlite reading the pod's
/// rows with the same SQL on a connection it keeps.
pub(crate) fn measure_picture(
    db: &Path,
    pod: &PodName,
    runs: usize,
) -> Result<Measured, BenchError> {
    let case = Case {
        name: "pod timeline picture (open + build + SVG)",
        filter: pod_filter_text(pod),
        since: None,
        until: None,
        limit: None,
        full_scan: false,
    };
    let narrowed = case.query()?;
    let raw = raw_connection(db)?;
    let plan = explain(&raw, &narrowed)?;
    let draw = || -> Result<u64, BenchError> {
        let reader = Reader::open(db)?;
        let request = PictureQuery {
            query: Query::default(),
            pod: Some(pod.clone()),
            group: Group::Pod,
            max_rows: PICTURE_MAX_ROWS,
            deadline: Instant::now() + Duration::from_secs(600),
        };
        let picture = picture::build(&reader, &request).map_err(|e| match e {
            PictureError::Store(e) => BenchError::from(e),
            other => BenchError::Failed {
                what: format!("the pod timeline picture: {other}"),
            },
        })?;
        std::hint::black_box(svg::render(&picture));
        Ok(picture.rows)
    };
    let rows = draw()?;
    let raw_rows = raw_run(&raw, &narrowed)?;
    let mut measured = Measured {
        case,
        eventgate: Vec::with_capacity(runs),
        raw: Vec::with_capacity(runs),
        rows,
        raw_rows,
        plan,
    };
    alternate(&mut measured, runs, draw, || raw_run(&raw, &narrowed))?;
    check(&measured, true)?;
    Ok(measured)
}

/// `runs` timed runs alternating eventgate (`ours`) and plain rusqlite (`raw`), each
/// returning the rows its warm-up run returned.
fn alternate(
    measured: &mut Measured,
    runs: usize,
    mut ours: impl FnMut() -> Result<u64, BenchError>,
    mut raw: impl FnMut() -> Result<u64, BenchError>,
) -> Result<(), BenchError> {
    for _ in 0..runs {
        let started = Instant::now();
        let n = ours()?;
        measured.eventgate.push(started.elapsed());
        let started = Instant::now();
        let m = raw()?;
        measured.raw.push(started.elapsed());
        if (n, m) != (measured.rows, measured.raw_rows) {
            return Err(BenchError::Failed {
                what: format!(
                    "{}: the row counts changed between runs",
                    measured.case.name
                ),
            });
        }
    }
    Ok(())
}

/// A benchmark of an empty result measures nothing.
fn check(m: &Measured, exact: bool) -> Result<(), BenchError> {
    let failed = |what: String| Err(BenchError::Failed { what });
    if m.rows == 0 {
        return failed(format!("{}: the query returned no rows", m.case.name));
    }
    if exact && m.rows != m.raw_rows {
        return failed(format!(
            "{}: eventgate returned {} rows, the same SQL {}",
            m.case.name, m.rows, m.raw_rows
        ));
    }
    Ok(())
}
