//! `eventgate bench tree`: what the audit store's Merkle tree costs (insert time,
//! disk space, `audit verify` time, building it for an older store) and how fast
//! its proofs are made and checked, each next to a plain peer measured in the same
//! run.
//!
//! The store is the query benchmark's (same generator, same writer, so the same
//! rows), kept at its own path with a side file (`<db>.bench.json`) that also
//! holds the tree heads signed while it was written, one per transaction, and the
//! verifier key of the throwaway key that signed them. A later run with the same
//! parameters reuses it. Only the insert measurement writes new stores (small ones,
//! in a temporary directory); the upgrade measurement rebuilds the generated
//! store's tree in place, and the run fails unless the rebuilt tree gives the root
//! that was signed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, TransactionBehavior, params};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::BenchError;
use super::query::generate::{GENERATOR_VERSION, Generator, Params};
use super::query::{file_size, side_file, wal_file, write_generated};
use crate::note::{Signer, Verifier};
use crate::store::chain::{COLUMNS, RowHasher};
use crate::store::checkpoint::{self, Checkpoint, TreeFacts};
use crate::store::prove::{self, Which};
use crate::store::verify::{self, checkpoints, shipped, witnessed};
use crate::store::{self, EventRow, WriterOptions, tree};
use crate::tlog::proof::{check_record, check_tree};
use crate::tlog::proof_file::ProofFile;
use crate::tlog::stored::{Frontier, HashReader, stored_hash_count, tree_hash};
use crate::tlog::{Hash, TlogError, leaf_hash, node_hash};

/// Bumped whenever what a generated store holds besides the query benchmark's rows
/// changes (the heads signed, the side file), so an older one is made again.
const TREE_STORE_VERSION: u32 = 1;

/// Rows per writer transaction while generating, and so per signed head.
const TRANSACTION_ROWS: u64 = 50_000;

/// The node the heads name: any will do, the store's id makes the log.
const NODE: &str = "bench";

fn sqlite(what: &'static str) -> impl Fn(rusqlite::Error) -> BenchError {
    move |source| BenchError::Sqlite { what, source }
}

fn failed(what: impl Into<String>) -> BenchError {
    BenchError::Failed { what: what.into() }
}

fn described(context: &str, error: &(dyn std::error::Error + 'static)) -> BenchError {
    failed(format!("{context}: {}", crate::errors::chain(error)))
}

/// The generated store, and the heads signed while it was written.
pub(crate) struct Prepared {
    pub path: PathBuf,
    pub rows: u64,
    pub bytes: u64,
    /// Generation rate (rows/s): of this run, or recorded by the run that made it.
    pub rows_per_sec: f64,
    pub reused: bool,
    /// Signed notes, oldest first; the last is the tree of every row.
    pub heads: Vec<String>,
    pub verifier: Verifier,
}

fn describe(params: &Params) -> serde_json::Value {
    json!({
        "bench": "tree",
        "version": TREE_STORE_VERSION,
        "generator": GENERATOR_VERSION,
        "rows": params.rows,
        "span_secs": params.span_secs,
        "containers": params.containers,
        "seed": params.seed,
    })
}

/// What the side file recorded, if `db` is a store this benchmark made with `params`.
fn recorded(db: &Path, params: &Params) -> Option<(f64, Vec<String>, Verifier)> {
    let text = std::fs::read_to_string(side_file(db)).ok()?;
    let found: serde_json::Value = serde_json::from_str(&text).ok()?;
    if found.get("params") != Some(&describe(params)) || !db.exists() {
        return None;
    }
    let heads = found
        .get("heads")?
        .as_array()?
        .iter()
        .map(|h| h.as_str().map(str::to_owned))
        .collect::<Option<Vec<_>>>()?;
    let verifier = Verifier::from_text(found.get("verifier")?.as_str()?).ok()?;
    Some((found.get("rows_per_sec")?.as_f64()?, heads, verifier))
}

/// Whether the side file next to `db` is this benchmark's (of any parameters).
fn ours(side: &Path) -> bool {
    std::fs::read_to_string(side)
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .is_some_and(|v| v.pointer("/params/bench").and_then(|b| b.as_str()) == Some("tree"))
}

/// Reuses the store at `db` if this benchmark generated it with `params`; otherwise
/// generates it (replacing only a store this benchmark made). `progress` hears about
/// every committed transaction with the rows written so far.
pub(crate) fn prepare(
    db: &Path,
    params: &Params,
    progress: &mut dyn FnMut(u64, Duration),
) -> Result<Prepared, BenchError> {
    if let Some((rows_per_sec, heads, verifier)) = recorded(db, params) {
        check_reused(db, params, &heads)?;
        return Ok(Prepared {
            path: db.to_path_buf(),
            rows: params.rows,
            bytes: file_size(db),
            rows_per_sec,
            reused: true,
            heads,
            verifier,
        });
    }
    let side = side_file(db);
    if db.exists() && !ours(&side) {
        return Err(failed(format!(
            "{} exists and was not generated by this benchmark (no {} of `bench tree`); name another --db",
            db.display(),
            side.display()
        )));
    }
    for stale in [
        side.clone(),
        db.to_path_buf(),
        wal_file(db, "-wal"),
        wal_file(db, "-shm"),
    ] {
        match std::fs::remove_file(&stale) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(BenchError::Io {
                    context: format!("cannot remove the old {}", stale.display()),
                    source: e,
                });
            }
            _ => {}
        }
    }
    let signer = Signer::generate("bench-tree").map_err(|e| described("a signing key", &e))?;
    let started = Instant::now();
    let heads = generate(db, params, &signer, progress)?;
    let elapsed = started.elapsed();
    let rows_per_sec = params.rows as f64 / elapsed.as_secs_f64().max(1e-9);
    let verifier = signer.verifier();
    let record = json!({
        "params": describe(params),
        "rows_per_sec": rows_per_sec,
        "elapsed_secs": elapsed.as_secs_f64(),
        "verifier": verifier.to_text(),
        "heads": heads,
    });
    std::fs::write(&side, format!("{record:#}\n")).map_err(|source| BenchError::Io {
        context: format!("cannot write {}", side.display()),
        source,
    })?;
    Ok(Prepared {
        path: db.to_path_buf(),
        rows: params.rows,
        bytes: file_size(db),
        rows_per_sec,
        reused: false,
        heads,
        verifier,
    })
}

