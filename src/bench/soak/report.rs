//! The soak's figures: a markdown table, the resource samples as CSV, and the
//! verdict.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use super::check::SinkCheck;
use super::faults::Fault;
use super::gateway::{Exits, Sample};

#[derive(Debug)]
pub(crate) struct Report {
    /// The faulted part of the run.
    pub(super) duration: Duration,
    pub(super) seed: u64,
    pub(super) rate: f64,
    pub(super) acked: usize,
    pub(super) refused: BTreeMap<String, u64>,
    pub(super) upstream_published: usize,
    pub(super) upstream_stored: usize,
    pub(super) faults: BTreeMap<Fault, usize>,
    pub(super) sqlite: SinkCheck,
    pub(super) file: SinkCheck,
    pub(super) kafka: SinkCheck,
    pub(super) chain_ok: bool,
    pub(super) chain: String,
    pub(super) exits: Exits,
    pub(super) lives: usize,
    /// How the gateway ended at the clean stop.
    pub(super) last_exit: Option<String>,
    /// From the end of the faults until every sink held every acknowledged event.
    /// Per sink: SQLite, file, Kafka.
    pub(super) drained: [Option<Duration>; 3],
    pub(super) samples: Vec<Sample>,
    pub(super) notes: Vec<String>,
}

/// Growth allowed between two windows before it counts as growth: a fifth, plus a
/// floor for figures that are small or move in steps (threads, allocator arenas).
const RSS_SLACK_KIB: u64 = 16 * 1024;
const FDS_SLACK: u64 = 16;
const THREADS_SLACK: u64 = 4;

