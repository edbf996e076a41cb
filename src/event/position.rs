//! Where a taken-in event was read in Kafka, for a store that keeps the group's
//! offsets in the same transaction as the rows (the `postgres` forwarder).
//!
//! It travels with the event in memory only: the spool does not record it, so an
//! event read back from the spool after a restart has none, and is stored by its id
//! alone (a repeat adds nothing); its partition is read again from the offset the
//! store kept.

use std::sync::Arc;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaPosition {
    /// The `postgres` forwarder whose database keeps this group's offsets; no other
    /// forwarder moves them.
    pub store: Arc<str>,
    pub group: Arc<str>,
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    /// The partition's claim under which the message was read
    /// (`kafka_offsets.epoch`): a batch read under an older claim was read by a
    /// member that has since lost the partition, and is not written.
    pub epoch: i64,
}
