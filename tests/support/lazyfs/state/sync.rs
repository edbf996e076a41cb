//! What each sync copies from the live tree to the durable one, and the cut.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use super::{Kind, Node, ROOT, Result, State, Tree};

impl State {
    /// `fsync` (`datasync` false) or `fdatasync` of a file, or `fsync` of a directory.
    pub fn fsync(&mut self, ino: u64, datasync: bool) -> Result<()> {
        let live = self.node(ino)?.clone();
        if live.kind == Kind::Dir {
            return self.fsync_dir(ino);
        }
        self.synced_at.insert(ino, Instant::now());
        if datasync {
            self.stats.fdatasyncs += 1;
        } else {
            self.stats.fsyncs += 1;
        }
        let durable = self
            .durable
            .nodes
            .entry(ino)
            .or_insert_with(|| live.hollow());
        if datasync {
            durable.data = live.data;
        } else {
            *durable = Node {
                entries: BTreeMap::new(),
                opens: 0,
                ..live
            };
        }
        self.boundary();
        Ok(())
    }

    /// Makes the directory's entries, as they are now, durable.
    pub fn fsync_dir(&mut self, ino: u64) -> Result<()> {
        self.stats.dir_fsyncs += 1;
        let live = self.dir(ino)?.clone();
        for child in live.entries.values() {
            if !self.durable.nodes.contains_key(child) {
                let hollow = self.node(*child)?.hollow();
                self.durable.nodes.insert(*child, hollow);
            }
        }
        let durable = self
            .durable
            .nodes
            .entry(ino)
            .or_insert_with(|| live.hollow());
        durable.entries = live.entries;
        self.collect_durable();
        self.boundary();
        Ok(())
    }

    /// Drops durable nodes a cut could not reach and nobody can sync any more.
    fn collect_durable(&mut self) {
        let reachable = reachable(&self.durable);
        let live = &self.live.nodes;
        self.durable
            .nodes
            .retain(|ino, _| reachable.contains(ino) || live.contains_key(ino));
    }

    /// The power cut: everything not synced is gone.
    pub fn cut(&mut self) {
        self.stats.cuts += 1;
        let reachable = reachable(&self.durable);
        self.durable.nodes.retain(|ino, _| reachable.contains(ino));
        let mut lost = 0u64;
        for (ino, node) in &self.live.nodes {
            let kept = self.durable.nodes.get(ino).map_or(&[][..], |n| &n.data);
            let common = kept
                .iter()
                .zip(&node.data)
                .take_while(|(a, b)| a == b)
                .count();
            lost += (node.data.len() - common) as u64;
        }
        self.stats.bytes_lost += lost;
        let mut tree = self.durable.clone();
        count_links(&mut tree);
        self.live = tree;
    }

    /// The last sync of a file now named in the directory `dir` (a live path).
    pub fn last_sync_in(&self, dir: &str) -> Option<Instant> {
        let dir = self.dir(self.resolve(dir).ok()?).ok()?;
        dir.entries
            .values()
            .filter_map(|ino| self.synced_at.get(ino))
            .max()
            .copied()
    }
}

fn reachable(tree: &Tree) -> HashSet<u64> {
    let mut seen = HashSet::from([ROOT]);
    let mut stack = vec![ROOT];
    while let Some(ino) = stack.pop() {
        if let Some(node) = tree.nodes.get(&ino) {
            for child in node.entries.values() {
                if seen.insert(*child) {
                    stack.push(*child);
                }
            }
        }
    }
    seen
}

/// Link counts recomputed from the entries a cut left.
fn count_links(tree: &mut Tree) {
    let mut counts: HashMap<u64, u32> = HashMap::new();
    for node in tree.nodes.values() {
        for child in node.entries.values() {
            *counts.entry(*child).or_default() += 1;
        }
    }
    let subdirs: HashMap<u64, u32> = tree
        .nodes
        .iter()
        .map(|(ino, node)| {
            let n = node
                .entries
                .values()
                .filter(|c| tree.nodes.get(c).is_some_and(|c| c.kind == Kind::Dir))
                .count() as u32;
            (*ino, n)
        })
        .collect();
    for (ino, node) in tree.nodes.iter_mut() {
        node.opens = 0;
        node.nlink = if node.kind == Kind::Dir {
            2 + subdirs.get(ino).copied().unwrap_or(0)
        } else {
            counts.get(ino).copied().unwrap_or(0)
        };
    }
}
