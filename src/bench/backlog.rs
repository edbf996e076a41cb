//! Memory with a large backlog: a `kafka` forwarder's broker is down (its address
//! has nothing listening), so every event the gateway accepts waits in the spool for
//! it. The benchmark publishes a million events into such a gateway, restarts it on
//! the same data directory, lets it retry the dead sink while it takes more
//! publishes, and then (optionally) brings a real broker up on that address and
//! watches the backlog drain. eventgate's resident memory is read from
//! `/proc/PID/status` in every phase.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::BenchError;
use super::daemon::{Daemon, free_port};
use super::load::{lifecycle, publish_all};

/// The forwarder the backlog builds up for.
pub(crate) const FORWARDER: &str = "kafka";

/// Which forwarders the gateway runs besides the dead one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Forwarders {
    /// The kafka forwarder alone.
    Kafka,
    /// The embedded defaults (the `log` file and the `audit` SQLite store), which
    /// keep up, and the kafka forwarder: a node's gateway with Kafka added.
    DefaultsAndKafka,
}

impl Forwarders {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Forwarders::Kafka => "kafka",
            Forwarders::DefaultsAndKafka => "defaults + kafka",
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct BacklogBench {
    /// Events published while the broker is down.
    pub events: usize,
    pub publishers: usize,
    pub in_flight: usize,
    pub forwarders: Forwarders,
    /// How long the restarted gateway is watched retrying the dead sink.
    pub after_restart: Duration,
    /// Events published (spread over `after_restart`) to the restarted gateway.
    pub more_events: usize,
    /// The tansu binary for the drain phase; `None` skips it.
    pub tansu: Option<PathBuf>,
    /// How long the drain may take.
    pub drain_timeout: Duration,
}

/// Resident memory of one phase, in bytes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Memory {
    /// The most the process held during the phase (VmHWM).
    pub peak: Option<u64>,
    /// What it held at the end of the phase (VmRSS).
    pub end: Option<u64>,
}

#[derive(Clone, Debug)]
pub(crate) struct Drain {
    /// From the broker accepting connections until every event was delivered.
    pub took: Duration,
    pub delivered: u64,
    pub memory: Memory,
}

#[derive(Clone, Debug)]
pub(crate) struct Report {
    pub fill: Duration,
    pub filling: Memory,
    /// Spool segments on disk once filled.
    pub spool_bytes: u64,
    /// SIGTERM until the process had exited.
    pub stop: Duration,
    /// Start until the socket accepted connections.
    pub restart_socket: Duration,
    /// Start until a Publish was acknowledged.
    pub restart_publish: Duration,
    /// Start until `/readyz` answered 200, if it did within the watch.
    pub restart_ready: Option<Duration>,
    /// From start until serving (peak includes opening the spool).
    pub restarted: Memory,
    /// From start to the end of the watch (peak over both).
    pub after_restart: Memory,
    /// Events published to the restarted gateway.
    pub more_events: usize,
    pub drain: Option<Drain>,
}

/// Runs the whole benchmark in `dir`.
pub(crate) async fn run(
    eventgate: &Path,
    dir: &Path,
    bench: &BacklogBench,
) -> Result<Report, BenchError> {
    let broker_port = free_port()?;
    let admin = format!("127.0.0.1:{}", free_port()?);
    let config = dir.join("eventgate.toml");
    write(&config, &config_text(bench.forwarders, broker_port))?;
    let config = config.display().to_string();
    let args = ["--config", config.as_str(), "--admin", admin.as_str()];

    let gateway = Daemon::eventgate(eventgate, dir, &args).await?;
    let address = gateway.socket().display().to_string();
    let items = Arc::new(lifecycle(bench.events));
    eprintln!(
        "publishing {} events with the kafka broker down ...",
        items.len()
    );
    let fill = publish_all(&address, items, bench.publishers, bench.in_flight).await?;
    let filling = Memory {
        peak: gateway.peak_rss(),
        end: gateway.rss(),
    };
    let spool_bytes = dir_bytes(&dir.join("eventgate").join("spool").join("segments"));
    eprintln!(
        "filled in {:.1} s: peak RSS {}, {} of spool",
        fill.as_secs_f64(),
        mib(filling.peak),
        mib(Some(spool_bytes))
    );
    let stopping = Instant::now();
    gateway.stop(Duration::from_secs(120)).await;
    let stop = stopping.elapsed();
    keep_log(dir, "fill")?;

    let starting = Instant::now();
    let gateway = Daemon::eventgate_within(eventgate, dir, &args, Duration::from_secs(300)).await?;
    let restart_socket = starting.elapsed();
    let restarted_rss = gateway.rss();
    let one = Arc::new(lifecycle(1));
    publish_all(&address, Arc::clone(&one), 1, 1).await?;
    let restart_publish = starting.elapsed();
    let restarted = Memory {
        peak: gateway.peak_rss(),
        end: restarted_rss,
    };
    eprintln!(
        "restarted: serving after {:.2} s, RSS {}, peak {}",
        restart_socket.as_secs_f64(),
        mib(restarted.end),
        mib(restarted.peak)
    );

    let (restart_ready, more_events) = watch(&gateway, &address, &admin, starting, bench).await?;
    let after_restart = Memory {
        peak: gateway.peak_rss(),
        end: gateway.rss(),
    };
    eprintln!(
        "after {:?} of retrying and {more_events} more events: RSS {}, peak {}",
        bench.after_restart,
        mib(after_restart.end),
        mib(after_restart.peak)
    );

    let expected = (bench.events + 1 + more_events) as u64;
    let drain = match &bench.tansu {
        Some(tansu) => {
            Some(drain(&gateway, &admin, tansu, dir, broker_port, expected, bench).await?)
        }
        None => None,
    };
    gateway.stop(Duration::from_secs(60)).await;
    Ok(Report {
        fill,
        filling,
        spool_bytes,
        stop,
        restart_socket,
        restart_publish,
        restart_ready,
        restarted,
        after_restart,
        more_events,
        drain,
    })
}

