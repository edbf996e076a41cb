//! The removal of an upstream, recorded once, at the first start without it.

use futures::StreamExt;
use prost::Message;

use super::*;
use crate::exchange::{ExchangeParts, ExchangeSettings};
use crate::filter::Filter;
use crate::proto::eventgate::events::v1::UpstreamDisconnected;

async fn start(data_dir: &Path, configured: &[&str]) -> Vec<UpstreamDisconnected> {
    let exchange = Exchange::new(ExchangeSettings::default(), ExchangeParts::default());
    let mut sub = exchange
        .subscribe(Filter::parse_all::<&str>(&[]).unwrap())
        .unwrap();
    let configured: Vec<String> = configured.iter().map(|s| s.to_string()).collect();
    record_removed(&exchange, data_dir, &configured).await;
    exchange.close();
    let mut markers = Vec::new();
    while let Some(Ok(event)) = sub.next().await {
        assert_eq!(event.envelope.topic, markers::DISCONNECTED_TOPIC);
        let any = event.envelope.event.as_ref().unwrap();
        markers.push(UpstreamDisconnected::decode(any.value.as_slice()).unwrap());
    }
    markers
}

#[tokio::test]
async fn each_upstream_gone_since_the_last_start_gets_one_removal_marker() {
    let dir = tempfile::tempdir().unwrap();
    assert!(
        start(dir.path(), &["a", "b"]).await.is_empty(),
        "a first start"
    );
    assert!(start(dir.path(), &["a", "b"]).await.is_empty());
    let removed = start(dir.path(), &["b", "c"]).await;
    assert_eq!(removed.len(), 1);
    assert_eq!(
        (removed[0].upstream.as_str(), removed[0].reason.as_str()),
        ("a", REMOVED)
    );
    assert!(
        start(dir.path(), &["b", "c"]).await.is_empty(),
        "recorded once"
    );
    let removed: Vec<String> = start(dir.path(), &[])
        .await
        .into_iter()
        .map(|m| m.upstream)
        .collect();
    assert_eq!(removed, ["b", "c"]);
}

#[tokio::test]
async fn a_list_a_newer_eventgate_wrote_is_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let file = path(dir.path());
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let newer = br#"{"version": 2, "upstreams": ["a"], "more": true}"#;
    std::fs::write(&file, newer).unwrap();
    assert!(start(dir.path(), &[]).await.is_empty());
    assert_eq!(std::fs::read(&file).unwrap(), newer);
}
