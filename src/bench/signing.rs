//! Signed checkpoints in a benchmarked gateway: the key and `[signing]` table a row
//! with signing on is given, and the proof afterwards that it did sign (a row that
//! claims signing but signed nothing fails the run instead of being reported).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::BenchError;
use crate::note::{self, Verifier};
use crate::store;
use crate::store::checkpoint::TOPIC;

/// `signing.interval` in the benchmarks: far more often than the default ("1m"), so
/// a round of a few seconds signs a checkpoint each time the signer looks at the
/// store's head (once a second) while rows are added.
pub(crate) const INTERVAL: &str = "1s";

/// `signing.every_rows` in the benchmarks (the default is 100000).
pub(crate) const EVERY_ROWS: u64 = 10_000;

/// How long, after a round's events are all stored, a row with signing on may take
/// to show its first checkpoint (a tiny round can be over before the signer's first
/// look at the store, a second after it was made).
const FIRST_CHECKPOINT: Duration = Duration::from_secs(15);

/// A signer key written for one gateway.
pub(crate) struct SigningKey {
    pub path: PathBuf,
    pub verifier: Verifier,
}

impl SigningKey {
    /// Writes a new key (`note::write_new_key`, mode 0600) to `dir/signer.key`.
    pub(crate) fn write(dir: &Path) -> Result<SigningKey, BenchError> {
        let path = dir.join("signer.key");
        let signer =
            note::write_new_key(&path, "eventgate-bench").map_err(|e| BenchError::Failed {
                what: format!("cannot write a signer key: {}", crate::errors::chain(&e)),
            })?;
        Ok(SigningKey {
            path,
            verifier: signer.verifier(),
        })
    }

    /// The `[signing]` table of the gateway's config file.
    pub(crate) fn config_table(&self) -> String {
        format!(
            "[signing]\nkey = {:?}\ninterval = \"{INTERVAL}\"\nevery_rows = {EVERY_ROWS}\n",
            self.path.display().to_string()
        )
    }
}

