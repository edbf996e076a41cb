//! Operator semantics, AND/OR structure and the filters seen in practice.

use super::{Object, check, fields, parse};
use crate::filter::{Filter, quote};

const TASK_EXIT: &[(&str, &str)] = &[("namespace", "default"), ("topic", "/tasks/exit")];
const IMAGE: &[(&str, &str)] = &[("namespace", "k8s.io"), ("topic", "/images/create")];
const EMPTY: &[(&str, &str)] = &[];

#[test]
fn operators() {
    let cases: &[(&str, Object, bool)] = &[
        // Presence.
        ("topic", TASK_EXIT, true),
        ("event.id", TASK_EXIT, false),
        ("x", &[("x", "")], true),
        // `==` needs presence and is exact and case-sensitive.
        ("namespace==default", TASK_EXIT, true),
        ("namespace==Default", TASK_EXIT, false),
        ("namespace==defaul", TASK_EXIT, false),
        ("x==\"\"", EMPTY, false),
        ("x==\"\"", &[("x", "")], true),
        ("namespace=='default'", TASK_EXIT, false),
        ("namespace=='default'", &[("namespace", "'default'")], true),
        // `!=` treats an absent field as "".
        ("namespace!=default", TASK_EXIT, false),
        ("namespace!=other", TASK_EXIT, true),
        ("x!=foo", EMPTY, true),
        ("x!=\"\"", EMPTY, false),
        // `~=` is an unanchored search; an absent field is searched as "".
        ("topic~=tasks", TASK_EXIT, true),
        ("topic~=^tasks", TASK_EXIT, false),
        ("topic~=exit$", TASK_EXIT, true),
        ("topic~=(?i)TASKS", TASK_EXIT, true),
        ("topic~=TASKS", TASK_EXIT, false),
        ("event.missing~=\"\"", EMPTY, true),
        ("event.missing~=^$", EMPTY, true),
        ("event.missing~=\".\"", EMPTY, false),
        // Fields hold arbitrary text.
        (r#"labels."a b"==c"#, &[("labels.a b", "c")], true),
        (r#"labels."x.y"~="^v[0-9]$""#, &[("labels.x.y", "v1")], true),
    ];
    for (filter, object, expected) in cases {
        assert_eq!(check(filter, object), *expected, "{filter:?} on {object:?}");
    }
}

#[test]
fn and_within_a_string_or_across_strings() {
    let cases: &[(&[&str], Object, bool)] = &[
        (&["namespace==default,topic~=exit"], TASK_EXIT, true),
        (&["namespace==default,topic~=create"], TASK_EXIT, false),
        (&["namespace==default,b"], TASK_EXIT, false),
        (&["namespace==default,topic"], TASK_EXIT, true),
        (&["namespace==x", "topic~=exit"], TASK_EXIT, true),
        (&["namespace==x", "topic~=create"], TASK_EXIT, false),
        (&["namespace==x", ""], TASK_EXIT, true),
        (&[], TASK_EXIT, true),
        (&[""], EMPTY, true),
        // "N and (A or B)" spelled as two strings.
        (
            &[
                "namespace==k8s.io,topic~=exit",
                "namespace==k8s.io,topic~=create",
            ],
            IMAGE,
            true,
        ),
        (
            &[
                "namespace==k8s.io,topic~=exit",
                "namespace==k8s.io,topic~=create",
            ],
            TASK_EXIT,
            false,
        ),
    ];
    for (filters, object, expected) in cases {
        let filter = Filter::parse_all(filters).unwrap();
        assert_eq!(
            filter.matches(&fields(object)),
            *expected,
            "{filters:?} on {object:?}"
        );
    }
}

#[test]
fn real_world_filters() {
    // CRI subscribes with two strings.
    let cri = Filter::parse_all(&[r#"topic=="/tasks/oom""#, r#"topic~="/images/""#]).unwrap();
    assert!(cri.matches(&fields(&[("topic", "/tasks/oom")])));
    assert!(cri.matches(&fields(IMAGE)));
    assert!(!cri.matches(&fields(TASK_EXIT)));
    // moby and containerd's integration tests.
    assert!(check("namespace==default,topic~=|^/tasks/|", TASK_EXIT));
    assert!(!check("namespace==default,topic~=|^/tasks/|", IMAGE));
    assert!(check("namespace==default,topic~=|^/tasks/exit|", TASK_EXIT));
    assert!(!check("namespace==other,topic~=|^/tasks/exit|", TASK_EXIT));
    // Written before `/` became a quote character: now a parse error.
    assert!(Filter::parse("topic~=/tasks/.+,namespace==bb").is_err());
}

#[test]
fn non_utf8_values_are_compared_as_bytes() {
    let eq = parse(r#"x=="\xff""#);
    let ne = parse(r#"x!="\xff""#);
    let lossy = fields(&[("x", "\u{fffd}")]);
    assert!(!eq.matches(&lossy));
    assert!(ne.matches(&lossy));
    assert!(ne.matches(&fields(EMPTY)));
    let selector = &eq.alternatives()[0].selectors()[0];
    assert!(selector.value_is_lossy());
    assert_eq!(selector.value, "\u{fffd}");
    // Bytes that combine into valid UTF-8 are an ordinary value.
    assert!(check(r#"x=="\xc3\xa9""#, &[("x", "é")]));
}

#[test]
fn works_through_references_and_trait_objects() {
    let filter = parse("namespace==default");
    let object = fields(TASK_EXIT);
    let dynamic: &dyn crate::filter::Fields = &object;
    assert!(filter.matches(dynamic));
    assert!(filter.matches(&&object));
}

#[test]
fn and_matches_what_both_match_across_alternatives() {
    let left = Filter::parse_all(&["x==1", "y==1"]).unwrap();
    let right = Filter::parse_all(&["z==1", "w==1,v==1"]).unwrap();
    let both = left.and(&right);
    assert_eq!(both.alternatives().len(), 4);
    let names = ["x", "y", "z", "w", "v"];
    // Every assignment of the five fields to present-or-absent.
    for bits in 0u32..32 {
        let pairs: Vec<(&str, &str)> = names
            .iter()
            .enumerate()
            .filter(|(i, _)| bits & (1 << i) != 0)
            .map(|(_, n)| (*n, "1"))
            .collect();
        let object = fields(&pairs);
        assert_eq!(
            both.matches(&object),
            left.matches(&object) && right.matches(&object),
            "{pairs:?}"
        );
    }
    // The empty filter is the identity.
    let always = Filter::always();
    assert!(always.and(&always).is_always());
    assert_eq!(left.and(&always).alternatives().len(), 2);
}

#[test]
fn quoted_text_reads_back_exactly() {
    for text in [
        "web-7",
        "",
        "a\"b",
        "back\\slash",
        "new\nline",
        "tab\t",
        "é ☃",
        "x' OR 1=1 --",
    ] {
        let filter = parse(&format!("p=={}", quote(text)));
        assert!(filter.matches(&fields(&[("p", text)])), "{text:?}");
        assert!(!filter.matches(&fields(&[("p", "other")])), "{text:?}");
        let path = parse(&format!("labels.{}==v", quote(text)));
        let key = format!("labels.{text}");
        assert!(path.matches(&fields(&[(key.as_str(), "v")])), "{text:?}");
    }
}
