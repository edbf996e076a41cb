//! Cut points at sync boundaries, and what unsynced writes may leave behind.
//!
//! Every `fsync`, `fdatasync`, directory `fsync` and `rename` ends a boundary: the
//! moment right after it is where a power cut finds the most just made durable, and
//! where bugs that depend on the order of syncs and renames live. A test counts the
//! boundaries of a workload once, then runs it again for each of them with
//! [`State::freeze_after`]: when that boundary passes, both trees are copied, and the
//! cut that follows ([`State::cut_with`]) restores that moment, whatever the programs
//! did after it (they ran on, as they would not have without power: the test compares
//! only what they were told before [`State::frozen_at`]).
//!
//! At the cut, each file's data that was written and not synced is, by
//! [`Writeback`]: dropped whole (the model's default), kept as a prefix (a write
//! torn by the cut), or kept page by page in any subset (writeback out of order,
//! with holes where a page did not make it). Names follow the directory syncs only.

use std::time::Instant;

use super::{State, Tree};

/// What becomes of unsynced file data at a cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writeback {
    /// All of it is lost.
    Dropped,
    /// A prefix of each file's unsynced bytes reached the disk (chosen by `seed`).
    Torn { seed: u64 },
    /// Any subset of each file's unsynced 4 KiB pages reached the disk, the rest
    /// reads as zeros or as the old content; the size is the old or the new one.
    Reordered { seed: u64 },
}

/// The boundary to freeze at, and the moment once it passed.
#[derive(Clone, Default)]
pub(super) struct Freeze {
    after: u64,
    image: Option<Image>,
}

#[derive(Clone)]
struct Image {
    at: Instant,
    live: Tree,
    durable: Tree,
}

const PAGE: usize = 4096;

impl State {
    /// Called once a sync or a rename is done.
    pub(super) fn boundary(&mut self) {
        self.boundaries += 1;
        if let Some(freeze) = &mut self.freeze
            && freeze.image.is_none()
            && self.boundaries == freeze.after
        {
            freeze.image = Some(Image {
                at: Instant::now(),
                live: self.live.clone(),
                durable: self.durable.clone(),
            });
        }
    }

    /// Boundaries passed since the mount.
    pub fn boundaries(&self) -> u64 {
        self.boundaries
    }

    /// The next cut happens right after the `n`th boundary from now (1: the next).
    pub fn freeze_after(&mut self, n: u64) {
        self.freeze = Some(Freeze {
            after: self.boundaries + n.max(1),
            image: None,
        });
    }

    /// When the frozen boundary passed; `None` before it did.
    pub fn frozen_at(&self) -> Option<Instant> {
        self.freeze.as_ref()?.image.as_ref().map(|image| image.at)
    }

    /// The power cut, at the frozen boundary if one passed (else now), with the
    /// unsynced data treated as `writeback` says.
    pub fn cut_with(&mut self, writeback: Writeback) {
        if let Some(image) = self.freeze.take().and_then(|freeze| freeze.image) {
            self.live = image.live;
            self.durable = image.durable;
        }
        let mut random = match writeback {
            Writeback::Dropped => 1,
            // splitmix64 of the seed: nearby seeds start far apart.
            Writeback::Torn { seed } | Writeback::Reordered { seed } => {
                let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                (z ^ (z >> 31)) | 1
            }
        };
        let mut next = move |below: usize| {
            random ^= random << 13;
            random ^= random >> 7;
            random ^= random << 17;
            usize::try_from(random % below.max(1) as u64).unwrap_or(0)
        };
        if writeback != Writeback::Dropped {
            let mut inos: Vec<u64> = self.durable.nodes.keys().copied().collect();
            inos.sort_unstable();
            for ino in inos {
                let Some(live) = self.live.nodes.get(&ino) else {
                    continue;
                };
                let Some(durable) = self.durable.nodes.get_mut(&ino) else {
                    continue;
                };
                if live.kind != super::Kind::File || live.data == durable.data {
                    continue;
                }
                let common = durable
                    .data
                    .iter()
                    .zip(&live.data)
                    .take_while(|(a, b)| a == b)
                    .count();
                match writeback {
                    Writeback::Dropped => {}
                    Writeback::Torn { .. } => {
                        // Up to where the cut tore the writes, the new bytes.
                        let end = common + next(live.data.len() - common + 1);
                        let mut data = live.data[..end].to_vec();
                        if durable.data.len() > end {
                            data.extend_from_slice(&durable.data[end..]);
                        }
                        durable.data = data;
                    }
                    Writeback::Reordered { .. } => {
                        let old = std::mem::take(&mut durable.data);
                        let grown = next(2) == 1;
                        let size = if grown { live.data.len() } else { old.len() };
                        let mut data = vec![0u8; size];
                        let kept = old.len().min(size);
                        data[..kept].copy_from_slice(&old[..kept]);
                        for start in (common / PAGE * PAGE..size).step_by(PAGE) {
                            let end = (start + PAGE).min(size).min(live.data.len());
                            if start < end && next(2) == 1 {
                                data[start..end].copy_from_slice(&live.data[start..end]);
                            }
                        }
                        durable.data = data;
                    }
                }
            }
        }
        self.cut();
    }
}
