//! The `/ui` readers of `bench ui`: clients looping GETs of the history page's heaviest
//! answers (the whole range's timeline, pages of 1000 events, a CSV export) on the
//! gateway's admin listener, each answer counted by what it was and timed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

/// What one GET came back as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    /// 503: the two reads allowed at once were running for the whole queue wait.
    Busy,
    /// 503: the read ran past its deadline and was interrupted.
    Deadline,
    /// Any other status, or no answer at all.
    Other,
}

/// Tells the two 503s apart by the message `/ui` gives each (src/ui/reads.rs).
pub(crate) fn classify(status: u16, body: &str) -> Outcome {
    match status {
        200 => Outcome::Ok,
        503 if body.contains("reads of the audit store are running") => Outcome::Busy,
        503 if body.contains("took longer than") => Outcome::Deadline,
        _ => Outcome::Other,
    }
}

/// The readers' answers over one phase.
#[derive(Clone, Debug, Default)]
pub(crate) struct Answers {
    pub ok: u64,
    pub busy: u64,
    pub deadline: u64,
    pub other: u64,
    /// Bytes of the 200 answers.
    pub bytes: u64,
    /// Request to last byte, of every answer, in microseconds.
    pub latencies_us: Vec<u64>,
    /// From the readers' start to their stop.
    pub elapsed: Duration,
    /// The first answer of the `Other` kind, to say what went wrong.
    pub first_other: Option<String>,
}

impl Answers {
    pub(crate) fn total(&self) -> u64 {
        self.ok + self.busy + self.deadline + self.other
    }

    pub(crate) fn per_sec(&self) -> f64 {
        self.total() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The `q` quantile of the latencies (nearest rank), if any answer came.
    pub(crate) fn quantile(&self, q: f64) -> Option<Duration> {
        let mut sorted = self.latencies_us.clone();
        sorted.sort_unstable();
        let last = sorted.len().checked_sub(1)?;
        let rank = ((q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize).saturating_sub(1);
        sorted
            .get(rank.min(last))
            .map(|us| Duration::from_micros(*us))
    }

    fn add(&mut self, outcome: Outcome, latency: Duration, bytes: usize, what: String) {
        match outcome {
            Outcome::Ok => {
                self.ok += 1;
                self.bytes += bytes as u64;
            }
            Outcome::Busy => self.busy += 1,
            Outcome::Deadline => self.deadline += 1,
            Outcome::Other => {
                self.other += 1;
                self.first_other.get_or_insert(what);
            }
        }
        self.latencies_us.push(latency.as_micros() as u64);
    }

    fn merge(&mut self, other: Answers) {
        self.ok += other.ok;
        self.busy += other.busy;
        self.deadline += other.deadline;
        self.other += other.other;
        self.bytes += other.bytes;
        self.latencies_us.extend(other.latencies_us);
        if self.first_other.is_none() {
            self.first_other = other.first_other;
        }
    }
}

/// The `next` of a `/ui/api/events` page (`..."next":ROW}`), `None` at the last page.
pub(crate) fn next_page(body: &str) -> Option<i64> {
    let (_, rest) = body.rsplit_once("\"next\":")?;
    rest.trim_end().trim_end_matches('}').trim().parse().ok()
}

/// Readers running until [`Readers::stop`].
pub(crate) struct Readers {
    stop: Arc<AtomicBool>,
    tasks: JoinSet<Answers>,
    started: Instant,
}

impl Readers {
    /// Starts `count` readers of the admin listener at `admin`; reader i starts at the
    /// i-th of the three requests, so they are mixed from the first moment.
    pub(crate) fn start(admin: &str, count: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = JoinSet::new();
        for reader in 0..count {
            let (admin, stop) = (admin.to_owned(), Arc::clone(&stop));
            tasks.spawn(read_loop(admin, reader, stop));
        }
        Self {
            stop,
            tasks,
            started: Instant::now(),
        }
    }

    /// Stops the readers (each finishes the GET it is in, and has made at least one)
    /// and adds up their answers.
    pub(crate) async fn stop(mut self) -> Answers {
        self.stop.store(true, Ordering::Relaxed);
        let elapsed = self.started.elapsed();
        let mut all = Answers::default();
        while let Some(joined) = self.tasks.join_next().await {
            if let Ok(answers) = joined {
                all.merge(answers);
            }
        }
        all.elapsed = elapsed;
        all
    }
}

async fn read_loop(admin: String, reader: usize, stop: Arc<AtomicBool>) -> Answers {
    let mut answers = Answers::default();
    let mut after: Option<i64> = None;
    let mut turn = reader;
    // Each reader asks at least once, however short the phase.
    loop {
        let path = match turn % 3 {
            0 => "/ui/api/timeline.svg?group=namespace".to_owned(),
            1 => match after {
                Some(row) => format!("/ui/api/events?limit=1000&after={row}"),
                None => "/ui/api/events?limit=1000".to_owned(),
            },
            _ => "/ui/api/export?format=csv".to_owned(),
        };
        turn += 1;
        let started = Instant::now();
        let got = crate::admin::client::get(&admin, &path, Duration::from_secs(30)).await;
        let latency = started.elapsed();
        match got {
            Ok((status, body)) => {
                let outcome = classify(status, &body);
                if outcome == Outcome::Ok && path.starts_with("/ui/api/events") {
                    after = next_page(&body);
                }
                let what = format!("{path}: HTTP {status}: {}", head(&body));
                answers.add(outcome, latency, body.len(), what);
            }
            Err(error) => answers.add(Outcome::Other, latency, 0, format!("{path}: {error}")),
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
    }
    answers
}

fn head(body: &str) -> &str {
    let end = body
        .char_indices()
        .nth(200)
        .map_or(body.len(), |(at, _)| at);
    &body[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_503s_are_told_apart_by_their_messages() {
        assert_eq!(classify(200, ""), Outcome::Ok);
        let busy = "2 reads of the audit store are running; try again in a moment";
        assert_eq!(classify(503, busy), Outcome::Busy);
        let late = "the read of the audit store took longer than 5s; narrow the time range";
        assert_eq!(classify(503, late), Outcome::Deadline);
        assert_eq!(classify(503, "no audit store"), Outcome::Other);
        assert_eq!(classify(500, busy), Outcome::Other);
    }

    #[test]
    fn pages_are_followed_until_next_is_null() {
        assert_eq!(next_page("{\"events\":[],\"next\":41}"), Some(41));
        assert_eq!(next_page("{\"events\":[],\"next\":null}"), None);
        assert_eq!(next_page("not json"), None);
    }

    #[test]
    fn answers_add_up_and_give_nearest_rank_quantiles() {
        let mut a = Answers::default();
        for ms in 1..=10 {
            a.add(Outcome::Ok, Duration::from_millis(ms), 5, String::new());
        }
        let mut b = Answers::default();
        b.add(Outcome::Busy, Duration::from_millis(500), 0, String::new());
        b.add(Outcome::Other, Duration::from_millis(1), 0, "first".into());
        a.merge(b);
        a.elapsed = Duration::from_secs(2);
        assert_eq!((a.ok, a.busy, a.deadline, a.other), (10, 1, 0, 1));
        assert_eq!(a.bytes, 50);
        assert_eq!(a.per_sec(), 6.0);
        assert_eq!(a.quantile(0.5), Some(Duration::from_millis(5)));
        assert_eq!(a.quantile(1.0), Some(Duration::from_millis(500)));
        assert_eq!(a.first_other.as_deref(), Some("first"));
        assert_eq!(Answers::default().quantile(0.5), None);
    }
}
