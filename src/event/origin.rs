//! Whether an event was received live or reconstructed by a reconcile, and where a
//! reconstructed event's timestamp came from.

use std::fmt;

/// Whether an event was received as it happened or reconstructed afterwards.
///
/// After a gap (eventgate stopped, an upstream reconnecting) eventgate compares the
/// daemon's state with what it recorded and records each difference as the standard
/// containerd event for it. Those events are marked [`Origin::Reconciled`] in every
/// record eventgate keeps (spool, audit store, JSON lines, Kafka headers, dead
/// letters); gRPC subscribers receive them as ordinary envelopes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Origin {
    /// As received from a publisher, a forwarder or an upstream.
    #[default]
    Live,
    /// Synthesized from a difference between the daemon's state and the record.
    Reconciled { clock: Clock, from: Witness },
    /// Received live, and repeating a change a reconcile already recorded: the
    /// upstream published it before the reconcile's lists were read, and it arrived
    /// after the reconcile had told it (a slow stream). Kept, as everything received
    /// is, and counted once with the reconciled event it repeats (`stats`, the
    /// timeline and `query --pod` leave it out).
    Repeat,
}

/// Whose record of the state a reconciled event was reconstructed from: containerd's
/// own lists, or the manager above it that keeps what containerd deletes (the CRI on a
/// Kubernetes node, dockerd on a Docker host).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Witness {
    #[default]
    Containerd,
    Cri,
    Docker,
}

impl Witness {
    /// Every value [`Witness::label`] returns, in wire order (the spool keeps the index).
    pub const LABELS: [&'static str; 3] = ["containerd", "cri", "docker"];

    /// `containerd`, `cri` or `docker`: the `reconciled_from` column, field and header.
    pub fn label(self) -> &'static str {
        Self::LABELS[self.index()]
    }

    pub fn index(self) -> usize {
        match self {
            Witness::Containerd => 0,
            Witness::Cri => 1,
            Witness::Docker => 2,
        }
    }

    pub fn from_index(index: usize) -> Option<Witness> {
        [Witness::Containerd, Witness::Cri, Witness::Docker]
            .get(index)
            .copied()
    }

    pub fn from_label(text: &str) -> Option<Witness> {
        Self::LABELS
            .iter()
            .position(|l| *l == text)
            .and_then(Self::from_index)
    }
}

/// Where a reconciled event's envelope timestamp came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Clock {
    /// The daemon's own record of the change (a task's `exited_at`, a container's
    /// `created_at`): when it happened.
    Daemon,
    /// eventgate's clock when it found the difference: the daemon did not say when
    /// it happened, only that it had by then.
    Reconcile,
}

impl Origin {
    /// Every value [`Origin::label`] returns.
    pub const LABELS: [&'static str; 3] = ["live", "reconciled", "repeat"];

    /// `live`, `reconciled` or `repeat`: the `origin` column, field and header.
    pub fn label(self) -> &'static str {
        match self {
            Origin::Live => "live",
            Origin::Reconciled { .. } => "reconciled",
            Origin::Repeat => "repeat",
        }
    }

    /// The clock of a reconciled event; `None` for a live one.
    pub fn clock(self) -> Option<Clock> {
        match self {
            Origin::Live | Origin::Repeat => None,
            Origin::Reconciled { clock, .. } => Some(clock),
        }
    }

    /// A reconciled event from containerd's own lists, with `clock`.
    pub const fn reconciled(clock: Clock) -> Origin {
        Origin::Reconciled {
            clock,
            from: Witness::Containerd,
        }
    }

    /// Whose record a reconciled event was reconstructed from; `None` for a live one.
    pub fn witness(self) -> Option<Witness> {
        match self {
            Origin::Live | Origin::Repeat => None,
            Origin::Reconciled { from, .. } => Some(from),
        }
    }

    pub fn is_live(self) -> bool {
        self == Origin::Live
    }

    /// The inverse of [`Origin::label`] and [`Clock::label`] as stored: `live` has no
    /// clock, `reconciled` must have one.
    pub fn from_labels(origin: &str, clock: Option<&str>) -> Result<Origin, String> {
        match (origin, clock) {
            ("live", None) => Ok(Origin::Live),
            ("repeat", None) => Ok(Origin::Repeat),
            ("reconciled", Some(clock)) => match Clock::from_label(clock) {
                Some(clock) => Ok(Origin::reconciled(clock)),
                None => Err(format!(
                    "origin_clock {clock:?} is not \"daemon\" or \"reconcile\""
                )),
            },
            ("live" | "repeat", Some(clock)) => {
                Err(format!("a {origin} event has origin_clock {clock:?}"))
            }
            ("reconciled", None) => Err("a reconciled event has no origin_clock".to_owned()),
            (other, _) => Err(format!(
                "origin {other:?} is not \"live\", \"reconciled\" or \"repeat\""
            )),
        }
    }
}

