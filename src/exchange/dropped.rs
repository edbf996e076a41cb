//! What the exchange records when a full spool under `drop_oldest` discarded records a
//! forwarder had not delivered: one `/eventgate/spool/dropped` event per forwarder, in
//! namespace `eventgate`, so the audit trail says whose record has which hole.

use super::{Exchange, Incoming};
use crate::event::Source;
use crate::spool::Dropped;

impl Exchange {
    /// Writes a `/eventgate/spool/dropped` marker per forwarder that lost records to
    /// a full spool, so the audit trail says where that forwarder's record has a hole.
    pub(super) fn record_dropped(&self, dropped: Vec<Dropped>) {
        for lost in dropped {
            tracing::error!(
                forwarder = %lost.forwarder,
                first_seq = lost.first_seq,
                last_seq = lost.last_seq,
                count = lost.count,
                "the spool was full: undelivered records discarded"
            );
            let marker = crate::markers::spool_dropped(&lost);
            let exchange = self.clone();
            // A task, not a recursive call: the marker goes through append (and the
            // spool) like any event, after the event that made room.
            tokio::spawn(async move {
                let incoming = Incoming::checked(Source::Internal, marker);
                let accepted = async { exchange.append(incoming).await?.acknowledged().await };
                if let Err(error) = accepted.await {
                    tracing::error!(%error, "could not record a spool drop marker");
                }
            });
        }
    }
}
