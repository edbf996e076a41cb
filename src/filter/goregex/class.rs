//! Bracketed character classes in Go syntax.

use super::escape::{parse_escape, perl_class, unicode_class};
use super::{NEVER, error, push_char, push_literal};

const POSIX_CLASSES: [&str; 14] = [
    "alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct",
    "space", "upper", "word", "xdigit",
];

/// A bracketed class, Go rules: `]` first is a literal, `-` is a literal
/// unless it separates two characters, `[` only matters as `[:name:]`.
pub(super) fn class<'a>(t: &'a str, out: &mut String) -> Result<&'a str, String> {
    let missing = || error("missing closing ]", t);
    let mut s = &t[1..];
    out.push('[');
    if let Some(rest) = s.strip_prefix('^') {
        out.push('^');
        s = rest;
    }
    let mut first = true;
    loop {
        let c = s.chars().next().ok_or_else(missing)?;
        if c == ']' && !first {
            out.push(']');
            return Ok(&s[1..]);
        }
        first = false;
        if let Some(i) = s.strip_prefix("[:").and_then(|r| r.find(":]")) {
            let name = &s[..i + 4];
            let bare = &name[2..i + 2];
            if !POSIX_CLASSES.contains(&bare.strip_prefix('^').unwrap_or(bare)) {
                return Err(error("invalid character class range", name));
            }
            out.push_str(name);
            s = &s[i + 4..];
            continue;
        }
        if s.starts_with(r"\p") || s.starts_with(r"\P") {
            s = unicode_class(s, out)?;
            continue;
        }
        if let Some(p) = s.strip_prefix('\\').and_then(|r| r.chars().next())
            && "dDsSwW".contains(p)
        {
            out.push_str(perl_class(p));
            s = &s[2..];
            continue;
        }
        let range_start = s;
        let (low, rest) = class_char(s).ok_or_else(missing)??;
        s = rest;
        match s.strip_prefix('-') {
            Some(hi) if !hi.is_empty() && !hi.starts_with(']') => {
                let (high, rest) = class_char(hi).ok_or_else(missing)??;
                s = rest;
                if high < low {
                    let range = &range_start[..range_start.len() - s.len()];
                    return Err(error("invalid character class range", range));
                }
                push_range(out, low, high);
            }
            _ => push_literal(out, low),
        }
    }
}

/// One class member character; `None` at the end of the pattern.
fn class_char(s: &str) -> Option<Result<(u32, &str), String>> {
    let c = s.chars().next()?;
    Some(if c == '\\' {
        parse_escape(s)
    } else {
        Ok((u32::from(c), &s[c.len_utf8()..]))
    })
}

fn push_range(out: &mut String, low: u32, high: u32) {
    let surrogates = 0xD800..=0xDFFF;
    let low = if surrogates.contains(&low) {
        0xE000
    } else {
        low
    };
    let high = if surrogates.contains(&high) {
        0xD7FF
    } else {
        high
    };
    match (char::from_u32(low), char::from_u32(high)) {
        (Some(l), Some(h)) if l <= h => {
            push_char(out, l);
            out.push('-');
            push_char(out, h);
        }
        _ => out.push_str(NEVER),
    }
}
