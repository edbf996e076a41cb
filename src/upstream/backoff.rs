//! Reconnection delays: exponential, capped, with jitter so many gateways that lost
//! the same daemon do not knock on its socket in lockstep.

use std::time::Duration;

use rand::Rng;

use super::settings::ReconnectSettings;

pub(super) struct Backoff {
    initial: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    pub(super) fn new(settings: &ReconnectSettings) -> Self {
        Self {
            initial: settings.initial,
            max: settings.max,
            failures: 0,
        }
    }

    /// The delay before the next attempt: "equal jitter", uniformly between half and
    /// all of `initial * 2^failures` (capped at `max`). Unlike full jitter it never
    /// comes out near zero, so a dead socket is not retried in a tight loop.
    pub(super) fn next_delay(&mut self, rng: &mut impl Rng) -> Duration {
        let ceiling = self
            .initial
            .saturating_mul(1u32 << self.failures.min(20))
            .min(self.max);
        self.failures = self.failures.saturating_add(1);
        let half = ceiling / 2;
        half + rng.random_range(Duration::ZERO..=ceiling - half)
    }

    pub(super) fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_within_jitter_up_to_the_cap_and_reset() {
        let settings = ReconnectSettings {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(30),
            stable: Duration::from_secs(10),
        };
        let mut backoff = Backoff::new(&settings);
        let mut rng = rand::rng();
        let ms = |d: Duration| d.as_millis();
        let ceilings = [
            100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000,
        ];
        for ceiling in ceilings {
            let delay = ms(backoff.next_delay(&mut rng));
            assert!(
                (ceiling / 2..=ceiling).contains(&delay),
                "{delay}ms outside [{}, {ceiling}]ms",
                ceiling / 2
            );
        }
        for _ in 0..100 {
            assert!(backoff.next_delay(&mut rng) <= settings.max);
        }
        backoff.reset();
        assert!(ms(backoff.next_delay(&mut rng)) <= 100);
    }
}
