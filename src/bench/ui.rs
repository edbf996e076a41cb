//! `bench ui`: ingest into a gateway with its defaults (durable spool, the `log` file
//! and `audit` SQLite forwarders) with and without `/ui` readers on its admin
//! listener, in alternating phases on the same gateway and store.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::BenchError;
use super::daemon::{Daemon, own_cpu_time};
use super::gateway_round::free_admin_address;
use super::load::{Item, lifecycle, publish_all, wait_until};
use super::ui_readers::{Answers, Readers};
use crate::store;

#[derive(Clone, Debug)]
pub(crate) struct UiBench {
    /// Events published per phase.
    pub events: usize,
    /// Events stored before the first phase, so reads have work.
    pub prefill: usize,
    pub readers: usize,
    pub publishers: usize,
    pub in_flight: usize,
    /// How long a phase may take to have every event stored.
    pub timeout: Duration,
}

/// One phase: `events` published, with or without readers.
#[derive(Clone, Debug)]
pub(crate) struct Phase {
    pub with_readers: bool,
    /// Publishing alone: every call answered (accepted: durable in the spool).
    pub accepted: Duration,
    /// First publish until the audit store held every event.
    pub stored: Duration,
    /// CPU the gateway used in the phase.
    pub gateway_cpu: Option<Duration>,
    /// CPU this process (publishers and readers) used in the phase.
    pub client_cpu: Duration,
    pub answers: Option<Answers>,
}

/// The gateway under test, with a reader of its audit store to count what it stored.
pub(crate) struct Gateway {
    daemon: Daemon,
    pub admin: String,
    audit: PathBuf,
    log: PathBuf,
    conn: Option<rusqlite::Connection>,
    items: Arc<Vec<Item>>,
}

impl Gateway {
    /// Starts `eventgate serve` with no config file (the defaults) in `dir`, its admin
    /// listener on a free loopback port, and stores `bench.prefill` events.
    pub(crate) async fn start(
        eventgate: &Path,
        dir: &Path,
        bench: &UiBench,
    ) -> Result<Self, BenchError> {
        let admin = free_admin_address()?;
        let daemon = Daemon::eventgate(eventgate, dir, &["--admin", &admin]).await?;
        let mut gateway = Self {
            daemon,
            admin,
            audit: dir.join("eventgate").join("audit.db"),
            log: dir.join("eventgate.log"),
            conn: None,
            items: Arc::new(lifecycle(bench.events)),
        };
        let prefill = Arc::new(lifecycle(bench.prefill));
        let address = gateway.daemon.socket().display().to_string();
        publish_all(&address, prefill, bench.publishers, bench.in_flight).await?;
        let expected = bench.prefill as i64;
        let mut stored = 0;
        let waited = wait_until("the prefill stored", bench.timeout, || {
            stored = gateway.stored()?;
            Ok(stored >= expected)
        })
        .await;
        waited.map_err(|_| gateway.not_stored(stored, expected, bench.timeout))?;
        Ok(gateway)
    }

    /// Publishes `bench.events` events, with `bench.readers` readers running from
    /// just before the first publish until the last event is stored, or none.
    pub(crate) async fn phase(
        &mut self,
        bench: &UiBench,
        with_readers: bool,
    ) -> Result<Phase, BenchError> {
        let expected = self.stored()? + bench.events as i64;
        let address = self.daemon.socket().display().to_string();
        let readers = with_readers.then(|| Readers::start(&self.admin, bench.readers));
        let (cpu_before, client_before) = (self.daemon.cpu_time(), own_cpu_time());
        let start = Instant::now();
        let published = publish_all(
            &address,
            Arc::clone(&self.items),
            bench.publishers,
            bench.in_flight,
        )
        .await;
        let mut stored = 0;
        let waited = match &published {
            Ok(_) => {
                wait_until("", bench.timeout, || {
                    stored = self.stored()?;
                    Ok(stored >= expected)
                })
                .await
            }
            Err(_) => Ok(()),
        };
        let stored_after = start.elapsed();
        let gateway_cpu = self
            .daemon
            .cpu_time()
            .zip(cpu_before)
            .map(|(after, before)| after.saturating_sub(before));
        let client_cpu = own_cpu_time().saturating_sub(client_before);
        let answers = match readers {
            Some(readers) => Some(readers.stop().await),
            None => None,
        };
        let accepted = published?;
        waited.map_err(|_| self.not_stored(stored, expected, bench.timeout))?;
        Ok(Phase {
            with_readers,
            accepted,
            stored: stored_after,
            gateway_cpu,
            client_cpu,
            answers,
        })
    }

    pub(crate) async fn stop(self) {
        self.daemon.stop(Duration::from_secs(10)).await;
    }

    /// The audit store's last row id: rows are only appended here, and counting them
    /// all every few milliseconds would itself be a reader competing for the CPU.
    fn stored(&mut self) -> Result<i64, BenchError> {
        if self.conn.is_none() && self.audit.exists() {
            self.conn = store::open_reader(&self.audit, Duration::from_secs(5)).ok();
        }
        let Some(conn) = &self.conn else {
            return Ok(0);
        };
        conn.query_row("SELECT coalesce(max(rowid), 0) FROM events", [], |row| {
            row.get::<_, i64>(0)
        })
        .map_err(|source| BenchError::Sqlite {
            what: "read the last stored row",
            source,
        })
    }

    fn not_stored(&self, stored: i64, expected: i64, timeout: Duration) -> BenchError {
        BenchError::Timeout {
            what: format!(
                "the audit store held row {stored} of {expected} after {timeout:?}; see {}",
                self.log.display()
            ),
        }
    }
}
