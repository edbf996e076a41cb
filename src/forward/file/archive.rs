//! Rotated files: their names, compression and pruning.
//!
//! The active file `<dir>/<stem><ext>` (e.g. `events.jsonl`) is rotated by renaming it
//! to `<stem>-<UTC time of rotation><ext>`, e.g.
//! `events-20240501T100000.123456789Z.jsonl`, and `.gz` is appended once compressed.
//! The time has a fixed width, so names sort in rotation order; a rotation never
//! takes a time at or before an existing rotated file's, even if the clock steps back.
//!
//! Compression and pruning are one idempotent pass over the directory ([`Archive::tidy`]),
//! run off the writer's path on a housekeeping thread after each rotation and once at
//! start. A rotated file is compressed into `<name>.gz.tmp`, synced, renamed to
//! `<name>.gz`, and only then is the uncompressed file removed: a crash at any point
//! leaves either the complete uncompressed file, or a complete `.gz` (the next pass
//! removes a leftover uncompressed twin and any `.tmp`).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::SystemTime;

use flate2::Compression;
use flate2::write::GzEncoder;

/// Mode of every file the forwarder creates.
pub(super) use crate::fsmode::FILE_MODE;

/// Length of the time part of a rotated name: `20240501T100000.123456789Z`.
const STAMP_LEN: usize = 26;

pub(super) struct Archive {
    pub name: Arc<str>,
    dir: PathBuf,
    stem: String,
    ext: String,
    keep: usize,
    compress: bool,
}

/// One rotation's files (normally one of them exists, both after a crash mid-compression).
#[derive(Debug, Default)]
struct Rotated {
    plain: Option<PathBuf>,
    gz: Option<PathBuf>,
    tmp: Option<PathBuf>,
}

impl Archive {
    pub(super) fn new(name: Arc<str>, active: &Path, keep: usize, compress: bool) -> Self {
        let dir = active.parent().map_or_else(PathBuf::new, Path::to_path_buf);
        let file_name = active
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // `events.jsonl` -> (`events`, `.jsonl`); a leading dot is not an extension.
        let (stem, ext) = match file_name.rfind('.') {
            Some(i) if i > 0 => (file_name[..i].to_owned(), file_name[i..].to_owned()),
            _ => (file_name, String::new()),
        };
        Self {
            name,
            dir,
            stem,
            ext,
            keep,
            compress,
        }
    }

    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The name for a rotation happening at `now`: later than every existing rotated
    /// file, so that names keep sorting in rotation order.
    pub(super) fn next_rotated_path(&self, now: SystemTime) -> io::Result<PathBuf> {
        let mut stamp = stamp(now);
        if let Some(newest) = self.list()?.keys().next_back()
            && stamp.as_str() <= newest.as_str()
        {
            stamp = after(newest);
        }
        Ok(self.dir.join(format!("{}-{stamp}{}", self.stem, self.ext)))
    }

