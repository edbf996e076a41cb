//! The file system's contents as two trees: what the programs see (`live`) and what a
//! disk would still hold after a power cut (`durable`). Every change lands in `live`;
//! only a sync copies from `live` to `durable`, as strictly as a journaling file system
//! promises and no more:
//! - `fsync` of a file: its data, size and attributes; `fdatasync`: its data and size.
//!   Neither makes the file's name durable.
//! - `fsync` of a directory: its entries as they are now (created, removed and renamed
//!   names alike). A node that becomes reachable this way but was never synced itself
//!   comes back empty (ext4 without `auto_da_alloc`: the inode, not its data).
//!
//! A cut replaces `live` with `durable`. Inode numbers stay the same across a cut.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::{Instant, SystemTime};

mod boundary;
mod sync;

pub use boundary::Writeback;

pub const ROOT: u64 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Socket,
    Fifo,
}

#[derive(Clone, Debug)]
pub struct Node {
    pub kind: Kind,
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    pub data: Vec<u8>,
    pub entries: BTreeMap<OsString, u64>,
    pub target: PathBuf,
    /// Names pointing at the node (directories: 2 + subdirectories, as `stat` says).
    pub nlink: u32,
    /// Open handles (live tree only): an unlinked file lives on while open.
    pub opens: u32,
}

impl Node {
    fn new(kind: Kind, perm: u16, uid: u32, gid: u32) -> Node {
        let now = SystemTime::now();
        Node {
            kind,
            perm,
            uid,
            gid,
            atime: now,
            mtime: now,
            ctime: now,
            data: Vec::new(),
            entries: BTreeMap::new(),
            target: PathBuf::new(),
            nlink: 0,
            opens: 0,
        }
    }

    /// The node as a cut finds it when only its name was synced: metadata, no content.
    fn hollow(&self) -> Node {
        Node {
            data: Vec::new(),
            entries: BTreeMap::new(),
            opens: 0,
            ..self.clone()
        }
    }
}

/// What happened since the mount, for the test's report.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub cuts: u64,
    pub fsyncs: u64,
    pub fdatasyncs: u64,
    pub dir_fsyncs: u64,
    /// Bytes of file data the cuts threw away (live content differing from durable).
    pub bytes_lost: u64,
}

pub type Result<T> = std::result::Result<T, i32>;

#[derive(Clone, Default)]
struct Tree {
    nodes: HashMap<u64, Node>,
}

pub struct State {
    live: Tree,
    durable: Tree,
    next_ino: u64,
    /// When each file was last synced (`fsync` or `fdatasync`).
    synced_at: HashMap<u64, Instant>,
    pub stats: Stats,
    /// Syncs and renames done since the mount (see `boundary.rs`).
    boundaries: u64,
    freeze: Option<boundary::Freeze>,
}

impl Default for State {
    fn default() -> Self {
        State::new()
    }
}

impl State {
    pub fn new() -> State {
        let mut root = Node::new(Kind::Dir, 0o755, 0, 0);
        root.nlink = 2;
        let tree = Tree {
            nodes: HashMap::from([(ROOT, root)]),
        };
        State {
            live: tree.clone(),
            durable: tree,
            next_ino: ROOT + 1,
            synced_at: HashMap::new(),
            stats: Stats::default(),
            boundaries: 0,
            freeze: None,
        }
    }

    pub fn node(&self, ino: u64) -> Result<&Node> {
        self.live.nodes.get(&ino).ok_or(libc::ENOENT)
    }

    fn node_mut(&mut self, ino: u64) -> Result<&mut Node> {
        self.live.nodes.get_mut(&ino).ok_or(libc::ENOENT)
    }

    fn dir(&self, ino: u64) -> Result<&Node> {
        let node = self.node(ino)?;
        if node.kind != Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        Ok(node)
    }

    pub fn lookup(&self, parent: u64, name: &OsStr) -> Result<u64> {
        self.dir(parent)?
            .entries
            .get(name)
            .copied()
            .ok_or(libc::ENOENT)
    }