/// A reused store must still hold the tree its newest head signed. Opening it for
/// writing also finishes the tree of a store whose upgrade measurement was cut short
/// (the writer builds a missing tree at open).
fn check_reused(db: &Path, params: &Params, heads: &[String]) -> Result<(), BenchError> {
    let conn = store::open_writer(db, &WriterOptions::default())?;
    let newest = heads
        .last()
        .ok_or_else(|| failed(format!("{} records no tree head", side_file(db).display())))?;
    let facts = prove::checkpoint_of(newest)
        .map_err(|e| described("the newest head", &e))?
        .tree
        .ok_or_else(|| failed("the newest head has no tree"))?;
    let state = tree::state(&conn)
        .map_err(sqlite("reading the tree's state"))?
        .ok_or_else(|| failed("the store has no tree"))?;
    let root = tree::root(&conn, facts.size).map_err(|e| described("the tree's root", &e))?;
    if state.size != params.rows || facts.size != params.rows || root != facts.root {
        return Err(failed(format!(
            "{} no longer holds the tree its heads signed (tree of {} leaves); remove it and its .bench.json to generate it again",
            db.display(),
            state.size
        )));
    }
    Ok(())
}

/// Writes the store as the query benchmark does (one thread builds events, this one
/// inserts them with the forwarder's writer) and signs a head after every
/// transaction. Returns the signed notes.
fn generate(
    db: &Path,
    params: &Params,
    signer: &Signer,
    progress: &mut dyn FnMut(u64, Duration),
) -> Result<Vec<String>, BenchError> {
    // Small stores still get several heads, so consistency proofs have pairs.
    let per_transaction =
        usize::try_from(TRANSACTION_ROWS.min(params.rows.div_ceil(8)).max(1)).unwrap_or(usize::MAX);
    let mut heads: Vec<String> = Vec::new();
    write_generated(db, params, per_transaction, progress, &mut |conn| {
        let note = sign_head(conn, signer, heads.last().map(String::as_str))?;
        heads.push(note);
        Ok(())
    })?;
    Ok(heads)
}

