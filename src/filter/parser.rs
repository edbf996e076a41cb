//! Recursive-descent parser, a port of containerd's `filters/parser.go` and
//! `filters/quote.go`.
//!
//! It only checks syntax and produces raw selectors; compiling `~=` values
//! into regexes happens afterwards (see `Filter::parse_all`) so that, as in
//! containerd, a syntax error anywhere takes precedence over a bad regex.

use super::Operator;
use super::scanner::{Rune, Scanner, Token};

/// A selector as written, before its value is compiled.
pub(super) struct RawSelector {
    pub(super) path: Vec<String>,
    pub(super) op: Operator,
    /// Unquoted bytes: `\x` and octal escapes can produce invalid UTF-8.
    pub(super) value: Vec<u8>,
    /// Start of the value token, where a regex error is reported.
    pub(super) value_pos: usize,
}

/// A syntax error: byte offset into the input and containerd's message.
pub(super) type Failure = (usize, String);

/// Parses one non-empty filter string (`selector ("," selector)*`).
pub(super) fn parse(input: &[u8]) -> Result<Vec<RawSelector>, Failure> {
    Parser {
        scanner: Scanner::new(input),
    }
    .selectors()
}

struct Parser<'a> {
    scanner: Scanner<'a>,
}

impl Parser<'_> {
    fn selectors(&mut self) -> Result<Vec<RawSelector>, Failure> {
        let mut selectors = vec![self.selector()?];
        loop {
            match self.scanner.peek() {
                Rune::Char(',') => {
                    let (pos, tok, _) = self.scanner.scan();
                    if tok != Token::Separator {
                        return Err((pos, "expected a separator".into()));
                    }
                    selectors.push(self.selector()?);
                }
                Rune::Eof => return Ok(selectors),
                // Go formats its illegal-rune sentinel with `string(rune)`,
                // which yields U+FFFD.
                Rune::Illegal => {
                    return Err((self.scanner.ppos(), "unexpected input: \u{FFFD}".into()));
                }
                Rune::Char(c) => {
                    return Err((self.scanner.ppos(), format!("unexpected input: {c}")));
                }
            }
        }
    }

    fn selector(&mut self) -> Result<RawSelector, Failure> {
        let path = self.fieldpath()?;
        // No whitespace skipping here: `topic ` is not presence-only.
        if matches!(self.scanner.peek(), Rune::Char(',') | Rune::Eof) {
            return Ok(RawSelector {
                path,
                op: Operator::Present,
                value: Vec::new(),
                value_pos: 0,
            });
        }
        let op = self.operator()?;
        let (value_pos, value) = self.value(op == Operator::Matches)?;
        Ok(RawSelector {
            path,
            op,
            value,
            value_pos,
        })
    }

    fn fieldpath(&mut self) -> Result<Vec<String>, Failure> {
        let mut path = vec![self.field()?];
        while self.scanner.peek() == Rune::Char('.') {
            let (pos, tok, _) = self.scanner.scan();
            if tok != Token::Separator {
                return Err((pos, "expected a field separator (`.`)".into()));
            }
            path.push(self.field()?);
        }
        Ok(path)
    }

    fn field(&mut self) -> Result<String, Failure> {
        let (pos, tok, text) = self.scanner.scan();
        match tok {
            // Field tokens are ASCII by construction.
            Token::Field => Ok(String::from_utf8_lossy(text).into_owned()),
            // Label keys are strings; an escape that yields invalid UTF-8
            // cannot name one, so the lossy conversion is documented rather
            // than modelled.
            Token::Quoted => {
                unquote_token(pos, text, false).map(|v| String::from_utf8_lossy(&v).into_owned())
            }
            Token::Illegal => Err((pos, self.scanner.err().into())),
            _ => Err((pos, "expected field or quoted".into())),
        }
    }

    fn operator(&mut self) -> Result<Operator, Failure> {
        let (pos, tok, text) = self.scanner.scan();
        match tok {
            Token::Operator => match text {
                b"==" => Ok(Operator::Equal),
                b"!=" => Ok(Operator::NotEqual),
                b"~=" => Ok(Operator::Matches),
                // Operator tokens only hold `=`, `!` and `~`, so Go's %q
                // quoting is plain double quotes.
                _ => Err((
                    pos,
                    format!("unsupported operator \"{}\"", String::from_utf8_lossy(text)),
                )),
            },
            Token::Illegal => Err((pos, self.scanner.err().into())),
            _ => Err((pos, r#"expected an operator ("=="|"!="|"~=")"#.into())),
        }
    }

    fn value(&mut self, allow_alt_quotes: bool) -> Result<(usize, Vec<u8>), Failure> {
        let (pos, tok, text) = self.scanner.scan();
        match tok {
            Token::Value | Token::Field => Ok((pos, text.to_vec())),
            Token::Quoted => unquote_token(pos, text, allow_alt_quotes).map(|v| (pos, v)),
            Token::Illegal => Err((pos, self.scanner.err().into())),
            _ => Err((pos, "expected value or quoted".into())),
        }
    }
}

fn unquote_token(pos: usize, text: &[u8], allow_alt_quotes: bool) -> Result<Vec<u8>, Failure> {
    // containerd also lets `'` through here, but its scanner never produces
    // single-quoted tokens.
    if !allow_alt_quotes && text.first() != Some(&b'"') {
        return Err((pos, "invalid quote encountered".into()));
    }
    unquote(text).ok_or_else(|| (pos, "unquoting failed: quote syntax error".into()))
}

/// Go's `strconv.Unquote`, as modified by containerd to accept `/` and `|`
/// as quote characters. The scanner has already rejected most malformed
/// escapes; what is left to fail is an octal escape above `\377` or a `\U`
/// escape above U+10FFFF.
pub(super) fn unquote(token: &[u8]) -> Option<Vec<u8>> {
    let (&quote, rest) = token.split_first()?;
    let (&last, body) = rest.split_last()?;
    if quote != last || !matches!(quote, b'"' | b'/' | b'|') || body.contains(&b'\n') {
        return None;
    }
    let mut out = Vec::with_capacity(body.len());
    let mut rest = body;
    while let Some((&c, tail)) = rest.split_first() {
        if c == quote {
            return None;
        }
        if c != b'\\' {
            out.push(c);
            rest = tail;
            continue;
        }
        rest = unescape(tail, quote, &mut out)?;
    }
    Some(out)
}

/// Decodes the escape following a backslash into `out`; returns the rest.
fn unescape<'a>(s: &'a [u8], quote: u8, out: &mut Vec<u8>) -> Option<&'a [u8]> {
    let (&c, rest) = s.split_first()?;
    let simple = match c {
        b'a' => Some(0x07),
        b'b' => Some(0x08),
        b'f' => Some(0x0c),
        b'n' => Some(b'\n'),
        b'r' => Some(b'\r'),
        b't' => Some(b'\t'),
        b'v' => Some(0x0b),
        b'\\' => Some(b'\\'),
        b'"' | b'/' | b'|' | b'\'' if c == quote => Some(c),
        _ => None,
    };
    if let Some(byte) = simple {
        out.push(byte);
        return Some(rest);
    }
    match c {
        b'x' | b'u' | b'U' => {
            let n = match c {
                b'x' => 2,
                b'u' => 4,
                _ => 8,
            };
            let digits = rest.get(..n)?;
            let mut v: u32 = 0;
            for &d in digits {
                v = (v << 4) | char::from(d).to_digit(16)?;
            }
            if c == b'x' {
                // A single byte, possibly not valid UTF-8 on its own.
                out.push(v as u8);
            } else {
                push_code_point(v, out)?;
            }
            Some(&rest[n..])
        }
        b'0'..=b'7' => {
            let mut v = u32::from(c - b'0');
            for &d in rest.get(..2)? {
                if !(b'0'..=b'7').contains(&d) {
                    return None;
                }
                v = (v << 3) | u32::from(d - b'0');
            }
            out.push(u8::try_from(v).ok()?);
            Some(&rest[2..])
        }
        _ => None,
    }
}

/// Encodes a `\u`/`\U` code point the way Go does: Go's rune is an int32, so
/// values of 0x80000000 and above are negative, slip past the range check and
/// encode as U+FFFD, exactly like surrogates.
fn push_code_point(v: u32, out: &mut Vec<u8>) -> Option<()> {
    if v > 0x10_FFFF && v < 0x8000_0000 {
        return None;
    }
    let c = char::from_u32(v).unwrap_or('\u{FFFD}');
    out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
    Some(())
}