    /// A new node named `name` in `parent`.
    pub fn make(
        &mut self,
        parent: u64,
        name: &OsStr,
        kind: Kind,
        perm: u16,
        ids: (u32, u32),
    ) -> Result<u64> {
        if self.dir(parent)?.entries.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let mut node = Node::new(kind, perm, ids.0, ids.1);
        node.nlink = if kind == Kind::Dir { 2 } else { 1 };
        self.live.nodes.insert(ino, node);
        let dir = self.node_mut(parent)?;
        dir.entries.insert(name.to_owned(), ino);
        dir.mtime = SystemTime::now();
        if kind == Kind::Dir {
            dir.nlink += 1;
        }
        Ok(ino)
    }

    pub fn symlink(
        &mut self,
        parent: u64,
        name: &OsStr,
        target: PathBuf,
        ids: (u32, u32),
    ) -> Result<u64> {
        let ino = self.make(parent, name, Kind::Symlink, 0o777, ids)?;
        self.node_mut(ino)?.target = target;
        Ok(ino)
    }

    pub fn link(&mut self, ino: u64, parent: u64, name: &OsStr) -> Result<()> {
        if self.node(ino)?.kind == Kind::Dir {
            return Err(libc::EPERM);
        }
        if self.dir(parent)?.entries.contains_key(name) {
            return Err(libc::EEXIST);
        }
        self.node_mut(parent)?.entries.insert(name.to_owned(), ino);
        self.node_mut(ino)?.nlink += 1;
        Ok(())
    }

    /// Takes `name` out of `parent`; the node goes once nothing names or holds it.
    fn drop_name(&mut self, parent: u64, name: &OsStr) -> Result<u64> {
        let dir = self.node_mut(parent)?;
        let ino = dir.entries.remove(name).ok_or(libc::ENOENT)?;
        dir.mtime = SystemTime::now();
        let is_dir = self.node(ino)?.kind == Kind::Dir;
        if is_dir {
            self.node_mut(parent)?.nlink -= 1;
        }
        let node = self.node_mut(ino)?;
        node.nlink = if is_dir { 0 } else { node.nlink - 1 };
        node.ctime = SystemTime::now();
        self.forget_if_unused(ino);
        Ok(ino)
    }

    fn forget_if_unused(&mut self, ino: u64) {
        if self
            .live
            .nodes
            .get(&ino)
            .is_some_and(|n| n.nlink == 0 && n.opens == 0)
        {
            self.live.nodes.remove(&ino);
        }
    }

    pub fn unlink(&mut self, parent: u64, name: &OsStr) -> Result<()> {
        let ino = self.lookup(parent, name)?;
        if self.node(ino)?.kind == Kind::Dir {
            return Err(libc::EISDIR);
        }
        self.drop_name(parent, name).map(drop)
    }

    pub fn rmdir(&mut self, parent: u64, name: &OsStr) -> Result<()> {
        let ino = self.lookup(parent, name)?;
        let node = self.dir(ino)?;
        if !node.entries.is_empty() {
            return Err(libc::ENOTEMPTY);
        }
        self.drop_name(parent, name).map(drop)
    }