/// Signs the store's head as the gateway's signer does (a version 2 checkpoint,
/// chained to the one before by `prev`).
fn sign_head(conn: &Connection, signer: &Signer, prev: Option<&str>) -> Result<String, BenchError> {
    let head = checkpoint::head(conn).map_err(sqlite("reading the head"))?;
    let (first_row_id, size, root) = head
        .tree
        .ok_or_else(|| failed("the generated store has no tree"))?;
    let checkpoint = Checkpoint {
        node: NODE.to_owned(),
        store: head.store,
        row_id: head.row_id,
        seq: head.seq,
        hash: head.hash,
        pruned_rows: head.pruned_rows,
        time: SystemTime::now(),
        prev: prev.map(checkpoint::note_hash),
        tree: Some(TreeFacts {
            forwarder: "audit".to_owned(),
            size,
            root,
            first_row_id,
            pruned_row_id: head.pruned_row_id,
            pruned_hash: head.pruned_hash,
            retention: None,
        }),
    };
    signer
        .sign(&checkpoint.to_text())
        .map_err(|e| described("signing a head", &e))
}

// ---------------------------------------------------------------------------------
// 1. Insert

/// Per-batch times of one round, each side over the same rows.
#[derive(Debug, Default)]
pub(crate) struct InsertRound {
    /// `store::insert_rows`: chain and tree, as the `sqlite` forwarder writes.
    pub chained: Vec<Duration>,
    /// `store::raw_insert_rows`: plain rusqlite, no chain, no tree.
    pub raw: Vec<Duration>,
    /// The tree's own work alone: `tree::Appender` (edge read, leaf and interior
    /// hashes, chunk writes) in a transaction of its own.
    pub appends: Vec<Duration>,
    /// The tree's hashing alone, in memory: leaf hashes and `Frontier::append`.
    pub hashing: Vec<Duration>,
}

/// Opens a fresh audit store in `dir`.
fn fresh(dir: &Path, name: &str) -> Result<Connection, BenchError> {
    Ok(store::open_writer(
        &dir.join(name),
        &WriterOptions::default(),
    )?)
}

/// The tree appends of one batch, in a transaction of their own, on a store whose
/// tree has no rows under it (so its edge is its own, not the chain's).
fn tree_appends(conn: &mut Connection, records: &[Vec<u8>]) -> Result<(), BenchError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sqlite("beginning a transaction"))?;
    let state = tree::state(&tx)
        .map_err(sqlite("reading the tree's state"))?
        .ok_or_else(|| failed("the store has no tree"))?;
    let mut appender = tree::Appender::start(&tx, state.last_row_id())
        .map_err(|e| described("starting the tree's appends", &e))?;
    for record in records {
        appender.push(leaf_hash(record));
    }
    appender
        .finish(&tx)
        .map_err(|e| described("writing the tree's chunks", &e))?;
    tx.commit().map_err(sqlite("committing"))
}

/// `rounds` rounds of `batches` batches of `batch_rows` generated rows, each batch
/// written by every side into fresh stores of its own in a temporary directory, the
/// sides taking turns going first batch by batch.
pub(crate) fn measure_insert(
    params: &Params,
    batches: usize,
    batch_rows: usize,
    rounds: usize,
    progress: &mut dyn FnMut(usize, &InsertRound),
) -> Result<Vec<InsertRound>, BenchError> {
    let mut out = Vec::new();
    for round in 0..rounds {
        let dir = tempfile::Builder::new()
            .prefix("eg-bench-tree")
            .tempdir()
            .map_err(|source| BenchError::Io {
                context: "cannot create a temporary directory".into(),
                source,
            })?;
        let mut chained = fresh(dir.path(), "chained.db")?;
        let mut raw = fresh(dir.path(), "raw.db")?;
        let mut appends = fresh(dir.path(), "tree.db")?;
        let mut frontier = Frontier::default();
        let mut produced = Vec::with_capacity(batch_rows * 2 + 64);
        let mut hasher = RowHasher::default();
        let mut generator = Generator::new(&Params {
            rows: (batches * batch_rows) as u64,
            seed: params.seed.wrapping_add(1000 + round as u64),
            ..params.clone()
        });
        let mut times = InsertRound::default();
        for i in 0..batches {
            let events = generator.batch(batch_rows);
            for event in &events {
                event.payload_json();
            }
            let rows: Vec<EventRow<'_>> = events.iter().map(EventRow::from_event).collect();
            let records: Vec<Vec<u8>> = rows
                .iter()
                .map(|row| {
                    let seq = i64::try_from(row.seq).unwrap_or(i64::MAX);
                    hasher.record(&store::chain::values(seq, row))
                })
                .collect();
            for turn in 0..4 {
                let started = Instant::now();
                match (i + turn) % 4 {
                    0 => {
                        store::insert_rows(&mut chained, &rows).map_err(|e| {
                            BenchError::Sqlite {
                                what: "insert_rows",
                                source: e.source,
                            }
                        })?;
                        times.chained.push(started.elapsed());
                    }
                    1 => {
                        store::raw_insert_rows(&mut raw, &rows)
                            .map_err(sqlite("raw_insert_rows"))?;
                        times.raw.push(started.elapsed());
                    }
                    2 => {
                        tree_appends(&mut appends, &records)?;
                        times.appends.push(started.elapsed());
                    }
                    _ => {
                        produced.clear();
                        for record in &records {
                            frontier.append(leaf_hash(record), &mut produced);
                        }
                        std::hint::black_box(&produced);
                        times.hashing.push(started.elapsed());
                    }
                }
            }
        }
        // The three stores must hold the same tree: the appends alone did the
        // chained writer's tree work, no more, no less.
        let ours = tree::root(&chained, frontier.size()).map_err(|e| root_error(&e))?;
        let alone = tree::root(&appends, frontier.size()).map_err(|e| root_error(&e))?;
        if ours != frontier.root() || alone != frontier.root() {
            return Err(failed(
                "the tree appends measured alone built another tree than insert_rows did",
            ));
        }
        progress(round, &times);
        out.push(times);
    }
    Ok(out)
}

