//! The node an event was captured on: by default this machine's host name, or the
//! top-level `node` key (`serve --node`). It is kept with every event (spool, stores,
//! JSON lines, Kafka headers, CloudEvents `source`), so records from a fleet of
//! gateways say where each event happened.
//!
//! A node name is 1 to [`MAX_LEN`] bytes of UTF-8 without whitespace or control
//! characters: it goes into a header, a URI authority (percent-encoded) and filter
//! values (`node==web-1`), where a space or a newline would need quoting or would
//! split a line.

/// The longest node name, in bytes: a host name's limit (RFC 1035's 255 octets).
pub(crate) const MAX_LEN: usize = 255;

/// `name` cut to [`MAX_LEN`] bytes on a character boundary: how a node name that
/// did not come from validated config (a Kafka header) is kept, in memory as in the
/// spool's one-byte-length block.
pub(crate) fn cut(name: &str) -> &str {
    let mut end = name.len().min(MAX_LEN);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

/// This machine's host name, or "" when it cannot be read (validation then asks for
/// an explicit `node`, rather than labelling a fleet's records with a guess).
pub(crate) fn host_name() -> String {
    let mut buf = [0u8; MAX_LEN + 1];
    // SAFETY: the buffer is valid for its whole length; gethostname writes at most
    // that many bytes.
    let status = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let from_libc = (status == 0)
        .then(|| {
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            String::from_utf8(buf[..end].to_vec()).ok()
        })
        .flatten();
    from_libc
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|name| name.trim().to_owned())
        .unwrap_or_default()
}

/// Why `name` cannot name a node; `None` when it can.
pub(crate) fn problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some(
            "must not be empty (the default is the host name, which could not be read here: set `node`, or give `serve --node NAME`)"
                .into(),
        );
    }
    if name.len() > MAX_LEN {
        return Some(format!(
            "is {} bytes long; a node name is at most {MAX_LEN} bytes",
            name.len()
        ));
    }
    if let Some(c) = name.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Some(format!(
            "{name:?} contains {c:?}; a node name has no whitespace or control characters"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert_eq!(problem("web-1"), None);
        assert_eq!(problem("node.example.com"), None);
        assert_eq!(problem(&"a".repeat(MAX_LEN)), None);
        assert!(problem("").is_some_and(|p| p.contains("empty")));
        assert!(problem(&"a".repeat(MAX_LEN + 1)).is_some_and(|p| p.contains("256 bytes")));
        assert!(problem("web 1").is_some_and(|p| p.contains("' '")));
        assert!(problem("web\n1").is_some_and(|p| p.contains("'\\n'")));
        assert!(problem("web\u{7f}").is_some());
    }

    /// The default is whatever the kernel says this machine is called.
    #[test]
    fn the_host_name_is_the_kernels() {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(host_name(), kernel.trim());
    }
}
