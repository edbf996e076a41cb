//! Readers: a forwarder's view of the spool from a sequence number on, reading only
//! durable records, off the async runtime.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use super::SpoolError;
use super::record::{self, Check, HEADER};
use super::shared::Shared;
use crate::event::Event;

/// Sequence numbers `first..=last` that are not in the spool: dropped under
/// `drop_oldest`, deleted before the reader started, or lost to corruption.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    pub first: u64,
    pub last: u64,
}

impl Gap {
    pub fn count(&self) -> u64 {
        self.last - self.first + 1
    }
}

/// One `Reader::next`: either a gap or events in seq order (never both).
#[derive(Debug, Default)]
pub struct ReadBatch {
    pub gap: Option<Gap>,
    pub events: Vec<Arc<Event>>,
    /// Where the next batch starts.
    pub next_seq: u64,
}

pub struct Reader {
    shared: Arc<Shared>,
    pos: u64,
    open: Option<OpenSegment>,
}

/// The segment a reader is in, with bytes already read from it.
struct OpenSegment {
    first_seq: u64,
    file: File,
    /// Offset of the record at `pos` (or of an earlier one).
    offset: u64,
    window_start: u64,
    window: Vec<u8>,
}

/// Where `pos` is, taken under the lock.
struct Place {
    first_seq: u64,
    path: PathBuf,
    /// Bytes fully written to it.
    bytes: u64,
    end_seq: u64,
    /// The first seq of the next segment, when this one is finished.
    next_first: Option<u64>,
}

const WINDOW: usize = 1 << 20;

impl Reader {
    pub(super) fn new(shared: Arc<Shared>, from_seq: u64) -> Self {
        Self {
            shared,
            pos: from_seq.max(1),
            open: None,
        }
    }