    /// Rotated files by time stamp, oldest first.
    fn list(&self) -> io::Result<BTreeMap<String, Rotated>> {
        let mut found: BTreeMap<String, Rotated> = BTreeMap::new();
        let prefix = format!("{}-", self.stem);
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let file_name = entry.file_name();
            let Some(name) = file_name.to_str() else {
                continue;
            };
            let Some(rest) = name.strip_prefix(&prefix) else {
                continue;
            };
            let Some(stamp) = rest.get(..STAMP_LEN).filter(|s| is_stamp(s)) else {
                continue;
            };
            let Some(suffix) = rest[STAMP_LEN..].strip_prefix(self.ext.as_str()) else {
                continue;
            };
            let slot = found.entry(stamp.to_owned()).or_default();
            match suffix {
                "" => slot.plain = Some(entry.path()),
                ".gz" => slot.gz = Some(entry.path()),
                ".gz.tmp" => slot.tmp = Some(entry.path()),
                _ => {}
            }
        }
        Ok(found)
    }

    /// Compresses what is due and removes what is beyond `keep`. Safe to run again at
    /// any point: every step leaves the directory in a state the next pass completes.
    pub(super) fn tidy(&self) -> io::Result<()> {
        let mut rotated = self.list()?;
        for files in rotated.values_mut() {
            if let Some(tmp) = files.tmp.take() {
                // An interrupted compression; the uncompressed file is still there.
                remove(&tmp)?;
            }
            match (&files.plain, &files.gz) {
                // The `.gz` is renamed into place only when complete, so its twin is
                // a leftover of a crash between rename and removal.
                (Some(plain), Some(_)) => {
                    remove(plain)?;
                    files.plain = None;
                }
                (Some(plain), None) if self.compress => {
                    files.gz = Some(self.compress_file(plain)?);
                    files.plain = None;
                }
                _ => {}
            }
        }
        rotated.retain(|_, files| files.plain.is_some() || files.gz.is_some());
        if self.keep > 0 && rotated.len() > self.keep {
            let excess = rotated.len() - self.keep;
            for (_, files) in rotated.into_iter().take(excess) {
                for path in files.plain.iter().chain(files.gz.iter()) {
                    remove(path)?;
                    tracing::info!(forwarder = %self.name, path = %path.display(), "removed a rotated file beyond `keep`");
                }
            }
        }
        Ok(())
    }

    fn compress_file(&self, plain: &Path) -> io::Result<PathBuf> {
        let mut gz_name = plain.as_os_str().to_owned();
        gz_name.push(".gz");
        let gz = PathBuf::from(gz_name);
        let mut tmp_name = gz.as_os_str().to_owned();
        tmp_name.push(".tmp");
        let tmp = PathBuf::from(tmp_name);

        let started = std::time::Instant::now();
        let mut input = BufReader::new(File::open(plain)?);
        let output = crate::fsmode::create_file(&tmp)?;
        let mut encoder = GzEncoder::new(BufWriter::new(output), Compression::default());
        io::copy(&mut input, &mut encoder)?;
        let output = encoder.finish()?.into_inner().map_err(|e| e.into_error())?;
        output.sync_all()?;
        drop(output);
        fs::rename(&tmp, &gz)?;
        sync_dir(&self.dir)?;
        fs::remove_file(plain)?;
        sync_dir(&self.dir)?;
        metrics::histogram!("eventgate_file_compress_seconds", "forwarder" => self.name.to_string())
            .record(started.elapsed().as_secs_f64());
        tracing::debug!(forwarder = %self.name, path = %gz.display(), "compressed a rotated file");
        Ok(gz)
    }
}

