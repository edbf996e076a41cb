//! The layer itself: what a cut keeps, through the model and through a real mount.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;

use super::Mount;
use super::state::{Kind, ROOT, State, Writeback};

fn name(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn content(state: &State, path: &str) -> Option<Vec<u8>> {
    let ino = state.resolve(path).ok()?;
    Some(state.node(ino).ok()?.data.clone())
}

#[test]
fn model_synced_data_and_entries_survive_a_cut_and_the_rest_does_not() {
    let mut s = State::new();
    let dir = s.make(ROOT, name("d"), Kind::Dir, 0o750, (0, 0)).unwrap();
    s.fsync_dir(ROOT).unwrap();
    let f = s.make(dir, name("f"), Kind::File, 0o640, (0, 0)).unwrap();
    s.write(f, 0, b"synced").unwrap();
    s.fsync(f, true).unwrap();
    s.fsync_dir(dir).unwrap();
    s.write(f, 6, b" and not").unwrap();
    let g = s.make(dir, name("g"), Kind::File, 0o640, (0, 0)).unwrap();
    s.write(g, 0, b"never named durably").unwrap();
    s.fsync(g, false).unwrap();
    s.cut();
    assert_eq!(content(&s, "d/f").as_deref(), Some(&b"synced"[..]));
    assert_eq!(
        s.resolve("d/g"),
        Err(libc::ENOENT),
        "a name needs its directory synced"
    );
    assert_eq!(s.node(dir).unwrap().perm, 0o750);
}

#[test]
fn model_a_rename_without_a_directory_sync_is_undone_and_with_one_is_kept() {
    let mut s = State::new();
    let a = s.make(ROOT, name("a"), Kind::File, 0o640, (0, 0)).unwrap();
    s.write(a, 0, b"old").unwrap();
    s.fsync(a, false).unwrap();
    s.fsync_dir(ROOT).unwrap();
    let tmp = s
        .make(ROOT, name("a.tmp"), Kind::File, 0o640, (0, 0))
        .unwrap();
    s.write(tmp, 0, b"new").unwrap();
    s.fsync(tmp, false).unwrap();
    s.rename(ROOT, name("a.tmp"), ROOT, name("a"), false)
        .unwrap();
    assert_eq!(content(&s, "a").as_deref(), Some(&b"new"[..]));
    s.cut();
    assert_eq!(content(&s, "a").as_deref(), Some(&b"old"[..]));
    assert_eq!(s.resolve("a.tmp"), Err(libc::ENOENT));

    let tmp = s
        .make(ROOT, name("a.tmp"), Kind::File, 0o640, (0, 0))
        .unwrap();
    s.write(tmp, 0, b"newer").unwrap();
    s.fsync(tmp, false).unwrap();
    s.rename(ROOT, name("a.tmp"), ROOT, name("a"), false)
        .unwrap();
    s.fsync_dir(ROOT).unwrap();
    s.cut();
    assert_eq!(content(&s, "a").as_deref(), Some(&b"newer"[..]));
}

#[test]
fn model_a_name_synced_before_its_data_comes_back_empty() {
    let mut s = State::new();
    let f = s.make(ROOT, name("f"), Kind::File, 0o640, (0, 0)).unwrap();
    s.write(f, 0, b"data").unwrap();
    s.fsync_dir(ROOT).unwrap();
    s.cut();
    assert_eq!(content(&s, "f").as_deref(), Some(&b""[..]));
}

#[test]
fn model_fdatasync_keeps_data_and_size_but_not_a_mode_change() {
    let mut s = State::new();
    let f = s.make(ROOT, name("f"), Kind::File, 0o600, (0, 0)).unwrap();
    s.fsync(f, false).unwrap();
    s.fsync_dir(ROOT).unwrap();
    s.write(f, 0, b"0123456789").unwrap();
    s.set_attrs(f, Some(0o640), None, None, (None, None))
        .unwrap();
    s.fsync(f, true).unwrap();
    s.set_size(f, 4).unwrap();
    s.cut();
    assert_eq!(content(&s, "f").as_deref(), Some(&b"0123456789"[..]));
    assert_eq!(s.node(f).unwrap().perm, 0o600, "fdatasync leaves metadata");
}

#[test]
fn model_an_unlink_without_a_directory_sync_is_undone() {
    let mut s = State::new();
    let f = s.make(ROOT, name("f"), Kind::File, 0o640, (0, 0)).unwrap();
    s.write(f, 0, b"kept").unwrap();
    s.fsync(f, false).unwrap();
    s.fsync_dir(ROOT).unwrap();
    s.unlink(ROOT, name("f")).unwrap();
    s.cut();
    assert_eq!(content(&s, "f").as_deref(), Some(&b"kept"[..]));
    s.unlink(ROOT, name("f")).unwrap();
    s.fsync_dir(ROOT).unwrap();
    s.cut();
    assert_eq!(s.resolve("f"), Err(libc::ENOENT));
}

/// A file with `old` synced and `new` written after it, not synced.
fn unsynced(old: &[u8], new: &[u8]) -> State {
    let mut s = State::new();
    let f = s.make(ROOT, name("f"), Kind::File, 0o640, (0, 0)).unwrap();
    s.write(f, 0, old).unwrap();
    s.fsync(f, true).unwrap();
    s.fsync_dir(ROOT).unwrap();
    s.write(f, 0, new).unwrap();
    s
}

#[test]
fn model_every_sync_and_rename_is_a_boundary_and_a_cut_restores_the_frozen_one() {
    let mut s = State::new();
    let f = s.make(ROOT, name("f"), Kind::File, 0o640, (0, 0)).unwrap();
    s.freeze_after(3);
    s.write(f, 0, b"one").unwrap();
    s.fsync(f, true).unwrap(); // 1
    s.fsync_dir(ROOT).unwrap(); // 2
    s.write(f, 3, b" two").unwrap();
    s.fsync(f, false).unwrap(); // 3: frozen here
    assert!(s.frozen_at().is_some());
    s.write(f, 7, b" three").unwrap();
    s.fsync(f, true).unwrap(); // 4
    let g = s.make(ROOT, name("g"), Kind::File, 0o640, (0, 0)).unwrap();
    s.fsync(g, false).unwrap(); // 5
    s.rename(ROOT, name("g"), ROOT, name("h"), false).unwrap(); // 6
    s.fsync_dir(ROOT).unwrap(); // 7
    assert_eq!(s.boundaries(), 7);
    s.cut_with(Writeback::Dropped);
    assert_eq!(content(&s, "f").as_deref(), Some(&b"one two"[..]));
    assert_eq!(s.resolve("h"), Err(libc::ENOENT));
    // Counted from now: a cut during what follows a cut.
    s.freeze_after(1);
    assert_eq!(s.frozen_at(), None);
}

#[test]
fn model_a_torn_cut_keeps_a_prefix_of_the_unsynced_bytes() {
    let (old, new) = (&b"0123456789"[..], &b"0123456789abcdefghij"[..]);
    let mut kept = std::collections::BTreeSet::new();
    for seed in 0..64 {
        let mut s = unsynced(old, new);
        s.cut_with(Writeback::Torn { seed });
        let data = content(&s, "f").unwrap();
        assert!(
            data.len() >= old.len() && new.starts_with(&data),
            "{data:?}"
        );
        kept.insert(data.len());
    }
    assert!(
        kept.len() > 5,
        "the tears fall in different places: {kept:?}"
    );
}

#[test]
fn model_a_reordered_cut_keeps_any_pages_and_holes_read_as_zeros() {
    let old = vec![1u8; 4096];
    let new: Vec<u8> = [vec![1u8; 4096], vec![2u8; 4096], vec![3u8; 4096]].concat();
    let mut shapes = std::collections::BTreeSet::new();
    for seed in 0..64 {
        let mut s = unsynced(&old, &new);
        s.cut_with(Writeback::Reordered { seed });
        let data = content(&s, "f").unwrap();
        assert!(data.len() == old.len() || data.len() == new.len());
        assert_eq!(data[..4096], old[..]);
        let pages: Vec<u8> = data.chunks(4096).skip(1).map(|page| page[0]).collect();
        for (i, &first) in pages.iter().enumerate() {
            assert!(first == 0 || first == new[(i + 1) * 4096], "{pages:?}");
        }
        shapes.insert(pages);
    }
    // Both sizes, holes before written pages and the other way round.
    assert!(
        shapes.contains(&vec![0, 3]) && shapes.contains(&vec![2, 0]),
        "{shapes:?}"
    );
}

fn mounted() -> (tempfile::TempDir, Mount) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mount = Mount::new(dir.path()).expect("mount lazyfs (needs root and /dev/fuse)");
    (dir, mount)
}

