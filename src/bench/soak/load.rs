//! The soak's load: publishers at a steady rate, each event a task exit whose
//! container id is unique, so that every sink can be checked by id.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prost::Message as _;
use prost_types::Any;
use tokio::time::MissedTickBehavior;

use crate::proto::containerd::events::TaskExit;
use crate::proto::containerd::services::events::v1::PublishRequest;

/// What one publisher did.
#[derive(Debug, Default)]
pub(super) struct Published {
    /// Ids whose Publish returned OK.
    pub acked: Vec<String>,
    /// Publish calls that did not return OK, by gRPC code (or "connect",
    /// "timeout"); their events are never published again.
    pub refused: BTreeMap<String, u64>,
}

pub(super) fn exit_request(namespace: &str, id: &str) -> tonic::Request<PublishRequest> {
    let exit = TaskExit {
        container_id: id.to_owned(),
        id: id.to_owned(),
        pid: 1,
        exit_status: 1,
        ..TaskExit::default()
    };
    let mut request = tonic::Request::new(PublishRequest {
        topic: "/tasks/exit".into(),
        event: Some(Any {
            type_url: "containerd.events.TaskExit".into(),
            value: exit.encode_to_vec(),
        }),
    });
    if let Ok(value) = namespace.parse() {
        request.metadata_mut().insert("containerd-namespace", value);
    }
    request
}

/// Publishes `<prefix>-<n>` exits to `socket` at `rate` per second until `stop`,
/// each call given `timeout`; a failed call drops the connection and the event.
pub(super) async fn publisher(
    socket: PathBuf,
    prefix: String,
    rate: f64,
    timeout: Duration,
    stop: Arc<AtomicBool>,
) -> Published {
    let mut done = Published::default();
    let mut client = None;
    let mut n = 0u64;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.1)));
    // After an outage, go on at the same rate rather than catching up in a burst.
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let address = socket.display().to_string();
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        if client.is_none() {
            match crate::client::connect(&address, Duration::from_millis(500)).await {
                Ok(c) => client = Some(c),
                Err(_) => {
                    *done.refused.entry("connect".into()).or_default() += 1;
                    continue;
                }
            }
        }
        let Some(c) = client.as_mut() else { continue };
        let id = format!("{prefix}-{n}");
        n += 1;
        match tokio::time::timeout(timeout, c.publish(exit_request("default", &id))).await {
            Ok(Ok(_)) => done.acked.push(id),
            Ok(Err(status)) => {
                *done
                    .refused
                    .entry(format!("{:?}", status.code()))
                    .or_default() += 1;
                client = None;
            }
            Err(_) => {
                *done.refused.entry("timeout".into()).or_default() += 1;
                client = None;
            }
        }
    }
    done
}
