//! Errors as people read them in logs and gap markers: one line with every cause.

use std::error::Error;

/// "kafka did not accept 5 of 5 messages: Message production error: ..." rather than
/// the outermost message alone.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    with_sources(error.to_string(), error.source())
}

/// `head` followed by each cause in `source`'s chain that it does not already say
/// (tonic, hyper and librdkafka often repeat their cause in their own message).
pub(crate) fn with_sources(mut head: String, mut source: Option<&(dyn Error + 'static)>) -> String {
    while let Some(cause) = source {
        let text = cause.to_string();
        if !head.contains(&text) {
            head.push_str(": ");
            head.push_str(&text);
        }
        source = cause.source();
    }
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn causes_follow_once() {
        let error = Outer(std::io::Error::other("disk on fire"));
        assert_eq!(chain(&error), "outer: disk on fire");
        let repeated = with_sources("outer: disk on fire".into(), Some(&error.0));
        assert_eq!(repeated, "outer: disk on fire");
    }
}
