//! containerd's filter language (`github.com/containerd/containerd/filters`),
//! as used by `Events.Subscribe` and the List APIs.
//!
//! A filter is a list of strings that match if **any** of them matches; each
//! string is a comma-separated list of selectors that must **all** match
//! (`namespace==default,topic~=|^/tasks/|`). An empty list and an empty
//! string both match everything. The grammar, quoting, escapes, quirks and
//! error texts reproduce containerd's scanner and parser exactly (see
//! section 4 of the event spec), down to which message wins when several
//! apply and where the error marker points. Field values come from a
//! [`Fields`] adaptor; this module knows nothing about envelopes or events.
//!
//! # Deliberate differences from containerd
//!
//! 1. **Invalid regular expressions are rejected when parsing.** containerd
//!    compiles `~=` patterns at match time, logs, and never matches. Here the
//!    parse fails with the usual error format, pointing at the start of the
//!    value, e.g. ``filters: parse error: [topic~= >|"|< ["]: invalid regular
//!    expression: missing closing ]: `[` ``. Syntax errors still take
//!    precedence, across all strings of a list, as containerd reports those.
//! 2. **Topic globs.** In a `topic==` selector (first path component `topic`,
//!    operator `==`), `*` in the value matches within one `/`-separated
//!    component and a component that is exactly `**` matches zero or more
//!    components: `topic=="/tasks/*"` matches `/tasks/exit` but not
//!    `/tasks/a/b`, and `topic=="/**"` matches every topic. Valid topics
//!    never contain `*`, so no filter containerd accepts changes meaning.
//!    `!=` stays literal.
//!
//! # Known residual divergences
//!
//! * `~=` patterns are Go RE2 syntax, run on the Rust `regex` crate after a
//!   rewrite (see `goregex/mod.rs`) that makes `\d \w \s \b` ASCII as in Go and
//!   fixes up the other dialect differences. Left over: Unicode table
//!   versions differ slightly; Rust accepts some property names Go does not
//!   (binary properties such as `\p{Alphabetic}`, script extensions);
//!   Rust limits nesting to 250 levels and compiled size to 10 MiB (a
//!   `RegexBudget` can lower that for all expressions of a filter
//!   together), while Go has its own (different) nesting and size limits.
//! * Which non-ASCII characters may continue an unquoted value depends on
//!   Unicode general categories; Go's and the regex crate's tables may
//!   disagree on characters assigned in the newest Unicode versions.
//! * `\x` and octal escapes can produce bytes that are not UTF-8. In values
//!   this is modelled exactly (`==` never matches, `!=` always does, and `~=`
//!   fails to parse where Go's regexp would refuse to compile it). In field paths the bytes are
//!   decoded lossily (U+FFFD), since no real field or label key can hold
//!   them anyway.
//! * Error texts that mark one byte of a multi-byte character contain broken
//!   UTF-8 in Go; [`ParseError`] renders the lossy decoding of those bytes.

mod budget;
mod error;
mod glob;
mod goregex;
mod parser;
mod scanner;

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

pub(crate) use budget::RegexBudget;
pub use error::ParseError;
use glob::TopicGlob;
use parser::RawSelector;

/// containerd's `Adaptor.Field`: `Some(value)` when the field is present.
pub trait Fields {
    fn field(&self, path: &[String]) -> Option<Cow<'_, str>>;
}

impl<T: Fields + ?Sized> Fields for &T {
    fn field(&self, path: &[String]) -> Option<Cow<'_, str>> {
        (**self).field(path)
    }
}

/// A parsed filter: alternatives (OR) of conjunctions (AND) of selectors.
#[derive(Clone, Debug)]
pub struct Filter {
    alternatives: Vec<Conjunction>,
}

/// Selectors that must all match; an empty conjunction always matches.
#[derive(Clone, Debug)]
pub struct Conjunction {
    selectors: Vec<Selector>,
}

/// One `fieldpath[op value]` term.
///
/// The public fields describe the selector as written (for translators and
/// logs); matching uses the test compiled at parse time, so editing them
/// does not change what [`Selector::matches`] does.
#[derive(Clone, Debug)]
pub struct Selector {
    pub path: Vec<String>,
    pub op: Operator,
    /// The unquoted value; empty for [`Operator::Present`].
    pub value: String,
    test: Test,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    /// No operator: the field must be present.
    Present,
    /// `==`: present and equal.
    Equal,
    /// `!=`: not equal, where an absent field counts as `""`.
    NotEqual,
    /// `~=`: unanchored regex search, where an absent field counts as `""`.
    Matches,
}

