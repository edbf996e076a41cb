//! The parse error, rendered exactly like containerd's.

use std::borrow::Cow;
use std::fmt;

/// What containerd's `ParseAll` appends to a parse error (it wraps
/// `errdefs.ErrInvalidArgument`). [`ParseError`]'s `Display` leaves it off;
/// callers that mimic `ParseAll`'s message (e.g. a gRPC status) append it,
/// or use [`ParseError::invalid_argument_message`].
pub(super) const INVALID_ARGUMENT_SUFFIX: &str = ": invalid argument";

/// A filter string that failed to parse.
///
/// `Display` gives containerd's text:
/// `filters: parse error: [<before> >|<char>|< <after>]: <message>`, or
/// `filters: parse error: [<input>]: <message>` when the error is at the
/// end of the input.
///
/// containerd marks a single *byte*, which may be part of a multi-byte
/// character; Go prints the raw bytes, which cannot live in a Rust `String`,
/// so each piece is decoded lossily (the result equals a lossy decoding of
/// Go's bytes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ParseError {
    index: usize,
    input: Vec<u8>,
    position: usize,
    message: String,
}

impl ParseError {
    pub(super) fn new(index: usize, input: &[u8], position: usize, message: String) -> Self {
        ParseError {
            index,
            input: input.to_vec(),
            position,
            message,
        }
    }

    /// Which string of the `parse_all` list failed (0 for `parse`).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The failing filter string (lossily decoded if it came from
    /// `parse_bytes` and was not UTF-8).
    pub fn input(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.input)
    }

    /// Byte offset into [`input`](Self::input) that the error points at; may
    /// equal the input's length.
    pub fn position(&self) -> usize {
        self.position
    }

    /// The bare message, e.g. `expected field or quoted`.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// containerd's complete `ParseAll` error text, with
    /// `INVALID_ARGUMENT_SUFFIX`.
    pub fn invalid_argument_message(&self) -> String {
        format!("{self}{INVALID_ARGUMENT_SUFFIX}")
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lossy = String::from_utf8_lossy;
        f.write_str("filters: parse error: ")?;
        if self.position < self.input.len() {
            let (before, rest) = self.input.split_at(self.position);
            let (at, after) = rest.split_at(1);
            write!(
                f,
                "[{} >|{}|< {}]: {}",
                lossy(before),
                lossy(at),
                lossy(after),
                self.message
            )
        } else {
            write!(f, "[{}]: {}", lossy(&self.input), self.message)
        }
    }
}
