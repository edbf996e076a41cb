//! Token streams, including the positions and sticky error messages the
//! parser's errors are built from.

use crate::filter::scanner::Token::{self, *};
use crate::filter::scanner::tokens;

type Expected<'a> = &'a [(usize, Token, &'a str, &'a str)];

#[test]
fn token_streams() {
    let cases: &[(&str, Expected)] = &[
        ("name", &[(0, Field, "name", ""), (4, Eof, "", "")]),
        (
            "name==value,foo!=bar",
            &[
                (0, Field, "name", ""),
                (4, Operator, "==", ""),
                (6, Value, "value", ""),
                (11, Separator, ",", ""),
                (12, Field, "foo", ""),
                (15, Operator, "!=", ""),
                (17, Value, "bar", ""),
                (20, Eof, "", ""),
            ],
        ),
        (
            // Operators are a maximal run; values take any punctuation.
            "a=!~b.c==d",
            &[
                (0, Field, "a", ""),
                (1, Operator, "=!~", ""),
                (4, Value, "b.c==d", ""),
                (10, Eof, "", ""),
            ],
        ),
        (
            "name~=/[abc]{0,2}/,x",
            &[
                (0, Field, "name", ""),
                (4, Operator, "~=", ""),
                (6, Quoted, "/[abc]{0,2}/", ""),
                (18, Separator, ",", ""),
                (19, Field, "x", ""),
                (20, Eof, "", ""),
            ],
        ),
        (
            "name~=牛,x",
            &[
                (0, Field, "name", ""),
                (4, Operator, "~=", ""),
                (6, Value, "牛", ""),
                (9, Separator, ",", ""),
                (10, Field, "x", ""),
                (11, Eof, "", ""),
            ],
        ),
        (
            "foo\0bar",
            &[
                (0, Field, "foo", ""),
                (3, Illegal, "", "unexpected null"),
                (4, Field, "bar", ""),
                (7, Eof, "", ""),
            ],
        ),
        (
            "foo = bar    ",
            &[
                (0, Field, "foo", ""),
                (4, Operator, "=", ""),
                (6, Value, "bar", ""),
                (13, Eof, "", ""),
            ],
        ),
        (
            // A value ends at whitespace; what follows is a field again.
            "doublevalue=value value",
            &[
                (0, Field, "doublevalue", ""),
                (11, Operator, "=", ""),
                (12, Value, "value", ""),
                (18, Field, "value", ""),
                (23, Eof, "", ""),
            ],
        ),
        (
            "labels.containerd.io/key==value",
            &[
                (0, Field, "labels", ""),
                (6, Separator, ".", ""),
                (7, Field, "containerd", ""),
                (17, Separator, ".", ""),
                (18, Field, "io", ""),
                (20, Illegal, "/key==value", "quoted literal not terminated"),
                (31, Eof, "", ""),
            ],
        ),
        (
            "labels.\"containerd.io\nkey\"==value",
            &[
                (0, Field, "labels", ""),
                (6, Separator, ".", ""),
                (
                    7,
                    Illegal,
                    "\"containerd.io\n",
                    "quoted literal not terminated",
                ),
                (22, Field, "key", ""),
                (25, Illegal, "\"==value", "quoted literal not terminated"),
                (33, Eof, "", ""),
            ],
        ),
        (
            r#"labels."\g""#,
            &[
                (0, Field, "labels", ""),
                (6, Separator, ".", ""),
                (7, Illegal, r#""\g""#, "illegal escape sequence"),
                (11, Eof, "", ""),
            ],
        ),
        (
            r#"labels."\xaz""#,
            &[
                (0, Field, "labels", ""),
                (6, Separator, ".", ""),
                (7, Illegal, r#""\xaz""#, "illegal numeric escape sequence"),
                (13, Eof, "", ""),
            ],
        ),
        (
            // The first error message is kept: an illegal escape, then an
            // unterminated literal, reports the escape.
            "\"\\g\n",
            &[
                (0, Illegal, "\"\\g\n", "illegal escape sequence"),
                (4, Eof, "", ""),
            ],
        ),
        (
            // `-` starts no token outside value mode.
            "a-b",
            &[
                (0, Field, "a", ""),
                (1, Other('-'), "", ""),
                (2, Field, "b", ""),
                (3, Eof, "", ""),
            ],
        ),
    ];
    for (input, expected) in cases {
        let got = tokens(input);
        let want: Vec<_> = expected
            .iter()
            .map(|&(p, t, s, e)| (p, t, s.to_owned(), e))
            .collect();
        assert_eq!(got, want, "tokens of {input:?}");
    }
}
