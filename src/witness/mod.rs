//! `eventgate witness`: a transparency log witness speaking C2SP tlog-witness
//! (<https://c2sp.org/tlog-witness>) and cosigning with C2SP tlog-cosignature
//! `cosignature/v1` (Ed25519), for eventgate's signed tree heads and any other
//! log's checkpoints.
//!
//! A witness is configured with the logs it follows, each an origin and its
//! verifier key(s). A log submits each new signed checkpoint with a consistency
//! proof from the last one the witness cosigned; the witness checks the signature
//! and the proof, records the new tree head, and returns its cosignature. It never
//! cosigns a tree head smaller than, or not extending, the one it recorded, so a log
//! cannot show one history to some and another to others and get both cosigned by
//! the same witness.
//!
//! - `settings`: the TOML file (`deploy/witness.example.toml`);
//! - `protocol`: the request and answers as bytes, and the judgement (pure);
//! - `state`: the recorded heads and refused forks, in SQLite (compare-and-set);
//! - `cosign`: one request from bytes to cosignature;
//! - `server`: the HTTP/1 listener;
//! - `client`: the log's side, submitting a checkpoint to a witness;
//! - `metric_table`: the metrics it records.

pub(crate) mod client;
mod cosign;
pub(crate) mod metric_table;
pub(crate) mod protocol;
mod server;
pub(crate) mod settings;
mod state;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::note::KeyFileError;
use crate::tlog::cosignature::Cosigner;
pub(crate) use cosign::Witness;
pub(crate) use settings::{WitnessConfigError, WitnessSettings};
use state::State;
pub(crate) use state::StateError;

/// Everything `witness serve` and `witness check-config` can fail with.
#[derive(Debug, Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] WitnessConfigError),
    #[error("invalid witness config {origin}: `key`")]
    Key {
        origin: String,
        #[source]
        source: KeyFileError,
    },
    #[error(transparent)]
    State(#[from] StateError),
    #[error("cannot listen on {addr} for the witness (`listen`, or `witness serve --listen`)")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// What `serve` would use, all checked: the key read, the logs' keys parsed, the
/// state file's schema looked at (read-only; a missing file passes).
pub(crate) fn check(
    settings: &WitnessSettings,
    origin: &str,
) -> Result<(Cosigner, Vec<settings::Log>), ServeError> {
    let logs = settings.validate(origin)?;
    let cosigner = crate::note::load_cosigner(&settings.key).map_err(|source| ServeError::Key {
        origin: origin.to_owned(),
        source,
    })?;
    State::check(&settings.state_path())?;
    Ok((cosigner, logs))
}

/// Runs a witness until `stop` resolves, then lets requests in flight finish.
/// `origin` says where the settings came from, for errors.
pub(crate) async fn serve(
    settings: &WitnessSettings,
    origin: &str,
    stop: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    // Before anything is counted: what is recorded from here on is kept.
    crate::admin::metrics::install();
    let (cosigner, logs) = check(settings, origin)?;
    let state = State::open(&settings.state_path())?;
    for log in &logs {
        match state.head(&log.origin)? {
            Some(head) => tracing::info!(
                origin = log.origin,
                size = head.size,
                cosigned_at = head.cosigned_at,
                keys = log.keys.len(),
                "witness: following a log"
            ),
            None => tracing::info!(
                origin = log.origin,
                keys = log.keys.len(),
                "witness: following a log, nothing cosigned for it yet"
            ),
        }
    }
    let listener = TcpListener::bind(settings.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: settings.listen,
            source,
        })?;
    let addr = listener.local_addr().unwrap_or(settings.listen);
    tracing::info!(
        %addr,
        witness = cosigner.witness_key().to_text(),
        logs = logs.len(),
        state = %state.path().display(),
        "witness serving POST /add-checkpoint"
    );
    let witness = Arc::new(Witness::new(cosigner, logs, state));
    let cancel = CancellationToken::new();
    let server = tokio::spawn(server::serve(listener, witness, cancel.clone()));
    stop.await;
    cancel.cancel();
    if let Err(error) = server.await {
        tracing::error!(%error, "witness: the server task died");
    }
    tracing::info!("witness stopped");
    Ok(())
}