/// Runs [`Archive::tidy`] on its own thread whenever asked, so that compression never
/// holds up writes.
pub(super) struct Housekeeper {
    tx: Mutex<Option<mpsc::Sender<()>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Housekeeper {
    pub(super) fn spawn(archive: Arc<Archive>) -> io::Result<Self> {
        let (tx, rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("eventgate-file-housekeeping".into())
            .spawn(move || {
                while rx.recv().is_ok() {
                    // Several rotations while a pass ran need only one more pass.
                    while rx.try_recv().is_ok() {}
                    if let Err(error) = archive.tidy() {
                        metrics::counter!("eventgate_file_housekeeping_errors_total", "forwarder" => archive.name.to_string())
                            .increment(1);
                        tracing::error!(forwarder = %archive.name, dir = %archive.dir.display(), %error, "compressing or pruning rotated files failed; will try again after the next rotation");
                    }
                }
            })?;
        Ok(Self {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Asks for a pass (after a rotation, or at start).
    pub(super) fn nudge(&self) {
        if let Some(tx) = lock(&self.tx).as_ref() {
            let _ = tx.send(());
        }
    }

    /// Lets the pending pass finish and stops the thread. Blocking.
    pub(super) fn finish(&self) {
        lock(&self.tx).take();
        let thread = lock(&self.thread).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Makes renames and new files in `dir` survive a crash.
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    File::open(dir)?.sync_all()
}

fn remove(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// `20240501T100000.123456789Z` for a UTC time.
pub(super) fn stamp(time: SystemTime) -> String {
    let since = match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d,
        Err(_) => std::time::Duration::ZERO,
    };
    let ts = prost_types::Timestamp {
        seconds: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        nanos: since.subsec_nanos() as i32,
    };
    crate::proto::rfc3339_nanos(&ts).replace(['-', ':'], "")
}

fn is_stamp(s: &str) -> bool {
    s.bytes().enumerate().all(|(i, b)| match i {
        8 => b == b'T',
        15 => b == b'.',
        25 => b == b'Z',
        _ => b.is_ascii_digit(),
    })
}

/// The smallest stamp after `stamp`: one more nanosecond (rolling over into the
/// seconds digits textually keeps it simple and still sorts correctly).
fn after(stamp: &str) -> String {
    let mut digits: Vec<u8> = stamp.bytes().collect();
    for i in (0..STAMP_LEN - 1).rev() {
        if !digits[i].is_ascii_digit() {
            continue;
        }
        if digits[i] == b'9' {
            digits[i] = b'0';
        } else {
            digits[i] += 1;
            break;
        }
    }
    String::from_utf8(digits).unwrap_or_else(|_| stamp.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_fixed_width_and_sort_in_time_order() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::new(1_714_557_600, 123_456_789);
        assert_eq!(stamp(t), "20240501T100000.123456789Z");
        assert!(is_stamp(&stamp(t)));
        assert_eq!(stamp(t).len(), STAMP_LEN);
        assert!(stamp(t) < stamp(t + std::time::Duration::from_nanos(1)));
        assert_eq!(
            after("20240501T100000.123456789Z"),
            "20240501T100000.123456790Z"
        );
        assert_eq!(
            after("20240501T100059.999999999Z"),
            "20240501T100060.000000000Z"
        );
        assert!(after("20240501T100059.999999999Z").as_str() > "20240501T100059.999999999Z");
    }

    #[test]
    fn names_split_stem_and_extension() {
        let dir = tempfile::tempdir().unwrap();
        let archive = Archive::new("t".into(), &dir.path().join("events.jsonl"), 0, false);
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::new(1_714_557_600, 0);
        let first = archive.next_rotated_path(t).unwrap();
        assert_eq!(
            first.file_name().unwrap(),
            "events-20240501T100000.000000000Z.jsonl"
        );
        fs::write(&first, "x\n").unwrap();
        // The clock stepped back: the next name still sorts after the first.
        let second = archive
            .next_rotated_path(t - std::time::Duration::from_secs(60))
            .unwrap();
        assert_eq!(
            second.file_name().unwrap(),
            "events-20240501T100000.000000001Z.jsonl"
        );

        let bare = Archive::new("t".into(), &dir.path().join(".log"), 0, false);
        assert_eq!(
            bare.next_rotated_path(t).unwrap().file_name().unwrap(),
            ".log-20240501T100000.000000000Z"
        );
    }

    #[test]
    fn tidy_finishes_an_interrupted_compression_and_prunes() {
        let dir = tempfile::tempdir().unwrap();
        let archive = Archive::new("t".into(), &dir.path().join("events.jsonl"), 2, true);
        let path = |s: &str| {
            dir.path()
                .join(format!("events-20240501T10000{s}.000000000Z.jsonl"))
        };
        // 0: compressed and its uncompressed twin (crash after the rename).
        fs::write(path("0"), "a\n").unwrap();
        fs::write(path("0").with_extension("jsonl.gz"), "not read").unwrap();
        // 1: an interrupted compression.
        fs::write(path("1"), "b\n").unwrap();
        fs::write(path("1").with_extension("jsonl.gz.tmp"), "partial").unwrap();
        // 2: not compressed yet.
        fs::write(path("2"), "c\n").unwrap();
        fs::write(dir.path().join("events.jsonl"), "active\n").unwrap();
        fs::write(dir.path().join("events-notes.jsonl"), "unrelated\n").unwrap();

        archive.tidy().unwrap();

        let mut names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "events-20240501T100001.000000000Z.jsonl.gz",
                "events-20240501T100002.000000000Z.jsonl.gz",
                "events-notes.jsonl",
                "events.jsonl",
            ]
        );
        let gz = File::open(path("1").with_extension("jsonl.gz")).unwrap();
        let mut text = String::new();
        io::Read::read_to_string(&mut flate2::read::GzDecoder::new(gz), &mut text).unwrap();
        assert_eq!(text, "b\n");
    }
}
