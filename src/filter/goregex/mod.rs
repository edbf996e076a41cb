//! Compiles Go RE2 (`regexp/syntax` with Perl flags) patterns with the Rust
//! `regex` crate.
//!
//! The two dialects share most syntax but not all meanings, so the pattern is
//! rewritten first:
//! * `\d \w \s \b` (and negations) are ASCII in Go but Unicode in Rust; they
//!   become explicit ASCII classes (`\s` is Go's `[\t\n\f\r ]`, without the
//!   `\v` of Rust's ASCII `\s`) and `(?-u:\b)`.
//! * Inside brackets Go has no nesting or set operations (`[[]`, `[a&&b]`,
//!   `[a~~b]` are plain literals there), so literals are re-escaped.
//! * `\Q...\E`, octal escapes and `\p{^Name}` exist only in Go; a `{` that
//!   does not start a valid repeat is a literal in Go but an error in Rust.
//! * Rust accepts some things Go rejects (stacked repetitions like `a**`,
//!   the `x`/`R`/`u` flags, `\<`, `\e`, lowercase property names); those
//!   are rejected here with Go's error text.

mod class;
mod escape;

use regex_automata::meta::{self, BuildError, Regex};

use super::budget::Budget;

/// A class that matches nothing, for Go literals Rust cannot express (UTF-16
/// surrogates, which never match valid text anyway).
const NEVER: &str = r"[^\x00-\x{10FFFF}]";

/// Why a `~=` value did not compile.
#[derive(Debug)]
pub(super) enum CompileError {
    /// Not a valid Go regular expression; a one-line description.
    Invalid(String),
    /// Valid, but compiling it would take more of the filter's regex budget than
    /// is left.
    OverBudget,
}

/// Compiles a `~=` value within what is left of `budget`, and charges it.
pub(super) fn compile(pattern: &str, budget: &mut Budget) -> Result<Regex, CompileError> {
    let translated = translate(pattern).map_err(CompileError::Invalid)?;
    let limits = budget.limits();
    let Some(size_limit) = budget.size_limit() else {
        return Err(CompileError::OverBudget);
    };
    let config = meta::Config::new()
        .nfa_size_limit(Some(size_limit))
        .hybrid_cache_capacity(limits.cache);
    let regex = Regex::builder()
        .configure(config)
        .build(&translated)
        .map_err(|e| describe(e, budget.is_limited()))?;
    budget.charge(regex.memory_usage())?;
    Ok(regex)
}

/// The regex crate's syntax errors are multi-line diagrams of the rewritten
/// pattern; only the final `error:` line makes sense to a filter's author.
fn describe(err: BuildError, limited: bool) -> CompileError {
    if let Some(syntax) = err.syntax_error() {
        let text = syntax.to_string();
        let line = text
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix("error: "))
            .unwrap_or(&text)
            .to_owned();
        return CompileError::Invalid(line);
    }
    match err.size_limit() {
        Some(_) if limited => CompileError::OverBudget,
        Some(_) => CompileError::Invalid("expression too large".to_owned()),
        None => CompileError::Invalid(err.to_string()),
    }
}

fn error(code: &str, expr: &str) -> String {
    format!("{code}: `{expr}`")
}

/// Rewrites a Go pattern into an equivalent Rust pattern.
pub(super) fn translate(pattern: &str) -> Result<String, String> {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut t = pattern;
    // Where the previous token started, if it was a repetition operator.
    let mut last_repeat: Option<usize> = None;
    // Flag-only groups such as `(?i)`, held back until the next operand: Go
    // lets a repetition after them apply to the item before them, Rust
    // rejects it, and emitting the repetition first means the same thing.
    let mut flags = String::new();
    while let Some(c) = t.chars().next() {
        let start = pattern.len() - t.len();
        let mut repeat = None;
        if !matches!(c, '*' | '+' | '?' | '{' | '(') {
            flush(&mut out, &mut flags);
        }
        t = match c {
            '\\' => escape::escape(t, &mut out)?,
            '[' => class::class(t, &mut out)?,
            '(' => group(t, &mut out, &mut flags)?,
            '*' | '+' | '?' | '{' => match repetition(t)? {
                Some(after) => {
                    let end = pattern.len() - after.len();
                    if let Some(prev) = last_repeat {
                        return Err(error(
                            "invalid nested repetition operator",
                            &pattern[prev..end],
                        ));
                    }
                    out.push_str(&pattern[start..end]);
                    repeat = Some(start);
                    after
                }
                None => {
                    flush(&mut out, &mut flags);
                    push_char(&mut out, '{');
                    &t[1..]
                }
            },
            '.' | '^' | '$' | '|' | ')' => {
                out.push(c);
                &t[1..]
            }
            _ => {
                push_char(&mut out, c);
                &t[c.len_utf8()..]
            }
        };
        last_repeat = repeat;
    }
    flush(&mut out, &mut flags);
    Ok(out)
}

