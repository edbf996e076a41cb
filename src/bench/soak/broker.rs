//! The Kafka side of the soak: a tansu broker behind a TCP front the soak stops and
//! starts, and a tally of the event ids its topic holds.
//!
//! The tansu build the tests use keeps its log in memory only: a tansu process
//! started again is an empty broker that also forgot every producer's state, which
//! no real broker restart does. So "broker stop and start" stops the broker's
//! listener instead: the front (on the port the broker advertises) closes every
//! connection and refuses new ones for a few seconds, then listens again in front of
//! the same log, as a broker restarted on its data does.
//!
//! That tansu build also keeps a partition's most recent produce out of sight of
//! readers (high watermark and fetch) until the next produce to the partition, however
//! long that takes. The gateway's last batch before the load stops would then show up
//! only with its next write (the upstream reconcile, every 5 minutes): Kafka looked
//! 4-5 minutes behind the other sinks after the faults, which had only made that last
//! batch big. So the tally writes a marker of its own before each read.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use prost::Message as _;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::task::{JoinHandle, JoinSet};

use super::super::BenchError;
use super::super::daemon::free_port;
use crate::proto::containerd::events::TaskExit;
use crate::proto::containerd::types::Envelope;

pub(super) const TOPIC: &str = "soak";

pub(super) struct Broker {
    tansu: Child,
    /// Where clients connect (the front) and where tansu listens.
    port: u16,
    inner: u16,
    front: Option<JoinHandle<()>>,
}

