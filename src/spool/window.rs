//! Reading a segment file at open through a bounded window, so that recovering a
//! spool of any size holds one chunk of it in memory (or one record, when a record
//! is larger than a chunk) rather than whole 64 MiB segments.

use std::fs::File;
use std::io::{self, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;

use super::record::{HEADER, MAX_BODY, MIN_BODY};

/// How much of a segment recovery reads at a time.
pub(super) const CHUNK: usize = 1 << 20;

pub(super) struct Window<'f> {
    file: &'f File,
    len: u64,
    chunk: usize,
    /// File offset of `buf[0]`.
    start: u64,
    buf: Vec<u8>,
    /// The most bytes `buf` has held, for tests.
    peak: usize,
}

impl<'f> Window<'f> {
    /// A window over the first `len` bytes of `file`, read `chunk` bytes at a time.
    pub(super) fn new(file: &'f File, len: u64, chunk: usize) -> Self {
        Self {
            file,
            len,
            chunk: chunk.max(HEADER + 8),
            start: 0,
            buf: Vec::new(),
            peak: 0,
        }
    }

    pub(super) fn len(&self) -> u64 {
        self.len
    }

    #[cfg(test)]
    pub fn peak(&self) -> usize {
        self.peak
    }

    /// `want` bytes from `at`, fewer only where the file ends.
    pub(super) fn get(&mut self, at: u64, want: usize) -> io::Result<&[u8]> {
        let end = at.saturating_add(want as u64).min(self.len);
        let at = at.min(end);
        let held = self.start + self.buf.len() as u64;
        if at < self.start || end > held {
            let size = (want.max(self.chunk) as u64).min(self.len - at) as usize;
            // Allocated to size (no growth by doubling), and back to a chunk after a
            // record larger than one.
            if self.buf.capacity() < size || self.buf.capacity() > size.max(self.chunk) {
                self.buf = vec![0; size];
            } else {
                self.buf.resize(size, 0);
            }
            self.file.read_exact_at(&mut self.buf, at)?;
            self.start = at;
            self.peak = self.peak.max(self.buf.capacity());
        }
        let from = (at - self.start) as usize;
        Ok(&self.buf[from..from + (end - at) as usize])
    }

    /// The record at `at` as [`super::record::check`] takes it: header and body; the
    /// header alone when its length is out of range or past the end of the file
    /// (`check` then finds it bad or incomplete, as it would the whole rest).
    pub(super) fn record(&mut self, at: u64) -> io::Result<&[u8]> {
        let header = self.get(at, HEADER)?;
        if header.len() < HEADER {
            return self.get(at, HEADER);
        }
        let body = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        // A length out of range, or running past the end of the file, is judged from
        // the header alone: a damaged length must not make recovery read megabytes.
        let fits = at + (HEADER + body) as u64 <= self.len;
        let want = if (MIN_BODY..=MAX_BODY).contains(&body) && fits {
            HEADER + body
        } else {
            HEADER
        };
        self.get(at, want)
    }
}

/// Copies `range` of `from` into `to`, a chunk at a time.
pub(super) fn copy_range(from: &File, range: Range<u64>, to: &mut impl Write) -> io::Result<()> {
    let mut buf = vec![0; CHUNK.min((range.end - range.start) as usize)];
    let mut at = range.start;
    while at < range.end {
        let n = ((range.end - at) as usize).min(buf.len());
        from.read_exact_at(&mut buf[..n], at)?;
        to.write_all(&buf[..n])?;
        at += n as u64;
    }
    Ok(())
}

/// The parts of `0..len` outside `cut` (sorted, not overlapping).
pub(super) fn complement(len: u64, cut: &[Range<u64>]) -> Vec<Range<u64>> {
    let mut kept = Vec::new();
    let mut at = 0;
    for range in cut {
        if range.start > at {
            kept.push(at..range.start);
        }
        at = at.max(range.end);
    }
    if at < len {
        kept.push(at..len);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(bytes: &[u8]) -> (tempfile::NamedTempFile, File) {
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.write_all(bytes).unwrap();
        let file = File::open(tmp.path()).unwrap();
        (tmp, file)
    }

    #[test]
    fn a_window_returns_any_range_and_holds_one_chunk() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let (_tmp, f) = file(&bytes);
        let mut window = Window::new(&f, bytes.len() as u64, 64);
        for (at, want) in [
            (0, 10),
            (60, 10),
            (5, 3),
            (9_990, 50),
            (4_000, 64),
            (100, 0),
        ] {
            let got = window.get(at, want).unwrap().to_vec();
            let end = (at as usize + want).min(bytes.len());
            assert_eq!(got, bytes[at as usize..end], "at {at} want {want}");
        }
        assert!(window.peak() <= 128, "{}", window.peak());
        // A range larger than a chunk is read whole, and the window shrinks after it.
        assert_eq!(window.get(0, 1_000).unwrap(), &bytes[..1_000]);
        window.get(5_000, 8).unwrap();
        assert!(window.buf.capacity() <= 128);
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)]
    fn complement_keeps_what_is_not_cut() {
        assert_eq!(complement(10, &[]), [0..10]);
        assert_eq!(complement(10, &[0..2, 5..6]), [2..5, 6..10]);
        assert_eq!(complement(10, &[3..10]), [0..3]);
        assert_eq!(complement(10, &[0..10]), Vec::<Range<u64>>::new());
    }

    #[test]
    fn copy_range_copies_across_chunks() {
        let bytes: Vec<u8> = (0..(CHUNK as u32 * 2 + 77))
            .map(|i| (i % 251) as u8)
            .collect();
        let (_tmp, f) = file(&bytes);
        let mut out = Vec::new();
        copy_range(&f, 3..bytes.len() as u64 - 5, &mut out).unwrap();
        assert_eq!(out, bytes[3..bytes.len() - 5]);
    }
}