fn root_error(e: &TlogError) -> BenchError {
    described("the tree's root", e)
}

// ---------------------------------------------------------------------------------
// 2. Storage

#[derive(Debug)]
pub(crate) struct Storage {
    pub rows: u64,
    /// Stored hashes of the tree of `rows` leaves.
    pub stored_hashes: u64,
    /// `audit_tree_hashes`' pages and their bytes (dbstat: leaves, interior pages,
    /// overflow).
    pub tree_pages: u64,
    pub tree_bytes: u64,
    /// The file's pages in use (page_count - freelist_count), in bytes.
    pub used_bytes: u64,
}

pub(crate) fn measure_storage(path: &Path, rows: u64) -> Result<Storage, BenchError> {
    let conn = read_only(path)?;
    let (tree_pages, tree_bytes): (i64, i64) = conn
        .query_row(
            "SELECT count(*), coalesce(sum(pgsize), 0) FROM dbstat WHERE name = 'audit_tree_hashes'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(sqlite("reading dbstat (the bundled SQLite has it)"))?;
    let pragma = |name: &str| -> Result<i64, BenchError> {
        conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))
            .map_err(sqlite("reading the page counts"))
    };
    let used = (pragma("page_count")? - pragma("freelist_count")?) * pragma("page_size")?;
    Ok(Storage {
        rows,
        stored_hashes: stored_hash_count(rows),
        tree_pages: tree_pages.unsigned_abs(),
        tree_bytes: tree_bytes.unsigned_abs(),
        used_bytes: used.unsigned_abs(),
    })
}

fn read_only(path: &Path) -> Result<Connection, BenchError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    Connection::open_with_flags(path, flags).map_err(sqlite("opening the store read-only"))
}

// ---------------------------------------------------------------------------------
// 3. Proofs

/// One measure, eventgate's times and its peer's, sample by sample.
#[derive(Debug, Default)]
pub(crate) struct Timed {
    pub eventgate: Vec<Duration>,
    pub peer: Vec<Duration>,
}

#[derive(Debug, Default)]
pub(crate) struct Proofs {
    pub inclusion_warm: Timed,
    pub inclusion_cold: Timed,
    pub consistency_warm: Timed,
    pub consistency_cold: Timed,
    /// `check_record` on each inclusion proof; peer: the same SHA-256s with sha2.
    pub check_record: Timed,
    /// `check_tree` on each consistency proof; peer: two SHA-256s per proof hash.
    pub check_tree: Timed,
    /// `tlog::check::check` (the note's signature, then the proof); peer: the
    /// note's signature alone (`note::open`).
    pub check_file: Timed,
    /// Hashes per proof, summed over the proofs made.
    pub inclusion_hashes: usize,
    pub consistency_hashes: usize,
    /// Distinct chunks the peer read per proof, summed.
    pub inclusion_chunks: usize,
    pub consistency_chunks: usize,
    pub tree_size: u64,
    pub heads: usize,
}

/// Asks for stored hashes without reading any: which chunks a proof reads.
#[derive(Default)]
struct Recording(BTreeSet<u64>);