impl Broker {
    pub(super) async fn start(binary: &Path, dir: &Path) -> Result<Self, BenchError> {
        let (port, inner) = (free_port()?, free_port()?);
        let log = dir.join("tansu.log");
        let io = |context: String| move |source| BenchError::Io { context, source };
        let out =
            std::fs::File::create(&log).map_err(io(format!("cannot create {}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(io(format!("cannot reuse {}", log.display())))?;
        let tansu = Command::new(binary)
            .args(["broker", "--storage-engine", "memory://tansu/"])
            .arg("--listener-url")
            .arg(format!("tcp://127.0.0.1:{inner}"))
            .arg("--advertised-listener-url")
            .arg(format!("tcp://127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| BenchError::Spawn {
                what: "tansu",
                source,
            })?;
        let mut broker = Self {
            tansu,
            port,
            inner,
            front: None,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", inner)).await.is_err() {
            if Instant::now() > deadline || matches!(broker.tansu.try_wait(), Ok(Some(_))) {
                return Err(BenchError::NotReady {
                    what: "tansu",
                    timeout: Duration::from_secs(30),
                    log: std::fs::read_to_string(&log).unwrap_or_default(),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        broker.listen().await?;
        create_topic(&broker.brokers()).await?;
        Ok(broker)
    }

    pub(super) fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts the front again on the same port.
    pub(super) async fn listen(&mut self) -> Result<(), BenchError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", self.port)).await {
                Ok(listener) => break listener,
                Err(source) if Instant::now() > deadline => {
                    return Err(BenchError::Io {
                        context: format!("cannot listen on port {} again", self.port),
                        source,
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        let inner = self.inner;
        self.front = Some(tokio::spawn(async move {
            // Dropped with the task: every connection ends with it.
            let mut connections = JoinSet::new();
            while let Ok((mut client, _)) = listener.accept().await {
                connections.spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(("127.0.0.1", inner)).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                while connections.try_join_next().is_some() {}
            }
        }));
        Ok(())
    }

    /// Closes the listener and every connection through it.
    pub(super) async fn unlisten(&mut self) {
        if let Some(front) = self.front.take() {
            front.abort();
            let _ = front.await;
        }
    }

    pub(super) async fn stop(&mut self) {
        self.unlisten().await;
        self.signal(libc::SIGCONT);
        let _ = self.tansu.kill().await;
    }

    pub(super) fn signal(&self, signal: libc::c_int) -> bool {
        match self.tansu.id() {
            // SAFETY: a plain syscall on our own child's pid.
            Some(pid) => unsafe { libc::kill(pid as i32, signal) == 0 },
            None => false,
        }
    }
}

async fn create_topic(brokers: &str) -> Result<(), BenchError> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(kafka)?;
    let topic = NewTopic::new(TOPIC, 1, TopicReplication::Fixed(1));
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let result = admin.create_topics([&topic], &options).await;
    tokio::task::spawn_blocking(move || drop(admin)).await.ok();
    match result.map_err(kafka)?.into_iter().next() {
        Some(Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)))
        | Some(Ok(_))
        | None => Ok(()),
        Some(Err((_, code))) => Err(BenchError::Failed {
            what: format!("creating the Kafka topic failed: {code}"),
        }),
    }
}

fn kafka(error: rdkafka::error::KafkaError) -> BenchError {
    BenchError::Failed {
        what: format!("Kafka: {error}"),
    }
}

/// Container id -> messages, over every broker the soak ran.
#[derive(Default)]
pub(super) struct KafkaTally {
    pub counts: HashMap<String, u32>,
    /// Messages that were not an exit event of the soak.
    pub other: u64,
    /// The current broker's consumer and the next offset it reads.
    consumer: Option<(BaseConsumer, i64)>,
    /// Writes the markers that bring tansu's last batch into sight.
    marker: Option<BaseProducer>,
}

/// The marker's payload: not an envelope, so it counts in `other`.
const MARKER: &[u8] = b"eventgate soak: read marker";

impl KafkaTally {
    /// Reads the current broker's topic up to its end (the high watermark, looked at
    /// again after reaching it), within `timeout`.
    pub(super) fn read_to_end(
        &mut self,
        brokers: &str,
        timeout: Duration,
    ) -> Result<(), BenchError> {
        let deadline = Instant::now() + timeout;
        self.mark(brokers, timeout.min(Duration::from_secs(5)))?;
        if self.consumer.is_none() {
            let consumer: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", brokers)
                .set("group.id", "eventgate-soak")
                .set("enable.auto.commit", "false")
                .create()
                .map_err(kafka)?;
            let mut partitions = TopicPartitionList::new();
            partitions
                .add_partition_offset(TOPIC, 0, Offset::Beginning)
                .map_err(kafka)?;
            consumer.assign(&partitions).map_err(kafka)?;
            self.consumer = Some((consumer, 0));
        }
        let Some((consumer, next)) = self.consumer.as_mut() else {
            return Ok(());
        };
        loop {
            let high = match consumer.fetch_watermarks(TOPIC, 0, Duration::from_secs(2)) {
                Ok((_, high)) => high,
                Err(error) if Instant::now() > deadline => return Err(kafka(error)),
                Err(_) => continue,
            };
            if *next >= high {
                return Ok(());
            }
            while *next < high {
                if Instant::now() > deadline {
                    return Err(BenchError::Timeout {
                        what: format!(
                            "the Kafka topic was not read to its end ({next} of {high}) within {timeout:?}"
                        ),
                    });
                }
                if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
                    *next = message.offset() + 1;
                    match exit_id(message.payload()) {
                        Some(id) => *self.counts.entry(id).or_default() += 1,
                        None => self.other += 1,
                    }
                }
            }
        }
    }
}

impl KafkaTally {
    /// Produces one marker to the topic and waits for it, so everything the broker
    /// acknowledged before is readable (see the module comment). A marker that cannot
    /// be written (the broker down) is only logged: the read then shows what it can.
    fn mark(&mut self, brokers: &str, timeout: Duration) -> Result<(), BenchError> {
        if self.marker.is_none() {
            let producer: BaseProducer = ClientConfig::new()
                .set("bootstrap.servers", brokers)
                .set("message.timeout.ms", timeout.as_millis().to_string())
                .create()
                .map_err(kafka)?;
            self.marker = Some(producer);
        }
        let Some(producer) = self.marker.as_ref() else {
            return Ok(());
        };
        let record = BaseRecord::<(), [u8]>::to(TOPIC)
            .partition(0)
            .payload(MARKER);
        let sent = producer
            .send(record)
            .map_err(|(error, _)| error)
            .and_then(|()| producer.flush(timeout));
        if let Err(error) = sent {
            tracing::info!(%error, "cannot write the Kafka read marker; reading what is visible");
        }
        Ok(())
    }
}

fn exit_id(payload: Option<&[u8]>) -> Option<String> {
    let envelope = Envelope::decode(payload?).ok()?;
    if envelope.topic != "/tasks/exit" {
        return None;
    }
    let exit = TaskExit::decode(envelope.event?.value.as_slice()).ok()?;
    Some(exit.container_id)
}

#[cfg(test)]
mod tests {
    use prost_types::Any;
    use rdkafka::producer::{FutureProducer, FutureRecord};

    use super::*;

    fn tansu() -> std::path::PathBuf {
        std::env::var_os("PATH")
            .into_iter()
            .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
            .chain(std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo/bin")))
            .map(|dir| dir.join("tansu"))
            .find(|p| p.is_file())
            .expect("tansu on PATH or in ~/.cargo/bin")
    }

    fn exit(id: &str) -> Vec<u8> {
        let exit = TaskExit {
            container_id: id.into(),
            ..TaskExit::default()
        };
        Envelope {
            topic: "/tasks/exit".into(),
            event: Some(Any {
                type_url: "containerd.events.TaskExit".into(),
                value: exit.encode_to_vec(),
            }),
            ..Envelope::default()
        }
        .encode_to_vec()
    }

    /// tansu shows a partition's last produce only after the next one; the tally
    /// must still count every message the broker acknowledged, the last batch too.
    #[tokio::test]
    #[ignore = "needs tansu; run tests/run.sh"]
    async fn the_tally_reads_the_last_acknowledged_batch() {
        let dir = tempfile::tempdir().unwrap();
        let mut broker = Broker::start(&tansu(), dir.path()).await.unwrap();
        let brokers = broker.brokers();
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("enable.idempotence", "true")
            .set("linger.ms", "0")
            .create()
            .unwrap();
        let mut ids = Vec::new();
        for batch in 0..5 {
            let mut deliveries = Vec::new();
            for n in 0..10 {
                let id = format!("c-{batch}-{n}");
                let payload = exit(&id);
                let record = FutureRecord::<(), _>::to(TOPIC).payload(&payload);
                deliveries.push(producer.send_result(record).map_err(|(e, _)| e).unwrap());
                ids.push(id);
            }
            for delivery in deliveries {
                delivery.await.unwrap().map_err(|(e, _)| e).unwrap();
            }
        }
        let read = brokers.clone();
        let tally = tokio::task::spawn_blocking(move || {
            let mut tally = KafkaTally::default();
            tally
                .read_to_end(&read, Duration::from_secs(30))
                .map(|()| tally)
        })
        .await
        .unwrap()
        .unwrap();
        let missing: Vec<&String> = ids
            .iter()
            .filter(|id| !tally.counts.contains_key(*id))
            .collect();
        tokio::task::spawn_blocking(move || drop((producer, tally)))
            .await
            .unwrap();
        broker.stop().await;
        assert!(
            missing.is_empty(),
            "{} of {} acknowledged messages not read: {missing:?}",
            missing.len(),
            ids.len()
        );
    }
}
