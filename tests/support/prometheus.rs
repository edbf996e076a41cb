//! A strict reader of Prometheus's text exposition format (0.0.4), for the subset a
//! scrape must satisfy: HELP/TYPE lines, metric and label names, quoted and escaped
//! label values, float values, each family's TYPE before its samples and only once,
//! histogram buckets with `le` ending at +Inf and agreeing with `_count`.

use std::collections::{BTreeMap, HashMap};

/// Samples by `name{label="value",...}` (labels sorted), and each family's type.
#[derive(Debug, Default)]
pub struct Scrape {
    pub samples: BTreeMap<String, f64>,
    pub types: HashMap<String, String>,
    pub help: HashMap<String, String>,
}

impl Scrape {
    /// The value of `name` with exactly these labels.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples.get(&key(name, labels)).copied()
    }

    /// Every sample of metric `name` (any labels) as (labels, value).
    pub fn series(&self, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        self.samples
            .iter()
            .filter_map(|(k, v)| {
                let (n, labels) = split_key(k);
                (n == name).then_some((labels, *v))
            })
            .collect()
    }
}

pub fn key(name: &str, labels: &[(&str, &str)]) -> String {
    let mut sorted: Vec<_> = labels.to_vec();
    sorted.sort();
    let inner: Vec<String> = sorted.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{name}{{{}}}", inner.join(","))
}

fn split_key(key: &str) -> (String, BTreeMap<String, String>) {
    let (name, rest) = key.split_once('{').expect("key has labels part");
    let mut labels = BTreeMap::new();
    let rest = rest.trim_end_matches('}');
    if !rest.is_empty() {
        for pair in rest.split("\",") {
            let (k, v) = pair.split_once('=').expect("label pair");
            labels.insert(k.to_owned(), v.trim_matches('"').to_owned());
        }
    }
    (name.to_owned(), labels)
}

fn valid_name(name: &str, colon: bool) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':'))
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':'))
}

/// The family a sample belongs to (histogram samples carry suffixes).
fn family<'a>(name: &'a str, types: &HashMap<String, String>) -> &'a str {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix)
            && types
                .get(base)
                .is_some_and(|t| t == "histogram" || t == "summary")
        {
            return base;
        }
    }
    name
}

/// Parses `text`, panicking with the line number on anything malformed.
pub fn parse(text: &str) -> Scrape {
    let mut scrape = Scrape::default();
    let mut seen_samples: HashMap<String, usize> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let at = || format!("line {}: {line:?}", i + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let kind = parts.next().unwrap_or_default();
            let name = parts.next().unwrap_or_default();
            let value = parts.next().unwrap_or_default();
            assert!(valid_name(name, true), "bad metric name at {}", at());
            match kind {
                "TYPE" => {
                    assert!(
                        ["counter", "gauge", "histogram", "summary", "untyped"].contains(&value),
                        "bad type at {}",
                        at()
                    );
                    assert!(
                        scrape.types.insert(name.into(), value.into()).is_none(),
                        "second TYPE for {name} at {}",
                        at()
                    );
                    assert!(
                        !seen_samples.contains_key(name),
                        "TYPE after samples at {}",
                        at()
                    );
                }
                "HELP" => {
                    scrape.help.insert(name.into(), value.into());
                }
                _ => {}
            }
            continue;
        }
        assert!(
            !line.starts_with('#'),
            "comment without a space at {}",
            at()
        );
        let (series, value) = match line.find('{') {
            Some(_) => {
                let close = line
                    .rfind('}')
                    .unwrap_or_else(|| panic!("unclosed labels at {}", at()));
                (&line[..=close], line[close + 1..].trim())
            }
            None => {
                let (name, value) = line
                    .split_once(' ')
                    .unwrap_or_else(|| panic!("no value at {}", at()));
                (name, value.trim())
            }
        };
        let (name, labels) = parse_series(series).unwrap_or_else(|e| panic!("{e} at {}", at()));
        let value = value.split(' ').next().unwrap_or_default();
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("bad value at {}", at())),
        };
        *seen_samples
            .entry(family(&name, &scrape.types).to_owned())
            .or_default() += 1;
        let pairs: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let k = key(&name, &pairs);
        assert!(
            scrape.samples.insert(k.clone(), value).is_none(),
            "duplicate sample {k} at {}",
            at()
        );
    }
    check_histograms(&scrape);
    scrape
}

fn parse_series(series: &str) -> Result<(String, Vec<(String, String)>), String> {
    let Some((name, rest)) = series.split_once('{') else {
        return valid_name(series, true)
            .then(|| (series.to_owned(), Vec::new()))
            .ok_or_else(|| "bad metric name".into());
    };
    if !valid_name(name, true) {
        return Err("bad metric name".into());
    }
    let mut labels = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        let label: String =
            std::iter::from_fn(|| chars.next_if(|c| *c != '=' && *c != '}')).collect();
        if label.is_empty() && chars.peek() == Some(&'}') {
            break;
        }
        if !valid_name(&label, false) || chars.next() != Some('=') || chars.next() != Some('"') {
            return Err(format!("bad label {label:?}"));
        }
        let mut value = String::new();
        loop {
            match chars.next() {
                Some('\\') => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(c @ ('\\' | '"')) => value.push(c),
                    _ => return Err("bad escape".into()),
                },
                Some('"') => break,
                Some(c) => value.push(c),
                None => return Err("unterminated label value".into()),
            }
        }
        labels.push((label, value));
        match chars.next() {
            Some(',') => continue,
            Some('}') => break,
            _ => return Err("expected , or }".into()),
        }
    }
    Ok((name.to_owned(), labels))
}

/// Every histogram series has ascending `le` buckets ending at +Inf whose counts never
/// fall, and the +Inf bucket equals `_count`.
fn check_histograms(scrape: &Scrape) {
    for (name, kind) in &scrape.types {
        if kind != "histogram" {
            continue;
        }
        let mut by_series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for (mut labels, value) in scrape.series(&format!("{name}_bucket")) {
            let le = labels.remove("le").expect("bucket without le");
            let le: f64 = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().expect("le")
            };
            let pairs: Vec<(&str, &str)> = labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            by_series
                .entry(key(&format!("{name}_count"), &pairs))
                .or_default()
                .push((le, value));
        }
        assert!(!by_series.is_empty(), "histogram {name} has no buckets");
        for (count_key, mut buckets) in by_series {
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            assert!(
                buckets.windows(2).all(|w| w[0].1 <= w[1].1),
                "{name} buckets fall"
            );
            let last = buckets.last().expect("buckets");
            assert_eq!(last.0, f64::INFINITY, "{name} has no +Inf bucket");
            assert_eq!(
                Some(&last.1),
                scrape.samples.get(&count_key),
                "{count_key} differs from +Inf"
            );
        }
    }
}
