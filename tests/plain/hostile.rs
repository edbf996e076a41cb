//! Clients that try to stall the exchange for everyone else, against the real
//! binary: filters whose regexes need too much memory are refused. Under load, the
//! costliest filters the limits allow: tests/bench/hostile.rs.

use crate::support;

use eventgate::proto::containerd::services::events::v1::SubscribeRequest;
use support::filters::{MAX_FILTERS, heavy_filter};
use support::*;

/// A nine-byte pattern that compiles to about 10 MB is refused before it takes the
/// memory: INVALID_ARGUMENT naming `max_regex_memory`, counted. The regex crate's
/// own limit (10 MiB per expression) would have let it in.
#[tokio::test]
async fn filters_whose_regexes_need_too_much_memory_are_refused() {
    let mut gw = Gateway::start(&[]);
    let mut client = gw.client().await;
    let huge = r#"topic~="\\pL{200}""#;
    let status = client
        .subscribe(SubscribeRequest {
            filters: vec!["topic".into(), huge.into()],
        })
        .await
        .expect_err("too costly");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("filter 2")
            && status
                .message()
                .contains("8388608 bytes exchange.limits.max_regex_memory"),
        "{}",
        status.message()
    );
    let scraped = scrape(&mut gw);
    assert_eq!(
        scraped.get(
            "eventgate_limit_rejections_total",
            &[("limit", "max_regex_memory")]
        ),
        Some(1.0)
    );
    // The costliest filters the test below uses fit, all 64 of them.
    let heavy: Vec<String> = (0..MAX_FILTERS).map(heavy_filter).collect();
    client
        .subscribe(SubscribeRequest { filters: heavy })
        .await
        .expect("64 heavy filters fit the default budget");
}
