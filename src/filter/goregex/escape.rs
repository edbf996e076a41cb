//! Escapes (`\d`, `\pL`, `\x{..}`, octal, `\Q..\E`, ...) in Go syntax.

use super::{error, push_char, push_literal};

/// An escape outside brackets.
pub(super) fn escape<'a>(t: &'a str, out: &mut String) -> Result<&'a str, String> {
    let Some(c) = t[1..].chars().next() else {
        return Err("trailing backslash at end of expression".to_owned());
    };
    let rest = &t[1 + c.len_utf8()..];
    match c {
        'A' => out.push_str(r"\A"),
        'z' => out.push_str(r"\z"),
        'b' => out.push_str(r"(?-u:\b)"),
        'B' => out.push_str(r"(?-u:\B)"),
        'd' | 'D' | 's' | 'S' | 'w' | 'W' => out.push_str(perl_class(c)),
        'Q' => {
            let (literal, after) = match rest.find(r"\E") {
                Some(i) => (&rest[..i], &rest[i + 2..]),
                None => (rest, ""),
            };
            literal.chars().for_each(|c| push_char(out, c));
            return Ok(after);
        }
        'p' | 'P' => return unicode_class(t, out),
        _ => {
            let (code, after) = parse_escape(t)?;
            push_literal(out, code);
            return Ok(after);
        }
    }
    Ok(rest)
}

/// Go's ASCII Perl classes, as bracketed Rust classes (valid nested in a
/// class too).
pub(super) fn perl_class(c: char) -> &'static str {
    match c {
        'd' => "[0-9]",
        'D' => "[^0-9]",
        's' => r"[\t\n\x0C\r\x20]",
        'S' => r"[^\t\n\x0C\r\x20]",
        'w' => "[0-9A-Za-z_]",
        _ => "[^0-9A-Za-z_]",
    }
}

/// `\pL`, `\p{Greek}`, `\P{...}`, `\p{^...}`.
pub(super) fn unicode_class<'a>(t: &'a str, out: &mut String) -> Result<&'a str, String> {
    let mut negated = t.starts_with(r"\P");
    let s = &t[2..];
    let (seq_len, name) = match s.strip_prefix('{') {
        Some(body) => {
            let end = body
                .find('}')
                .ok_or_else(|| error("invalid character class range", t))?;
            (end + 4, &body[..end])
        }
        None => {
            let len = s.chars().next().map_or(0, char::len_utf8);
            (2 + len, &s[..len])
        }
    };
    let seq = &t[..seq_len];
    let name = match name.strip_prefix('^') {
        Some(name) => {
            negated = !negated;
            name
        }
        None => name,
    };
    // Go's tables are keyed by exact names such as `L`, `Lu`, `Greek`,
    // `Old_Italic`; Rust also accepts loose spellings, which Go rejects.
    let plausible = name.starts_with(|c: char| c.is_ascii_uppercase())
        && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric());
    if !plausible {
        return Err(error("invalid character class range", seq));
    }
    out.push_str(if negated { r"\P{" } else { r"\p{" });
    out.push_str(name);
    out.push('}');
    Ok(&t[seq_len..])
}

/// Go's `parseEscape`: a single-character escape, as a code point (octal and
/// `\x{...}` escapes can name surrogates, which are not `char`s).
pub(super) fn parse_escape(t: &str) -> Result<(u32, &str), String> {
    let invalid = |rest: &str| error("invalid escape sequence", &t[..t.len() - rest.len()]);
    let Some(c) = t[1..].chars().next() else {
        return Err("trailing backslash at end of expression".to_owned());
    };
    let mut rest = &t[1 + c.len_utf8()..];
    let octal = |s: &str| s.starts_with(|d: char| ('0'..='7').contains(&d));
    let code = match c {
        // A lone non-zero digit would be a backreference.
        '1'..='7' if !octal(rest) => return Err(invalid(rest)),
        '0'..='7' => {
            let mut v = u32::from(c) - u32::from('0');
            for _ in 0..2 {
                if !octal(rest) {
                    break;
                }
                v = v * 8 + u32::from(rest.as_bytes()[0] - b'0');
                rest = &rest[1..];
            }
            v
        }
        'x' => return hex_escape(t, rest),
        'a' => 0x07,
        'f' => 0x0c,
        'n' => 0x0a,
        'r' => 0x0d,
        't' => 0x09,
        'v' => 0x0b,
        c if c.is_ascii() && !c.is_ascii_alphanumeric() => u32::from(c),
        _ => return Err(invalid(rest)),
    };
    Ok((code, rest))
}

/// `\xHH` or `\x{H...}` (at most U+10FFFF); `rest` follows the `x`.
fn hex_escape<'a>(t: &'a str, rest: &'a str) -> Result<(u32, &'a str), String> {
    let invalid = |rest: &str| error("invalid escape sequence", &t[..t.len() - rest.len()]);
    let mut chars = rest.char_indices();
    match chars.next() {
        None => Err(invalid(rest)),
        Some((_, '{')) => {
            let mut value: u32 = 0;
            for (i, c) in chars {
                let after = &rest[i + c.len_utf8()..];
                if c == '}' {
                    return if i == 1 {
                        Err(invalid(after))
                    } else {
                        Ok((value, after))
                    };
                }
                let digit = c.to_digit(16).ok_or_else(|| invalid(after))?;
                value = value * 16 + digit;
                if value > 0x10_FFFF {
                    return Err(invalid(after));
                }
            }
            Err(invalid(""))
        }
        Some((_, high)) => {
            let after_high = &rest[high.len_utf8()..];
            let low = after_high.chars().next();
            let after = low.map_or(after_high, |c| &after_high[c.len_utf8()..]);
            match (high.to_digit(16), low.and_then(|c| c.to_digit(16))) {
                (Some(h), Some(l)) => Ok((h * 16 + l, after)),
                _ => Err(invalid(after)),
            }
        }
    }
}
