//! containerd's identifier and topic rules (`identifiers.Validate`, the exchange's
//! `validateTopic`), with the same error texts, so a client sees the same message from
//! eventgate as from the daemon.

use thiserror::Error;

/// containerd's limit on identifier length (namespaces and topic components).
pub(crate) const MAX_IDENTIFIER_LEN: usize = 76;

/// The pattern containerd prints in its error message.
const IDENTIFIER_PATTERN: &str = "^[A-Za-z0-9]+(?:[._-](?:[A-Za-z0-9]+))*$";

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum IdentifierError {
    #[error("identifier must not be empty")]
    Empty,
    #[error("identifier {0:?} greater than maximum length ({MAX_IDENTIFIER_LEN} characters)")]
    TooLong(String),
    #[error("identifier {0:?} must match {IDENTIFIER_PATTERN}")]
    Invalid(String),
}

/// Validates a namespace name or a topic component: ASCII alphanumeric runs joined by
/// single `.`, `_` or `-`, at most 76 characters.
pub(crate) fn validate(s: &str) -> Result<(), IdentifierError> {
    if s.is_empty() {
        return Err(IdentifierError::Empty);
    }
    if s.len() > MAX_IDENTIFIER_LEN {
        return Err(IdentifierError::TooLong(s.to_owned()));
    }
    // Hand-rolled rather than a regex: this runs on every Publish and Forward.
    let mut after_separator = true;
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => after_separator = false,
            b'.' | b'_' | b'-' if !after_separator => after_separator = true,
            _ => return Err(IdentifierError::Invalid(s.to_owned())),
        }
    }
    if after_separator {
        return Err(IdentifierError::Invalid(s.to_owned()));
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TopicError {
    #[error("must not be empty")]
    Empty,
    #[error("must start with '/'")]
    NoLeadingSlash,
    #[error("must have at least one component")]
    NoComponents,
    #[error("failed validation on component {component:?}: {source}")]
    Component {
        component: String,
        source: IdentifierError,
    },
}

/// Validates a topic: `/`-separated identifiers with a leading `/`.
pub(crate) fn validate_topic(topic: &str) -> Result<(), TopicError> {
    if topic.is_empty() {
        return Err(TopicError::Empty);
    }
    let Some(rest) = topic.strip_prefix('/') else {
        return Err(TopicError::NoLeadingSlash);
    };
    if rest.is_empty() {
        return Err(TopicError::NoComponents);
    }
    for component in rest.split('/') {
        validate(component).map_err(|source| TopicError::Component {
            component: component.to_owned(),
            source,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        for ok in ["default", "k8s.io", "a", "A-b_c.d", "x1-2", &"a".repeat(76)] {
            assert_eq!(validate(ok), Ok(()), "{ok}");
        }
        assert_eq!(validate(""), Err(IdentifierError::Empty));
        let long = "a".repeat(77);
        assert_eq!(validate(&long), Err(IdentifierError::TooLong(long.clone())));
        for bad in ["-a", "a-", "a..b", "a b", "a/b", "ü", ".", "a_-b", "a?"] {
            assert_eq!(
                validate(bad),
                Err(IdentifierError::Invalid(bad.into())),
                "{bad}"
            );
        }
        assert_eq!(
            IdentifierError::Invalid("a b".into()).to_string(),
            r#"identifier "a b" must match ^[A-Za-z0-9]+(?:[._-](?:[A-Za-z0-9]+))*$"#
        );
        assert_eq!(
            IdentifierError::TooLong("x".into()).to_string(),
            r#"identifier "x" greater than maximum length (76 characters)"#
        );
    }

    #[test]
    fn topics() {
        for ok in ["/tasks/exit", "/a", "/images/create", "/x/y/z/w"] {
            assert_eq!(validate_topic(ok), Ok(()), "{ok}");
        }
        assert_eq!(validate_topic(""), Err(TopicError::Empty));
        assert_eq!(
            validate_topic("tasks/exit"),
            Err(TopicError::NoLeadingSlash)
        );
        assert_eq!(validate_topic("/"), Err(TopicError::NoComponents));
        for (bad, component) in [("//x", ""), ("/x/", ""), ("/tasks/?", "?"), ("/a b", "a b")] {
            match validate_topic(bad) {
                Err(TopicError::Component { component: c, .. }) => assert_eq!(c, component),
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert_eq!(
            validate_topic("/tasks/?").unwrap_err().to_string(),
            r#"failed validation on component "?": identifier "?" must match ^[A-Za-z0-9]+(?:[._-](?:[A-Za-z0-9]+))*$"#
        );
    }
}
