//! Table-driven tests; each submodule covers one part of spec section 4.

mod glob;
mod props;
mod regex;
mod scanner;
mod semantics;
mod syntax;

use std::borrow::Cow;
use std::collections::HashMap;

use super::{Fields, Filter, Operator, ParseError};

/// The fields of a test object, as `(dot-joined path, value)` pairs.
pub(super) type Object<'a> = &'a [(&'a str, &'a str)];

/// Test adaptor: fields keyed by their dot-joined path.
pub(super) struct Map(HashMap<String, String>);

impl Fields for Map {
    fn field(&self, path: &[String]) -> Option<Cow<'_, str>> {
        self.0
            .get(&path.join("."))
            .map(|v| Cow::Borrowed(v.as_str()))
    }
}

pub(super) fn fields(pairs: &[(&str, &str)]) -> Map {
    Map(pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

pub(super) fn parse(input: &str) -> Filter {
    Filter::parse(input).unwrap_or_else(|e| panic!("{input:?} should parse: {e}"))
}

pub(super) fn parse_err(input: &str) -> ParseError {
    match Filter::parse(input) {
        Ok(f) => panic!("{input:?} should not parse, got {f:?}"),
        Err(e) => e,
    }
}

/// Whether `filter` (one string) matches an object with the given fields.
pub(super) fn check(filter: &str, pairs: &[(&str, &str)]) -> bool {
    parse(filter).matches(&fields(pairs))
}

#[test]
fn filter_is_send_sync_clone_debug() {
    fn assert_traits<T: Send + Sync + Clone + std::fmt::Debug + 'static>() {}
    assert_traits::<Filter>();
    assert_traits::<ParseError>();
}

#[test]
fn operator_strings_follow_containerd() {
    let cases = [
        (Operator::Present, "?"),
        (Operator::Equal, "=="),
        (Operator::NotEqual, "!="),
        (Operator::Matches, "~="),
    ];
    for (op, text) in cases {
        assert_eq!(op.as_str(), text);
        assert_eq!(op.to_string(), text);
    }
}

#[test]
fn parse_error_accessors() {
    let err = Filter::parse_all(&["namespace==a", "topic==\"/x\"", "b=="]).unwrap_err();
    assert_eq!(err.index(), 2);
    assert_eq!(err.input(), "b==");
    assert_eq!(err.position(), 3);
    assert_eq!(err.message(), "expected value or quoted");
    assert_eq!(
        err.to_string(),
        "filters: parse error: [b==]: expected value or quoted"
    );
    assert_eq!(
        err.invalid_argument_message(),
        "filters: parse error: [b==]: expected value or quoted: invalid argument"
    );
    assert_eq!(parse_err("a b").index(), 0);
}

#[test]
fn from_str_and_default() {
    let f: Filter = "namespace==x".parse().unwrap();
    assert!(f.matches(&fields(&[("namespace", "x")])));
    assert!(Filter::default().is_always());
    assert!("a b".parse::<Filter>().is_err());
}

#[test]
fn ast_is_exposed_for_translators() {
    let f = Filter::parse_all(&[r#"namespace==a,labels."x.y"~=/^b/"#, "topic"]).unwrap();
    let alts = f.alternatives();
    assert_eq!(alts.len(), 2);
    let first = alts[0].selectors();
    assert_eq!(first.len(), 2);
    assert_eq!(first[0].path, ["namespace"]);
    assert_eq!(first[0].op, Operator::Equal);
    assert_eq!(first[0].value, "a");
    assert_eq!(first[1].path, ["labels", "x.y"]);
    assert_eq!(first[1].op, Operator::Matches);
    assert_eq!(first[1].value, "^b");
    let second = alts[1].selectors();
    assert_eq!(second[0].path, ["topic"]);
    assert_eq!(second[0].op, Operator::Present);
    assert_eq!(second[0].value, "");
    assert!(!first[0].is_topic_glob() && !first[0].value_is_lossy());
}