/// An `eventgate witness` run in-process for one benchmarked gateway, following the
/// log of the gateway's audit store. The store is made before the gateway starts,
/// so its origin (`bench/eventgate/<store id>`, the gateway's `node` set to `bench`)
/// is known to configure the witness with.
pub(crate) struct Witness {
    url: String,
    key: crate::tlog::cosignature::WitnessKey,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Witness {
    pub(crate) async fn start(run_dir: &Path, log: &SigningKey) -> Result<Witness, BenchError> {
        let failed = |what: String| BenchError::Failed { what };
        let data_dir = run_dir.join("eventgate");
        let conn =
            store::open_writer(&data_dir.join("audit.db"), &store::WriterOptions::default())?;
        let id = crate::store::checkpoint::head(&conn)
            .map_err(|source| BenchError::Sqlite {
                what: "read the store's id",
                source,
            })?
            .store;
        drop(conn);
        let origin = crate::store::checkpoint::origin("bench", &id);
        let key_path = run_dir.join("witness.key");
        let cosigner = note::write_new_cosigner(&key_path, "bench.witness/w1").map_err(|e| {
            failed(format!(
                "cannot write a witness key: {}",
                crate::errors::chain(&e)
            ))
        })?;
        let port = super::daemon::free_port()?;
        let text = format!(
            "listen = \"127.0.0.1:{port}\"\nkey = {:?}\ndata_dir = {:?}\n[[log]]\norigin = {origin:?}\nkey = {:?}\n",
            key_path.display().to_string(),
            run_dir.join("witness").display().to_string(),
            log.verifier.to_text(),
        );
        let settings = crate::witness::WitnessSettings::parse(&text, "the benchmark's witness")
            .map_err(|e| failed(format!("witness settings: {}", crate::errors::chain(&e))))?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let stop = async {
                let _ = stopped.await;
            };
            if let Err(error) =
                crate::witness::serve(&settings, "the benchmark's witness", stop).await
            {
                tracing::error!(error = %crate::errors::chain(&error), "the benchmark's witness stopped");
            }
        });
        Ok(Witness {
            url: format!("http://127.0.0.1:{port}"),
            key: cosigner.witness_key(),
            stop: Some(stop),
            task,
        })
    }

    /// The `node` and `[signing]` of the gateway's config file, with this witness.
    pub(crate) fn config_table(&self, log: &SigningKey) -> String {
        format!(
            "node = \"bench\"\n{}witness_timeout = \"1s\"\n[[signing.witness]]\nurl = {:?}\nkey = {:?}\n",
            log.config_table(),
            self.url,
            self.key.to_text()
        )
    }

    /// [`checkpoints`], and that the newest stored checkpoint carries this witness's
    /// cosignature (some may not: the first ones can go before the witness listens).
    pub(crate) async fn cosigned(
        &self,
        data_dir: &Path,
        log: &SigningKey,
        admin: &str,
    ) -> Result<Signed, BenchError> {
        let deadline = Instant::now() + FIRST_CHECKPOINT;
        let path = data_dir.join("audit.db");
        loop {
            let signed = checkpoints(data_dir, log, Some(admin)).await?;
            let conn = store::open_reader(&path, Duration::from_secs(5))?;
            let newest: Option<String> = conn
                .query_row(
                    "SELECT json_extract(event, '$.note') FROM events WHERE topic = ?1 \
                     ORDER BY row_id DESC LIMIT 1",
                    [TOPIC],
                    |row| row.get(0),
                )
                .map_err(|source| BenchError::Sqlite {
                    what: "read the newest checkpoint",
                    source,
                })?;
            let cosigned = newest
                .as_deref()
                .and_then(|n| {
                    crate::tlog::cosignature::cosignatures(n, std::slice::from_ref(&self.key)).ok()
                })
                .is_some_and(|c| !c.good.is_empty());
            if cosigned {
                return Ok(signed);
            }
            if Instant::now() > deadline {
                return Err(BenchError::Failed {
                    what: format!(
                        "witnessing was on, but the newest checkpoint in {} carries no cosignature of the benchmark's witness {FIRST_CHECKPOINT:?} after the round; see the gateway's log",
                        path.display()
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(crate) async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = self.task.await;
    }
}

/// What a gateway with signing on had signed by the end of its round.
#[derive(Clone, Debug)]
pub(crate) struct Signed {
    /// Checkpoints the audit store held (each published as an event and stored like
    /// any other).
    pub stored: u64,
    /// `eventgate_audit_checkpoints_total`, when the gateway's metrics were read.
    pub published: Option<u64>,
}

/// Waits until the audit store in `data_dir` holds a signed checkpoint, and checks
/// that the newest one opens with `key`'s verifier; fails when none came within
/// [`FIRST_CHECKPOINT`]. `published` reads the gateway's checkpoint counter.
pub(crate) async fn checkpoints(
    data_dir: &Path,
    key: &SigningKey,
    admin: Option<&str>,
) -> Result<Signed, BenchError> {
    checkpoints_within(data_dir, key, admin, FIRST_CHECKPOINT).await
}

async fn checkpoints_within(
    data_dir: &Path,
    key: &SigningKey,
    admin: Option<&str>,
    wait: Duration,
) -> Result<Signed, BenchError> {
    let path = data_dir.join("audit.db");
    let deadline = Instant::now() + wait;
    let conn = store::open_reader(&path, Duration::from_secs(5))?;
    let sqlite = |what| move |source| BenchError::Sqlite { what, source };
    loop {
        let (stored, newest): (i64, Option<String>) = conn
            .query_row(
                "SELECT count(*), (SELECT json_extract(event, '$.note') FROM events \
                 WHERE topic = ?1 ORDER BY row_id DESC LIMIT 1) FROM events WHERE topic = ?1",
                [TOPIC],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .map_err(sqlite("count signed checkpoints"))?;
        if let Some(newest) = newest {
            note::open(&newest, std::slice::from_ref(&key.verifier)).map_err(|e| {
                BenchError::Failed {
                    what: format!(
                        "the newest checkpoint in {} does not open with the benchmark's key: {e}",
                        path.display()
                    ),
                }
            })?;
            let published = match admin {
                Some(admin) => Some(published(admin).await?),
                None => None,
            };
            return Ok(Signed {
                stored: stored as u64,
                published,
            });
        }
        if Instant::now() > deadline {
            return Err(BenchError::Failed {
                what: format!(
                    "signing was on, but {} held no signed checkpoint ({TOPIC}) {wait:?} \
                     after the round's events; see the gateway's log next to it",
                    path.display()
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The gateway's `eventgate_audit_checkpoints_total`.
async fn published(admin: &str) -> Result<u64, BenchError> {
    let (status, body) = crate::admin::client::get(admin, "/metrics", Duration::from_secs(5))
        .await
        .map_err(|e| BenchError::Failed {
            what: format!("cannot read the gateway's metrics at {admin}: {e}"),
        })?;
    if status != 200 {
        return Err(BenchError::Failed {
            what: format!("the gateway's /metrics at {admin} answered {status}"),
        });
    }
    Ok(super::gateway_round::sum(&body, "eventgate_audit_checkpoints_total") as u64)
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::event::{Event, EventId, Source};
    use crate::store::EventRow;
    use crate::store::checkpoint::Checkpoint;

    /// A store holding one checkpoint signed by `signer`.
    fn store_with_checkpoint(dir: &Path, signer: Option<&note::Signer>) {
        let mut conn =
            store::open_writer(&dir.join("audit.db"), &store::WriterOptions::default()).unwrap();
        let Some(signer) = signer else {
            return;
        };
        let checkpoint = Checkpoint {
            node: "n".into(),
            store: "s".into(),
            row_id: 0,
            seq: None,
            hash: None,
            pruned_rows: 0,
            time: SystemTime::now(),
            prev: None,
            tree: None,
        };
        let note = signer.sign(&checkpoint.to_text()).unwrap();
        let envelope = crate::markers::audit_checkpoint(&checkpoint, &note, "audit");
        let event = Event::new(1, EventId::generate(), Source::Internal, envelope);
        store::insert_rows(&mut conn, &[EventRow::from_event(&event)]).unwrap();
    }

    #[tokio::test]
    async fn a_gateway_that_signed_nothing_or_with_another_key_fails_the_run() {
        let wait = Duration::from_millis(200);
        let dir = tempfile::tempdir().unwrap();
        let key = SigningKey::write(dir.path()).unwrap();
        let table = key.config_table();
        assert!(
            table.contains("interval = \"1s\"\nevery_rows = 10000\n"),
            "{table}"
        );
        assert!(
            crate::note::load_key(&key.path).is_ok(),
            "the key file is one serve reads"
        );

        let nothing = tempfile::tempdir().unwrap();
        store_with_checkpoint(nothing.path(), None);
        let error = checkpoints_within(nothing.path(), &key, None, wait)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("held no signed checkpoint"), "{error}");

        let other = tempfile::tempdir().unwrap();
        let stranger = note::Signer::generate("eventgate-bench").unwrap();
        store_with_checkpoint(other.path(), Some(&stranger));
        let error = checkpoints_within(other.path(), &key, None, wait)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("does not open"), "{error}");

        let signed = tempfile::tempdir().unwrap();
        let signer = note::load_key(&key.path).unwrap();
        store_with_checkpoint(signed.path(), Some(&signer));
        let got = checkpoints_within(signed.path(), &key, None, wait)
            .await
            .unwrap();
        assert_eq!(got.stored, 1);
        assert_eq!(got.published, None);
    }
}
