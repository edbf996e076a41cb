//! The parts `Gateway::start_with` opens and starts around the exchange, one step
//! each: the data directory and its lock, the admin listener, the spool, the
//! pipeline, what feeds the exchange (upstreams, sources), the checkpoint signers, and
//! the admin endpoint over all of them.

use std::sync::Arc;
use std::time::SystemTime;

use super::{Gateway, GatewayError};
use crate::admin::settings::ReloadToken;
use crate::admin::{Admin, Bound, Observed};
use crate::config::{Config, ConfigError};
use crate::connections::OpenConnections;
use crate::deadletter::Store;
use crate::exchange::Exchange;
use crate::forward::Kinds;
use crate::lock::DataDirLock;
use crate::pipeline::{BacklogStart, DeadLetters, Pipeline};
use crate::reload::Reloader;
use crate::signer::Signers;
use crate::source::Sources;
use crate::spool::{Recovery, Spool};
use crate::upstream::Upstreams;

/// Creates the data directory and takes its lock, before anything in it is opened or
/// written.
pub(super) fn lock_data_dir(config: &Config) -> Result<DataDirLock, GatewayError> {
    crate::fsmode::create_dir_all(&config.data_dir).map_err(|source| GatewayError::DataDir {
        path: config.data_dir.clone(),
        source,
    })?;
    Ok(DataDirLock::acquire(&config.data_dir)?)
}

/// The admin listener, bound and not serving yet, and the token `POST /reload` will
/// ask for.
pub(super) struct AdminBound {
    listener: Option<Bound>,
    reload_token: Option<ReloadToken>,
}

/// Binds the admin endpoint (installing the metrics recorder) and reads its reload
/// token.
pub(super) async fn bind_admin(config: &Config) -> Result<AdminBound, GatewayError> {
    let listener = match config.admin.addr() {
        Ok(Some(addr)) => Some(Bound::bind(addr).await?),
        Ok(None) => None,
        Err((key, problem)) => return Err(ConfigError::Invalid { key, problem }.into()),
    };
    let reload_token = config
        .admin
        .reload_token()
        .map_err(|(key, problem)| ConfigError::Invalid { key, problem })?;
    Ok(AdminBound {
        listener,
        reload_token,
    })
}

/// Refuses to start on an upstream's state snapshot a newer eventgate wrote, as on its
/// spool or stores: reading it would take a new baseline and lose the gap it covers.
pub(crate) fn refuse_newer_state(config: &Config) -> Result<(), GatewayError> {
    for upstream in &config.upstreams {
        crate::reconcile::snapshot::refuse_newer(&config.data_dir, &upstream.effective_name())?;
    }
    Ok(())
}

/// Opens the spool off the runtime: recovery reads every segment.
pub(super) async fn open_spool(config: &Config) -> Result<(Spool, Recovery), GatewayError> {
    let dir = config.spool_dir();
    let settings = config.spool.clone();
    // The upstreams' state snapshots hold spool cursors too (see reconcile::snapshot).
    let names: Vec<String> = config
        .forwarders
        .iter()
        .map(|f| f.name.clone())
        .chain(
            config
                .upstreams
                .iter()
                .map(|u| crate::reconcile::snapshot::cursor_name(&u.effective_name())),
        )
        .collect();
    let opened = tokio::task::spawn_blocking(move || {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        Spool::open(&dir, &settings, &names)
    })
    .await
    .map_err(GatewayError::Task)?;
    Ok(opened?)
}

/// Opens the dead-letter store, builds every forwarder and starts the workers (each
/// resumes from its cursor in `spool`), and the reloader that swaps them later.
pub(super) async fn start_pipeline(
    config: &Config,
    kinds: &Kinds,
    spool: &Spool,
) -> Result<(Arc<Pipeline>, Arc<Reloader>), GatewayError> {
    let backlog = BacklogStart {
        backlog: Arc::new(spool.clone()),
        start_seq: spool.next_seq(),
    };
    let dead_letters = open_dead_letters(config).await?;
    let pipeline = Arc::new(
        Pipeline::start(
            &config.forwarders,
            kinds,
            &config.data_dir,
            Some(dead_letters.clone()),
            Some(backlog),
        )
        .await?,
    );
    let reloader = Arc::new(Reloader::new(
        Arc::clone(&pipeline),
        kinds.clone(),
        Some(dead_letters),
        config.clone(),
    ));
    Ok((pipeline, reloader))
}

/// Opens (creating) the dead-letter store; redeliveries a previous run left in flight
/// are requested again, so they are not lost.
async fn open_dead_letters(config: &Config) -> Result<DeadLetters, GatewayError> {
    let store = Store::open(config.dead_letter_path(), true)
        .await
        .map_err(GatewayError::DeadLetters)?;
    let requeued = store
        .requeue_interrupted()
        .await
        .map_err(GatewayError::DeadLetters)?;
    tracing::info!(
        path = %store.path().display(),
        requeued,
        poll_interval = ?config.dead_letter.poll_interval,
        "dead-letter store open"
    );
    Ok(DeadLetters {
        store,
        poll_interval: config.dead_letter.poll_interval,
    })
}

/// Starts a task per `[[upstream]]` (connecting in the background: an unreachable
/// upstream is not an error) and per `[[source]]` (its consumer is created and
/// subscribed here).
pub(super) fn start_upstreams_and_sources(
    config: &Config,
    exchange: &Exchange,
    spool: &Spool,
) -> Result<(Upstreams, Sources), GatewayError> {
    let upstreams = Upstreams::start(
        &config.upstreams,
        exchange,
        &config.data_dir,
        Some(spool.clone()),
    );
    let sources = Sources::start(&config.sources, &config.forwarders, &config.node, exchange)?;
    Ok((upstreams, sources))
}

/// Starts the signed checkpoints of the audit stores' chain heads (`[signing]`).
pub(super) fn start_signers(config: &Config, exchange: &Exchange) -> Result<Signers, GatewayError> {
    // Checked by the config's validation already; read again here so the key in
    // use is the file as it is now.
    let signer = config
        .signing
        .signer()
        .map_err(|e| GatewayError::Signing(crate::errors::chain(&e)))?;
    Ok(Signers::start(
        signer,
        &config.signing,
        &config.forwarders,
        &config.data_dir,
        &config.node,
        exchange,
    ))
}

impl Gateway {
    /// Serves the admin endpoint, when it is on, over every part the gateway runs:
    /// the last step of the start.
    pub(super) fn serve_admin(
        &self,
        admin: AdminBound,
        config: &Config,
        connections: Vec<OpenConnections>,
        started: SystemTime,
    ) -> Option<Admin> {
        let AdminBound {
            listener,
            reload_token,
        } = admin;
        // Checked by the config's validation already.
        let store =
            crate::admin::settings::ui_store(&config.admin, &config.forwarders, &config.data_dir)
                .unwrap_or_default();
        let ui = config
            .admin
            .ui
            .then(|| Arc::new(crate::ui::Ui::new(store, self.exchange.clone())));
        listener.map(|bound| {
            bound.serve(Observed {
                forwarders: self.pipeline.view(),
                reload: Some(Arc::clone(&self.reloader)),
                reload_token,
                upstreams: self.upstreams.watch(),
                sources: self.sources.views(),
                signers: self.signers.as_ref().map_or_else(Vec::new, Signers::watch),
                spool: Some(self.spool.clone()),
                exchange: self.exchange.clone(),
                readiness: crate::admin::readiness::Rules::from(&config.admin),
                connections,
                started,
                ui,
            })
        })
    }
}
