//! The PostgreSQL dialect of the translation: the same structure as SQLite's, the
//! same answers left to SQL and to the matcher, values only ever bound, placeholders
//! numbered and typed. (That the rows it keeps are the ones SQLite keeps is shown
//! against a server, in tests/postgres.)

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use super::equivalence::SELECTORS;
use crate::filter::Filter;
use crate::query::sql::{self, Binder, Dialect, Param};
use crate::query::{Query, RowRange};

fn postgres(text: &str) -> sql::Predicate {
    sql::translate_with(
        &Filter::parse(text).unwrap(),
        Binder::new(Dialect::Postgres),
    )
}

fn sqlite(text: &str) -> sql::Predicate {
    sql::translate(&Filter::parse(text).unwrap())
}

fn texts(params: &[Param]) -> Vec<&str> {
    params
        .iter()
        .map(|p| match p {
            Param::Text(t) => t.as_str(),
            Param::Integer(_) => "<integer>",
        })
        .collect()
}

/// The `$n` in `sql`, each with the type it is cast to.
fn placeholders(sql: &str) -> BTreeSet<(usize, String)> {
    let re = regex::Regex::new(r"\$(\d+)::(\w+)").unwrap();
    re.captures_iter(sql)
        .map(|c| (c[1].parse().unwrap(), c[2].to_owned()))
        .collect()
}

#[test]
fn every_value_is_bound_to_a_numbered_typed_placeholder() {
    for text in SELECTORS {
        let p = postgres(text);
        let used = placeholders(&p.sql);
        let numbers: BTreeSet<usize> = used.iter().map(|(n, _)| *n).collect();
        let expected: BTreeSet<usize> = (1..=p.params().len()).collect();
        assert_eq!(numbers, expected, "{text}: {}", p.sql);
        for (n, type_name) in &used {
            let want = match p.params()[n - 1] {
                Param::Text(_) => "text",
                Param::Integer(_) => "bigint",
            };
            assert_eq!(type_name, want, "{text}: ${n} in {}", p.sql);
        }
        assert!(
            !p.sql.contains('?'),
            "{text}: SQLite's placeholder in {}",
            p.sql
        );
        // The user's text is in the values, never in the statement.
        for hostile in ["DROP", "OR '1'", "OR 1=1", "a\"b", "quote"] {
            assert!(!p.sql.contains(hostile), "{text}: {}", p.sql);
        }
    }
}

/// What SQLite answers exactly, PostgreSQL answers exactly too, except fields of the
/// event (see the next test); what SQLite leaves to the matcher, so does PostgreSQL.
#[test]
fn the_dialects_leave_the_same_selectors_to_the_matcher() {
    let mut exact = 0;
    for text in SELECTORS {
        let (s, p) = (sqlite(text), postgres(text));
        let on_event = text.starts_with("event.");
        match (s.recheck, p.recheck) {
            (true, false) => panic!("{text}: PostgreSQL answers what SQLite cannot"),
            (false, true) => assert!(on_event, "{text}: {}", p.sql),
            (false, false) => exact += 1,
            (true, true) => {}
        }
        assert_eq!(
            !s.params().is_empty(),
            !p.params().is_empty(),
            "{text}: {} / {}",
            s.sql,
            p.sql
        );
    }
    assert!(exact >= SELECTORS.len() / 2, "{exact}");
}

/// The PostgreSQL writer keeps no `event` JSON for an event whose JSON holds a NUL
/// (jsonb cannot): such rows are kept for the matcher, which reads the payload.
#[test]
fn event_fields_keep_rows_without_json_for_the_matcher() {
    for text in [
        "event.container_id==web",
        "event.container_id!=web",
        "event.container_id",
        "event.io.terminal==true",
        "event.labels.empty",
    ] {
        let p = postgres(text);
        assert!(p.recheck, "{text}");
        assert!(
            p.sql
                .contains("OR (event IS NULL AND type_url IS NOT NULL)"),
            "{text}: {}",
            p.sql
        );
        assert!(!sqlite(text).sql.contains("event IS NULL"), "{text}");
    }
    // No type has the field: the same constant in both, nothing to recheck.
    assert_eq!(postgres("event.exit_status!=137").sql, "((TRUE))");
    assert!(!postgres("event.exit_status!=137").recheck);
}

