//! A throwaway tansu broker (a Kafka-protocol broker with in-memory storage) on a free
//! loopback port, killed on drop.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::{DEADLINE, Lines, wait_for};

pub struct Tansu {
    child: Child,
    pub port: u16,
    log: Lines,
}

/// The tansu binary from PATH or ~/.cargo/bin, or a panic saying how to get it.
pub fn tansu_bin() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("tansu"));
    let in_cargo =
        std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo/bin/tansu"));
    on_path
        .chain(in_cargo)
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "tansu not found on PATH or in ~/.cargo/bin; install it with \
                 `cargo install tansu --version 0.6.0 --features dynostore --locked` \
                 (tests/run.sh does this)"
            )
        })
}

impl Tansu {
    pub fn start() -> Tansu {
        Self::start_advertising(None)
    }

    /// A broker that tells clients to reach it at `advertised` (a loopback port that
    /// something in front of it, a TLS or SASL endpoint, will listen on) rather
    /// than at the plaintext port it listens on.
    pub fn behind(advertised: u16) -> Tansu {
        Self::start_advertising(Some(advertised))
    }

    fn start_advertising(advertised: Option<u16>) -> Tansu {
        // tansu advertises the port it listens on, so it cannot be given port 0, and a
        // port that was free a moment ago may be taken by the time tansu binds it: a
        // broker that exits during start-up is started again on another port.
        let mut failures = String::new();
        for _ in 0..3 {
            match Self::start_on(super::free_port(), advertised) {
                Ok(tansu) => return tansu,
                Err(why) => failures.push_str(&why),
            }
        }
        panic!("tansu did not start:\n{failures}");
    }

    fn start_on(port: u16, advertised: Option<u16>) -> Result<Tansu, String> {
        let url = format!("tcp://127.0.0.1:{port}");
        let advertised = format!("tcp://127.0.0.1:{}", advertised.unwrap_or(port));
        let mut child = Command::new(tansu_bin())
            .args(["broker", "--storage-engine", "memory://tansu/"])
            .args([
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &advertised,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tansu");
        let log = Lines::new(child.stderr.take().expect("tansu stderr"));
        let mut tansu = Tansu { child, port, log };
        let probe: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", tansu.brokers())
            .create()
            .expect("probe client");
        let answered = wait_for("tansu to answer a metadata request", DEADLINE, || {
            if let Ok(Some(status)) = tansu.child.try_wait() {
                return Some(Err(format!("exited on port {port}: {status}\n")));
            }
            probe
                .client()
                .fetch_metadata(None, Duration::from_millis(500))
                .ok()
                .map(|_| Ok(()))
        });
        match answered {
            Ok(()) => Ok(tansu),
            Err(why) => Err(why + &tansu.log_text()),
        }
    }

    /// Kills the broker and starts an empty one on the same port: a broker whose data
    /// is gone (topics, offsets and producer ids), at the address clients know.
    pub fn replace_empty(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let port = self.port;
        // The old listener's port is free once the process is gone; a bind that
        // still fails (another test took it meanwhile) fails the test, saying so.
        let fresh = wait_for("an empty tansu on the same port", DEADLINE, || {
            Self::start_on(port, None).ok()
        });
        // The old broker, dropped here, was already reaped.
        drop(std::mem::replace(self, fresh));
    }

    /// Freezes the broker (SIGSTOP): connections stay open and nothing answers, as
    /// with a hung or partitioned broker. Its in-memory data survives `resume`.
    pub fn freeze(&self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP tansu");
    }

    pub fn resume(&self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).expect("SIGCONT tansu");
    }

    /// The plaintext listener (what clients are told to use unless `behind`).
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// What tansu has logged so far (for failure messages).
    pub fn log_text(&mut self) -> String {
        self.log.drain()
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        // A frozen broker cannot die of SIGKILL's delivery until it runs again; one
        // already reaped (`replace_empty`) has no process left to signal.
        if let Ok(None) = self.child.try_wait() {
            self.resume();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every message of `topic` from the beginning: waits (with a deadline) until at
/// least `count` arrived and every partition reported its end, so extra messages
/// would be seen too. Messages of one partition come in offset order.
pub fn consume(brokers: &str, topic: &str, count: usize) -> Vec<OwnedMessage> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "eventgate-tests")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()
        .expect("consumer");
    let partitions = wait_for(&format!("metadata for topic {topic}"), DEADLINE, || {
        let metadata = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(1))
            .ok()?;
        let found = metadata.topics().iter().find(|t| t.name() == topic)?;
        let ids: Vec<i32> = found.partitions().iter().map(|p| p.id()).collect();
        (!ids.is_empty()).then_some(ids)
    });
    let mut assignment = TopicPartitionList::new();
    for id in &partitions {
        assignment
            .add_partition_offset(topic, *id, Offset::Beginning)
            .expect("assign");
    }
    consumer.assign(&assignment).expect("assign");
    let mut messages = Vec::new();
    let mut at_end = HashSet::new();
    let end = std::time::Instant::now() + DEADLINE;
    loop {
        // Everything that is ready, not one message per check.
        let mut wait = Duration::from_millis(100);
        while let Some(polled) = consumer.poll(wait) {
            wait = Duration::ZERO;
            match polled {
                Ok(message) => {
                    at_end.remove(&message.partition());
                    messages.push(message.detach());
                }
                Err(KafkaError::PartitionEOF(partition)) => {
                    at_end.insert(partition);
                }
                Err(error) => panic!("consuming {topic}: {error}"),
            }
        }
        if messages.len() >= count && at_end.len() == partitions.len() {
            return messages;
        }
        // Where it stands, so a timeout says which half of the condition is missing.
        assert!(
            std::time::Instant::now() < end,
            "timed out after {DEADLINE:?} waiting for {count} messages in {topic}: {} read, \
             at the end of partitions {at_end:?} of {partitions:?}",
            messages.len()
        );
    }
}