/// A figure's name, how to read it from a sample, and its slack.
type Figure = (&'static str, fn(&Sample) -> u64, u64);

/// Samples of one window, compared on their maxima.
fn max_of(samples: &[&Sample], f: impl Fn(&Sample) -> u64) -> u64 {
    samples.iter().map(|s| f(s)).max().unwrap_or(0)
}

/// Whether the last third's maximum is above the second third's by more than the
/// slack, for RSS, fds and threads; `None` with too few samples to say.
fn grew(samples: &[&Sample]) -> Option<Vec<String>> {
    if samples.len() < 6 {
        return None;
    }
    let third = samples.len() / 3;
    let second = &samples[third..2 * third];
    let last = &samples[2 * third..];
    let mut grown = Vec::new();
    let checks: [Figure; 3] = [
        ("RSS KiB", |s| s.rss_kib, RSS_SLACK_KIB),
        ("open fds", |s| s.fds, FDS_SLACK),
        ("threads", |s| s.threads, THREADS_SLACK),
    ];
    for (name, f, slack) in checks {
        let (a, b) = (max_of(second, f), max_of(last, f));
        if b > a + a / 5 + slack {
            grown.push(format!("{name}: {a} -> {b}"));
        }
    }
    Some(grown)
}

/// A process is compared with itself once it lived this long: long enough for a
/// leak of a few MiB a second to show above the slack, short enough that the
/// short CI soak, where a fault restarts the gateway every ten seconds or so, has
/// some.
pub(super) const LONG_LIFE_S: f64 = 20.0;

impl Report {
    /// Processes that lived at least [`LONG_LIFE_S`], sampled enough to compare.
    fn long_lives(&self) -> BTreeMap<usize, Vec<&Sample>> {
        let mut lives: BTreeMap<usize, Vec<&Sample>> = BTreeMap::new();
        for s in &self.samples {
            lives.entry(s.life).or_default().push(s);
        }
        lives.retain(|_, v| v.len() >= 6 && v.last().is_some_and(|s| s.age >= LONG_LIFE_S));
        lives
    }

    /// Whether the growth checks had samples enough to say anything: the whole run
    /// always needs them; a run without them fails rather than passing unchecked.
    fn checked(&self) -> (bool, usize) {
        (self.samples.len() >= 6, self.long_lives().len())
    }

    /// Resource growth found: over the whole run (last third against second third
    /// of all samples), and within each process that lived [`LONG_LIFE_S`] or more.
    pub(crate) fn growth(&self) -> Vec<String> {
        let all: Vec<&Sample> = self.samples.iter().collect();
        let mut found: Vec<String> = grew(&all)
            .unwrap_or_default()
            .into_iter()
            .map(|g| format!("over the run: {g}"))
            .collect();
        for (life, samples) in self.long_lives() {
            for g in grew(&samples).unwrap_or_default() {
                found.push(format!("within process {life}: {g}"));
            }
        }
        found
    }

    pub(crate) fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        if self.acked == 0 {
            failures.push("no event was acknowledged".into());
        }
        if !self.checked().0 {
            failures.push(format!(
                "only {} resource samples: too few to check growth",
                self.samples.len()
            ));
        }
        for (name, sink) in [
            ("SQLite", &self.sqlite),
            ("file", &self.file),
            ("Kafka", &self.kafka),
        ] {
            if sink.lost > 0 {
                failures.push(format!(
                    "{} acknowledged event(s) missing from {name}, e.g. {:?}",
                    sink.lost, sink.lost_examples
                ));
            }
        }
        if self.sqlite.duplicated > 0 {
            failures.push(format!(
                "{} event(s) more than once in SQLite",
                self.sqlite.duplicated
            ));
        }
        if !self.chain_ok {
            failures.push(format!("the audit chain did not verify: {}", self.chain));
        }
        if !self.exits.unexpected.is_empty() {
            failures.push(format!(
                "the gateway exited unexpectedly: {:?}",
                self.exits.unexpected
            ));
        }
        failures.extend(
            self.growth()
                .into_iter()
                .map(|g| format!("resources grew {g}")),
        );
        failures
    }

    pub(crate) fn csv(&self) -> String {
        let mut out =
            String::from("at_s,process,age_s,rss_kib,fds,threads,spool_bytes,store_bytes\n");
        for s in &self.samples {
            let _ = writeln!(
                out,
                "{:.1},{},{:.1},{},{},{},{},{}",
                s.at, s.life, s.age, s.rss_kib, s.fds, s.threads, s.spool_bytes, s.store_bytes
            );
        }
        out
    }

    /// The figures and verdict as one JSON object (`soak.json`), for tools.
    pub(crate) fn json(&self) -> serde_json::Value {
        let sink = |s: &SinkCheck| {
            serde_json::json!({
                "lost": s.lost,
                "duplicated": s.duplicated,
                "unacknowledged_stored": s.unacknowledged,
                "lost_examples": s.lost_examples,
            })
        };
        let (run_checked, lives_checked) = self.checked();
        let failures = self.failures();
        serde_json::json!({
            "duration_s": self.duration.as_secs_f64(),
            "seed": self.seed,
            "rate": self.rate,
            "acknowledged": self.acked,
            "refused": self.refused,
            "upstream": { "published": self.upstream_published, "stored": self.upstream_stored },
            "faults": self.faults.iter().map(|(f, n)| (f.label().to_owned(), *n)).collect::<BTreeMap<_, _>>(),
            "processes": self.lives,
            "exits": {
                "killed": self.exits.killed,
                "status_1_disk": self.exits.status_1,
                "unexplained": self.exits.unexpected,
                "failed_starts": self.exits.failed_starts,
            },
            "sinks": {
                "sqlite": sink(&self.sqlite),
                "file": sink(&self.file),
                "kafka": sink(&self.kafka),
            },
            "chain_intact": self.chain_ok,
            "drained_s": self.drained.map(|d| d.map(|d| d.as_secs_f64())),
            "clean_stop": self.last_exit,
            "samples": self.samples.len(),
            "growth": {
                "run_checked": run_checked,
                "processes_checked": lives_checked,
                "found": self.growth(),
            },
            "notes": self.notes,
            "failures": failures,
            "verdict": if failures.is_empty() { "PASS" } else { "FAIL" },
        })
    }

    pub(crate) fn markdown(&self) -> String {
        let mut out = String::new();
        let minutes = self.duration.as_secs_f64() / 60.0;
        let _ = writeln!(
            out,
            "Soak of {minutes:.1} min (seed {}, {} Publish/s offered), a fault every few seconds.\n",
            self.seed, self.rate
        );
        let _ = writeln!(out, "| figure | value |\n|---|---:|");
        let mut row = |k: &str, v: String| {
            let _ = writeln!(out, "| {k} | {v} |");
        };
        row("events acknowledged (Publish OK)", self.acked.to_string());
        let refused: u64 = self.refused.values().sum();
        let by_code = self
            .refused
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        row("Publish not acknowledged", format!("{refused} ({by_code})"));
        row(
            "upstream events published to containerd / in SQLite",
            format!("{} / {}", self.upstream_published, self.upstream_stored),
        );
        for fault in Fault::ALL {
            row(
                &format!("faults: {}", fault.label()),
                self.faults.get(&fault).copied().unwrap_or(0).to_string(),
            );
        }
        row("gateway processes (starts)", self.lives.to_string());
        row(
            "gateway exits: SIGKILLed / status 1 in a disk fault / unexplained / failed starts",
            format!(
                "{} / {} / {} / {}",
                self.exits.killed,
                self.exits.status_1,
                self.exits.unexpected.len(),
                self.exits.failed_starts
            ),
        );
        for (name, sink) in [
            ("SQLite (exactly once)", &self.sqlite),
            ("file (at least once)", &self.file),
            ("Kafka (at least once)", &self.kafka),
        ] {
            row(
                &format!("{name}: lost / duplicated / unacknowledged but stored"),
                format!(
                    "{} / {} / {}",
                    sink.lost, sink.duplicated, sink.unacknowledged
                ),
            );
        }
        row(
            "audit chain (`audit verify`)",
            if self.chain_ok {
                "intact".into()
            } else {
                "FAILED".into()
            },
        );
        let drained = |d: Option<Duration>| {
            d.map_or(
                format!("not within {} s", super::DRAIN_TIMEOUT.as_secs()),
                |d| format!("{:.1} s", d.as_secs_f64()),
            )
        };
        row(
            "every acknowledged event in SQLite / file / Kafka, after the last fault",
            format!(
                "{} / {} / {}",
                drained(self.drained[0]),
                drained(self.drained[1]),
                drained(self.drained[2])
            ),
        );
        row(
            "clean stop at the end",
            self.last_exit
                .clone()
                .unwrap_or_else(|| "no gateway running".into()),
        );
        let figures = |f: fn(&Sample) -> u64| {
            let mut v: Vec<u64> = self.samples.iter().map(f).collect();
            v.sort_unstable();
            match (v.first(), v.get(v.len() / 2), v.last()) {
                (Some(a), Some(b), Some(c)) => format!("{a} / {b} / {c}"),
                _ => "no samples".into(),
            }
        };
        row("RSS MiB min / median / max", {
            let mut v: Vec<u64> = self.samples.iter().map(|s| s.rss_kib / 1024).collect();
            v.sort_unstable();
            match (v.first(), v.get(v.len() / 2), v.last()) {
                (Some(a), Some(b), Some(c)) => format!("{a} / {b} / {c}"),
                _ => "no samples".into(),
            }
        });
        row("open fds min / median / max", figures(|s| s.fds));
        row("threads min / median / max", figures(|s| s.threads));
        let growth = self.growth();
        let (_, lives_checked) = self.checked();
        row(
            "resources bounded (the run, and each process that lived 20 s or more)",
            if growth.is_empty() {
                format!(
                    "yes ({} samples; {lives_checked} processes compared with themselves)",
                    self.samples.len()
                )
            } else {
                format!("NO: {}", growth.join("; "))
            },
        );
        let last = self.samples.last();
        row(
            "spool / store MiB at the last sample",
            last.map_or("no samples".into(), |s| {
                format!("{} / {}", s.spool_bytes >> 20, s.store_bytes >> 20)
            }),
        );
        let _ = writeln!(
            out,
            "\nRSS over time (max per tenth of the run, sampled every second):\n"
        );
        let _ = writeln!(
            out,
            "| minutes | RSS MiB | fds | threads | processes |\n|---|---:|---:|---:|---:|"
        );
        let span = self.samples.last().map_or(0.0, |s| s.at).max(1.0);
        for tenth in 0..10 {
            let (from, to) = (span * tenth as f64 / 10.0, span * (tenth + 1) as f64 / 10.0);
            let w: Vec<&Sample> = self
                .samples
                .iter()
                .filter(|s| s.at >= from && (s.at < to || tenth == 9))
                .collect();
            if w.is_empty() {
                continue;
            }
            let mut lives: Vec<usize> = w.iter().map(|s| s.life).collect();
            lives.dedup();
            let _ = writeln!(
                out,
                "| {:.1}-{:.1} | {} | {} | {} | {} |",
                from / 60.0,
                to / 60.0,
                max_of(&w, |s| s.rss_kib) / 1024,
                max_of(&w, |s| s.fds),
                max_of(&w, |s| s.threads),
                lives.len()
            );
        }
        for note in &self.notes {
            let _ = writeln!(out, "\nNote: {note}");
        }
        let failures = self.failures();
        let _ = writeln!(
            out,
            "\nVerdict: {}",
            if failures.is_empty() {
                "PASS".into()
            } else {
                format!("FAIL: {}", failures.join("; "))
            }
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(seconds: u64, lives: u64, rss_kib: impl Fn(f64) -> u64) -> Vec<Sample> {
        (0..seconds)
            .map(|at| {
                let life = (at * lives / seconds) as usize;
                let life_start = (life as u64 * seconds / lives) as f64;
                Sample {
                    at: at as f64,
                    life,
                    age: at as f64 - life_start,
                    rss_kib: rss_kib(at as f64),
                    fds: 40,
                    threads: 12,
                    spool_bytes: at << 20,
                    store_bytes: at << 20,
                }
            })
            .collect()
    }

    fn report(samples: Vec<Sample>) -> Report {
        Report {
            duration: Duration::from_secs(40),
            seed: 1,
            rate: 100.0,
            acked: 10,
            refused: BTreeMap::new(),
            upstream_published: 0,
            upstream_stored: 0,
            faults: BTreeMap::new(),
            sqlite: SinkCheck::default(),
            file: SinkCheck::default(),
            kafka: SinkCheck::default(),
            chain_ok: true,
            chain: String::new(),
            exits: Exits::default(),
            lives: 1,
            last_exit: None,
            drained: [None; 3],
            samples,
            notes: Vec::new(),
        }
    }

    /// A 40-second run sampled every second: flat use passes; a leak of 5 MiB a
    /// second fails it, over the run and within the one process that lived long
    /// enough; too few samples fail rather than pass unchecked. (The slack, a fifth
    /// plus 16 MiB, is what makes a short run catch only a fast leak.)
    #[test]
    fn the_growth_check_of_a_short_run_can_fail() {
        let flat = report(samples(40, 1, |_| 60 << 10));
        assert_eq!(flat.growth(), Vec::<String>::new());
        assert!(flat.failures().is_empty(), "{:?}", flat.failures());
        assert_eq!(flat.checked(), (true, 1));

        let leak = report(samples(40, 1, |at| (60 << 10) + (at as u64) * (5 << 10)));
        let found = leak.growth();
        assert!(
            found.iter().any(|g| g.starts_with("over the run: RSS")),
            "{found:?}"
        );
        assert!(
            found.iter().any(|g| g.starts_with("within process 0: RSS")),
            "{found:?}"
        );

        // A restart every 21 s hides a per-process leak from the run's check, but
        // not from a process that lived 20 s.
        let two = report(samples(42, 2, |at| {
            (60 << 10) + ((at as u64) % 21) * (8 << 10)
        }));
        assert!(
            two.growth().iter().any(|g| g.starts_with("within process")),
            "{:?}",
            two.growth()
        );

        let short = report(samples(4, 1, |_| 60 << 10));
        assert!(
            short
                .failures()
                .iter()
                .any(|f| f.contains("too few to check growth")),
            "{:?}",
            short.failures()
        );
        assert_eq!(
            report(samples(40, 1, |_| 60 << 10)).json()["growth"]["run_checked"],
            true
        );
    }
}