#[test]
fn the_same_structure_in_both_spellings() {
    for (text, sqlite_sql, postgres_sql, values) in [
        (
            "reconciled_from==cri",
            "(((row_id IN (SELECT row_id FROM events WHERE origin = 'reconciled') AND coalesce(reconciled_from, 'containerd') = ?)))",
            "(((origin = 'reconciled' AND coalesce(reconciled_from, 'containerd') = $1::text)))",
            vec!["cri"],
        ),
        (
            r#"container.labels."a.b"==x,origin_clock==daemon"#,
            "(((SELECT j.value FROM json_each(labels) AS j WHERE j.key = ?) = ? AND coalesce(origin_clock = ?, 0)))",
            "(((labels ->> $1::text) = $2::text AND coalesce(origin_clock = $3::text, FALSE)))",
            vec!["a.b", "x", "daemon"],
        ),
        (r#"topic=="""#, "((0))", "((FALSE))", vec![]),
        (
            "namespace==a,pod.name",
            "((namespace = ? AND (pod_name IS NOT NULL)))",
            "((namespace = $1::text AND (pod_name IS NOT NULL)))",
            vec!["a"],
        ),
    ] {
        let (s, p) = (sqlite(text), postgres(text));
        assert_eq!(s.sql, sqlite_sql, "{text}");
        assert_eq!(p.sql, postgres_sql, "{text}");
        assert_eq!(texts(s.params()), values, "{text}");
        assert_eq!(texts(p.params()), values, "{text}");
    }
}

#[test]
fn event_fields_are_read_from_jsonb_with_bound_keys() {
    let p = postgres("event.io.stdout==x");
    assert!(
        p.sql.contains("NULLIF(event -> $2::text ->> $3::text, '')"),
        "{}",
        p.sql
    );
    assert_eq!(
        texts(&p.params()[..3]),
        ["containerd.events.TaskCreate", "io", "stdout"]
    );
    assert!(
        p.sql
            .starts_with("(((coalesce((CASE substring(type_url from '[^/]*$') WHEN $1::text"),
        "{}",
        p.sql
    );
    let labels = postgres(r#"event.labels."quote\"d"=="x' OR 1=1 --""#);
    assert!(
        labels
            .sql
            .contains("(CASE jsonb_typeof(event -> $2::text -> $3::text) WHEN 'string' THEN event -> $2::text ->> $3::text END)"),
        "{}",
        labels.sql
    );
    assert_eq!(texts(&labels.params()[1..3]), ["labels", "quote\"d"]);
}

/// PostgreSQL's text holds no NUL: a value with one is not bound but left to the
/// matcher (no stored text has one, and what `!=` makes of that is the matcher's).
#[test]
fn a_nul_in_a_value_is_left_to_the_matcher() {
    for text in [r#"topic=="a\x00b""#, r#"container.labels."a\x00"==x"#] {
        let filter = Filter::parse(text).unwrap();
        let p = sql::translate_with(&filter, Binder::new(Dialect::Postgres));
        assert!(p.recheck, "{text}");
        assert!(p.params().is_empty(), "{text}: {:?}", p.params());
        assert!(!sql::translate(&filter).recheck, "{text}");
    }
}

/// Time bounds compare the stored text byte by byte, as SQLite does, whatever the
/// database's collation; the `time` column, widened by a minute, lets PostgreSQL use
/// its index.
#[test]
fn time_bounds_compare_the_text_and_narrow_by_the_time_column() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(super::T0 as u64);
    let query = Query {
        filter: Filter::parse("namespace==a").unwrap(),
        since: Some(t0 + Duration::from_nanos(5)),
        until: Some(t0 + Duration::from_secs(3600)),
        limit: None,
    };
    let p = query.predicate_in(
        RowRange { after: 2, up_to: 9 },
        Binder::new(Dialect::Postgres),
    );
    assert_eq!(
        p.sql,
        "((namespace = $1::text)) AND row_id > $2::bigint AND row_id <= $3::bigint \
         AND timestamp COLLATE \"C\" >= $4::text \
         AND (time >= $5::text::timestamptz OR time IS NULL) \
         AND timestamp COLLATE \"C\" < $6::text \
         AND (time < $7::text::timestamptz OR time IS NULL)"
    );
    assert_eq!(
        p.params(),
        [
            Param::Text("a".into()),
            Param::Integer(2),
            Param::Integer(9),
            Param::Text("2024-05-01T10:00:00.000000005Z".into()),
            Param::Text("2024-05-01T09:59:00.000000Z".into()),
            Param::Text("2024-05-01T11:00:00.000000000Z".into()),
            Param::Text("2024-05-01T11:01:00.000000Z".into()),
        ]
    );
    // Beyond the years RFC 3339 writes (and PostgreSQL reads), only the text is
    // compared.
    for far in [
        SystemTime::UNIX_EPOCH + Duration::from_secs(253_402_300_800 + 3600),
        SystemTime::UNIX_EPOCH - Duration::from_secs(62_135_596_800 - 30),
    ] {
        let far = Query {
            since: Some(far),
            ..Query::default()
        };
        let p = far.predicate_in(RowRange::ALL, Binder::new(Dialect::Postgres));
        assert_eq!(p.sql, "(TRUE) AND timestamp COLLATE \"C\" >= $1::text");
    }
}

#[test]
fn limits_are_bound_after_the_predicate() {
    let query = Query {
        filter: Filter::parse("node==a").unwrap(),
        limit: Some(5),
        ..Query::default()
    };
    let plan = query.plan_in(RowRange::ALL, Binder::new(Dialect::Postgres));
    assert!(
        plan.sql
            .ends_with("FROM events WHERE ((node = $1::text)) ORDER BY row_id LIMIT $2::bigint"),
        "{}",
        plan.sql
    );
    assert_eq!(plan.params, [Param::Text("a".into()), Param::Integer(5)]);
}
