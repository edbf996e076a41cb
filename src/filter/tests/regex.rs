//! `~=` patterns behave as Go RE2 would, and bad ones are parse errors.

use super::{check, parse_err};
use crate::filter::Filter;
use crate::filter::goregex::translate;

/// Matches `pattern` (written as a `"..."`-quoted `~=` value) against `text`.
fn re(pattern: &str, text: &str) -> bool {
    let quoted = pattern.replace('\\', r"\\").replace('"', r#"\""#);
    check(&format!("x~=\"{quoted}\""), &[("x", text)])
}

#[test]
fn go_semantics() {
    let cases: &[(&str, &str, bool)] = &[
        // Perl classes are ASCII-only in Go.
        (r"\d", "3", true),
        (r"\d", "٣", false),
        (r"[\d]", "٣", false),
        (r"\D", "٣", true),
        (r"[^\D]", "٣", false),
        (r"\w", "é", false),
        (r"\W", "é", true),
        (r"[\w-]", "-", true),
        (r"\s", "\t", true),
        (r"\s", "\u{a0}", false),
        (r"\s", "\u{b}", false),
        (r"[\s]", "\u{b}", false),
        (r"\S", "\u{b}", true),
        (r"a\b", "aé", true),
        (r"a\B", "aé", false),
        (r"\B", "aéa", false),
        (r"[[:alpha:]]", "é", false),
        (r"[[:^alpha:]]", "é", true),
        (r"\pL", "é", true),
        (r"\p{Greek}", "α", true),
        (r"\p{^Greek}", "α", false),
        (r"\P{^Greek}", "α", true),
        (r"(?i)straße", "STRASSE", false),
        (r"(?i)k", "\u{212a}", true),
        (r"(?i-i)A", "a", false),
        (r"(?ii)A", "a", true),
        (r"(?)a", "a", true),
        // A repetition after a flag group repeats the item before it.
        (r"^a(?i)*b$", "aaB", true),
        (r"^a(?i)+$", "", false),
        (r"(?s:.)", "\n", true),
        (r".", "\n", false),
        (r"(?m)^b$", "a\nb\nc", true),
        (r"^b$", "a\nb", false),
        (r"(?U)a+", "aa", true),
        (r"(?P<n>a)(?<m>b)", "ab", true),
        // Brackets hold no nesting or set operations in Go.
        (r"[[]", "[", true),
        (r"[a&&b]", "&", true),
        (r"[a~~b]", "~", true),
        (r"[-a]", "-", true),
        (r"[]a]", "]", true),
        (r"[^]a]", "b", true),
        (r"[a-]", "-", true),
        (r"[\--/]", ".", true),
        // A `{` that starts no valid repeat is a literal.
        (r"a{", "a{", true),
        (r"a{,5}", "a{,5}", true),
        (r"a{01}", "a{01}", true),
        (r"a{2}", "aa", true),
        (r"^a{2,}$", "a", false),
        (r"a}", "a}", true),
        // Escapes: \Q..\E, octal, hex, punctuation.
        (r"\Q.*\E", "a.*b", true),
        (r"\Q.*\E", "ab", false),
        (r"\Q(a", "(a", true),
        (r"\101\0", "A\0", true),
        (r"\x41\x{42}", "AB", true),
        (r"\<\>\#", "<>#", true),
        (r"\a\f\t\n\r\v", "\u{7}\u{c}\t\n\r\u{b}", true),
        // UTF-16 surrogates never match.
        (r"\x{D800}", "\u{fffd}", false),
        (r"[\x{D800}-\x{DFFF}]", "\u{fffd}", false),
        (r"[^\x{D800}]", "a", true),
        (r"[\x{D000}-\x{E000}]", "\u{e000}", true),
        // Repetition of empty-width assertions is allowed.
        (r"^*a", "a", true),
    ];
    for (pattern, text, expected) in cases {
        assert_eq!(re(pattern, text), *expected, "{pattern:?} on {text:?}");
    }
}

#[test]
fn invalid_regex_is_a_parse_error_at_the_value() {
    let cases: &[(&str, &str)] = &[
        (
            r#"topic~="[""#,
            r#"[topic~= >|"|< ["]: invalid regular expression: missing closing ]: `[`"#,
        ),
        (
            "namespace==a,topic~=a**",
            "[namespace==a,topic~= >|a|< **]: invalid regular expression: \
             invalid nested repetition operator: `**`",
        ),
        (
            r"x~=(",
            "[x~= >|(|< ]: invalid regular expression: unclosed group",
        ),
        (
            "x~=a{1001}",
            "[x~= >|a|< {1001}]: invalid regular expression: invalid repeat count: `{1001}`",
        ),
        (
            r#"x~="a{2,1}""#,
            r#"[x~= >|"|< a{2,1}"]: invalid regular expression: invalid repeat count: `{2,1}`"#,
        ),
        (
            // In Go brackets, `a--` is a range from `a` down to `-`.
            "x~=[a--b]",
            "[x~= >|[|< a--b]]: invalid regular expression: invalid character class range: `a--`",
        ),
        (
            r"x~=\1",
            r"[x~= >|\|< 1]: invalid regular expression: invalid escape sequence: `\1`",
        ),
        (
            r"x~=\8",
            r"[x~= >|\|< 8]: invalid regular expression: invalid escape sequence: `\8`",
        ),
        (
            r"x~=\e",
            r"[x~= >|\|< e]: invalid regular expression: invalid escape sequence: `\e`",
        ),
        (
            r"x~=a\",
            r"[x~= >|a|< \]: invalid regular expression: trailing backslash at end of expression",
        ),
        (
            "x~=(?x)a",
            "[x~= >|(|< ?x)a]: invalid regular expression: \
             invalid or unsupported Perl syntax: `(?x`",
        ),
        (
            "x~=(?i-)a",
            "[x~= >|(|< ?i-)a]: invalid regular expression: \
             invalid or unsupported Perl syntax: `(?i-)`",
        ),
        (
            "x~=(?<=a)b",
            "[x~= >|(|< ?<=a)b]: invalid regular expression: invalid named capture: `(?<=a)b`",
        ),
        (
            "x~=[z-a]",
            "[x~= >|[|< z-a]]: invalid regular expression: invalid character class range: `z-a`",
        ),
        (
            "x~=[[:foo:]]",
            "[x~= >|[|< [:foo:]]]: invalid regular expression: \
             invalid character class range: `[:foo:]`",
        ),
        (
            r"x~=\p{greek}",
            r"[x~= >|\|< p{greek}]: invalid regular expression: invalid character class range: `\p{greek}`",
        ),
        (
            r"x~=\p{Klingon}",
            r"[x~= >|\|< p{Klingon}]: invalid regular expression: Unicode property not found",
        ),
        (
            r#"x~="\xff""#,
            r#"[x~= >|"|< \xff"]: invalid regular expression: invalid UTF-8"#,
        ),
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
fn quoted_escapes_reach_the_regex_as_literals() {
    // The filter's own escapes are decoded first; the regex then sees the
    // raw characters, including NUL, tab and space.
    assert!(check(r#"x~="\x00a\tb c""#, &[("x", "\0a\tb c")]));
    assert!(check(r#"x~="^\u00e9$""#, &[("x", "é")]));
    assert!(!check(r#"x~="^\u00e9$""#, &[("x", "e")]));
}

#[test]
fn syntax_errors_take_precedence_over_regex_errors() {
    let err = parse_err(r#"a~="[",b=="#);
    assert_eq!(err.message(), "expected value or quoted");
    let err = Filter::parse_all(&[r#"a~="[""#, "b=="]).unwrap_err();
    assert_eq!(
        (err.index(), err.message()),
        (1, "expected value or quoted")
    );
    let err = Filter::parse_all(&["a", r#"a~="[""#]).unwrap_err();
    assert_eq!((err.index(), err.position()), (1, 3));
}

#[test]
fn translation() {
    let cases: &[(&str, &str)] = &[
        (r"\d\D", r"[0-9][^0-9]"),
        (r"\s", r"[\t\n\x0C\r\x20]"),
        (r"\w\b\B", r"[0-9A-Za-z_](?-u:\b)(?-u:\B)"),
        (r"[\d-]", r"[[0-9]\-]"),
        (r"a{2,3}?b*?", r"a{2,3}?b*?"),
        (r"\Q.\E", r"\."),
        ("(?is-m:a)", "(?is-m:a)"),
        ("(?i)(?)", "(?i)"),
        ("a(?i)(?m)+b", "a+(?i)(?m)b"),
        (r"\p{^L}", r"\P{L}"),
        ("/a.b-c/", r"/a.b\-c/"),
    ];
    for (go, rust) in cases {
        assert_eq!(translate(go).as_deref(), Ok(*rust), "{go:?}");
    }
}

/// A short pattern can compile to megabytes; under a budget such a filter is
/// refused (naming the string that passed it) before it takes the memory, while the
/// same filter without a budget keeps the regex crate's own per-expression limit.
#[test]
fn a_budget_bounds_all_expressions_of_a_filter_together() {
    use crate::filter::{FilterError, RegexBudget};
    let budget = RegexBudget::total(1 << 20);
    // Nine bytes of pattern, about 10 MB compiled.
    let huge = r#"topic~="\\pL{200}""#;
    assert_eq!(
        Filter::parse_all_within(&["topic", huge], budget).unwrap_err(),
        FilterError::OverBudget {
            index: 1,
            limit: 1 << 20
        }
    );
    assert!(Filter::parse(huge).is_ok(), "within the crate's 10 MiB");
    // Each of these is small; together they pass the total.
    let small: Vec<String> = (0..64).map(|i| format!("topic~=|^/t{i}/|")).collect();
    let err = Filter::parse_all_within(&small, budget).unwrap_err();
    assert!(
        matches!(err, FilterError::OverBudget { index, .. } if index > 0 && index < 63),
        "{err:?}"
    );
    let fits = Filter::parse_all_within(&small[..4], budget).expect("four small ones fit");
    assert!(fits.matches(&super::fields(&[("topic", "/t3/x")])));
    assert!(!fits.matches(&super::fields(&[("topic", "/t5/x")])));
    // Syntax and regex errors are still parse errors, pointing at the value.
    let err = Filter::parse_all_within(&["x~=("], budget).unwrap_err();
    assert!(
        matches!(&err, FilterError::Parse(e) if e.message().contains("unclosed group")),
        "{err:?}"
    );
}