/// What a selector checks, compiled from its operator and value.
#[derive(Clone, Debug)]
enum Test {
    Present,
    Equal,
    TopicGlob(TopicGlob),
    NotEqual,
    Regex(regex_automata::meta::Regex),
    /// `==` against a value that is not UTF-8 and so equals no field.
    Never,
    /// `!=` against such a value.
    Always,
}

/// Why a filter was refused under a `RegexBudget`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// The filter is valid, but its `~=` expressions together need more than the
    /// budget's total; `index` is the string whose expression passed it.
    #[error(
        "the regular expressions of filter {} and those before it need more than {limit} bytes",
        index + 1
    )]
    OverBudget { index: usize, limit: usize },
}

impl Filter {
    /// containerd's `ParseAll`: matches when any string matches; an empty
    /// slice matches everything. On failure, [`ParseError::index`] names the
    /// string; containerd's own message additionally ends in
    /// `INVALID_ARGUMENT_SUFFIX`.
    pub fn parse_all<S: AsRef<str>>(filters: &[S]) -> Result<Filter, ParseError> {
        Self::parse_all_bytes(filters.iter().map(|f| f.as_ref().as_bytes()))
    }

    /// containerd's `Parse` for one string; `""` matches everything.
    pub fn parse(filter: &str) -> Result<Filter, ParseError> {
        Self::parse_all(&[filter])
    }

    /// Like [`Filter::parse_all`] for strings that need not be UTF-8 (Go
    /// strings are bytes; invalid UTF-8 is a parse error, `rune error`).
    pub(crate) fn parse_all_bytes<'a>(
        filters: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Filter, ParseError> {
        Self::parse_all_bytes_within(filters, RegexBudget::UNLIMITED).map_err(|e| match e {
            FilterError::Parse(e) => e,
            // Without a total nothing is over budget; an expression over the
            // crate's own limit is a parse error ("expression too large").
            FilterError::OverBudget { index, .. } => {
                ParseError::new(index, b"", 0, "regular expressions too large".to_owned())
            }
        })
    }

    /// Like [`Filter::parse_all`], with the `~=` expressions of all strings held to
    /// `budget` together: for filters a client sends.
    pub(crate) fn parse_all_within<S: AsRef<str>>(
        filters: &[S],
        budget: RegexBudget,
    ) -> Result<Filter, FilterError> {
        Self::parse_all_bytes_within(filters.iter().map(|f| f.as_ref().as_bytes()), budget)
    }

    fn parse_all_bytes_within<'a>(
        filters: impl IntoIterator<Item = &'a [u8]>,
        budget: RegexBudget,
    ) -> Result<Filter, FilterError> {
        let mut budget = budget::Budget::new(budget);
        let inputs: Vec<&[u8]> = filters.into_iter().collect();
        if inputs.is_empty() {
            return Ok(Filter::always());
        }
        // Syntax first, for every string, so that a syntax error is reported
        // in preference to an invalid regex, as containerd would.
        let mut parsed = Vec::with_capacity(inputs.len());
        for (index, input) in inputs.iter().enumerate() {
            let raw = match input.is_empty() {
                true => Vec::new(),
                false => parser::parse(input)
                    .map_err(|(pos, msg)| ParseError::new(index, input, pos, msg))?,
            };
            parsed.push(raw);
        }
        let alternatives = parsed
            .into_iter()
            .zip(&inputs)
            .enumerate()
            .map(|(index, (raw, input))| {
                let selectors = raw
                    .into_iter()
                    .map(|r| Selector::compile(r, index, input, &mut budget))
                    .collect::<Result<_, _>>()?;
                Ok::<_, FilterError>(Conjunction { selectors })
            })
            .collect::<Result<_, _>>()?;
        Ok(Filter { alternatives })
    }

    /// A filter that matches everything (what `""` and `[]` parse to).
    pub fn always() -> Filter {
        Filter {
            alternatives: vec![Conjunction {
                selectors: Vec::new(),
            }],
        }
    }

    /// True when some alternative has no selectors, so everything matches.
    pub fn is_always(&self) -> bool {
        self.alternatives.iter().any(Conjunction::is_always)
    }

    /// Evaluates the filter; allocates only if the adaptor does.
    pub fn matches<F: Fields + ?Sized>(&self, fields: &F) -> bool {
        self.alternatives.iter().any(|c| c.matches(fields))
    }

    /// The OR-ed alternatives, one per input string, in input order.
    pub fn alternatives(&self) -> &[Conjunction] {
        &self.alternatives
    }

    /// Matches what both `self` and `other` match. Every alternative of one is
    /// joined with every alternative of the other ((a or b) and c is a and c, or b and
    /// c), so the result has the shape translators already know.
    pub fn and(&self, other: &Filter) -> Filter {
        let mut alternatives =
            Vec::with_capacity(self.alternatives.len() * other.alternatives.len());
        for left in &self.alternatives {
            for right in &other.alternatives {
                let selectors = left
                    .selectors
                    .iter()
                    .chain(&right.selectors)
                    .cloned()
                    .collect();
                alternatives.push(Conjunction { selectors });
            }
        }
        Filter { alternatives }
    }
}

