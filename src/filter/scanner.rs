//! Tokenizer for the filter language, a faithful port of containerd's
//! `filters/scanner.go`.
//!
//! The structure (a `pos`/`ppos` cursor pair, a sticky error message and a
//! "value mode" flag) deliberately mirrors the Go state machine: several of
//! the language's observable quirks (which error message wins, where an error
//! points, what counts as the first character of a value) fall out of that
//! exact structure, so reproducing the quirks is easiest by reproducing it.

use std::sync::LazyLock;

/// One decoded input character, or one of Go's two sentinel "runes".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rune {
    Char(char),
    Eof,
    /// Invalid UTF-8, a literal U+FFFD or a NUL; the scanner's error message
    /// says which.
    Illegal,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Token {
    Eof,
    Quoted,
    Value,
    Field,
    Separator,
    Operator,
    Illegal,
    /// A character that starts no token in the current mode (Go returns the
    /// rune itself as the token).
    Other(char),
}

pub(super) struct Scanner<'a> {
    input: &'a [u8],
    /// Start of the most recently read rune.
    pos: usize,
    /// End of the most recently read rune.
    ppos: usize,
    /// Set by an operator: the next token is a value, not a field.
    value: bool,
    /// The first error seen; Go never overwrites it, so later failures may be
    /// reported with an earlier message.
    err: Option<&'static str>,
}

impl<'a> Scanner<'a> {
    pub(super) fn new(input: &'a [u8]) -> Self {
        Scanner {
            input,
            pos: 0,
            ppos: 0,
            value: false,
            err: None,
        }
    }

    /// Byte offset just past the last consumed rune; containerd reports
    /// "unexpected input" here.
    pub(super) fn ppos(&self) -> usize {
        self.ppos
    }

    pub(super) fn err(&self) -> &'static str {
        self.err.unwrap_or("")
    }

    fn error(&mut self, msg: &'static str) {
        if self.err.is_none() {
            self.err = Some(msg);
        }
    }

    fn next(&mut self) -> Rune {
        if self.pos >= self.input.len() {
            return Rune::Eof;
        }
        self.pos = self.ppos;
        let Some((decoded, width)) = decode(&self.input[self.ppos..]) else {
            return Rune::Eof;
        };
        self.ppos += width;
        match decoded {
            // Go's decoder cannot tell a literal U+FFFD from invalid input.
            None | Some('\u{FFFD}') => {
                self.error("rune error");
                Rune::Illegal
            }
            Some('\0') => {
                self.error("unexpected null");
                Rune::Illegal
            }
            Some(c) => Rune::Char(c),
        }
    }

    pub(super) fn peek(&mut self) -> Rune {
        let (pos, ppos) = (self.pos, self.ppos);
        let ch = self.next();
        self.pos = pos;
        self.ppos = ppos;
        ch
    }

    /// Returns the token's start offset, its kind and its raw text.
    pub(super) fn scan(&mut self) -> (usize, Token, &'a [u8]) {
        let mut ch = self.next();
        let mut pos = self.pos;
        let c = loop {
            let c = match ch {
                Rune::Eof => return (self.pos, Token::Eof, &[]),
                Rune::Illegal => return (self.pos, Token::Illegal, &[]),
                Rune::Char(c) => c,
            };
            if c.is_whitespace() {
                ch = self.next();
                pos = self.pos;
                continue;
            }
            break c;
        };
        let kind = if is_quote_rune(c) {
            if self.scan_quoted(c) {
                Token::Quoted
            } else {
                Token::Illegal
            }
        } else if is_separator_rune(c) {
            self.value = false;
            Token::Separator
        } else if is_operator_rune(c) {
            self.scan_operator();
            self.value = true;
            Token::Operator
        } else if self.value {
            // The first character of a value is not checked against
            // `is_value_rune`: anything that starts no other token will do.
            self.scan_while(is_value_rune);
            self.value = false;
            Token::Value
        } else if is_field_rune(c) {
            self.scan_while(is_field_rune);
            Token::Field
        } else {
            return (self.pos, Token::Other(c), &[]);
        };
        (pos, kind, &self.input[pos..self.ppos])
    }

    fn scan_while(&mut self, accept: fn(char) -> bool) {
        while let Rune::Char(c) = self.peek() {
            if !accept(c) {
                break;
            }
            self.next();
        }
    }

    fn scan_operator(&mut self) {
        self.scan_while(is_operator_rune);
    }

    /// Reads up to the closing `quote`; returns false when the literal is
    /// unterminated or holds an illegal escape (the rest is still consumed).
    fn scan_quoted(&mut self, quote: char) -> bool {
        let mut legal = true;
        let mut ch = self.next();
        while ch != Rune::Char(quote) {
            match ch {
                Rune::Char('\n') | Rune::Eof | Rune::Illegal => {
                    self.error("quoted literal not terminated");
                    return false;
                }
                Rune::Char('\\') => {
                    let (after, ok) = self.scan_escape(quote);
                    ch = after;
                    legal &= ok;
                }
                Rune::Char(_) => ch = self.next(),
            }
        }
        legal
    }

    /// Called after a backslash; returns the rune following the escape.
    fn scan_escape(&mut self, quote: char) -> (Rune, bool) {
        let ch = self.next();
        match ch {
            Rune::Char('a' | 'b' | 'f' | 'n' | 'r' | 't' | 'v' | '\\') => (self.next(), true),
            Rune::Char(c) if c == quote => (self.next(), true),
            Rune::Char('0'..='7') => self.scan_digits(ch, 8, 3),
            Rune::Char('x') => {
                let first = self.next();
                self.scan_digits(first, 16, 2)
            }
            Rune::Char('u') => {
                let first = self.next();
                self.scan_digits(first, 16, 4)
            }
            Rune::Char('U') => {
                let first = self.next();
                self.scan_digits(first, 16, 8)
            }
            _ => {
                self.error("illegal escape sequence");
                (ch, false)
            }
        }
    }

    fn scan_digits(&mut self, mut ch: Rune, base: u32, mut n: u32) -> (Rune, bool) {
        while n > 0 && digit_val(ch) < base {
            ch = self.next();
            n -= 1;
        }
        if n > 0 {
            self.error("illegal numeric escape sequence");
            return (ch, false);
        }
        (ch, true)
    }
}

