//! dockerd's Engine API, for Docker's terms on every record of a Docker container
//! (its name, the image reference the user ran, its labels) and for what dockerd
//! keeps that containerd deleted (a container's exit, until `docker rm`).
//!
//! Three calls are used: the list of every container (`GET /containers/json?all=1`),
//! one container's inspect (`GET /containers/{id}/json`), and the event log dockerd
//! keeps in memory (`GET /events` with `since` and `until`: its last 256 events, of
//! every kind), on a unix socket. The
//! paths carry no API version: dockerd answers them in its own (1.41 for 20.10, and
//! later ones alike), and only the few fields read here are decoded, so a field some
//! version adds or spells differently elsewhere in the answer changes nothing.
//!
//! Every call has a deadline, and an answer is read up to [`MAX_ANSWER`] bytes at
//! most; a dockerd that is absent, slow, refuses or answers garbage is a
//! [`DockerError`] saying which, never a panic.

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use thiserror::Error;

use crate::event::Workload;
use crate::reconcile::managed::{ManagedExit, ManagedStatus};
use crate::reconcile::run::{Action, EventLog, Logged, OOM_KILLED};

/// Where `docker = "auto"` looks for dockerd.
pub(crate) const DEFAULT_SOCKET: &str = "/var/run/docker.sock";

/// The largest answer read (containerd's own send limit, as for the CRI): a list of
/// about ten thousand containers with compose's labels.
pub(crate) const MAX_ANSWER: usize = 16 * 1024 * 1024;

/// The most containers a list may name.
pub(crate) const MAX_CONTAINERS: usize = 16 * 1024;

/// The most events dockerd keeps in memory (its `eventsLimit`): the log read for a
/// gap holds this many at most, the oldest dropped first.
pub(crate) const LOG_CAPACITY: usize = 256;

/// The most events read from the log: a dockerd that sends more than it keeps is
/// not the one described here.
const MAX_LOGGED: usize = 4 * LOG_CAPACITY;

#[derive(Debug, Error)]
pub(crate) enum DockerError {
    #[error("dockerd's socket {} does not exist", path.display())]
    NoSocket {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot connect to dockerd at {}", path.display())]
    Connect {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("dockerd did not answer {call} within {timeout:?}")]
    Timeout {
        call: &'static str,
        timeout: Duration,
    },
    #[error("dockerd refused {call}: HTTP {status}: {message}")]
    Refused {
        call: &'static str,
        status: u16,
        message: String,
    },
    #[error("the HTTP exchange with dockerd for {call} failed")]
    Http {
        call: &'static str,
        #[source]
        source: hyper::Error,
    },
    #[error("dockerd's answer to {call} is larger than {MAX_ANSWER} bytes")]
    TooLarge { call: &'static str },
    #[error("dockerd's answer to {call} is not the Engine API's JSON")]
    Garbage {
        call: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("dockerd lists {count} containers, more than the {MAX_CONTAINERS} read")]
    TooMany { count: usize },
    #[error("dockerd's event log sent more than {MAX_LOGGED} events")]
    TooManyEvents,
    #[error("dockerd's Engine API is read on a unix socket, not {address:?}")]
    NotUnix { address: String },
}

/// One container as dockerd's list shows it (`docker ps -a`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listed {
    pub id: String,
    /// As `docker ps` shows it, without the leading `/`.
    pub name: String,
    /// The image reference the user ran (dockerd shows the image id instead once
    /// that reference names another image).
    pub image: String,
    pub labels: BTreeMap<String, String>,
    /// dockerd's word (`created`, `running`, `exited`, ...).
    pub state: String,
    pub status: ManagedStatus,
    pub created_at: Option<SystemTime>,
}

/// One container as dockerd's inspect shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Inspected {
    pub id: String,
    pub name: String,
    /// `Config.Image`: the image reference the user ran.
    pub image: String,
    pub labels: BTreeMap<String, String>,
    pub status: ManagedStatus,
    pub created_at: Option<SystemTime>,
    /// The last run's end, once it exited.
    pub exit: Option<ManagedExit>,
    /// When the run under way started, while it runs.
    pub started_at: Option<SystemTime>,
    /// How many times dockerd's restart policy restarted it since it was last
    /// started by hand (`docker start` and `docker restart` set it back to 0).
    pub restart_count: Option<u64>,
}

impl Listed {
    /// Docker's terms for the container's events.
    pub(crate) fn workload(&self) -> Workload {
        workload(&self.name, &self.image, &self.labels)
    }
}

impl Inspected {
    pub(crate) fn workload(&self) -> Workload {
        workload(&self.name, &self.image, &self.labels)
    }
}