fn read(path: &std::path::Path) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    File::open(path).ok()?.read_to_end(&mut out).ok()?;
    Some(out)
}

#[test]
fn mounted_write_and_fsync_survive_a_cut_and_unsynced_writes_do_not() {
    let (_dir, mut mount) = mounted();
    let at = mount.path().to_owned();
    let path = at.join("log");
    let mut file = File::create(&path).unwrap();
    file.write_all(b"one\n").unwrap();
    file.sync_data().unwrap();
    File::open(&at).unwrap().sync_all().unwrap();
    file.write_all(b"two\n").unwrap();
    assert_eq!(read(&path).unwrap(), b"one\ntwo\n");
    drop(file);
    mount.cut().unwrap();
    assert_eq!(read(&path).unwrap(), b"one\n");

    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(b"three\n").unwrap();
    file.sync_all().unwrap();
    drop(file);
    mount.cut().unwrap();
    assert_eq!(read(&path).unwrap(), b"one\nthree\n");
    assert!(mount.stats().bytes_lost >= 4);
}

#[test]
fn mounted_a_new_file_without_a_directory_sync_disappears() {
    let (_dir, mut mount) = mounted();
    let at = mount.path().to_owned();
    fs::create_dir(at.join("d")).unwrap();
    File::open(&at).unwrap().sync_all().unwrap();
    let mut file = File::create(at.join("d/f")).unwrap();
    file.write_all(b"synced, but not its name").unwrap();
    file.sync_all().unwrap();
    drop(file);
    mount.cut().unwrap();
    assert!(at.join("d").is_dir());
    assert!(!at.join("d/f").exists());
}