impl HashReader for Recording {
    fn read_hashes(&mut self, indexes: &[u64]) -> Result<Vec<Hash>, TlogError> {
        self.0.extend(indexes.iter().map(|i| i / tree::CHUNK));
        Ok(vec![[0; 32]; indexes.len()])
    }
}

/// What the peer reads for one proof: the store's id and the tree's state (the
/// proof's checks), every distinct chunk the heads' roots and the proof need, and
/// the proven row.
struct Reads {
    chunks: Vec<i64>,
    row: Option<i64>,
}

/// One lookup a proof makes, run against a [`Recording`].
type Lookup<'a> = &'a dyn Fn(&mut Recording) -> Result<(), TlogError>;

fn record_chunks(parts: &[Lookup<'_>]) -> Vec<i64> {
    let mut recording = Recording::default();
    for part in parts {
        // The recording reader never fails.
        let _ = part(&mut recording);
    }
    recording
        .0
        .into_iter()
        .map(|c| i64::try_from(c).unwrap_or(i64::MAX))
        .collect()
}

fn raw_reads(conn: &Connection, reads: &Reads) -> rusqlite::Result<usize> {
    let mut bytes = conn
        .prepare_cached("SELECT store_id FROM audit_store WHERE id = 1")?
        .query_row([], |r| r.get::<_, String>(0))?
        .len();
    let (first, size): (i64, i64) = conn
        .prepare_cached("SELECT first_row_id, size FROM audit_tree WHERE id = 1")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    std::hint::black_box((first, size));
    let mut stmt = conn.prepare_cached("SELECT hashes FROM audit_tree_hashes WHERE chunk = ?1")?;
    for chunk in &reads.chunks {
        bytes += stmt
            .query_row(params![chunk], |r| r.get::<_, Vec<u8>>(0))?
            .len();
    }
    if let Some(row_id) = reads.row {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT row_id, {} FROM events WHERE row_id = ?1",
            COLUMNS.join(", ")
        ))?;
        let mut rows = stmt.query(params![row_id])?;
        if let Some(row) = rows.next()? {
            for i in 0..=COLUMNS.len() {
                bytes += value_len(row.get_ref(i)?);
            }
        }
    }
    Ok(bytes)
}

fn value_len(value: ValueRef<'_>) -> usize {
    match value {
        ValueRef::Null => 0,
        ValueRef::Integer(_) | ValueRef::Real(_) => 8,
        ValueRef::Text(b) | ValueRef::Blob(b) => b.len(),
    }
}

fn open_eventgate(path: &Path) -> Result<Connection, BenchError> {
    Ok(store::open_reader(path, Duration::from_secs(5))?)
}

fn prove_error(e: prove::ProveError) -> BenchError {
    described("proving", &e)
}