/// A Docker container's terms: its name, image reference and labels (bounded as
/// every record's are; compose's `com.docker.compose.project` and `.service` among
/// them).
pub(crate) fn workload(name: &str, image: &str, labels: &BTreeMap<String, String>) -> Workload {
    let labels = labels.iter().map(|(k, v)| (k.clone(), v.clone()));
    let mut workload = Workload::from_record(image, labels).unwrap_or_default();
    if !name.is_empty() {
        workload.container_name = Some(clip(name, MAX_NAME).to_owned());
    }
    workload
}

/// dockerd's names are short (`[a-zA-Z0-9][a-zA-Z0-9_.-]+`); a longer one is cut.
const MAX_NAME: usize = 1024;

/// An Engine API client on one unix socket; each call opens its own connection.
#[derive(Debug, Clone)]
pub(crate) struct DockerClient {
    socket: PathBuf,
    timeout: Duration,
}

impl DockerClient {
    /// The client for `address` (a socket path or `unix://PATH`); each call must be
    /// answered within `timeout`.
    pub(crate) fn new(address: &str, timeout: Duration) -> Result<Self, DockerError> {
        let path = address.strip_prefix("unix://").unwrap_or(address);
        if !path.starts_with('/') && path.contains(':') {
            return Err(DockerError::NotUnix {
                address: address.to_owned(),
            });
        }
        Ok(DockerClient {
            socket: PathBuf::from(path),
            timeout,
        })
    }

    #[cfg(test)]
    pub(crate) fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    /// Every container dockerd keeps, running or not.
    pub(crate) async fn list(&self) -> Result<Vec<Listed>, DockerError> {
        const CALL: &str = "the container list";
        parse_list(&self.get_found(CALL, "/containers/json?all=1").await?)
    }

    /// One container's inspect; `None` when dockerd has no such container.
    pub(crate) async fn inspect(&self, id: &str) -> Result<Option<Inspected>, DockerError> {
        const CALL: &str = "a container's inspect";
        // dockerd's ids are hex; anything else cannot name one of its containers.
        if id.is_empty()
            || !id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
        {
            return Ok(None);
        }
        match self.get(CALL, &format!("/containers/{id}/json")).await? {
            Some(body) => parse_inspect(&body).map(Some),
            None => Ok(None),
        }
    }

    /// The events dockerd still holds up to `until` (which must be past, or dockerd
    /// would wait for it), oldest first.
    pub(crate) async fn events(&self, until: SystemTime) -> Result<EventLog, DockerError> {
        const CALL: &str = "the event log";
        let until = until.duration_since(UNIX_EPOCH).unwrap_or_default();
        // `since` from the epoch's first second: every event the log holds.
        let path = format!(
            "/events?since=1&until={}.{:09}",
            until.as_secs(),
            until.subsec_nanos()
        );
        parse_events(&self.get_found(CALL, &path).await?)
    }

    /// GETs `path`, which every dockerd serves: a 404 is a refusal.
    async fn get_found(&self, call: &'static str, path: &str) -> Result<Bytes, DockerError> {
        self.get(call, path).await?.ok_or(DockerError::Refused {
            call,
            status: 404,
            message: "not found".into(),
        })
    }

    /// GETs `path`: the body of a 2xx answer, `None` for 404.
    async fn get(&self, call: &'static str, path: &str) -> Result<Option<Bytes>, DockerError> {
        match tokio::time::timeout(self.timeout, self.exchange(call, path)).await {
            Ok(answer) => answer,
            Err(_) => Err(DockerError::Timeout {
                call,
                timeout: self.timeout,
            }),
        }
    }

    async fn exchange(&self, call: &'static str, path: &str) -> Result<Option<Bytes>, DockerError> {
        let stream = tokio::net::UnixStream::connect(&self.socket)
            .await
            .map_err(|source| match source.kind() {
                io::ErrorKind::NotFound => DockerError::NoSocket {
                    path: self.socket.clone(),
                    source,
                },
                _ => DockerError::Connect {
                    path: self.socket.clone(),
                    source,
                },
            })?;
        let http = |source| DockerError::Http { call, source };
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(http)?;
        let request = http::Request::get(path)
            // dockerd (Go's HTTP server) refuses an HTTP/1.1 request without a Host.
            .header(http::header::HOST, "docker")
            .body(Empty::<Bytes>::new())
            .map_err(|_| DockerError::Refused {
                call,
                status: 0,
                message: format!("{path:?} is no request path"),
            })?;
        let exchange = async move {
            let response = sender.send_request(request).await.map_err(http)?;
            let status = response.status();
            let body = match Limited::new(response.into_body(), MAX_ANSWER)
                .collect()
                .await
            {
                Ok(body) => body.to_bytes(),
                Err(error) => {
                    return Err(match error.downcast::<hyper::Error>() {
                        Ok(source) => DockerError::Http {
                            call,
                            source: *source,
                        },
                        Err(_) => DockerError::TooLarge { call },
                    });
                }
            };
            // The sender goes here, so the connection ends once the answer is read.
            drop(sender);
            if status == http::StatusCode::NOT_FOUND {
                return Ok(None);
            }
            if !status.is_success() {
                return Err(DockerError::Refused {
                    call,
                    status: status.as_u16(),
                    message: message_of(&body),
                });
            }
            Ok(Some(body))
        };
        // The connection is driven alongside the exchange, and ends with it.
        let (answer, _) = futures::future::join(exchange, connection).await;
        answer
    }
}

