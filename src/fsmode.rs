//! One rule for the modes of what eventgate creates on disk, whatever the umask:
//! directories [`DIR_MODE`] (0750) and files [`FILE_MODE`] (0640), owner read/write,
//! group read, nothing for others. The unix socket is the exception (its
//! `socket_mode`, 0660 by default: clients connect to it), and so are key files
//! written by `audit keygen` (0600).
//!
//! Only what eventgate creates gets the mode: a directory or file that already
//! exists keeps the mode it has (an operator's `chmod` stands), except files
//! replaced by writing aside and renaming, which are new files each time.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of every directory eventgate creates.
pub(crate) const DIR_MODE: u32 = 0o750;
/// Mode of every file eventgate creates (SQLite's `-wal` and `-shm` follow the
/// main database file).
pub(crate) const FILE_MODE: u32 = 0o640;

/// Creates `dir` and its missing parents with [`DIR_MODE`]; directories that exist
/// are left as they are. Each directory it creates is synced into its parent: a new
/// directory's name is only on disk once the parent is synced, and whatever is
/// later made durable inside it (a checkpoint record, cursors) would otherwise go
/// with it in a power loss.
pub(crate) fn create_dir_all(dir: &Path) -> io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    let mut missing = Vec::new();
    let mut at = dir;
    while !at.exists() {
        missing.push(at.to_path_buf());
        match at.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => at = parent,
            _ => break,
        }
    }
    for dir in missing.iter().rev() {
        match fs::DirBuilder::new().mode(DIR_MODE).create(dir) {
            Ok(()) => {
                fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE))?;
                sync_parent(dir)?;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
            Err(e) => return Err(e),
        }
    }
    // `dir` exists but is not a directory (a file in the way): say so clearly.
    if !dir.is_dir() {
        return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
    }
    Ok(())
}

/// Makes the name `path` durable in its directory. A file system that cannot sync
/// a directory (EINVAL) has nothing more to offer and is not an error.
pub(crate) fn sync_parent(path: &Path) -> io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match File::open(parent)?.sync_all() {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
        done => done,
    }
}

/// Opens `path` with `options`; a file this call creates gets [`FILE_MODE`].
pub(crate) fn open(options: &mut OpenOptions, path: &Path) -> io::Result<File> {
    let existed = fs::symlink_metadata(path).is_ok();
    let file = options.mode(FILE_MODE).open(path)?;
    if !existed {
        file.set_permissions(fs::Permissions::from_mode(FILE_MODE))?;
    }
    Ok(file)
}

/// Creates (or truncates) a file with [`FILE_MODE`].
pub(crate) fn create_file(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(path)?;
    file.set_permissions(fs::Permissions::from_mode(FILE_MODE))?;
    Ok(file)
}

/// Before SQLite opens `path` to create it: an empty file with [`FILE_MODE`] (SQLite
/// would make it 0644 less the umask, and gives its `-wal` and `-shm` the mode of
/// the main file). An existing file is left alone.
pub(crate) fn prepare_sqlite(path: &Path) -> io::Result<()> {
    open(
        OpenOptions::new().write(true).create(true).truncate(false),
        path,
    )
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn creates_with_the_rule_and_leaves_existing_modes() {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
        let nested = dir.path().join("a/b");
        create_dir_all(&nested).unwrap();
        assert_eq!(mode(&dir.path().join("a")), DIR_MODE);
        assert_eq!(mode(&nested), DIR_MODE);
        assert_eq!(
            mode(dir.path()),
            0o700,
            "an existing directory keeps its mode"
        );

        let file = nested.join("f");
        create_file(&file).unwrap();
        assert_eq!(mode(&file), FILE_MODE);
        fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
        open(OpenOptions::new().append(true).create(true), &file).unwrap();
        assert_eq!(mode(&file), 0o600, "an existing file keeps its mode");

        let db = nested.join("x.db");
        prepare_sqlite(&db).unwrap();
        assert_eq!(mode(&db), FILE_MODE);
        assert_eq!(fs::metadata(&db).unwrap().len(), 0);

        fs::write(dir.path().join("plain"), b"x").unwrap();
        let err = create_dir_all(&dir.path().join("plain")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTDIR));
    }
}
