//! A tree head as C2SP's tlog-checkpoint writes it: the text a signed note carries.
//!
//! ```text
//! web-1/eventgate/5f0c1b8e2d6a4c3f9e7b1a2d3c4e5f60
//! 183467
//! n9qbO7NRgk0G2b1n6U9dVVn6Hk0n0p4nVSoc8ih5w4M=
//! node web-1
//! ...
//! ```
//!
//! The origin (the log's name, unique per log), the number of leaves in decimal, the
//! root in standard base64, then optional extension lines, each non-empty, whose
//! meaning is the log's own. Every line ends in a newline.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::{HASH_LEN, Hash};

/// The longest tree head text accepted: a few hundred bytes are used.
pub(crate) const MAX_TEXT: usize = 16 * 1024;

/// The most extension lines accepted.
pub(crate) const MAX_EXTENSIONS: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeHead {
    pub origin: String,
    pub size: u64,
    pub root: Hash,
    pub extensions: Vec<String>,
}

impl TreeHead {
    pub fn to_text(&self) -> String {
        let mut text = format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            STANDARD.encode(self.root)
        );
        for line in &self.extensions {
            text.push_str(line);
            text.push('\n');
        }
        text
    }

    /// Parses a note's text (ending in a newline) as a tree head.
    pub fn parse(text: &str) -> Result<TreeHead, String> {
        if text.len() > MAX_TEXT {
            return Err(format!(
                "a tree head is at most {MAX_TEXT} bytes, this text is {}",
                text.len()
            ));
        }
        let Some(body) = text.strip_suffix('\n') else {
            return Err("a tree head's text ends in a newline".to_owned());
        };
        let mut lines = body.split('\n');
        let origin = lines.next().unwrap_or_default();
        if origin.is_empty() {
            return Err("the first line, the origin, is empty".to_owned());
        }
        let size = lines
            .next()
            .ok_or("the second line, the tree size, is missing")?;
        let size = parse_size(size).map_err(|e| format!("line 2, the tree size: {e}"))?;
        let root = lines
            .next()
            .ok_or("the third line, the root hash, is missing")?;
        let root = parse_hash(root).map_err(|e| format!("line 3, the root hash: {e}"))?;
        let mut extensions = Vec::new();
        for (i, line) in lines.enumerate() {
            if line.is_empty() {
                return Err(format!("line {} is empty", i + 4));
            }
            if extensions.len() == MAX_EXTENSIONS {
                return Err(format!("more than {MAX_EXTENSIONS} extension lines"));
            }
            extensions.push(line.to_owned());
        }
        Ok(TreeHead {
            origin: origin.to_owned(),
            size,
            root,
            extensions,
        })
    }
}

/// A decimal without sign or leading zeros, as the format writes sizes.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if !canonical {
        return Err(format!(
            "{:?} is not a decimal number without leading zeros",
            short(text)
        ));
    }
    text.parse::<u64>()
        .map_err(|e| format!("{:?}: {e}", short(text)))
}

/// A hash in standard base64 (44 characters with its padding).
pub(crate) fn parse_hash(text: &str) -> Result<Hash, String> {
    let bytes = STANDARD
        .decode(text)
        .map_err(|e| format!("{:?} is not base64: {e}", short(text)))?;
    <Hash>::try_from(bytes.as_slice()).map_err(|_| {
        format!(
            "a hash is {HASH_LEN} bytes, {:?} holds {}",
            short(text),
            bytes.len()
        )
    })
}

pub(crate) fn encode_hash(hash: &Hash) -> String {
    STANDARD.encode(hash)
}

fn short(text: &str) -> String {
    text.chars().take(80).collect()
}
