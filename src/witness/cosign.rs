//! What a witness does with one `add-checkpoint` request: parse it, find the log by
//! its origin, check the log's signature, judge it against the recorded head and
//! record it in one transaction, and cosign it. Blocking (SQLite): the server runs
//! it on a blocking thread.

use std::collections::BTreeMap;

use thiserror::Error;

use super::protocol::{self, AddCheckpoint, Refusal};
use super::settings::Log;
use super::state::{Advanced, Fork, Head, State, StateError};
use crate::note::{NoteError, Verifier};
use crate::tlog::cosignature::Cosigner;

/// Why a request got no cosignature.
#[derive(Debug, Error)]
pub(crate) enum AddError {
    /// The request was judged and refused: the answer says why.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The state could not be read or written: nothing was cosigned (500).
    #[error(transparent)]
    State(#[from] StateError),
}

/// A witness: its key, the logs it cosigns for, and its state.
#[derive(Debug)]
pub(crate) struct Witness {
    cosigner: Cosigner,
    logs: BTreeMap<String, Vec<Verifier>>,
    state: State,
}

impl Witness {
    pub(crate) fn new(cosigner: Cosigner, logs: Vec<Log>, state: State) -> Witness {
        let logs = logs.into_iter().map(|log| (log.origin, log.keys)).collect();
        Witness {
            cosigner,
            logs,
            state,
        }
    }

    pub(crate) fn state(&self) -> &State {
        &self.state
    }

    /// The configured origins.
    pub(crate) fn origins(&self) -> impl Iterator<Item = &str> {
        self.logs.keys().map(String::as_str)
    }

    /// Handles one request body at `now` (Unix seconds, the cosignature's time):
    /// the cosignature line(s), each ending in a newline, or why not.
    pub(crate) fn add_checkpoint(&self, body: &[u8], now: u64) -> Result<String, AddError> {
        let request =
            protocol::parse_request(body).map_err(|e| Refusal::BadRequest(e.to_string()))?;
        let origin = request.head.origin.as_str();
        let Some(keys) = self.logs.get(origin) else {
            return Err(Refusal::UnknownOrigin(origin.to_owned()).into());
        };
        if let Err(error) = crate::note::open(&request.note, keys) {
            return Err(match error {
                NoteError::Malformed(problem) => {
                    Refusal::BadRequest(format!("the checkpoint is not a signed note: {problem}"))
                }
                other => Refusal::Unauthorized(format!(
                    "the checkpoint is not signed by a key configured for {origin:?}: {other}"
                )),
            }
            .into());
        }
        let new = Head {
            size: request.head.size,
            root: request.head.root,
            note: request.note.clone(),
            cosigned_at: now,
        };
        let advanced = self.state.advance(origin, &new, |recorded| {
            protocol::judge(recorded.map(|head| (head.size, &head.root)), &request)
        })?;
        match advanced {
            Advanced::Recorded => {
                metrics::counter!("eventgate_witness_cosignatures_total", "origin" => origin.to_owned())
                    .increment(1);
                metrics::gauge!("eventgate_witness_tree_size", "origin" => origin.to_owned())
                    .set(request.head.size as f64);
                tracing::info!(
                    origin,
                    old = request.old,
                    size = request.head.size,
                    "cosigned a checkpoint"
                );
                Ok(self.cosigner.cosign(&request.text, now))
            }
            Advanced::Refused { refusal, recorded } => {
                if refusal.is_fork()
                    && let Some(recorded) = &recorded
                {
                    self.keep_fork(&request, recorded, &refusal, now);
                }
                Err(refusal.into())
            }
        }
    }

    /// A refused checkpoint the log signed that contradicts the recorded head: the
    /// log showed two histories. Logged and kept; failing to keep it changes nothing
    /// in the answer.
    fn keep_fork(&self, request: &AddCheckpoint, recorded: &Head, refusal: &Refusal, now: u64) {
        let origin = request.head.origin.as_str();
        metrics::counter!("eventgate_witness_forks_total", "origin" => origin.to_owned())
            .increment(1);
        let reason = refusal.to_string();
        let fork = Fork {
            origin,
            size: request.head.size,
            root: &request.head.root,
            note: &request.note,
            old: request.old,
            recorded,
            reason: &reason,
            received_at: now,
        };
        let kept = match self.state.keep_fork(&fork) {
            Ok(kept) => kept,
            Err(error) => {
                tracing::error!(origin, error = %crate::errors::chain(&error), "cannot keep a fork");
                false
            }
        };
        tracing::warn!(
            origin,
            size = request.head.size,
            recorded_size = recorded.size,
            kept,
            reason,
            checkpoint = request.note,
            "refused a checkpoint signed by the log that contradicts the one cosigned: the log \
             shows two histories"
        );
    }
}

#[cfg(test)]
#[path = "cosign_tests.rs"]
mod tests;
