//! `--rate N`: a token bucket. Tokens accrue continuously at N per second up to a
//! tenth of a second's worth (at least one), and a batch takes one per event. Waiting
//! is computed from the bucket's clock, not slept per event, so time spent sending
//! counts towards the rate instead of adding to it, and the long-run rate is N
//! exactly. The small bucket keeps the flow even: batches are capped at its size, so
//! events go out every ~100 ms rather than in one-second bursts.

use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug)]
pub(crate) struct TokenBucket {
    per_sec: f64,
    capacity: usize,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket for `per_sec` events per second (at least 1).
    pub(crate) fn new(per_sec: u32) -> Self {
        let per_sec = per_sec.max(1);
        let capacity = per_sec.div_ceil(10).max(1) as usize;
        Self {
            per_sec: f64::from(per_sec),
            capacity,
            tokens: capacity as f64,
            last: Instant::now(),
        }
    }

    /// The most events one batch may carry.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Waits until `events` tokens are there and takes them. `events` above the
    /// capacity is treated as the capacity (callers cap their batches).
    pub(crate) async fn take(&mut self, events: usize) {
        let wanted = events.min(self.capacity) as f64;
        loop {
            let now = Instant::now();
            let earned = now.duration_since(self.last).as_secs_f64() * self.per_sec;
            self.tokens = (self.tokens + earned).min(self.capacity as f64);
            self.last = now;
            if self.tokens >= wanted {
                self.tokens -= wanted;
                return;
            }
            let missing = wanted - self.tokens;
            tokio::time::sleep(Duration::from_secs_f64(missing / self.per_sec)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_rate_holds_over_every_window_and_in_the_long_run() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(50);
        assert_eq!(bucket.capacity(), 5);
        let mut times = Vec::new();
        for _ in 0..200 {
            bucket.take(1).await;
            times.push(Instant::now() - start);
        }
        // The first bucketful goes at once, then 50 a second: 195 more take 3.9 s.
        let total = *times.last().unwrap();
        assert!(
            (total.as_secs_f64() - 3.9).abs() < 0.01,
            "took {total:?} for 200 events at 50/s"
        );
        // No one-second window holds more than a second's worth plus the bucket.
        for (i, &t) in times.iter().enumerate() {
            let within = times[i..]
                .iter()
                .take_while(|&&u| u < t + Duration::from_secs(1))
                .count();
            assert!(within <= 55, "{within} events in the second from {t:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn time_spent_elsewhere_counts_towards_the_rate() {
        let mut bucket = TokenBucket::new(10);
        assert_eq!(bucket.capacity(), 1);
        bucket.take(1).await;
        // Sending took as long as one token: the next one is due at once.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let before = Instant::now();
        bucket.take(1).await;
        assert_eq!(Instant::now(), before);
        // Batches wait for as many tokens as they carry.
        let mut bucket = TokenBucket::new(100);
        bucket.take(10).await;
        let before = Instant::now();
        bucket.take(10).await;
        let waited = Instant::now() - before;
        assert!(
            (waited.as_secs_f64() - 0.1).abs() < 0.001,
            "waited {waited:?}"
        );
    }
}
