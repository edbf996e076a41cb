//! Keeping secret values out of what eventgate shows (logs, errors, `check-config`),
//! by the key they belong to.
//!
//! Replacing every occurrence of a secret's text is not enough and too much: a
//! one-character password `p` would turn `property` into `***ro***erty`, and a
//! secret that appears in a form other than the configured one would still show.
//! Instead, values are masked where they are assigned to a secret key: `key = value`,
//! `key=value`, `key: value`, `"key" = "value"`, `"key":"value"` (any quoting), and
//! librdkafka's `value "..." for configuration property "key"`. Known secret values
//! are also masked where they stand alone as a token, never inside a longer word.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::{Captures, Regex};

/// What a secret value is shown as.
pub(crate) const MASK: &str = "***";

/// Keys whose values must never be shown: passwords, secrets, tokens, credentials,
/// inline PEM (`ssl.key.pem`; certificates too, rather than guess which are public)
/// and librdkafka's OAUTHBEARER configuration string.
pub(crate) fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key.contains("password")
        || key.contains("secret")
        || key.contains("token")
        || key.contains("credential")
        || key.ends_with(".pem")
        || key == "sasl.oauthbearer.config"
}

/// `key = value`, the key and value bare or quoted. An opening quote without its
/// closing one (a broken line) takes the rest of the line.
static ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?x)
        (?P<key> "[^"\n]*" | '[^'\n]*' | [A-Za-z0-9_.\-]+ )
        (?P<sep> [\ \t]* = [\ \t]* )
        (?P<value> "(?:[^"\\\n]|\\.)*"? | '[^'\n]*'? | [^\s,;}\])]+ )
        "#,
    )
    .expect("constant pattern is valid")
});

/// `"key": "value"` (JSON). A bare value after a colon is prose, as in
/// `property "x": message`, and is left alone.
static JSON_MEMBER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?x)
        (?P<key> "[^"\n]*" | [A-Za-z0-9_.\-]+ )
        (?P<sep> [\ \t]* : [\ \t]* )
        (?P<value> "(?:[^"\\\n]|\\.)*"? )
        "#,
    )
    .expect("constant pattern is valid")
});

/// librdkafka's configuration errors, which quote the value first.
static PROPERTY_ERROR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?P<before>value )(?P<value>"[^"\n]*")(?P<after> for (?:configuration )?property "(?P<key>[^"\n]+)")"#)
        .expect("constant pattern is valid")
});

fn unquoted(text: &str) -> &str {
    let text = text.trim_start_matches(['"', '\'']);
    text.trim_end_matches(['"', '\''])
}

/// The value shown in place of `value`, keeping its quotes.
fn masked(value: &str) -> String {
    match value.chars().next() {
        Some(quote @ ('"' | '\'')) => format!("{quote}{MASK}{quote}"),
        _ => MASK.to_owned(),
    }
}

/// Replaces the value of every secret key in an option table, at any depth
/// (`properties = { "sasl.password" = ... }`), with "***": what a forwarder kind shows
/// of its options unless it knows better (see `forward::Kind::redact`).
pub(crate) fn table(options: &mut toml::Table) {
    for (key, value) in options.iter_mut() {
        match value {
            toml::Value::Table(inner) => table(inner),
            _ if is_secret(key) => *value = toml::Value::String("***".into()),
            _ => {}
        }
    }
}

/// `text` with the value of every assignment to a secret key masked.
pub(crate) fn by_key(text: &str) -> Cow<'_, str> {
    let text = PROPERTY_ERROR.replace_all(text, |c: &Captures| {
        if is_secret(&c["key"]) {
            format!("{}{}{}", &c["before"], masked(&c["value"]), &c["after"])
        } else {
            c[0].to_owned()
        }
    });
    let mut text = text;
    for pattern in [&*ASSIGNMENT, &*JSON_MEMBER] {
        if let Cow::Owned(replaced) = pattern.replace_all(&text, |c: &Captures| {
            if is_secret(unquoted(&c["key"])) && unquoted(&c["value"]) != MASK {
                format!("{}{}{}", &c["key"], &c["sep"], masked(&c["value"]))
            } else {
                c[0].to_owned()
            }
        }) {
            text = Cow::Owned(replaced);
        }
    }
    text
}