#[test]
fn mounted_rename_without_a_directory_sync_reverts() {
    let (_dir, mut mount) = mounted();
    let at = mount.path().to_owned();
    let write_synced = |path: &std::path::Path, bytes: &[u8]| {
        let mut file = File::create(path).unwrap();
        file.write_all(bytes).unwrap();
        file.sync_all().unwrap();
    };
    write_synced(&at.join("cursors"), b"old");
    File::open(&at).unwrap().sync_all().unwrap();
    write_synced(&at.join("cursors.tmp"), b"new");
    fs::rename(at.join("cursors.tmp"), at.join("cursors")).unwrap();
    mount.cut().unwrap();
    assert_eq!(read(&at.join("cursors")).unwrap(), b"old");
    assert!(!at.join("cursors.tmp").exists());

    write_synced(&at.join("cursors.tmp"), b"new");
    fs::rename(at.join("cursors.tmp"), at.join("cursors")).unwrap();
    File::open(&at).unwrap().sync_all().unwrap();
    mount.cut().unwrap();
    assert_eq!(read(&at.join("cursors")).unwrap(), b"new");
}

#[test]
fn mounted_fdatasync_keeps_data_and_size_and_modes_are_kept_by_fsync() {
    let (_dir, mut mount) = mounted();
    let at = mount.path().to_owned();
    let path = at.join("segment");
    let mut file = File::create(&path).unwrap();
    file.set_permissions(fs::Permissions::from_mode(0o640))
        .unwrap();
    file.sync_all().unwrap();
    File::open(&at).unwrap().sync_all().unwrap();
    file.write_all(&[7u8; 10_000]).unwrap();
    file.sync_data().unwrap();
    file.set_len(100).unwrap();
    drop(file);
    mount.cut().unwrap();
    let kept = read(&path).unwrap();
    assert_eq!(kept.len(), 10_000);
    let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
}

#[test]
fn mounted_sqlite_in_wal_mode_works_and_keeps_committed_rows_across_a_cut() {
    let (_dir, mut mount) = mounted();
    let db = mount.path().join("t.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal", "WAL needs mmap of -shm to work on the mount");
        conn.pragma_update(None, "synchronous", "FULL").unwrap();
        conn.execute_batch("CREATE TABLE t (n INTEGER); INSERT INTO t VALUES (1), (2);")
            .unwrap();
        // SQLite syncs the directory when it creates the -wal file, so the rows hold.
    }
    mount.cut().unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 2);
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

#[test]
fn mounted_unix_sockets_bind_and_connect() {
    let (_dir, mount) = mounted();
    let path = mount.path().join("s.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let _client = std::os::unix::net::UnixStream::connect(&path).unwrap();
    listener.accept().unwrap();
}

#[test]
fn mounted_a_cut_keeps_device_and_inode_numbers() {
    use std::os::unix::fs::MetadataExt;
    let (_dir, mut mount) = mounted();
    let path = mount.path().join("f");
    let file = File::create(&path).unwrap();
    file.sync_all().unwrap();
    File::open(mount.path()).unwrap().sync_all().unwrap();
    drop(file);
    let before = fs::metadata(&path).unwrap();
    mount.cut().unwrap();
    let after = fs::metadata(&path).unwrap();
    assert_eq!((after.dev(), after.ino()), (before.dev(), before.ino()));
}
