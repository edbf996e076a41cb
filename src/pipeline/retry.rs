//! The delivery stack for one forwarder, built with tower:
//!
//! ```text
//! Retry(BackoffPolicy)          outermost: decides whether and when to try again
//!   └─ Timeout(retry.timeout)   per attempt: a hung sink becomes a retryable error
//!        └─ Deliver             calls Forwarder::send
//! ```
//!
//! Timeout sits *inside* Retry so that each attempt gets the full timeout; Retry
//! needs a `Clone` inner service, which both of these are. Sleeps use tokio's clock,
//! so tests run the backoff with paused time.
//!
//! The request is a [`Delivery`]: the batch plus a tally that `Deliver` updates at the
//! start of every attempt, so whoever sent it learns how many attempts it took and
//! when they happened (the dead-letter store keeps both).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use rand::Rng;
use tokio::time::Instant;
use tower::retry::{Policy, Retry};
use tower::timeout::Timeout;
use tower::{BoxError, Service, ServiceExt};

pub(crate) use super::attempts::{Attempts, Delivery};
use super::health::Health;
use super::meters::LazyCounter;
use super::settings::RetrySettings;
use crate::forward::{Batch, ForwardError, Forwarder};

/// Sends one batch through the stack: the outcome, and the attempts it took.
pub(crate) async fn deliver(
    stack: &mut DeliveryStack,
    batch: Batch,
) -> (Result<(), BoxError>, Attempts) {
    let delivery = Delivery::new(batch);
    let result = match stack.ready().await {
        Ok(ready) => ready.call(delivery.clone()).await,
        Err(error) => Err(error),
    };
    (result, delivery.attempts())
}

/// Calls the forwarder; the innermost service.
#[derive(Clone)]
pub(crate) struct Deliver {
    forwarder: Arc<dyn Forwarder>,
}

impl Service<Delivery> for Deliver {
    type Response = ();
    type Error = ForwardError;
    type Future = BoxFuture<'static, Result<(), ForwardError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, delivery: Delivery) -> Self::Future {
        delivery.begin_attempt();
        let forwarder = Arc::clone(&self.forwarder);
        Box::pin(async move { forwarder.send(&delivery.batch).await })
    }
}

/// Per-batch retry state. tower clones the policy for every request, so each batch
/// starts from attempt 1 with a fresh budget.
#[derive(Clone)]
pub(crate) struct BackoffPolicy {
    settings: Arc<RetrySettings>,
    forwarder: Arc<str>,
    attempts: u32,
    started: Option<Instant>,
    /// Told about every retryable failure, for readiness.
    health: Arc<Health>,
    /// Shared by the clones: looked up once per stack, not per retry.
    retries: Arc<LazyCounter>,
}

impl BackoffPolicy {
    pub(crate) fn reporting(settings: RetrySettings, forwarder: &str, health: Arc<Health>) -> Self {
        Self {
            settings: Arc::new(settings),
            forwarder: forwarder.into(),
            attempts: 0,
            started: None,
            health,
            retries: Arc::new(LazyCounter::new(
                "eventgate_forwarder_retries_total",
                forwarder,
            )),
        }
    }

    /// The backoff ceiling after `attempt` failed attempts: initial * 2^(attempt-1),
    /// capped at max.
    pub(crate) fn ceiling(settings: &RetrySettings, attempt: u32) -> Duration {
        let doubled = settings
            .initial
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(30));
        doubled.min(settings.max)
    }
}

/// True when the pipeline should try the batch again after this error.
pub(crate) fn is_retryable(error: &BoxError) -> bool {
    match error.downcast_ref::<ForwardError>() {
        Some(error) => error.is_retryable(),
        // tower's Elapsed (the attempt timed out) and anything unexpected.
        None => true,
    }
}

impl Policy<Delivery, (), BoxError> for BackoffPolicy {
    type Future = Pin<Box<dyn Future<Output = ()> + Send>>;

    fn retry(
        &mut self,
        delivery: &mut Delivery,
        result: &mut Result<(), BoxError>,
    ) -> Option<Self::Future> {
        let batch = &delivery.batch;
        let error = result.as_ref().err()?;
        let now = Instant::now();
        let started = *self.started.get_or_insert(now);
        self.attempts += 1;
        let (first, last) = batch.seq_range();
        if !is_retryable(error) {
            return None;
        }
        self.health
            .attempt_failed(self.attempts, crate::errors::chain(&**error));
        let settings = &self.settings;
        let out_of_attempts = settings.attempts != 0 && self.attempts >= settings.attempts;
        let out_of_time = !settings.elapsed.is_zero() && now - started >= settings.elapsed;
        if out_of_attempts || out_of_time {
            return None;
        }
        let ceiling = Self::ceiling(settings, self.attempts);
        // Full jitter: uniform in [0, ceiling], so many gateways retrying against one
        // recovering broker spread out instead of arriving together.
        let delay = rand::rng().random_range(Duration::ZERO..=ceiling);
        self.retries.increment(1);
        tracing::warn!(
            forwarder = %self.forwarder,
            attempt = self.attempts,
            events = batch.len(),
            first_seq = first,
            last_seq = last,
            retry_in = ?delay,
            error = %crate::errors::chain(&**error),
            "delivery failed; will retry"
        );
        Some(Box::pin(tokio::time::sleep(delay)))
    }

    fn clone_request(&mut self, delivery: &Delivery) -> Option<Delivery> {
        Some(delivery.clone())
    }
}

pub(crate) type DeliveryStack = Retry<BackoffPolicy, Timeout<MapErr>>;

/// Converts the forwarder's error into tower's boxed error, keeping it downcastable.
#[derive(Clone)]
pub(crate) struct MapErr(Deliver);