/// The values assigned to secret keys in `text` (a configuration file, possibly
/// broken), so that they can be masked wherever else they appear.
pub(crate) fn assigned_secrets(text: &str) -> Vec<String> {
    let mut found: Vec<String> = ASSIGNMENT
        .captures_iter(text)
        .chain(JSON_MEMBER.captures_iter(text))
        .filter(|c| is_secret(unquoted(&c["key"])))
        .map(|c| unquoted(&c["value"]).to_owned())
        .filter(|v| !v.is_empty() && v != MASK)
        .collect();
    found.sort();
    found.dedup();
    found
}

/// `text` with each of `secrets` masked where it stands as a token of its own: not
/// preceded or followed by a letter, digit or `_`. A short secret then cannot mangle
/// the words that happen to contain it.
pub(crate) fn values(text: &str, secrets: &[String]) -> String {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let mut out = text.to_owned();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        let mut result = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(at) = rest.find(secret.as_str()) {
            result.push_str(&rest[..at]);
            // What precedes it in the whole text, not just in what is left.
            let before = result.chars().next_back();
            let after = rest[at + secret.len()..].chars().next();
            if word(before) || word(after) {
                result.push_str(secret);
            } else {
                result.push_str(MASK);
            }
            rest = &rest[at + secret.len()..];
        }
        result.push_str(rest);
        out = result;
    }
    out
}

/// Both: assignments to secret keys, then the known values where they stand alone.
pub(crate) fn text(text: &str, secrets: &[String]) -> String {
    values(&by_key(text), secrets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_masked_by_their_key_in_any_quoting() {
        for (line, shown) in [
            ("  sasl.password = hunter2", "  sasl.password = ***"),
            ("sasl.password=hunter2, next", "sasl.password=***, next"),
            (
                r#""sasl.password" = "hun ter2""#,
                r#""sasl.password" = "***""#,
            ),
            (
                r#"{"ssl.key.pem":"-----BEGIN"}"#,
                r#"{"ssl.key.pem":"***"}"#,
            ),
            (
                r#"properties = { "sasl.password" = "hunter2", "sasl.username" = "me" }"#,
                r#"properties = { "sasl.password" = "***", "sasl.username" = "me" }"#,
            ),
            // A broken line: the unterminated value runs to its end.
            (
                r#""sasl.password" = "hunter2"#,
                r#""sasl.password" = "***""#,
            ),
            (
                r#"Invalid value "hunter2" for configuration property "sasl.password""#,
                r#"Invalid value "***" for configuration property "sasl.password""#,
            ),
            ("sasl.username = me", "sasl.username = me"),
            // Prose, not an assignment.
            (
                r#"property "sasl.password": Invalid value"#,
                r#"property "sasl.password": Invalid value"#,
            ),
        ] {
            assert_eq!(by_key(line), shown, "{line}");
        }
    }

    /// The old masking replaced every occurrence of the secret's text.
    #[test]
    fn a_one_character_secret_does_not_mangle_words() {
        let secrets = vec!["p".to_owned()];
        let line = "property sasl.password = p set; p";
        assert_eq!(
            text(line, &secrets),
            "property sasl.password = *** set; ***"
        );
        assert_eq!(
            text("Configuration property \"p\" is p", &secrets),
            "Configuration property \"***\" is ***"
        );
        assert_eq!(text("[thrd:app]: pp p", &secrets), "[thrd:app]: pp ***");
    }

    #[test]
    fn secrets_assigned_in_a_file_are_found_even_when_it_is_broken() {
        let file = "[x]\n\"sasl.password\" = \"hunter2\nname = \"a\"\ntoken=abc\n";
        assert_eq!(assigned_secrets(file), vec!["abc", "hunter2"]);
    }
}
