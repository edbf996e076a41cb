//! Topic globs in `topic==` values (an eventgate extension).

use super::{Object, check, parse};
use crate::filter::glob::TopicGlob;

#[test]
fn glob_matching() {
    let cases: &[(&str, &str, bool)] = &[
        ("/tasks/*", "/tasks/exit", true),
        ("/tasks/*", "/tasks/", true),
        ("/tasks/*", "/tasks/a/b", false),
        ("/tasks/*", "/tasks", false),
        ("/tasks/*", "/images/exit", false),
        ("/**", "/tasks/exit", true),
        ("/**", "/", true),
        ("/**", "/a/b/c/d", true),
        ("/**", "tasks", false),
        ("/tasks/**", "/tasks", true),
        ("/tasks/**", "/tasks/a/b", true),
        ("/tasks/**", "/tasksx/a", false),
        ("/**/exit", "/tasks/exit", true),
        ("/**/exit", "/exit", true),
        ("/**/exit", "/a/b/exit", true),
        ("/**/exit", "/tasks/exit/x", false),
        ("/**/tasks/**/exit", "/x/tasks/y/z/exit", true),
        ("/**/tasks/**/exit", "/x/task/y/exit", false),
        ("/t*s/e*", "/tasks/exit", true),
        ("/t*s/e*", "/tasks/oom", false),
        ("/*/*", "/tasks/exit", true),
        ("/*", "/tasks/exit", false),
        ("/ta**s/exit", "/tasks/exit", true),
        ("/ta**s/exit", "/ta/s/exit", false),
        ("/*a*a*/x", "/banana/x", true),
        ("/*a*a*/x", "/bana/y", false),
        ("/é*/*ü", "/éa/bü", true),
        ("*", "", true),
        ("**", "", true),
    ];
    for (pattern, topic, expected) in cases {
        let glob = TopicGlob::new(pattern);
        assert_eq!(glob.matches(topic), *expected, "{pattern:?} on {topic:?}");
    }
}

#[test]
fn only_topic_equality_is_globbed() {
    let exit = &[("topic", "/tasks/exit"), ("namespace", "abc")];
    let cases: &[(&str, Object, bool)] = &[
        (r#"topic=="/tasks/*""#, exit, true),
        (
            r#"topic.x=="/tasks/*""#,
            &[("topic.x", "/tasks/exit")],
            true,
        ),
        (r#""topic"=="/**""#, exit, true),
        (r#"topic=="/**""#, &[], false),
        (r#"topic!="/tasks/*""#, exit, true),
        (r#"topic!="/tasks/*""#, &[("topic", "/tasks/*")], false),
        (r#"topic=="/tasks/*""#, &[("topic", "/tasks/*")], true),
        ("namespace==a*", exit, false),
        ("namespace==a*", &[("namespace", "a*")], true),
        (
            r#"event.topic=="/tasks/*""#,
            &[("event.topic", "/tasks/exit")],
            false,
        ),
    ];
    for (filter, object, expected) in cases {
        assert_eq!(check(filter, object), *expected, "{filter:?} on {object:?}");
    }
    let glob = parse(r#"topic=="/tasks/*""#);
    let selector = &glob.alternatives()[0].selectors()[0];
    assert!(selector.is_topic_glob());
    assert_eq!(selector.value, "/tasks/*");
    let exact = parse(r#"topic=="/tasks/exit""#);
    let literal = &exact.alternatives()[0].selectors()[0];
    assert!(!literal.is_topic_glob());
}