/// `count` inclusion proofs of random rows against the newest head and `count`
/// consistency proofs between random pairs of the heads, warm (one connection each
/// side, after one untimed proof) and cold (a connection opened for each proof, as
/// `eventgate audit prove` does), eventgate and the peer taking turns; then the
/// checkers over the proofs made warm.
pub(crate) fn measure_proofs(
    path: &Path,
    heads: &[String],
    verifier: &Verifier,
    count: usize,
    seed: u64,
) -> Result<Proofs, BenchError> {
    let newest = heads.last().ok_or_else(|| failed("no tree head"))?;
    let facts = |note: &str| -> Result<TreeFacts, BenchError> {
        prove::checkpoint_of(note)
            .map_err(prove_error)?
            .tree
            .ok_or_else(|| failed("a head without a tree"))
    };
    let top = facts(newest)?;
    let mut rng = StdRng::seed_from_u64(seed ^ 0x7ee);
    let mut out = Proofs {
        tree_size: top.size,
        heads: heads.len(),
        ..Proofs::default()
    };
    // The samples: rows to prove, pairs of heads to relate.
    let rows: Vec<i64> = (0..count)
        .map(|_| top.first_row_id + rng.random_range(0..top.size) as i64)
        .collect();
    let pairs: Vec<(usize, usize)> = match heads.len() {
        0 | 1 => Vec::new(),
        n => (0..count)
            .map(|_| {
                let old = rng.random_range(0..n - 1);
                (old, rng.random_range(old + 1..n))
            })
            .collect(),
    };
    let inclusion_reads: Vec<Reads> = rows
        .iter()
        .map(|&row_id| {
            let index = u64::try_from(row_id - top.first_row_id).unwrap_or(0);
            Reads {
                chunks: record_chunks(&[
                    &|r: &mut Recording| tree_hash(top.size, r).map(drop),
                    &|r: &mut Recording| {
                        crate::tlog::proof::prove_record(top.size, index, r).map(drop)
                    },
                ]),
                row: Some(row_id),
            }
        })
        .collect();
    let mut consistency_reads = Vec::new();
    for &(old, new) in &pairs {
        let (old, new) = (facts(&heads[old])?.size, facts(&heads[new])?.size);
        consistency_reads.push(Reads {
            chunks: record_chunks(&[
                &|r: &mut Recording| tree_hash(old, r).map(drop),
                &|r: &mut Recording| tree_hash(new, r).map(drop),
                &|r: &mut Recording| crate::tlog::proof::prove_tree(new, old, r).map(drop),
            ]),
            row: None,
        });
    }
    out.inclusion_chunks = inclusion_reads.iter().map(|r| r.chunks.len()).sum();
    out.consistency_chunks = consistency_reads.iter().map(|r| r.chunks.len()).sum();

    let include = |conn: &Connection, row_id: i64| {
        prove::inclusion(conn, &Which::Row(row_id), newest).map_err(prove_error)
    };
    let relate = |conn: &Connection, (old, new): (usize, usize)| {
        prove::consistency(conn, &heads[old], &heads[new]).map_err(prove_error)
    };

    // Warm: one connection each, kept.
    let warm = open_eventgate(path)?;
    let peer = read_only(path)?;
    let mut made_inclusion = Vec::new();
    let mut made_consistency = Vec::new();
    if let (Some(&row), Some(reads)) = (rows.first(), inclusion_reads.first()) {
        include(&warm, row)?;
        raw_reads(&peer, reads).map_err(sqlite("the peer's reads"))?;
    }
    for (i, (&row, reads)) in rows.iter().zip(&inclusion_reads).enumerate() {
        for turn in 0..2 {
            let started = Instant::now();
            if (i + turn) % 2 == 0 {
                let file = include(&warm, row)?;
                out.inclusion_warm.eventgate.push(started.elapsed());
                made_inclusion.push(file);
            } else {
                std::hint::black_box(raw_reads(&peer, reads).map_err(sqlite("the peer's reads"))?);
                out.inclusion_warm.peer.push(started.elapsed());
            }
        }
    }
    if let (Some(&pair), Some(reads)) = (pairs.first(), consistency_reads.first()) {
        relate(&warm, pair)?;
        raw_reads(&peer, reads).map_err(sqlite("the peer's reads"))?;
    }
    for (i, (&pair, reads)) in pairs.iter().zip(&consistency_reads).enumerate() {
        for turn in 0..2 {
            let started = Instant::now();
            if (i + turn) % 2 == 0 {
                let file = relate(&warm, pair)?;
                out.consistency_warm.eventgate.push(started.elapsed());
                made_consistency.push(file);
            } else {
                std::hint::black_box(raw_reads(&peer, reads).map_err(sqlite("the peer's reads"))?);
                out.consistency_warm.peer.push(started.elapsed());
            }
        }
    }
    drop((warm, peer));

    // Cold: the connection opened inside the timing, as a new process opens it.
    for (i, (&row, reads)) in rows.iter().zip(&inclusion_reads).enumerate() {
        for turn in 0..2 {
            let started = Instant::now();
            if (i + turn) % 2 == 0 {
                let conn = open_eventgate(path)?;
                std::hint::black_box(include(&conn, row)?);
                out.inclusion_cold.eventgate.push(started.elapsed());
            } else {
                let conn = read_only(path)?;
                std::hint::black_box(raw_reads(&conn, reads).map_err(sqlite("the peer's reads"))?);
                out.inclusion_cold.peer.push(started.elapsed());
            }
        }
    }
    for (i, (&pair, reads)) in pairs.iter().zip(&consistency_reads).enumerate() {
        for turn in 0..2 {
            let started = Instant::now();
            if (i + turn) % 2 == 0 {
                let conn = open_eventgate(path)?;
                std::hint::black_box(relate(&conn, pair)?);
                out.consistency_cold.eventgate.push(started.elapsed());
            } else {
                let conn = read_only(path)?;
                std::hint::black_box(raw_reads(&conn, reads).map_err(sqlite("the peer's reads"))?);
                out.consistency_cold.peer.push(started.elapsed());
            }
        }
    }

    // The checkers, on what was made.
    let keys = std::slice::from_ref(verifier);
    for file in &made_inclusion {
        let ProofFile::Inclusion {
            index,
            record,
            proof,
            note,
        } = file
        else {
            continue;
        };
        out.inclusion_hashes += proof.len();
        let started = Instant::now();
        check_record(proof, top.size, &top.root, *index, &leaf_hash(record))
            .map_err(|e| described("an inclusion proof made here", &e))?;
        out.check_record.eventgate.push(started.elapsed());
        let started = Instant::now();
        std::hint::black_box(sha2_path(record, proof.len()));
        out.check_record.peer.push(started.elapsed());
        time_check(file, note, keys, &mut out.check_file)?;
    }
    for (file, &(old, new)) in made_consistency.iter().zip(&pairs) {
        let ProofFile::Consistency { proof, .. } = file else {
            continue;
        };
        out.consistency_hashes += proof.len();
        let (old_facts, new_facts) = (facts(&heads[old])?, facts(&heads[new])?);
        let started = Instant::now();
        check_tree(
            proof,
            new_facts.size,
            &new_facts.root,
            old_facts.size,
            &old_facts.root,
        )
        .map_err(|e| described("a consistency proof made here", &e))?;
        out.check_tree.eventgate.push(started.elapsed());
        let started = Instant::now();
        std::hint::black_box(sha2_nodes(2 * proof.len()));
        out.check_tree.peer.push(started.elapsed());
    }
    Ok(out)
}