/// `text` as a quoted literal the parser reads back exactly, for a value or a
/// field path component built from data (a pod name) rather than typed.
pub(crate) fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            // A raw newline ends a quoted literal; other controls are escaped too so
            // the text stays printable in error messages.
            c if c.is_control() => {
                use std::fmt::Write;
                let _ = write!(out, "\\U{:08x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Default for Filter {
    fn default() -> Self {
        Filter::always()
    }
}

impl FromStr for Filter {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Filter::parse(s)
    }
}

impl Conjunction {
    /// The AND-ed selectors, in input order.
    pub fn selectors(&self) -> &[Selector] {
        &self.selectors
    }

    pub fn is_always(&self) -> bool {
        self.selectors.is_empty()
    }

    pub fn matches<F: Fields + ?Sized>(&self, fields: &F) -> bool {
        self.selectors.iter().all(|s| s.matches(fields))
    }
}

impl Selector {
    fn compile(
        raw: RawSelector,
        index: usize,
        input: &[u8],
        budget: &mut budget::Budget,
    ) -> Result<Selector, FilterError> {
        let RawSelector {
            path,
            op,
            value,
            value_pos,
        } = raw;
        let (value, exact) = match String::from_utf8(value) {
            Ok(value) => (value, true),
            Err(e) => (String::from_utf8_lossy(e.as_bytes()).into_owned(), false),
        };
        let test = match op {
            Operator::Present => Test::Present,
            Operator::Equal if !exact => Test::Never,
            Operator::Equal
                if path.first().is_some_and(|p| p == "topic") && value.contains('*') =>
            {
                Test::TopicGlob(TopicGlob::new(&value))
            }
            Operator::Equal => Test::Equal,
            Operator::NotEqual if !exact => Test::Always,
            Operator::NotEqual => Test::NotEqual,
            Operator::Matches => {
                // Go's regexp rejects patterns that are not UTF-8; the lossy
                // copy must not be compiled in their place.
                let compiled = match exact {
                    true => goregex::compile(&value, budget),
                    false => Err(goregex::CompileError::Invalid("invalid UTF-8".to_owned())),
                };
                let regex = compiled.map_err(|error| match error {
                    goregex::CompileError::Invalid(detail) => {
                        let msg = format!("invalid regular expression: {detail}");
                        FilterError::Parse(ParseError::new(index, input, value_pos, msg))
                    }
                    goregex::CompileError::OverBudget => FilterError::OverBudget {
                        index,
                        limit: budget.limits().total.unwrap_or(usize::MAX),
                    },
                })?;
                Test::Regex(regex)
            }
        };
        Ok(Selector {
            path,
            op,
            value,
            test,
        })
    }

    /// containerd's `selector.Match`.
    pub fn matches<F: Fields + ?Sized>(&self, fields: &F) -> bool {
        let field = || fields.field(&self.path);
        match &self.test {
            Test::Present => field().is_some(),
            Test::Equal => field().is_some_and(|v| v == self.value),
            Test::TopicGlob(glob) => field().is_some_and(|v| glob.matches(&v)),
            Test::NotEqual => field().as_deref().unwrap_or("") != self.value,
            Test::Regex(regex) => regex.is_match(field().as_deref().unwrap_or("")),
            Test::Never => false,
            Test::Always => true,
        }
    }

    /// True for a `topic==` selector whose value is a glob (extension 2 in
    /// the module docs); a translator must not compare it literally.
    pub fn is_topic_glob(&self) -> bool {
        matches!(self.test, Test::TopicGlob(_))
    }

    /// True when escapes made the value non-UTF-8, so [`Selector::value`]
    /// is a lossy copy: `==` then never matches and `!=` always does.
    pub fn value_is_lossy(&self) -> bool {
        matches!(self.test, Test::Never | Test::Always)
    }
}

impl Operator {
    /// containerd's spelling (`?` for presence).
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Present => "?",
            Operator::Equal => "==",
            Operator::NotEqual => "!=",
            Operator::Matches => "~=",
        }
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests;