impl Origin {
    /// [`Origin::from_labels`] with the witness's label as stored next to them (the
    /// `reconciled_from` column, field and header): a reconciled event without one was
    /// recorded before witnesses were kept, when every reconciled event was
    /// containerd's; a live event has none.
    pub fn from_stored(
        origin: &str,
        clock: Option<&str>,
        from: Option<&str>,
    ) -> Result<Origin, String> {
        match (Origin::from_labels(origin, clock)?, from) {
            (origin, None) => Ok(origin),
            (origin @ (Origin::Live | Origin::Repeat), Some(from)) => Err(format!(
                "a {} event has reconciled_from {from:?}",
                origin.label()
            )),
            (Origin::Reconciled { clock, .. }, Some(from)) => match Witness::from_label(from) {
                Some(from) => Ok(Origin::Reconciled { clock, from }),
                None => Err(format!(
                    "reconciled_from {from:?} is not \"containerd\", \"cri\" or \"docker\""
                )),
            },
        }
    }
}

impl Clock {
    /// `daemon` or `reconcile`: the `origin_clock` column, field and header.
    pub fn label(self) -> &'static str {
        match self {
            Clock::Daemon => "daemon",
            Clock::Reconcile => "reconcile",
        }
    }

    pub fn from_label(text: &str) -> Option<Clock> {
        match text {
            "daemon" => Some(Clock::Daemon),
            "reconcile" => Some(Clock::Reconcile),
            _ => None,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.clock() {
            None => f.write_str(self.label()),
            Some(clock) => write!(f, "{} ({} clock)", self.label(), clock.label()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Origin; 4] = [
        Origin::Live,
        Origin::reconciled(Clock::Daemon),
        Origin::reconciled(Clock::Reconcile),
        Origin::Repeat,
    ];

    #[test]
    fn labels_read_back_and_bad_ones_are_named() {
        for origin in ALL {
            assert!(Origin::LABELS.contains(&origin.label()));
            let clock = origin.clock().map(Clock::label);
            assert_eq!(Origin::from_labels(origin.label(), clock), Ok(origin));
        }
        assert_eq!(
            ALL.map(|o| o.to_string()),
            [
                "live",
                "reconciled (daemon clock)",
                "reconciled (reconcile clock)",
                "repeat"
            ]
        );
        for (origin, clock, error) in [
            ("live", Some("daemon"), "a live event has origin_clock"),
            ("repeat", Some("daemon"), "a repeat event has origin_clock"),
            ("reconciled", None, "has no origin_clock"),
            ("reconciled", Some("wall"), "\"wall\" is not"),
            ("replayed", None, "\"replayed\" is not"),
            ("", None, "\"\" is not"),
        ] {
            let found = Origin::from_labels(origin, clock).unwrap_err();
            assert!(found.contains(error), "{origin} {clock:?}: {found}");
        }
    }

    #[test]
    fn witnesses_read_back_and_a_missing_one_is_containerd() {
        for from in [Witness::Containerd, Witness::Cri, Witness::Docker] {
            assert_eq!(Witness::from_label(from.label()), Some(from));
            let origin = Origin::Reconciled {
                clock: Clock::Reconcile,
                from,
            };
            assert_eq!(origin.witness(), Some(from));
            assert_eq!(
                Origin::from_stored("reconciled", Some("reconcile"), Some(from.label())),
                Ok(origin)
            );
        }
        assert_eq!(Origin::Live.witness(), None);
        assert_eq!(Origin::from_stored("live", None, None), Ok(Origin::Live));
        assert_eq!(
            Origin::from_stored("reconciled", Some("daemon"), None),
            Ok(Origin::reconciled(Clock::Daemon)),
            "recorded before witnesses were kept"
        );
        for (origin, clock, from, error) in [
            (
                "live",
                None,
                Some("cri"),
                "a live event has reconciled_from",
            ),
            (
                "reconciled",
                Some("daemon"),
                Some("kubelet"),
                "\"kubelet\" is not",
            ),
            ("reconciled", Some("daemon"), Some(""), "\"\" is not"),
            ("reconciled", None, Some("cri"), "has no origin_clock"),
        ] {
            let found = Origin::from_stored(origin, clock, from).unwrap_err();
            assert!(found.contains(error), "{origin} {from:?}: {found}");
        }
    }
}