/// The SHA-256s an inclusion proof's check computes, with sha2 and nothing else:
/// the leaf, then one node per proof hash.
fn sha2_path(record: &[u8], hashes: usize) -> Hash {
    let mut sha = Sha256::new();
    sha.update([0u8]);
    sha.update(record);
    let mut hash: Hash = sha.finalize().into();
    for _ in 0..hashes {
        hash = node_hash(&hash, &hash);
    }
    hash
}

fn sha2_nodes(count: usize) -> Hash {
    let mut hash = [0u8; 32];
    for _ in 0..count {
        hash = node_hash(&hash, &hash);
    }
    hash
}

/// `check` on the whole file (signature and proof) against opening its note alone.
fn time_check(
    file: &ProofFile,
    note: &str,
    keys: &[Verifier],
    into: &mut Timed,
) -> Result<(), BenchError> {
    let started = Instant::now();
    crate::tlog::check::check(file, keys, &[], 0)
        .map_err(|e| described("checking a proof made here", &e))?;
    into.eventgate.push(started.elapsed());
    let started = Instant::now();
    crate::note::open(note, keys).map_err(|e| described("opening a head", &e))?;
    into.peer.push(started.elapsed());
    Ok(())
}

// ---------------------------------------------------------------------------------
// 4. audit verify, 5. upgrade

/// One pass over the whole store.
#[derive(Debug)]
pub(crate) struct Pass {
    pub rows: u64,
    pub elapsed: Duration,
    /// The process's peak resident memory during the pass, and its resident memory
    /// before (kB), where /proc allows resetting the peak.
    pub peak_kb: Option<u64>,
    pub before_kb: Option<u64>,
}