/// The restarted gateway for `bench.after_restart`: more events published in
/// one-second slices, `/readyz` looked at until it first says ready. Returns when it
/// did (from `started`) and how many events were published.
async fn watch(
    gateway: &Daemon,
    address: &str,
    admin: &str,
    started: Instant,
    bench: &BacklogBench,
) -> Result<(Option<Duration>, usize), BenchError> {
    let slices = bench.after_restart.as_secs().max(1) as usize;
    let per_slice = bench.more_events.div_ceil(slices);
    let slice = Arc::new(lifecycle(per_slice));
    let end = Instant::now() + bench.after_restart;
    let mut ready = None;
    let mut published = 0;
    while Instant::now() < end {
        let next = Instant::now() + Duration::from_secs(1);
        if published < bench.more_events && per_slice > 0 {
            publish_all(address, Arc::clone(&slice), 2, 4).await?;
            published += per_slice;
        }
        while Instant::now() < next.min(end) {
            if ready.is_none() && readyz(admin).await {
                ready = Some(started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if gateway.rss().is_none() {
            return Err(BenchError::Failed {
                what: "eventgate exited while retrying the dead sink".into(),
            });
        }
    }
    Ok((ready, published))
}

/// Brings the broker up where the forwarder has been pointing, and waits until the
/// forwarder has delivered `expected` messages.
async fn drain(
    gateway: &Daemon,
    admin: &str,
    tansu: &Path,
    dir: &Path,
    port: u16,
    expected: u64,
    bench: &BacklogBench,
) -> Result<Drain, BenchError> {
    let reset = gateway.reset_peak_rss();
    let (broker, _) = Daemon::tansu_on(tansu, dir, port).await?;
    eprintln!("broker up; draining {expected} events ...");
    let start = Instant::now();
    let mut delivered = 0;
    let mut last_report = Instant::now();
    while delivered < expected {
        if start.elapsed() > bench.drain_timeout {
            broker.stop(Duration::from_secs(5)).await;
            return Err(BenchError::Timeout {
                what: format!(
                    "the kafka forwarder delivered {delivered} of {expected} events within {:?}; see {}",
                    bench.drain_timeout,
                    dir.join("eventgate.log").display()
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        delivered = delivered.max(kafka_delivered(admin).await.unwrap_or(0));
        if last_report.elapsed() > Duration::from_secs(10) {
            last_report = Instant::now();
            eprintln!(
                "  {delivered} delivered after {:.0} s, RSS {}",
                start.elapsed().as_secs_f64(),
                mib(gateway.rss())
            );
        }
    }
    let took = start.elapsed();
    let memory = Memory {
        // Without the reset the peak would count from the gateway's start.
        peak: if reset { gateway.peak_rss() } else { None },
        end: gateway.rss(),
    };
    broker.stop(Duration::from_secs(5)).await;
    Ok(Drain {
        took,
        delivered,
        memory,
    })
}

/// The gateway's config: the kafka forwarder pointing at `port` (nothing listens
/// there yet), creating its topic once it can; everything else is the default.
pub(crate) fn config_text(forwarders: Forwarders, port: u16) -> String {
    let defaults = match forwarders {
        Forwarders::Kafka => "",
        Forwarders::DefaultsAndKafka => {
            "[[forwarder]]\nname = \"log\"\nkind = \"file\"\npath = \"events.jsonl\"\n\n\
             [[forwarder]]\nname = \"audit\"\nkind = \"sqlite\"\npath = \"audit.db\"\n\n"
        }
    };
    format!(
        "{defaults}[[forwarder]]\nname = \"{FORWARDER}\"\nkind = \"kafka\"\n\
         brokers = \"127.0.0.1:{port}\"\ntopic = \"eventgate-backlog\"\ncreate_topic = true\n"
    )
}

async fn readyz(admin: &str) -> bool {
    matches!(
        crate::admin::client::get(admin, "/readyz", Duration::from_secs(1)).await,
        Ok((200, _))
    )
}

/// `eventgate_kafka_messages_total` of the forwarder, from `/metrics`.
async fn kafka_delivered(admin: &str) -> Option<u64> {
    let (code, body) = crate::admin::client::get(admin, "/metrics", Duration::from_secs(5))
        .await
        .ok()?;
    if code != 200 {
        return None;
    }
    let series = format!("eventgate_kafka_messages_total{{forwarder=\"{FORWARDER}\"}}");
    body.lines()
        .find_map(|line| line.strip_prefix(&series)?.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// Bytes of the files directly in `dir` (0 when it cannot be read).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Keeps the first gateway's log beside the second one's.
fn keep_log(dir: &Path, phase: &str) -> Result<(), BenchError> {
    let from = dir.join("eventgate.log");
    let to = dir.join(format!("eventgate-{phase}.log"));
    std::fs::rename(&from, &to).map_err(|source| BenchError::Io {
        context: format!("cannot move {} to {}", from.display(), to.display()),
        source,
    })
}

fn write(path: &Path, text: &str) -> Result<(), BenchError> {
    std::fs::write(path, text).map_err(|source| BenchError::Io {
        context: format!("cannot write {}", path.display()),
        source,
    })
}

/// "63.2 MiB", or "?" when unknown.
pub(crate) fn mib(bytes: Option<u64>) -> String {
    bytes.map_or("?".into(), |b| format!("{:.1} MiB", b as f64 / 1048576.0))
}
