//! A certificate's subject as an RFC 4514 string: the relative distinguished names
//! last to first, separated by `,`, multi-valued ones joined with `+`, the RFC's
//! attribute types by name (`CN`, `L`, `ST`, `O`, `OU`, `C`, `STREET`, `DC`, `UID`,
//! plus `SERIALNUMBER` and `POSTALCODE`, which Go's `pkix.Name` also names), any other
//! type as its dotted OID with the value as `#` and the hex of its DER encoding.
//!
//! The certificate itself is parsed by webpki (already a dependency of rustls), which
//! hands over the subject's bytes; only the Name's small structure is read here.

use std::fmt::Write as _;

use rustls_pki_types::CertificateDer;

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;

/// The RFC 4514 string of a DER certificate's subject; `None` if the certificate or
/// its subject cannot be parsed.
pub(crate) fn certificate_subject(certificate: &CertificateDer<'_>) -> Option<String> {
    let parsed = webpki::EndEntityCert::try_from(certificate).ok()?;
    format_name(parsed.subject())
}

/// The RFC 4514 string of a Name's contents (the RDNSequence without its outer
/// SEQUENCE header, as webpki hands it over).
pub(crate) fn format_name(mut rdns: &[u8]) -> Option<String> {
    let mut parts = Vec::new();
    while !rdns.is_empty() {
        let (set, rest) = element(rdns, SET)?;
        parts.push(format_rdn(set)?);
        rdns = rest;
    }
    parts.reverse();
    Some(parts.join(","))
}

fn format_rdn(mut set: &[u8]) -> Option<String> {
    let mut out = String::new();
    while !set.is_empty() {
        let (pair, rest) = element(set, SEQUENCE)?;
        let (oid, value) = element(pair, OID)?;
        if !out.is_empty() {
            out.push('+');
        }
        match short_name(oid) {
            Some(name) => {
                out.push_str(name);
                out.push('=');
                let (tag, content, after) = any_element(value)?;
                if !after.is_empty() {
                    return None;
                }
                match text(tag, content) {
                    Some(text) => escape_into(&mut out, &text),
                    None => hex_into(&mut out, value),
                }
            }
            None => {
                out.push_str(&dotted(oid)?);
                out.push('=');
                hex_into(&mut out, value);
            }
        }
        set = rest;
    }
    // An empty RDN is not valid DER for a Name.
    (!out.is_empty()).then_some(out)
}

/// RFC 4514's names plus the two Go also prints by name.
fn short_name(oid: &[u8]) -> Option<&'static str> {
    const DS: [u8; 2] = [0x55, 0x04]; // 2.5.4
    const PILOT: [u8; 9] = [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01]; // 0.9.2342.19200300.100.1
    match oid {
        [a, b, n] if [*a, *b] == DS => match n {
            3 => Some("CN"),
            5 => Some("SERIALNUMBER"),
            6 => Some("C"),
            7 => Some("L"),
            8 => Some("ST"),
            9 => Some("STREET"),
            10 => Some("O"),
            11 => Some("OU"),
            17 => Some("POSTALCODE"),
            _ => None,
        },
        [prefix @ .., n] if prefix == PILOT => match n {
            1 => Some("UID"),
            25 => Some("DC"),
            _ => None,
        },
        _ => None,
    }
}

/// A DirectoryString (or IA5String) value as text; `None` for other types, which
/// are written as hex.
fn text(tag: u8, content: &[u8]) -> Option<String> {
    match tag {
        // UTF8String, NumericString, PrintableString, IA5String
        0x0c | 0x12 | 0x13 | 0x16 => std::str::from_utf8(content).ok().map(str::to_owned),
        // TeletexString: in practice Latin-1.
        0x14 => Some(content.iter().map(|&b| char::from(b)).collect()),
        // BMPString: UTF-16BE.
        0x1e if content.len().is_multiple_of(2) => char::decode_utf16(
            content
                .chunks_exact(2)
                .map(|pair| u16::from_be_bytes([pair[0], pair[1]])),
        )
        .collect::<Result<String, _>>()
        .ok(),
        // UniversalString: UTF-32BE.
        0x1c if content.len().is_multiple_of(4) => content
            .chunks_exact(4)
            .map(|quad| char::from_u32(u32::from_be_bytes([quad[0], quad[1], quad[2], quad[3]])))
            .collect(),
        _ => None,
    }
}

/// RFC 4514 section 2.4: the special characters get a backslash, a leading space or
/// `#` and a trailing space too. Control characters are written as `\XX` hex pairs
/// (also RFC 4514), so a subject never carries a raw newline or escape sequence into
/// a log or a terminal.
fn escape_into(out: &mut String, value: &str) {
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' ' if i == 0 || i == last => out.push_str("\\ "),
            '#' if i == 0 => out.push_str("\\#"),
            c if c.is_control() => {
                let mut bytes = [0; 4];
                for b in c.encode_utf8(&mut bytes).bytes() {
                    let _ = write!(out, "\\{b:02X}");
                }
            }
            c => out.push(c),
        }
    }
}

fn hex_into(out: &mut String, der: &[u8]) {
    out.push('#');
    for b in der {
        let _ = write!(out, "{b:02x}");
    }
}

/// An OBJECT IDENTIFIER's content as dotted decimal.
fn dotted(oid: &[u8]) -> Option<String> {
    let mut arcs = Vec::new();
    let mut value: u64 = 0;
    for (i, &b) in oid.iter().enumerate() {
        // A leading 0x80 would be a non-minimal encoding.
        if value == 0 && b == 0x80 {
            return None;
        }
        value = value.checked_mul(128)? | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let (first, second) = match value {
                    0..40 => (0, value),
                    40..80 => (1, value - 40),
                    _ => (2, value - 80),
                };
                arcs.push(first);
                arcs.push(second);
            } else {
                arcs.push(value);
            }
            value = 0;
        } else if i == oid.len() - 1 {
            return None;
        }
    }
    if arcs.is_empty() {
        return None;
    }
    Some(
        arcs.iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("."),
    )
}

/// The element at the start of `input`, which must have tag `tag`: its content and
/// what follows it.
fn element(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (found, content, rest) = any_element(input)?;
    (found == tag).then_some((content, rest))
}

/// The element at the start of `input` (single-byte tags, definite lengths of up to
/// four bytes): its tag, its content and what follows it.
fn any_element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    // High tag numbers (0x1f) never occur in a Name.
    if tag & 0x1f == 0x1f {
        return None;
    }
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 {
            return None;
        }
        let (bytes, after) = rest.split_at_checked(count)?;
        rest = after;
        bytes
            .iter()
            .fold(0usize, |len, &b| (len << 8) | usize::from(b))
    };
    let (content, rest) = rest.split_at_checked(len)?;
    Some((tag, content, rest))
}