impl Pass {
    pub(crate) fn rows_per_sec(&self) -> f64 {
        self.rows as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()
}

/// Runs `f`, with the process's peak RSS reset before it (Linux: `5` into
/// clear_refs) so the peak read after is this pass's.
fn timed_pass(f: impl FnOnce() -> Result<u64, BenchError>) -> Result<Pass, BenchError> {
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let before_kb = status_kb("VmRSS:");
    let started = Instant::now();
    let rows = f()?;
    let elapsed = started.elapsed();
    Ok(Pass {
        rows,
        elapsed,
        peak_kb: reset.then(|| status_kb("VmHWM:")).flatten(),
        before_kb,
    })
}

/// Reads the whole file once, untimed by the passes, so that the first of them
/// (the plain scan, their peer) does not pay for bringing it into the page cache and
/// the others find it there as far as memory allows. Returns the bytes and time.
pub(crate) fn read_through(path: &Path) -> Result<(u64, Duration), BenchError> {
    let started = Instant::now();
    let mut file = std::fs::File::open(path).map_err(|source| BenchError::Io {
        context: format!("cannot open {}", path.display()),
        source,
    })?;
    let bytes =
        std::io::copy(&mut file, &mut std::io::sink()).map_err(|source| BenchError::Io {
            context: format!("cannot read {}", path.display()),
            source,
        })?;
    Ok((bytes, started.elapsed()))
}

/// The peer of the whole-store passes: plain rusqlite running the chain walk's
/// SELECT (every hashed column, prev_hash and hash, in row_id order), each value
/// read, nothing computed.
pub(crate) fn plain_scan(path: &Path) -> Result<Pass, BenchError> {
    timed_pass(|| {
        let conn = read_only(path)?;
        let sql = format!(
            "SELECT row_id, {}, prev_hash, hash FROM events ORDER BY row_id",
            COLUMNS.join(", ")
        );
        let mut stmt = conn.prepare(&sql).map_err(sqlite("preparing the scan"))?;
        let mut rows = stmt.query([]).map_err(sqlite("scanning"))?;
        let (mut count, mut bytes) = (0u64, 0usize);
        while let Some(row) = rows.next().map_err(sqlite("scanning"))? {
            for i in 0..COLUMNS.len() + 3 {
                bytes += value_len(row.get_ref(i).map_err(sqlite("scanning"))?);
            }
            count += 1;
        }
        std::hint::black_box(bytes);
        Ok(count)
    })
}

/// `audit verify` without keys: the chain walk alone.
pub(crate) fn chain_walk(path: &Path) -> Result<Pass, BenchError> {
    timed_pass(|| {
        let report = verify::verify(path, &[]).map_err(|e| described("audit verify", &e))?;
        if let Some(problem) = report.problem {
            return Err(failed(format!(
                "audit verify found a problem in the generated store: {}",
                problem.what
            )));
        }
        Ok(report.verified)
    })
}

/// What `audit verify --key --checkpoints` found besides its time.
#[derive(Debug)]
pub(crate) struct TreeVerified {
    pub pass: Pass,
    pub leaves: u64,
    pub roots: usize,
}

/// `audit verify --key K --checkpoints FILE` with every head signed while the
/// store was written: the notes read and opened, the chain walk, then the tree
/// pass.
pub(crate) fn chain_and_tree(
    path: &Path,
    heads: &[String],
    verifier: &Verifier,
) -> Result<TreeVerified, BenchError> {
    let notes = heads.join("\n");
    let mut found = (0, 0);
    let pass = timed_pass(|| {
        let shipped = shipped::read(
            notes.as_bytes(),
            "the heads",
            std::slice::from_ref(verifier),
        )
        .map_err(|e| described("reading the heads", &e))?;
        let verified =
            checkpoints::verify_checkpoints(path, &[], shipped, &witnessed::Options::default())
                .map_err(|e| described("audit verify --checkpoints", &e))?;
        if let Some(problem) = verified
            .report
            .problem
            .as_ref()
            .or(verified.archive.as_ref())
        {
            return Err(failed(format!(
                "audit verify --checkpoints found a problem in the generated store: {}",
                problem.what
            )));
        }
        found = (verified.tree.leaves, verified.tree.roots);
        Ok(verified.report.verified)
    })?;
    Ok(TreeVerified {
        pass,
        leaves: found.0,
        roots: found.1,
    })
}

/// The tree of an existing store built anew, as the writer builds it for a store
/// made before the tree existed: the generated store's tree emptied (as such a
/// store's is after the migration), then `tree::catch_up` timed. The rebuilt tree
/// must give the root the newest head signed.
pub(crate) fn upgrade(path: &Path, newest: &str) -> Result<Pass, BenchError> {
    let facts = prove::checkpoint_of(newest)
        .map_err(prove_error)?
        .tree
        .ok_or_else(|| failed("the newest head has no tree"))?;
    let mut conn = store::open_writer(path, &WriterOptions::default())?;
    conn.execute_batch(
        "BEGIN IMMEDIATE; DELETE FROM audit_tree_hashes; UPDATE audit_tree SET size = 0 WHERE id = 1; COMMIT;",
    )
    .map_err(sqlite("emptying the tree"))?;
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .map_err(sqlite("checkpointing"))?;
    let pass = timed_pass(|| {
        tree::catch_up(&mut conn, |_, _| {}).map_err(|e| described("building the tree", &e))
    })?;
    let root = tree::root(&conn, facts.size).map_err(|e| root_error(&e))?;
    if pass.rows != facts.size || root != facts.root {
        return Err(failed(format!(
            "the rebuilt tree ({} leaves) does not give the root the newest head signed",
            pass.rows
        )));
    }
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .map_err(sqlite("checkpointing"))?;
    Ok(pass)
}