/// Decodes one character like Go's `utf8.DecodeRune`: `None` at the end of
/// input, `Some((None, 1))` for an invalid or truncated sequence.
fn decode(bytes: &[u8]) -> Option<(Option<char>, usize)> {
    if bytes.is_empty() {
        return None;
    }
    let chunk = &bytes[..bytes.len().min(4)];
    let valid = match std::str::from_utf8(chunk) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&chunk[..e.valid_up_to()]).unwrap_or(""),
    };
    Some(match valid.chars().next() {
        Some(c) => (Some(c), c.len_utf8()),
        None => (None, 1),
    })
}

fn digit_val(ch: Rune) -> u32 {
    match ch {
        Rune::Char(c) => c.to_digit(16).unwrap_or(16),
        _ => 16,
    }
}

fn is_field_rune(c: char) -> bool {
    c == '_' || c.is_ascii_alphanumeric()
}

fn is_operator_rune(c: char) -> bool {
    matches!(c, '=' | '!' | '~')
}

fn is_quote_rune(c: char) -> bool {
    matches!(c, '"' | '/' | '|')
}

fn is_separator_rune(c: char) -> bool {
    matches!(c, ',' | '.')
}

/// Go accepts letters, marks, numbers, punctuation and symbols (its
/// `IsGraphic` minus spaces). Rust's std has no general-category API, so the
/// non-ASCII case borrows the regex crate's Unicode tables.
fn is_value_rune(c: char) -> bool {
    static GRAPHIC: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(r"^[\p{L}\p{M}\p{N}\p{P}\p{S}]$").expect("constant pattern is valid")
    });
    if c.is_ascii() {
        return c.is_ascii_graphic() && c != ',';
    }
    !c.is_whitespace() && GRAPHIC.is_match(c.encode_utf8(&mut [0; 4]))
}

#[cfg(test)]
pub(super) fn tokens(input: &str) -> Vec<(usize, Token, String, &'static str)> {
    let mut scanner = Scanner::new(input.as_bytes());
    let mut out = Vec::new();
    loop {
        let (pos, tok, text) = scanner.scan();
        let err = if tok == Token::Illegal {
            scanner.err()
        } else {
            ""
        };
        out.push((pos, tok, String::from_utf8_lossy(text).into_owned(), err));
        if tok == Token::Eof {
            return out;
        }
    }
}