fn flush(out: &mut String, flags: &mut String) {
    out.push_str(flags);
    flags.clear();
}

/// Returns the text after a repetition operator (including a non-greedy
/// `?`), or `None` for a `{` that Go treats as a literal.
fn repetition(t: &str) -> Result<Option<&str>, String> {
    let after = if t.starts_with('{') {
        let Some((min, max, after)) = parse_repeat(t) else {
            return Ok(None);
        };
        if min > 1000 || max.is_some_and(|max| max > 1000 || min > max) {
            return Err(error("invalid repeat count", &t[..t.len() - after.len()]));
        }
        after
    } else {
        &t[1..]
    };
    Ok(Some(after.strip_prefix('?').unwrap_or(after)))
}

/// Parses `{n}`, `{n,}` or `{n,m}`; `max` is `None` when unbounded.
fn parse_repeat(t: &str) -> Option<(u64, Option<u64>, &str)> {
    let (min, s) = parse_int(t.strip_prefix('{')?)?;
    let (max, s) = match s.strip_prefix(',') {
        None => (Some(min), s),
        Some(s) if s.starts_with('}') => (None, s),
        Some(s) => {
            let (max, s) = parse_int(s)?;
            (Some(max), s)
        }
    };
    Some((min, max, s.strip_prefix('}')?))
}

/// Go's repeat counts: decimal, no leading zeros; huge values saturate (and
/// are then rejected as too large rather than overflowing).
fn parse_int(s: &str) -> Option<(u64, &str)> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || (digits > 1 && s.starts_with('0')) {
        return None;
    }
    let value = s[..digits].bytes().fold(0u64, |n, d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    });
    Some((value, &s[digits..]))
}

/// `(`: a plain group, a named group or a flag group. Go only knows the
/// flags `i`, `m`, `s` and `U`, allows repeating them, and allows `(?)`.
/// A flag-only group is appended to `flags` rather than `out`.
fn group<'a>(t: &'a str, out: &mut String, flags: &mut String) -> Result<&'a str, String> {
    let Some(s) = t.strip_prefix("(?") else {
        flush(out, flags);
        out.push('(');
        return Ok(&t[1..]);
    };
    if let Some(named) = s.strip_prefix("P<").or_else(|| s.strip_prefix('<')) {
        let end = named
            .find('>')
            .ok_or_else(|| error("invalid named capture", t))?;
        let name = &named[..end];
        if name.is_empty() || !name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric()) {
            let capture = &t[..t.len() - named.len() + end + 1];
            return Err(error("invalid named capture", capture));
        }
        flush(out, flags);
        out.push_str("(?P<");
        out.push_str(name);
        out.push('>');
        return Ok(&named[end + 1..]);
    }
    let (mut on, mut off) = (String::new(), String::new());
    let (mut negated, mut saw_flag) = (false, false);
    for (i, c) in s.char_indices() {
        match c {
            'i' | 'm' | 's' | 'U' => {
                saw_flag = true;
                let (add, remove) = if negated {
                    (&mut off, &mut on)
                } else {
                    (&mut on, &mut off)
                };
                remove.retain(|f| f != c);
                if !add.contains(c) {
                    add.push(c);
                }
            }
            '-' if !negated => {
                negated = true;
                saw_flag = false;
            }
            ':' | ')' if !negated || saw_flag => {
                let set = if off.is_empty() {
                    on
                } else {
                    format!("{on}-{off}")
                };
                if c == ':' {
                    flush(out, flags);
                    out.push_str("(?");
                    out.push_str(&set);
                    out.push(':');
                } else if !set.is_empty() {
                    flags.push_str("(?");
                    flags.push_str(&set);
                    flags.push(')');
                }
                return Ok(&s[i + 1..]);
            }
            _ => {
                let seq = &t[..2 + i + c.len_utf8()];
                return Err(error("invalid or unsupported Perl syntax", seq));
            }
        }
    }
    Err(error("invalid or unsupported Perl syntax", t))
}

fn push_literal(out: &mut String, code: u32) {
    match char::from_u32(code) {
        Some(c) => push_char(out, c),
        None => out.push_str(NEVER),
    }
}

/// Escapes every character that is special anywhere in Rust syntax
/// (`regex_syntax::is_meta_character`), inside brackets or out.
fn push_char(out: &mut String, c: char) {
    if r"\.+*?()|[]{}^$#&-~".contains(c) {
        out.push('\\');
    }
    out.push(c);
}
