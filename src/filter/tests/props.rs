//! Arbitrary input never panics the parser: every string is either a filter or a
//! precise error that points inside it. Bounded case counts keep `cargo test` fast.

use proptest::prelude::*;

use super::{Filter, fields};

/// Mostly the filter language's own characters, so cases get past the first token.
fn filterish() -> impl Strategy<Value = String> {
    proptest::string::string_regex(r#"[a-z_.=!~"/|\\ ,*0-9\[\]()^$+?{}\t]{0,48}"#).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn filter_like_strings_parse_or_point_inside_the_input(input in filterish()) {
        check(input.as_bytes());
    }

    #[test]
    fn any_string_parses_or_fails_cleanly(input in any::<String>()) {
        check(input.as_bytes());
    }

    #[test]
    fn any_bytes_parse_or_fail_cleanly(input in proptest::collection::vec(any::<u8>(), 0..64)) {
        check(&input);
    }

    #[test]
    fn lists_of_filters_name_the_one_that_failed(
        inputs in proptest::collection::vec(filterish(), 1..4),
    ) {
        match Filter::parse_all(&inputs) {
            Ok(_) => {}
            Err(error) => {
                prop_assert!(error.index() < inputs.len());
                prop_assert!(Filter::parse(&inputs[error.index()]).is_err());
                // Syntax is checked in every string before any regex is compiled (as
                // containerd does), so an earlier string may hold a bad regex but no
                // syntax error: followed by one, the follower's is the one reported.
                for earlier in &inputs[..error.index()] {
                    let followed = Filter::parse_all(&[earlier.as_str(), "="]);
                    prop_assert_eq!(followed.map(drop).map_err(|e| e.index()), Err(1), "{:?}", earlier);
                }
            }
        }
    }
}

fn check(input: &[u8]) {
    match Filter::parse_all_bytes([input]) {
        Ok(filter) => {
            // A parsed filter also evaluates without panicking, present fields or not.
            let object = fields(&[
                ("topic", "/tasks/exit"),
                ("namespace", "default"),
                ("event.container_id", "abc"),
            ]);
            let _ = filter.matches(&object);
            let _ = filter.matches(&fields(&[]));
        }
        Err(error) => {
            assert!(error.position() <= input.len(), "{error:?}");
            assert!(!error.message().is_empty());
            // The rendered message names the input (containerd's shape).
            assert!(error.to_string().starts_with("filters: parse error: ["));
        }
    }
}
