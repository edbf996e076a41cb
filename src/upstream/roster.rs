//! Which upstreams the last start had. An upstream taken out of the configuration
//! would leave its last `/eventgate/upstream/disconnected` marker (written as the
//! gateway stopped) as a gap that never ends: no connect follows it. So each start
//! compares its upstreams with the last start's, and records every one that is gone
//! with a disconnected marker whose reason is [`REMOVED`]; that marker ends the gap
//! there and starts none. The list lives in `<data_dir>/state/configured-upstreams`
//! (no `.json`, so no upstream's snapshot can have its name).

use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::event::Source;
use crate::exchange::{Exchange, Incoming};
use crate::markers::{self, Disconnected};

/// The reason of the marker that records an upstream's removal.
pub(crate) const REMOVED: &str = "removed from the configuration";

const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Roster {
    version: u32,
    upstreams: Vec<String>,
}

fn path(data_dir: &Path) -> PathBuf {
    data_dir.join("state").join("configured-upstreams")
}

/// Records the removal of every upstream the last start had and `configured` has
/// not, then keeps `configured` for the next start. Failures are logged: the list
/// is only written once the markers are durable, so the next start tries again.
pub(crate) async fn record_removed(exchange: &Exchange, data_dir: &Path, configured: &[String]) {
    let file = path(data_dir);
    let previous = match std::fs::read(&file) {
        Ok(bytes) => match serde_json::from_slice::<Roster>(&bytes) {
            Ok(roster) if roster.version > VERSION => {
                tracing::warn!(path = %file.display(), version = roster.version, "the list of configured upstreams was written by a newer eventgate; left as it is, and removals are not recorded");
                return;
            }
            Ok(roster) => roster.upstreams,
            Err(error) => {
                tracing::warn!(path = %file.display(), %error, "the list of configured upstreams cannot be read; writing it anew");
                Vec::new()
            }
        },
        Err(error) if error.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(error) => {
            tracing::warn!(path = %file.display(), %error, "the list of configured upstreams cannot be read; removals are not recorded");
            return;
        }
    };
    for name in previous.iter().filter(|name| !configured.contains(name)) {
        let now = SystemTime::now();
        let marker = markers::disconnected(&Disconnected {
            upstream: name,
            address: "",
            reason: REMOVED,
            connected_at: now,
            disconnected_at: now,
            events_received: 0,
        });
        let incoming = Incoming::checked(Source::Internal, marker);
        let recorded = async { exchange.append(incoming).await?.acknowledged().await };
        if let Err(error) = recorded.await {
            tracing::warn!(upstream = %name, %error, "cannot record that an upstream was removed; the next start tries again");
            return;
        }
        tracing::info!(upstream = %name, "upstream removed from the configuration; its removal is recorded");
    }
    if previous.as_slice() == configured {
        return;
    }
    let roster = Roster {
        version: VERSION,
        upstreams: configured.to_vec(),
    };
    let written = serde_json::to_vec(&roster)
        .map_err(io::Error::other)
        .and_then(|bytes| {
            if let Some(dir) = file.parent() {
                crate::fsmode::create_dir_all(dir)?;
            }
            crate::spool::write_atomic(&file, &bytes)
        });
    if let Err(error) = written {
        tracing::warn!(path = %file.display(), %error, "cannot write the list of configured upstreams");
    }
}

#[cfg(test)]
#[path = "roster_tests.rs"]
mod tests;
