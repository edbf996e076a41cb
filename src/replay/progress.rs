//! How a replay shows how far it is: a progress bar on a terminal, a log line every
//! few seconds otherwise (a bar's redraws would fill a log file), and always a
//! summary at the end.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::time::Instant;

/// `--progress`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ProgressMode {
    /// A bar when stderr is a terminal, a log line every 5 s otherwise.
    #[default]
    Auto,
    /// The bar, even when stderr is not a terminal.
    Always,
    /// Neither: only the summary at the end.
    Never,
}

/// How often progress is logged without a bar.
const LOG_EVERY: Duration = Duration::from_secs(5);

pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    log: bool,
    total: u64,
    /// Events done before this run (a resumed replay).
    earlier: u64,
    done: u64,
    started: Instant,
    last_log: Instant,
}

impl Progress {
    /// `done` of `total` events were done by earlier runs.
    pub(crate) fn new(mode: ProgressMode, total: u64, done: u64) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let target = match (mode, terminal) {
            (ProgressMode::Always, false) => Some(ProgressDrawTarget::term_like(Box::new(
                console::Term::stderr(),
            ))),
            (ProgressMode::Always, true) | (ProgressMode::Auto, true) => {
                Some(ProgressDrawTarget::stderr())
            }
            _ => None,
        };
        let bar = target.map(|target| {
            let style = ProgressStyle::with_template(
                "{wide_bar} {human_pos}/{human_len} events  {rate}  ETA {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .with_key(
                "rate",
                |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{:.0}/s", state.per_sec());
                },
            );
            let bar = ProgressBar::with_draw_target(Some(total), target)
                .with_style(style)
                .with_position(done);
            // The rate and ETA are this run's, not skewed by what earlier runs did.
            bar.reset_eta();
            bar.enable_steady_tick(Duration::from_millis(500));
            bar
        });
        let now = Instant::now();
        Self {
            log: bar.is_none() && mode == ProgressMode::Auto,
            bar,
            total,
            earlier: done,
            done,
            started: now,
            last_log: now,
        }
    }

    /// A line for the person running the replay, above the bar if there is one.
    pub(crate) fn note(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    pub(crate) fn advance(&mut self, events: u64) {
        self.done += events;
        if let Some(bar) = &self.bar {
            bar.set_position(self.done);
        }
        let now = Instant::now();
        if self.log && now.duration_since(self.last_log) >= LOG_EVERY {
            self.last_log = now;
            let rate = self.rate();
            let eta = match rate > 0.0 {
                true => {
                    let left = self.total.saturating_sub(self.done) as f64;
                    humantime::format_duration(Duration::from_secs((left / rate).ceil() as u64))
                        .to_string()
                }
                false => "unknown".to_owned(),
            };
            tracing::info!(
                done = self.done,
                total = self.total,
                rate = format!("{rate:.1}/s"),
                eta,
                "replaying"
            );
        }
    }

    /// Events per second in this run.
    pub(crate) fn rate(&self) -> f64 {
        let secs = self.elapsed().as_secs_f64();
        match secs > 0.0 {
            true => (self.done - self.earlier) as f64 / secs,
            false => 0.0,
        }
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Removes the bar (the summary or the error says the rest).
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