    /// The next seq this reader will return.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Waits until at least one record at or after the position is durable, then
    /// returns up to `max_events` of them (and about `max_bytes`; at least one).
    /// After `close`, returns `SpoolError::Closed` once everything is read.
    pub async fn next(
        &mut self,
        max_events: usize,
        max_bytes: usize,
    ) -> Result<ReadBatch, SpoolError> {
        loop {
            let mut progress = self.shared.progress.subscribe();
            let durable = {
                let seen = progress
                    .wait_for(|p| p.durable_seq >= self.pos || p.stopped || p.failed.is_some())
                    .await
                    .map_err(|_| SpoolError::Closed)?;
                if seen.durable_seq < self.pos {
                    return Err(match &seen.failed {
                        Some(error) => SpoolError::Write(Arc::clone(error)),
                        None => SpoolError::Closed,
                    });
                }
                seen.durable_seq
            };
            let place = {
                let state = self.shared.lock();
                let first = state.first_seq();
                if self.pos < first {
                    let gap = Gap {
                        first: self.pos,
                        last: first - 1,
                    };
                    self.pos = first;
                    self.open = None;
                    return Ok(self.gap(gap));
                }
                let i = state
                    .segments
                    .iter()
                    .rposition(|s| s.first_seq <= self.pos)
                    .unwrap_or(0);
                let Some(segment) = state.segments.get(i) else {
                    return Err(SpoolError::Closed);
                };
                Place {
                    first_seq: segment.first_seq,
                    path: segment.path.clone(),
                    bytes: segment.bytes,
                    end_seq: segment.end_seq,
                    next_first: state.segments.get(i + 1).map(|s| s.first_seq),
                }
            };
            let open = self.open.take();
            let pos = self.pos;
            let looked_up = place.first_seq;
            let read = tokio::task::spawn_blocking(move || {
                read(open, &place, pos, durable, max_events.max(1), max_bytes)
            })
            .await
            .map_err(|e| SpoolError::Read {
                path: PathBuf::new(),
                source: std::io::Error::other(e),
            })?;
            let (open, batch) = match read {
                // Deleted (every cursor passed it, or drop_oldest) since it was
                // looked up: the next turn reports the gap.
                Err(SpoolError::Read { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound
                        && !self.retained(looked_up) =>
                {
                    continue;
                }
                other => other?,
            };
            self.open = open;
            self.pos = batch.next_seq;
            if batch.gap.is_some() || !batch.events.is_empty() {
                if let Some(gap) = batch.gap {
                    metrics::counter!("eventgate_spool_read_gaps_total").increment(1);
                    tracing::warn!(
                        first = gap.first,
                        last = gap.last,
                        "spool reader skipped records no longer in the spool"
                    );
                }
                return Ok(batch);
            }
            // The segment ended: the next turn finds the following one.
        }
    }

    fn retained(&self, first_seq: u64) -> bool {
        let state = self.shared.lock();
        state.segments.iter().any(|s| s.first_seq == first_seq)
    }

    fn gap(&self, gap: Gap) -> ReadBatch {
        ReadBatch {
            gap: Some(gap),
            events: Vec::new(),
            next_seq: self.pos,
        }
    }
}

type Read = (Option<OpenSegment>, ReadBatch);

fn read(
    open: Option<OpenSegment>,
    place: &Place,
    mut pos: u64,
    durable: u64,
    max_events: usize,
    max_bytes: usize,
) -> Result<Read, SpoolError> {
    let io = |source| SpoolError::Read {
        path: place.path.clone(),
        source,
    };
    let mut open = match open {
        Some(open) if open.first_seq == place.first_seq => open,
        _ => OpenSegment {
            first_seq: place.first_seq,
            file: File::open(&place.path).map_err(io)?,
            offset: 0,
            window_start: 0,
            window: Vec::new(),
        },
    };
    let mut events = Vec::new();
    let mut bytes = 0;
    let mut gap = None;
    while events.len() < max_events && bytes < max_bytes {
        let found = open.record(place.bytes).map_err(io)?.map(|record| {
            let decoded = match record::check(record) {
                Check::Valid { seq, .. } => record::decode(record).filter(|e| e.seq == seq),
                _ => None,
            };
            (decoded, record.len())
        });
        let Some((decoded, len)) = found else {
            // End of what is written here.
            if let Some(next) = place.next_first
                && events.is_empty()
                && pos < next
            {
                gap = Some(Gap {
                    first: pos,
                    last: next - 1,
                });
                pos = next;
            }
            break;
        };
        let Some(event) = decoded else {
            // Damaged after recovery checked it: skip what this segment holds.
            metrics::counter!("eventgate_spool_corrupt_records_total").increment(1);
            tracing::error!(path = %place.path.display(), offset = open.offset, "corrupt spool record while reading; skipping the rest of the segment");
            let end = place.next_first.unwrap_or(place.end_seq).max(pos + 1);
            if events.is_empty() {
                gap = Some(Gap {
                    first: pos,
                    last: end - 1,
                });
                pos = end;
            }
            open.offset = place.bytes;
            break;
        };
        if event.seq < pos {
            open.offset += len as u64;
            continue;
        }
        if event.seq > durable {
            break;
        }
        if event.seq > pos {
            if events.is_empty() {
                gap = Some(Gap {
                    first: pos,
                    last: event.seq - 1,
                });
                pos = event.seq;
            }
            break;
        }
        open.offset += len as u64;
        bytes += len;
        pos = event.seq + 1;
        events.push(Arc::new(event));
    }
    Ok((
        Some(open),
        ReadBatch {
            gap,
            events,
            next_seq: pos,
        },
    ))
}

impl OpenSegment {
    /// The whole record at `offset`, or `None` at the end of the written bytes.
    fn record(&mut self, written: u64) -> std::io::Result<Option<&[u8]>> {
        if self.offset + HEADER as u64 > written {
            return Ok(None);
        }
        self.fill(HEADER, written)?;
        let at = (self.offset - self.window_start) as usize;
        let body = u32::from_le_bytes([
            self.window[at],
            self.window[at + 1],
            self.window[at + 2],
            self.window[at + 3],
        ]) as usize;
        // A bad length is left for `check` to refuse; read no further than written.
        let len = (HEADER + body).min((written - self.offset) as usize);
        self.fill(len, written)?;
        let at = (self.offset - self.window_start) as usize;
        Ok(Some(&self.window[at..at + len]))
    }

    /// Makes `[offset, offset + len)` available in the window.
    fn fill(&mut self, len: usize, written: u64) -> std::io::Result<()> {
        let end = self.window_start + self.window.len() as u64;
        if self.offset >= self.window_start && self.offset + len as u64 <= end {
            return Ok(());
        }
        let want = (len.max(WINDOW) as u64).min(written - self.offset) as usize;
        self.window.resize(want, 0);
        self.file.read_exact_at(&mut self.window, self.offset)?;
        self.window_start = self.offset;
        Ok(())
    }
}