impl Service<Delivery> for MapErr {
    type Response = ();
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<(), BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, delivery: Delivery) -> Self::Future {
        let future = self.0.call(delivery);
        Box::pin(async move { future.await.map_err(Into::into) })
    }
}

/// Builds the stack described at the top of this file.
pub(crate) fn stack(
    forwarder: Arc<dyn Forwarder>,
    name: &str,
    settings: &RetrySettings,
) -> DeliveryStack {
    stack_reporting(forwarder, name, settings, Arc::default())
}

/// The same stack, telling `health` about every failed attempt.
pub(crate) fn stack_reporting(
    forwarder: Arc<dyn Forwarder>,
    name: &str,
    settings: &RetrySettings,
    health: Arc<Health>,
) -> DeliveryStack {
    let deliver = MapErr(Deliver { forwarder });
    Retry::new(
        BackoffPolicy::reporting(settings.clone(), name, health),
        Timeout::new(deliver, settings.timeout),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::event::Source;
    use crate::proto::containerd::types::Envelope;
    use crate::testing::{self, Scripted};

    fn batch() -> Delivery {
        let event = testing::event(7)
            .source(Source::Internal)
            .envelope(Envelope::default())
            .arc();
        Delivery::new(Batch::new(vec![event], 10))
    }

    fn settings(attempts: u32, elapsed: Duration) -> RetrySettings {
        RetrySettings {
            timeout: Duration::from_secs(1),
            initial: Duration::from_millis(100),
            max: Duration::from_millis(400),
            attempts,
            elapsed,
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let s = settings(0, Duration::ZERO);
        let ceilings: Vec<_> = (1..=6)
            .map(|a| BackoffPolicy::ceiling(&s, a).as_millis())
            .collect();
        assert_eq!(ceilings, [100, 200, 400, 400, 400, 400]);
        assert_eq!(BackoffPolicy::ceiling(&s, 1000), Duration::from_millis(400));
    }

    #[tokio::test(start_paused = true)]
    async fn retryable_errors_are_retried_with_jittered_backoff_until_success() {
        let sink = Scripted::new(vec![
            Some(ForwardError::retryable("down")),
            Some(ForwardError::retryable("down")),
            Some(ForwardError::retryable("down")),
        ]);
        let stack = stack(sink.clone(), "t", &settings(0, Duration::ZERO));
        stack.oneshot(batch()).await.unwrap();
        assert_eq!(sink.calls.load(Ordering::SeqCst), 4);
        let times = sink.times.lock().unwrap();
        for (i, pair) in times.windows(2).enumerate() {
            let gap = pair[1] - pair[0];
            let ceiling = BackoffPolicy::ceiling(&settings(0, Duration::ZERO), i as u32 + 1);
            assert!(gap <= ceiling, "retry {i} waited {gap:?} > {ceiling:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_errors_are_not_retried() {
        let sink = Scripted::new(vec![Some(ForwardError::permanent("bad batch"))]);
        let error = stack(sink.clone(), "t", &settings(0, Duration::ZERO))
            .oneshot(batch())
            .await
            .unwrap_err();
        assert!(!is_retryable(&error));
        assert_eq!(error.to_string(), "bad batch");
        assert_eq!(sink.calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_attempt_budget_ends_retries() {
        let failures = (0..10)
            .map(|_| Some(ForwardError::retryable("down")))
            .collect();
        let sink = Scripted::new(failures);
        let mut stack = stack(sink.clone(), "t", &settings(3, Duration::ZERO));
        let (result, attempts) = deliver(&mut stack, batch().batch).await;
        assert!(is_retryable(&result.unwrap_err()));
        assert_eq!(sink.calls.load(Ordering::SeqCst), 3);
        // The tally says what the sink saw: three attempts, spread over the backoff.
        assert_eq!(attempts.count, 3);
        let times = sink.times.lock().unwrap();
        let (first, last) = (attempts.first.unwrap(), attempts.last.unwrap());
        assert_eq!(last.duration_since(first).unwrap(), times[2] - times[0]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_time_success_counts_one_attempt_and_a_new_batch_starts_afresh() {
        let sink = Scripted::new(vec![Some(ForwardError::retryable("down"))]);
        let mut stack = stack(sink.clone(), "t", &settings(0, Duration::ZERO));
        let (result, attempts) = deliver(&mut stack, batch().batch).await;
        result.unwrap();
        assert_eq!(attempts.count, 2);
        let (result, attempts) = deliver(&mut stack, batch().batch).await;
        result.unwrap();
        assert_eq!(attempts.count, 1);
        assert_eq!(attempts.first, attempts.last);
    }

    #[tokio::test(start_paused = true)]
    async fn the_time_budget_ends_retries() {
        let failures = (0..1000)
            .map(|_| Some(ForwardError::retryable("down")))
            .collect();
        let sink = Scripted::new(failures);
        let start = Instant::now();
        stack(sink.clone(), "t", &settings(0, Duration::from_secs(5)))
            .oneshot(batch())
            .await
            .unwrap_err();
        let spent = Instant::now() - start;
        assert!(
            spent >= Duration::from_secs(5) && spent < Duration::from_secs(6),
            "{spent:?}"
        );
        assert!(sink.calls.load(Ordering::SeqCst) >= 12);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_attempt_times_out_and_is_retried() {
        let sink = Scripted::new(Vec::new());
        sink.hold();
        let error = stack(sink.clone(), "t", &settings(2, Duration::ZERO))
            .oneshot(batch())
            .await
            .unwrap_err();
        assert!(error.is::<tower::timeout::error::Elapsed>());
        assert_eq!(sink.calls.load(Ordering::SeqCst), 2);
    }
}
