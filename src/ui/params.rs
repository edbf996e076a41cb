//! The query parameters `/ui` endpoints share, parsed with the messages `eventgate
//! query` gives for the same mistakes, each naming its parameter.

use std::time::SystemTime;

use crate::filter::{Filter, FilterError, RegexBudget};
use crate::query::Query;
use crate::query::pods::{PodName, pod_filter};
use crate::query::time::parse_bound;

use super::UiError;

/// A query string's `name=value` pairs, percent-decoded, in order.
pub(super) struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    pub(super) fn parse(query: &str) -> Params {
        let pairs = query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                (decode(name), decode(value))
            })
            .collect();
        Params { pairs }
    }

    /// The last value of `name`; an empty value counts as absent.
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(n, v)| n == name && !v.trim().is_empty())
            .map(|(_, v)| v.as_str())
    }

    /// Every non-empty value of `name`, in order.
    pub(super) fn all(&self, name: &str) -> Vec<String> {
        self.pairs
            .iter()
            .filter(|(n, v)| n == name && !v.trim().is_empty())
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// `filter` (several are OR'd), `since`, `until`, and `pod` (with `ns`) AND'd as a
    /// pod's filter, as `eventgate query` takes them.
    pub(super) fn query(&self, regex_memory: usize) -> Result<Query, UiError> {
        let mut query = self.query_without_pod(regex_memory)?;
        if let Some(pod) = self.pod() {
            let namespace = (!pod.namespace.is_empty()).then_some(pod.namespace.as_str());
            query.filter = query.filter.and(&pod_filter(&pod.name, namespace));
        }
        Ok(query)
    }

    /// `pod` and `ns`: a pod's name, and its namespace (empty: any).
    pub(super) fn pod(&self) -> Option<PodName> {
        self.get("pod").map(|name| PodName {
            namespace: self.get("ns").unwrap_or("").trim().to_owned(),
            name: name.trim().to_owned(),
        })
    }

    /// [`Params::query`] without the pod, for readers that narrow to it themselves.
    pub(super) fn query_without_pod(&self, regex_memory: usize) -> Result<Query, UiError> {
        let filters = self.all("filter");
        let filter = parse_filters(&filters, regex_memory)?;
        let now = SystemTime::now();
        let bound = |param: &'static str| {
            self.get(param)
                .map(|text| parse_bound(text, now))
                .transpose()
                .map_err(|message| UiError::BadParam { param, message })
        };
        Ok(Query {
            filter,
            since: bound("since")?,
            until: bound("until")?,
            limit: None,
        })
    }

    /// A whole number in `1..=max` (`default` when absent).
    pub(super) fn number(
        &self,
        param: &'static str,
        default: u64,
        max: u64,
    ) -> Result<u64, UiError> {
        let Some(text) = self.get(param) else {
            return Ok(default);
        };
        match text.trim().parse::<u64>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(UiError::BadParam {
                param,
                message: format!("{param} must be a whole number from 1 to {max} (got {text:?})"),
            }),
        }
    }

    /// `after`: a row number (0 when absent).
    pub(super) fn after(&self) -> Result<i64, UiError> {
        let Some(text) = self.get("after") else {
            return Ok(0);
        };
        text.trim()
            .parse::<i64>()
            .ok()
            .filter(|row| *row >= 0)
            .ok_or_else(|| UiError::BadParam {
                param: "after",
                message: format!(
                    "after must be a row number (the `next` of the page before; got {text:?})"
                ),
            })
    }
}

/// The filters as `eventgate query` parses them (same messages), with the regular
/// expressions held to the exchange's `max_regex_memory` as Subscribe holds them.
pub(super) fn parse_filters(filters: &[String], regex_memory: usize) -> Result<Filter, UiError> {
    Filter::parse_all_within(filters, RegexBudget::total(regex_memory)).map_err(|e| {
        let message = match e {
            FilterError::Parse(e) => {
                let which = match filters.len() {
                    1 => String::new(),
                    _ => format!(" (filter {})", e.index() + 1),
                };
                format!("{e}{which}")
            }
            FilterError::OverBudget { index, limit } => {
                crate::exchange::limits::regex_memory(index, limit)
            }
        };
        UiError::BadParam {
            param: "filter",
            message,
        }
    })
}

/// `application/x-www-form-urlencoded` text: `+` is a space, `%XX` a byte; bytes that
/// are not UTF-8 become U+FFFD (a filter holding them is then refused by the parser).
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_percent_decoded_and_the_last_wins() {
        let p = Params::parse("filter=topic%3D%3D%22%2Ftasks%2Fexit%22&a=1+2&a=3&bad=%zz&filter=");
        assert_eq!(p.all("filter"), vec![r#"topic=="/tasks/exit""#]);
        assert_eq!(p.get("a"), Some("3"));
        assert_eq!(p.get("bad"), Some("%zz"));
        assert_eq!(Params::parse("a=1+2").get("a"), Some("1 2"));
        assert_eq!(Params::parse("a=%E2%82").get("a"), Some("\u{fffd}"));
    }

    #[test]
    fn mistakes_name_their_parameter() {
        let error = Params::parse("limit=0")
            .number("limit", 100, 1000)
            .unwrap_err();
        assert!(
            matches!(error, UiError::BadParam { param: "limit", .. }),
            "{error}"
        );
        let error = Params::parse("after=-1").after().unwrap_err();
        assert!(matches!(error, UiError::BadParam { param: "after", .. }));
        let error = Params::parse("since=yesterday").query(1 << 20).unwrap_err();
        assert!(error.to_string().contains("RFC 3339"), "{error}");
        assert!(matches!(error, UiError::BadParam { param: "since", .. }));
        let error = Params::parse("filter=topic%3D%3D")
            .query(1 << 20)
            .unwrap_err();
        assert!(matches!(
            error,
            UiError::BadParam {
                param: "filter",
                ..
            }
        ));
    }
}