    pub fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        no_replace: bool,
    ) -> Result<()> {
        let ino = self.lookup(parent, name)?;
        self.dir(new_parent)?;
        if let Ok(old) = self.lookup(new_parent, new_name) {
            if old == ino {
                return Ok(());
            }
            if no_replace {
                return Err(libc::EEXIST);
            }
            let (moving, replaced) = (self.node(ino)?.kind, self.node(old)?.kind);
            match (moving == Kind::Dir, replaced == Kind::Dir) {
                (true, false) => return Err(libc::ENOTDIR),
                (false, true) => return Err(libc::EISDIR),
                (true, true) if !self.node(old)?.entries.is_empty() => {
                    return Err(libc::ENOTEMPTY);
                }
                _ => {}
            }
            self.drop_name(new_parent, new_name)?;
        }
        let is_dir = self.node(ino)?.kind == Kind::Dir;
        let now = SystemTime::now();
        let dir = self.node_mut(parent)?;
        dir.entries.remove(name);
        dir.mtime = now;
        if is_dir {
            dir.nlink -= 1;
        }
        let dir = self.node_mut(new_parent)?;
        dir.entries.insert(new_name.to_owned(), ino);
        dir.mtime = now;
        if is_dir {
            dir.nlink += 1;
        }
        self.node_mut(ino)?.ctime = now;
        self.boundary();
        Ok(())
    }

    pub fn open(&mut self, ino: u64) -> Result<()> {
        self.node_mut(ino)?.opens += 1;
        Ok(())
    }

    pub fn release(&mut self, ino: u64) {
        if let Some(node) = self.live.nodes.get_mut(&ino) {
            node.opens = node.opens.saturating_sub(1);
        }
        self.forget_if_unused(ino);
    }

    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Result<&[u8]> {
        let data = &self.node(ino)?.data;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let end = start.saturating_add(size as usize).min(data.len());
        Ok(&data[start..end])
    }

    pub fn write(&mut self, ino: u64, offset: u64, bytes: &[u8]) -> Result<u32> {
        let node = self.node_mut(ino)?;
        let start = usize::try_from(offset).map_err(|_| libc::EFBIG)?;
        let end = start + bytes.len();
        if node.data.len() < end {
            node.data.resize(end, 0);
        }
        node.data[start..end].copy_from_slice(bytes);
        node.mtime = SystemTime::now();
        Ok(bytes.len() as u32)
    }

    pub fn set_size(&mut self, ino: u64, size: u64) -> Result<()> {
        let node = self.node_mut(ino)?;
        if node.kind == Kind::Dir {
            return Err(libc::EISDIR);
        }
        node.data
            .resize(usize::try_from(size).map_err(|_| libc::EFBIG)?, 0);
        node.mtime = SystemTime::now();
        Ok(())
    }

    /// `fallocate` mode 0 (grow) and `FALLOC_FL_KEEP_SIZE` (nothing to reserve in memory).
    pub fn fallocate(&mut self, ino: u64, offset: u64, length: u64, mode: i32) -> Result<()> {
        let end = offset.checked_add(length).ok_or(libc::EFBIG)?;
        match mode {
            0 => {
                if end > self.node(ino)?.data.len() as u64 {
                    self.set_size(ino, end)?;
                }
                Ok(())
            }
            libc::FALLOC_FL_KEEP_SIZE => self.node(ino).map(drop),
            _ => Err(libc::EOPNOTSUPP),
        }
    }

    pub fn set_attrs(
        &mut self,
        ino: u64,
        perm: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        times: (Option<SystemTime>, Option<SystemTime>),
    ) -> Result<()> {
        let node = self.node_mut(ino)?;
        if let Some(mode) = perm {
            node.perm = (mode & 0o7777) as u16;
        }
        if let Some(uid) = uid {
            node.uid = uid;
        }
        if let Some(gid) = gid {
            node.gid = gid;
        }
        if let Some(atime) = times.0 {
            node.atime = atime;
        }
        if let Some(mtime) = times.1 {
            node.mtime = mtime;
        }
        node.ctime = SystemTime::now();
        Ok(())
    }

    pub fn readdir(&self, ino: u64) -> Result<Vec<(u64, Kind, OsString)>> {
        let dir = self.dir(ino)?;
        let mut out = vec![
            (ino, Kind::Dir, OsString::from(".")),
            (ino, Kind::Dir, OsString::from("..")),
        ];
        for (name, child) in &dir.entries {
            let kind = self.node(*child).map_or(Kind::File, |n| n.kind);
            out.push((*child, kind, name.clone()));
        }
        Ok(out)
    }

    /// The live path `path` (relative to the root) resolved, for tests.
    pub fn resolve(&self, path: &str) -> Result<u64> {
        path.split('/')
            .filter(|p| !p.is_empty())
            .try_fold(ROOT, |dir, name| self.lookup(dir, OsStr::new(name)))
    }
}