/// dockerd's error text (`{"message":"..."}`), or the start of whatever it sent.
fn message_of(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Message {
        message: String,
    }
    let text = match serde_json::from_slice::<Message>(body) {
        Ok(m) => m.message,
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    clip(text.trim(), 512).to_owned()
}

fn clip(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A list entry as the Engine API spells it (only what is read).
#[derive(Deserialize)]
struct RawSummary {
    #[serde(rename = "Id")]
    id: String,
    #[serde(rename = "Names", default)]
    names: Option<Vec<String>>,
    #[serde(rename = "Image", default)]
    image: Option<String>,
    #[serde(rename = "Labels", default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(rename = "State", default)]
    state: Option<String>,
    #[serde(rename = "Created", default)]
    created: Option<i64>,
}

pub(crate) fn parse_list(body: &[u8]) -> Result<Vec<Listed>, DockerError> {
    const CALL: &str = "the container list";
    let raw: Vec<RawSummary> = serde_json::from_slice(body)
        .map_err(|source| DockerError::Garbage { call: CALL, source })?;
    if raw.len() > MAX_CONTAINERS {
        return Err(DockerError::TooMany { count: raw.len() });
    }
    Ok(raw
        .into_iter()
        .map(|c| {
            let state = c.state.unwrap_or_default();
            Listed {
                name: name_of(c.names.as_deref().unwrap_or_default()),
                image: c.image.unwrap_or_default(),
                labels: c.labels.unwrap_or_default(),
                status: status_of(&state),
                state,
                created_at: c.created.and_then(seconds),
                id: c.id,
            }
        })
        .collect())
}

/// An inspect answer as the Engine API spells it (only what is read).
#[derive(Deserialize)]
struct RawInspect {
    #[serde(rename = "Id")]
    id: String,
    #[serde(rename = "Name", default)]
    name: Option<String>,
    #[serde(rename = "Created", default)]
    created: Option<String>,
    #[serde(rename = "State", default)]
    state: Option<RawState>,
    #[serde(rename = "Config", default)]
    config: Option<RawConfig>,
    #[serde(rename = "RestartCount", default)]
    restart_count: Option<i64>,
}

#[derive(Deserialize)]
struct RawState {
    #[serde(rename = "Status", default)]
    status: Option<String>,
    #[serde(rename = "OOMKilled", default)]
    oom_killed: Option<bool>,
    #[serde(rename = "ExitCode", default)]
    exit_code: Option<i64>,
    #[serde(rename = "StartedAt", default)]
    started_at: Option<String>,
    #[serde(rename = "FinishedAt", default)]
    finished_at: Option<String>,
}

#[derive(Deserialize)]
struct RawConfig {
    #[serde(rename = "Image", default)]
    image: Option<String>,
    #[serde(rename = "Labels", default)]
    labels: Option<BTreeMap<String, String>>,
}

pub(crate) fn parse_inspect(body: &[u8]) -> Result<Inspected, DockerError> {
    const CALL: &str = "a container's inspect";
    let raw: RawInspect = serde_json::from_slice(body)
        .map_err(|source| DockerError::Garbage { call: CALL, source })?;
    let config = raw.config.unwrap_or(RawConfig {
        image: None,
        labels: None,
    });
    let (status, exit, started_at) = match raw.state {
        Some(state) => {
            let status = status_of(state.status.as_deref().unwrap_or_default());
            let started_at = (status == ManagedStatus::Running)
                .then(|| state.started_at.as_deref().and_then(time))
                .flatten();
            let exit = (status == ManagedStatus::Exited).then(|| ManagedExit {
                started_at: state.started_at.as_deref().and_then(time),
                finished_at: state.finished_at.as_deref().and_then(time),
                // Exit codes are a byte on Linux; anything else is not one.
                exit_code: state
                    .exit_code
                    .and_then(|c| i32::try_from(c).ok())
                    .unwrap_or(-1),
                reason: state
                    .oom_killed
                    .unwrap_or(false)
                    .then(|| OOM_KILLED.to_owned()),
            });
            (status, exit, started_at)
        }
        None => (ManagedStatus::Unknown, None, None),
    };
    Ok(Inspected {
        name: raw
            .name
            .as_deref()
            .map(|n| n.strip_prefix('/').unwrap_or(n).to_owned())
            .unwrap_or_default(),
        image: config.image.unwrap_or_default(),
        labels: config.labels.unwrap_or_default(),
        status,
        created_at: raw.created.as_deref().and_then(time),
        exit,
        started_at,
        restart_count: raw.restart_count.and_then(|c| u64::try_from(c).ok()),
        id: raw.id,
    })
}

/// One message of the event log as the Engine API spells it (only what is read).
#[derive(Deserialize)]
struct RawMessage {
    #[serde(rename = "Type", default)]
    kind: Option<String>,
    #[serde(rename = "Action", default)]
    action: Option<String>,
    #[serde(rename = "Actor", default)]
    actor: Option<RawActor>,
    #[serde(rename = "timeNano", default)]
    time_nano: Option<i64>,
}

#[derive(Deserialize)]
struct RawActor {
    #[serde(rename = "ID", default)]
    id: Option<String>,
    #[serde(rename = "Attributes", default)]
    attributes: Option<BTreeMap<String, String>>,
}

/// The event log's answer: one JSON message after another. Messages of other kinds
/// (images, networks, volumes) count for the log's oldest event only; a container
/// message without a time or an exit code it should have is garbage.
pub(crate) fn parse_events(body: &[u8]) -> Result<EventLog, DockerError> {
    const CALL: &str = "the event log";
    let mut log = EventLog::default();
    for message in serde_json::Deserializer::from_slice(body).into_iter::<RawMessage>() {
        let message = message.map_err(|source| DockerError::Garbage { call: CALL, source })?;
        log.events += 1;
        if log.events > MAX_LOGGED {
            return Err(DockerError::TooManyEvents);
        }
        let garbage = |what: &str| DockerError::Garbage {
            call: CALL,
            source: <serde_json::Error as serde::de::Error>::custom(what),
        };
        let at = message
            .time_nano
            .and_then(|n| u64::try_from(n).ok())
            .filter(|n| *n > 0)
            .map(|n| UNIX_EPOCH + Duration::from_nanos(n))
            .ok_or_else(|| garbage("an event without timeNano"))?;
        if log.oldest.is_none_or(|oldest| at < oldest) {
            log.oldest = Some(at);
        }
        if message.kind.as_deref() != Some("container") {
            continue;
        }
        let actor = message.actor.unwrap_or(RawActor {
            id: None,
            attributes: None,
        });
        let action = match message.action.as_deref() {
            Some("start") => Action::Start,
            Some("oom") => Action::Oom,
            Some("die") => {
                let code = actor
                    .attributes
                    .as_ref()
                    .and_then(|a| a.get("exitCode"))
                    .and_then(|c| c.parse::<i32>().ok())
                    .ok_or_else(|| garbage("a die event without an exitCode"))?;
                Action::Die(code)
            }
            _ => continue,
        };
        let Some(id) = actor.id.filter(|id| !id.is_empty()) else {
            return Err(garbage("a container event without an ID"));
        };
        log.containers
            .entry(id)
            .or_default()
            .push(Logged { at, action });
    }
    Ok(log)
}

/// The name `docker ps` shows: the first of `Names` that is the container's own
/// (a link adds `/other/alias` names), without the leading `/`.
fn name_of(names: &[String]) -> String {
    let bare = |n: &String| n.strip_prefix('/').unwrap_or(n).to_owned();
    names
        .iter()
        .find(|n| !n.trim_start_matches('/').contains('/'))
        .or_else(|| names.first())
        .map(bare)
        .unwrap_or_default()
}

/// dockerd's state word as a manager's status: a container that is restarting or
/// dead has exited (its exit is kept); one being removed is about to be gone.
fn status_of(state: &str) -> ManagedStatus {
    match state {
        "created" => ManagedStatus::Created,
        "running" | "paused" => ManagedStatus::Running,
        "exited" | "restarting" | "dead" => ManagedStatus::Exited,
        _ => ManagedStatus::Unknown,
    }
}

/// An RFC 3339 time as dockerd writes them (nanoseconds, UTC); Go's zero time
/// (`0001-01-01T00:00:00Z`, "never") and anything before 1970 are none.
fn time(text: &str) -> Option<SystemTime> {
    let parsed = chrono::DateTime::parse_from_rfc3339(text).ok()?;
    let seconds = u64::try_from(parsed.timestamp()).ok()?;
    if seconds == 0 && parsed.timestamp_subsec_nanos() == 0 {
        return None;
    }
    Some(UNIX_EPOCH + Duration::new(seconds, parsed.timestamp_subsec_nanos()))
}

/// The list's `Created`, in seconds since the epoch.
fn seconds(value: i64) -> Option<SystemTime> {
    (value > 0).then(|| UNIX_EPOCH + Duration::from_secs(value as u64))
}

#[cfg(test)]
#[path = "docker_tests.rs"]
mod tests;
