//! What parses into what, and the exact error text of what does not.

use super::{parse, parse_err};
use crate::filter::{Filter, Operator};

use Operator::{Equal as Eq, Matches as Re, NotEqual as Ne, Present as Has};

type Sel<'a> = (&'a [&'a str], Operator, &'a str);

fn assert_parses(input: &str, expected: &[Sel]) {
    let filter = parse(input);
    let alts = filter.alternatives();
    assert_eq!(alts.len(), 1, "{input:?}");
    let got: Vec<(Vec<String>, Operator, String)> = alts[0]
        .selectors()
        .iter()
        .map(|s| (s.path.clone(), s.op, s.value.clone()))
        .collect();
    let want: Vec<(Vec<String>, Operator, String)> = expected
        .iter()
        .map(|(p, op, v)| {
            (
                p.iter().map(|s| s.to_string()).collect(),
                *op,
                v.to_string(),
            )
        })
        .collect();
    assert_eq!(got, want, "{input:?}");
}

#[test]
fn accepted_syntax() {
    let cases: &[(&str, &[Sel])] = &[
        ("topic", &[(&["topic"], Has, "")]),
        ("1", &[(&["1"], Has, "")]),
        ("_x9.0", &[(&["_x9", "0"], Has, "")]),
        (
            "a==b,c!=d,e~=f",
            &[(&["a"], Eq, "b"), (&["c"], Ne, "d"), (&["e"], Re, "f")],
        ),
        // Whitespace: leading, around operators, after a comma.
        (
            "  a == b,\t c\u{3000}!=\u{a0}d",
            &[(&["a"], Eq, "b"), (&["c"], Ne, "d")],
        ),
        // Unquoted values keep `.`, `/`, `:`, `=`, `-` and quotes after
        // the first character.
        (
            "event.name==docker.io/library/busybox:latest",
            &[(&["event", "name"], Eq, "docker.io/library/busybox:latest")],
        ),
        ("a==b==c", &[(&["a"], Eq, "b==c")]),
        ("a==b\"c|d/e", &[(&["a"], Eq, "b\"c|d/e")]),
        ("a==牛", &[(&["a"], Eq, "牛")]),
        // The first character of an unquoted value is not checked further.
        ("a==\u{1}b", &[(&["a"], Eq, "\u{1}b")]),
        // Commas always split: `b` becomes a presence test.
        (
            "namespace==a,b",
            &[(&["namespace"], Eq, "a"), (&["b"], Has, "")],
        ),
        // Single quotes are ordinary value characters.
        ("namespace=='default'", &[(&["namespace"], Eq, "'default'")]),
        // Quoted fields may hold anything; only `"` quotes them.
        (
            r#"labels."io.cri-containerd.image"==x"#,
            &[(&["labels", "io.cri-containerd.image"], Eq, "x")],
        ),
        (
            r#"labels."a b",c"#,
            &[(&["labels", "a b"], Has, ""), (&["c"], Has, "")],
        ),
        (
            r#""leading quote".post==v"#,
            &[(&["leading quote", "post"], Eq, "v")],
        ),
        (
            r#"labels."a\"b\\c".post"#,
            &[(&["labels", "a\"b\\c", "post"], Has, "")],
        ),
        // `==` and `!=` take `"..."`; `~=` takes all three quote styles.
        (
            r#"topic=="/tasks/exit""#,
            &[(&["topic"], Eq, "/tasks/exit")],
        ),
        (r#"topic!="a, b""#, &[(&["topic"], Ne, "a, b")]),
        (r#"topic~="/images/""#, &[(&["topic"], Re, "/images/")]),
        ("topic~=/tasks/", &[(&["topic"], Re, "tasks")]),
        ("topic~=|^/tasks/|", &[(&["topic"], Re, "^/tasks/")]),
        (r"x~=/a\/b/", &[(&["x"], Re, "a/b")]),
        (r"x~=|a\|b|", &[(&["x"], Re, "a|b")]),
        (r#"x~="\\d""#, &[(&["x"], Re, r"\d")]),
        (r"x~=\d", &[(&["x"], Re, r"\d")]),
        ("x==\"\"", &[(&["x"], Eq, "")]),
        // Every Go escape.
        (
            r#"x=="\a\b\f\n\r\t\v\\\"""#,
            &[(&["x"], Eq, "\u{7}\u{8}\u{c}\n\r\t\u{b}\\\"")],
        ),
        (r#"x=="\101\x41\u0041\U00000041""#, &[(&["x"], Eq, "AAAA")]),
        (r#"x=="\u00e9\xc3\xa9\303\251""#, &[(&["x"], Eq, "ééé")]),
        // Go writes surrogates, and (through int32 overflow) huge `\U`
        // values, as U+FFFD.
        (
            r#"x=="\ud800\UFFFFFFFF\U80000000""#,
            &[(&["x"], Eq, "\u{fffd}\u{fffd}\u{fffd}")],
        ),
        // Valid regex syntax, matching nothing in practice.
        (
            r#"other~=/[abc]{0,1}"\//,name!=foo"#,
            &[(&["other"], Re, "[abc]{0,1}\"/"), (&["name"], Ne, "foo")],
        ),
    ];
    for (input, expected) in cases {
        assert_parses(input, expected);
    }
}

#[test]
fn empty_inputs_match_everything() {
    assert!(parse("").is_always());
    assert!(Filter::parse_all::<&str>(&[]).unwrap().is_always());
    assert!(
        Filter::parse_all(&[r#"topic=="/x""#, ""])
            .unwrap()
            .is_always()
    );
    assert!(Filter::always().is_always());
    assert!(!parse("a").is_always());
}

#[test]
fn rejected_syntax() {
    let op = r#"expected an operator ("=="|"!="|"~=")"#;
    let cases: &[(&str, &str)] = &[
        ("topic ", &format!("[topic ]: {op}")),
        ("a b", &format!("[a  >|b|< ]: {op}")),
        (r#"a=="x" ,b"#, r#"[a=="x" >| |< ,b]: unexpected input:  "#),
        ("a==b ", "[a==b >| |< ]: unexpected input:  "),
        (r#"a=="x"y"#, r#"[a=="x" >|y|< ]: unexpected input: y"#),
        (
            "labels.io.cri-containerd",
            &format!("[labels.io.cri >|-|< containerd]: {op}"),
        ),
        ("name==foo,", "[name==foo,]: expected field or quoted"),
        ("labels.", "[labels.]: expected field or quoted"),
        (" ", "[ ]: expected field or quoted"),
        (",", "[ >|,|< ]: expected field or quoted"),
        ("a,,b", "[a, >|,|< b]: expected field or quoted"),
        ("==x", "[ >|=|< =x]: expected field or quoted"),
        (
            r#"labels.?"a".post==present"#,
            r#"[labels. >|?|< "a".post==present]: expected field or quoted"#,
        ),
        ("a=b", "[a >|=|< b]: unsupported operator \"=\""),
        ("a===b", "[a >|=|< ==b]: unsupported operator \"===\""),
        ("a==!b", "[a >|=|< =!b]: unsupported operator \"==!\""),
        ("a==", "[a==]: expected value or quoted"),
        (
            "image~=,id?=?fbaq",
            "[image~= >|,|< id?=?fbaq]: expected value or quoted",
        ),
        (
            "event.x~=.*",
            "[event.x~= >|.|< *]: expected value or quoted",
        ),
        ("a== ~b", "[a==  >|~|< b]: expected value or quoted"),
        (
            "topic==/tasks/exit",
            "[topic== >|/|< tasks/exit]: invalid quote encountered",
        ),
        ("a!=|x|", "[a!= >|||< x|]: invalid quote encountered"),
        (
            "labels.|foo|==x",
            "[labels. >|||< foo|==x]: invalid quote encountered",
        ),
        (
            "labels./x/",
            "[labels. >|/|< x/]: invalid quote encountered",
        ),
        (
            "topic~=/tasks/.+,namespace==bb",
            "[topic~=/tasks/ >|.|< +,namespace==bb]: unexpected input: .",
        ),
        (
            "labels.ns/key==value",
            "[labels.ns >|/|< key==value]: quoted literal not terminated",
        ),
        (
            "labels.key==/value",
            "[labels.key== >|/|< value]: quoted literal not terminated",
        ),
        (
            "a==\"x\ny\"",
            "[a== >|\"|< x\ny\"]: quoted literal not terminated",
        ),
        (r#"a=="\d""#, r#"[a== >|"|< \d"]: illegal escape sequence"#),
        (r#"a=="\'""#, r#"[a== >|"|< \'"]: illegal escape sequence"#),
        (r#"a=="\/""#, r#"[a== >|"|< \/"]: illegal escape sequence"#),
        (r#"a~=/\"/"#, r#"[a~= >|/|< \"/]: illegal escape sequence"#),
        (r#"a~=|\/|"#, r#"[a~= >|||< \/|]: illegal escape sequence"#),
        (
            r#"a=="\x4""#,
            r#"[a== >|"|< \x4"]: illegal numeric escape sequence"#,
        ),
        (
            r#"a=="\u123""#,
            r#"[a== >|"|< \u123"]: illegal numeric escape sequence"#,
        ),
        (
            r#"a=="\U1234567""#,
            r#"[a== >|"|< \U1234567"]: illegal numeric escape sequence"#,
        ),
        (
            r#"a=="\12""#,
            r#"[a== >|"|< \12"]: illegal numeric escape sequence"#,
        ),
        (r#"a=="\8""#, r#"[a== >|"|< \8"]: illegal escape sequence"#),
        (
            r#"a=="\400""#,
            r#"[a== >|"|< \400"]: unquoting failed: quote syntax error"#,
        ),
        (
            r#"a=="\U00110000""#,
            r#"[a== >|"|< \U00110000"]: unquoting failed: quote syntax error"#,
        ),
        ("a\0", "[a >|\0|< ]: unexpected null"),
        ("a==b\0", "[a==b >|\0|< ]: unexpected input: \u{fffd}"),
        ("a==\"\0\"", "[a== >|\"|< \0\"]: unexpected null"),
        // A literal U+FFFD is indistinguishable from invalid UTF-8 in Go.
        (
            "a==\u{fffd}",
            "[a== >|\u{fffd}|< \u{fffd}\u{fffd}]: rune error",
        ),
        // The marker covers one byte of a multi-byte character.
        ("é", "[ >|\u{fffd}|< \u{fffd}]: expected field or quoted"),
    ];
    for (input, expected) in cases {
        let err = parse_err(input);
        assert_eq!(
            err.to_string(),
            format!("filters: parse error: {expected}"),
            "{input:?}"
        );
    }
}

#[test]
fn invalid_utf8_is_a_rune_error() {
    let cases: &[(&[u8], &str)] = &[
        (b"a==\xff", "[a== >|\u{fffd}|< ]: rune error"),
        (b"\xffa", "[ >|\u{fffd}|< a]: rune error"),
        (b"a==\"\xc3\"", "[a== >|\"|< \u{fffd}\"]: rune error"),
        (
            b"a==b,\xe2\x82",
            "[a==b, >|\u{fffd}|< \u{fffd}]: rune error",
        ),
    ];
    for (input, expected) in cases {
        let err = Filter::parse_all_bytes([*input]).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("filters: parse error: {expected}"),
            "{input:?}"
        );
    }
    let ok = Filter::parse_all_bytes([&b"a==b"[..], b""]).unwrap();
    assert!(ok.is_always());
}

#[test]
fn error_positions_and_index() {
    let cases: &[(&[&str], usize, usize, &str)] = &[
        (
            &["topic "],
            0,
            6,
            r#"expected an operator ("=="|"!="|"~=")"#,
        ),
        (&["a==b", "c,"], 1, 2, "expected field or quoted"),
        (&["", "x", "topic==/x/"], 2, 7, "invalid quote encountered"),
    ];
    for (inputs, index, position, message) in cases {
        let err = Filter::parse_all(inputs).unwrap_err();
        assert_eq!(
            (err.index(), err.position(), err.message()),
            (*index, *position, *message)
        );
    }
}
