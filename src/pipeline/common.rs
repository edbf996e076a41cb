//! What every part of one forwarder's worker (`intake`, `delivery`, `cursor`) is
//! given when it is built: each keeps the pieces it needs.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::backlog::Backlog;
use super::health::Health;

/// The forwarder's name, health, backlog and shutdown tokens.
pub(super) struct Common {
    pub name: Arc<str>,
    pub health: Arc<Health>,
    pub backlog: Option<Arc<dyn Backlog>>,
    /// Cancelled when shutdown begins: stop reading the backlog (it keeps).
    pub closing: CancellationToken,
    /// Cancelled when the shutdown deadline passes: abandon what is left.
    pub stop: CancellationToken,
}
