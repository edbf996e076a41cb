//! Time and witnesses: what the checkpoints' own clock cannot prove. A witness
//! cosigns a tree head with its own time, only after checking that it extends the one
//! it cosigned before; so a checkpoint cosigned by enough witnesses was signed no
//! later than they say and is not a fork, and the newest one's age says whether
//! checkpoints stopped arriving.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::signed::Signed;
use super::{Kind, Problem};
use crate::tlog::cosignature::{WitnessKey, cosignatures};

/// How far a checkpoint's own time may be from its witnesses' first cosignature: a
/// gateway sends each checkpoint to its witnesses as it signs it.
pub(crate) const MAX_SKEW: Duration = Duration::from_secs(600);

/// What `audit verify` checks of witnesses and time.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub witnesses: Vec<WitnessKey>,
    /// Cosignatures the newest checkpoint needs (0: witnesses not required).
    pub min_witnesses: usize,
    /// The newest checkpoint (cosigned, when witnesses are required) may be at most
    /// this old.
    pub max_age: Option<Duration>,
    pub now: SystemTime,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            witnesses: Vec::new(),
            min_witnesses: 0,
            max_age: None,
            now: SystemTime::now(),
        }
    }
}

/// What was found, for the summary.
#[derive(Debug, Default)]
pub(crate) struct Witnessed {
    /// Checkpoints cosigned by enough witnesses.
    pub witnessed: usize,
    /// The newest such, and when its witnesses first cosigned it.
    pub newest: Option<(Signed, SystemTime)>,
}

fn at(seconds: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(seconds)
}

fn text(time: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Checks `mine` (this store's checkpoints, sorted oldest first by row and time).
pub(crate) fn check(
    mine: &[Signed],
    options: &Options,
    named: &dyn Fn(&Signed) -> String,
) -> Result<Witnessed, Problem> {
    let problem = |kind, what: String| Problem {
        kind,
        row: None,
        what,
    };
    // A checkpoint's time never goes back from its predecessor's.
    let by_hash: HashMap<_, &Signed> = mine.iter().map(|s| (s.note_hash, s)).collect();
    for s in mine {
        if let Some(before) = s.checkpoint.prev.and_then(|p| by_hash.get(&p))
            && s.checkpoint.time < before.checkpoint.time
        {
            return Err(problem(
                Kind::BackDated,
                format!(
                    "{} names as the one before it {}, which was signed later: its time was set back",
                    named(s),
                    named(before)
                ),
            ));
        }
    }
    // Cosignatures, merged over copies of one tree head shipped with different
    // signature lines.
    let mut cosigned: HashMap<&str, Vec<(String, u64)>> = HashMap::new();
    for s in mine {
        let text = s
            .note
            .rfind("\n\n")
            .map_or(s.note.as_str(), |i| &s.note[..=i]);
        let crate::tlog::cosignature::Cosignatures { good, bad } =
            cosignatures(&s.note, &options.witnesses).unwrap_or_default();
        if let Some(witness) = bad.first() {
            return Err(problem(
                Kind::Forged,
                format!(
                    "{} carries a cosignature by witness {witness} that does not verify: the note was changed after it was cosigned",
                    named(s)
                ),
            ));
        }
        let entry = cosigned.entry(text).or_default();
        for (name, time) in good {
            if !entry.iter().any(|(n, _)| *n == name) {
                entry.push((name, time));
            }
        }
    }
    let witnesses_of = |s: &Signed| -> &[(String, u64)] {
        let text = s
            .note
            .rfind("\n\n")
            .map_or(s.note.as_str(), |i| &s.note[..=i]);
        cosigned.get(text).map_or(&[], Vec::as_slice)
    };
    let mut found = Witnessed::default();
    for s in mine {
        let cosigners = witnesses_of(s);
        let Some(first) = cosigners.iter().map(|(_, t)| *t).min() else {
            continue;
        };
        let last = cosigners.iter().map(|(_, t)| *t).max().unwrap_or(first);
        if s.checkpoint.time + MAX_SKEW < at(first) {
            return Err(problem(
                Kind::BackDated,
                format!(
                    "{} was first cosigned at {} (by {}): its own time is more than {} earlier, so it was back-dated",
                    named(s),
                    text(at(first)),
                    cosigners[0].0,
                    humantime::format_duration(MAX_SKEW)
                ),
            ));
        }
        if s.checkpoint.time > at(last) + MAX_SKEW {
            return Err(problem(
                Kind::BackDated,
                format!(
                    "{} was cosigned by {} at {}, more than {} before its own time: the node's clock or the checkpoint's time is wrong",
                    named(s),
                    cosigners[0].0,
                    text(at(last)),
                    humantime::format_duration(MAX_SKEW)
                ),
            ));
        }
        if options.min_witnesses > 0 && cosigners.len() >= options.min_witnesses {
            found.witnessed += 1;
            let newer = found.newest.as_ref().is_none_or(|(n, _)| {
                (n.checkpoint.row_id, n.checkpoint.time) <= (s.checkpoint.row_id, s.checkpoint.time)
            });
            if newer {
                found.newest = Some((s.clone(), at(first)));
            }
        }
    }
    let Some(newest) = mine
        .iter()
        .max_by_key(|s| (s.checkpoint.row_id, s.checkpoint.time))
    else {
        return Ok(found);
    };
    if options.min_witnesses > 0 {
        let cosigners = witnesses_of(newest);
        if cosigners.len() < options.min_witnesses {
            let names: Vec<&str> = cosigners.iter().map(|(n, _)| n.as_str()).collect();
            return Err(problem(
                Kind::NotWitnessed,
                format!(
                    "the newest checkpoint, {}, is cosigned by {} of the given witnesses{}, and {} are required: a tree head no witness checked may be a fork or a rollback shown only to you",
                    named(newest),
                    cosigners.len(),
                    match names.is_empty() {
                        true => String::new(),
                        false => format!(" ({})", names.join(", ")),
                    },
                    options.min_witnesses
                ),
            ));
        }
    }
    if let Some(max_age) = options.max_age {
        // With witnesses their time counts; without, the node's own.
        let (which, time) = match (&found.newest, options.min_witnesses) {
            (Some((s, time)), 1..) => (s, *time),
            (None, 1..) => (newest, UNIX_EPOCH),
            (_, 0) => (newest, newest.checkpoint.time),
        };
        let age = options.now.duration_since(time).unwrap_or(Duration::ZERO);
        if age > max_age {
            return Err(problem(
                Kind::Stale,
                format!(
                    "the newest checkpoint, {}, dates from {} ({} ago), more than --max-age {}: checkpoints stopped arriving (the gateway stopped, lost its key, or its shipping was cut), and rows since are not covered",
                    named(which),
                    text(time),
                    humantime::format_duration(Duration::from_secs(age.as_secs())),
                    humantime::format_duration(max_age)
                ),
            ));
        }
    }
    Ok(found)
}
