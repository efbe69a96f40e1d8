//! Rudder's snapshot file: a copy ([`super::dump`]) written to a file, restorable into any
//! driver. The format is documented in `docs/storage-copy.md`; in short (little-endian):
//!
//! ```text
//! "RUDDERSN" u32:format(1)
//! record*: u8:tag u32:length payload
//!   'H' header   str:driver i64:revision i64:base i64:compacted u64:keys i64:created_unix_ms
//!   'L' leases   u32:n (i64:id i64:ttl)*
//!   'K' keys     u32:n kv*
//!   'R' revision i64:revision u32:n (u8:kind(0 put, 1 delete) kv)*
//!   'F' finish   i64:revision i64:compacted
//! 'Z' u32:n n zero bytes  sha256 of every byte before it (32 bytes)
//! kv  = bytes:key bytes:value i64:create_revision i64:mod_revision i64:version i64:lease
//! bytes, str = u32:length data
//! ```
//!
//! The padding makes the file's length 32 more than a multiple of 512, and its last 32 bytes
//! are the SHA-256 of the rest — the shape of an etcd snapshot (a database in 512-byte
//! multiples with its hash appended), which `etcdctl snapshot save` checks for when it saves
//! the gateway's stream.
//!
//! A reader checks the whole file's checksum before it hands out a single step, so a
//! truncated or corrupted file is refused before anything is restored from it.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use super::{Plan, Sink};
use crate::error::{Error, Result};
use crate::types::*;

const MAGIC: &[u8; 8] = b"RUDDERSN";
/// The format this code writes and reads.
pub const FORMAT: u32 = 1;
/// No record is larger (a page of keys is at most a thousand 1.5 MiB values).
const MAX_RECORD: u32 = 2 * 1024 * 1024 * 1024 - 1;
/// The checksum at the end.
const SUM: u64 = 32;
/// The file's length is `SUM` more than a multiple of this.
const ALIGN: u64 = 512;

/// What a snapshot's header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The driver it was taken from.
    pub driver: String,
    pub plan: Plan,
    pub created_unix_ms: i64,
}

/// Writes a snapshot as a copy's steps come; [`SnapshotWriter::finish`] after `Finish`.
pub struct SnapshotWriter<W: Write + Send> {
    out: W,
    hash: Sha256,
    written: u64,
    finished: bool,
}

impl<W: Write + Send> SnapshotWriter<W> {
    pub fn new(out: W, header: &Header) -> Result<Self> {
        let mut writer = Self {
            out,
            hash: Sha256::new(),
            written: 0,
            finished: false,
        };
        writer.emit(MAGIC)?;
        writer.emit(&FORMAT.to_le_bytes())?;
        let mut payload = Vec::new();
        put_bytes(&mut payload, header.driver.as_bytes());
        for number in [
            header.plan.revision,
            header.plan.base,
            header.plan.compacted,
        ] {
            put_i64(&mut payload, number);
        }
        payload.extend_from_slice(&header.plan.keys.to_le_bytes());
        put_i64(&mut payload, header.created_unix_ms);
        writer.record(b'H', &payload)?;
        Ok(writer)
    }

    /// The output, once the copy has finished and the checksum is written.
    pub fn finish(mut self) -> Result<W> {
        if !self.finished {
            return Err(Error::InvalidArgument(
                "the snapshot was not finished: the copy stopped before its end".into(),
            ));
        }
        self.out.flush().map_err(io("writing the snapshot"))?;
        Ok(self.out)
    }

    fn emit(&mut self, bytes: &[u8]) -> Result<()> {
        self.hash.update(bytes);
        self.written += bytes.len() as u64;
        self.out
            .write_all(bytes)
            .map_err(io("writing the snapshot"))
    }

    fn record(&mut self, tag: u8, payload: &[u8]) -> Result<()> {
        let length = u32::try_from(payload.len())
            .ok()
            .filter(|length| *length <= MAX_RECORD)
            .ok_or_else(|| Error::TooLarge("a snapshot record over 2 GiB".into()))?;
        self.emit(&[tag])?;
        self.emit(&length.to_le_bytes())?;
        self.emit(payload)
    }
}

#[async_trait]
impl<W: Write + Send> Sink for SnapshotWriter<W> {
    async fn step(&mut self, step: RestoreStep) -> Result<()> {
        let mut payload = Vec::new();
        match &step {
            RestoreStep::Leases(leases) => {
                put_len(&mut payload, leases.len());
                for lease in leases {
                    put_i64(&mut payload, lease.id);
                    put_i64(&mut payload, lease.ttl);
                }
                self.record(b'L', &payload)
            }
            RestoreStep::Keys(kvs) => {
                put_len(&mut payload, kvs.len());
                for kv in kvs {
                    put_kv(&mut payload, kv);
                }
                self.record(b'K', &payload)
            }
            RestoreStep::History(revisions) => {
                for RevisionEvents { revision, events } in revisions {
                    payload.clear();
                    put_i64(&mut payload, *revision);
                    put_len(&mut payload, events.len());
                    for event in events {
                        payload.push(u8::from(event.kind == EventKind::Delete));
                        put_kv(&mut payload, &event.kv);
                    }
                    self.record(b'R', &payload)?;
                }
                Ok(())
            }
            RestoreStep::Finish {
                revision,
                compacted,
            } => {
                put_i64(&mut payload, *revision);
                put_i64(&mut payload, *compacted);
                self.record(b'F', &payload)?;
                let padding = (ALIGN - (self.written + 5) % ALIGN) % ALIGN;
                self.emit(b"Z")?;
                self.emit(&(padding as u32).to_le_bytes())?;
                self.emit(&vec![0u8; padding as usize])?;
                let sum = self.hash.clone().finalize();
                self.out
                    .write_all(&sum)
                    .map_err(io("writing the snapshot"))?;
                self.finished = true;
                Ok(())
            }
        }
    }
}

/// A snapshot file whose checksum has been checked.
pub struct SnapshotFile {
    path: PathBuf,
    pub header: Header,
    /// The file's SHA-256 as its trailer holds it.
    pub checksum: String,
}

impl SnapshotFile {
    /// Opens a snapshot, checking its format, its checksum and its header.
    pub fn open(path: &Path) -> Result<Self> {
        let shown = path.display().to_string();
        let mut file = File::open(path).map_err(io(&format!("opening {shown}")))?;
        let length = file
            .metadata()
            .map_err(io(&format!("reading {shown}")))?
            .len();
        if length < 12 + 5 + SUM {
            return Err(bad(&shown, "it is too short to be a Rudder snapshot"));
        }
        let mut hash = Sha256::new();
        let mut reader = BufReader::new(&mut file).take(length - SUM);
        std::io::copy(&mut reader, &mut hash).map_err(io(&format!("reading {shown}")))?;
        let mut stored = [0u8; SUM as usize];
        file.seek(SeekFrom::Start(length - SUM))
            .and_then(|_| file.read_exact(&mut stored))
            .map_err(io(&format!("reading {shown}")))?;
        let sum = hash.finalize();
        if stored[..] != sum[..] {
            return Err(bad(
                &shown,
                "its checksum does not match its content (truncated or corrupted?)",
            ));
        }
        let mut records = Records::open(path)?;
        let header = records.header()?;
        Ok(Self {
            path: path.to_path_buf(),
            header,
            checksum: super::hex(&sum),
        })
    }

    /// Hands every step of the snapshot to `sink`, reporting progress as [`super::dump`]
    /// does.
    pub async fn restore(&self, sink: &mut dyn Sink, progress: super::Progress<'_>) -> Result<()> {
        let mut records = Records::open(&self.path)?;
        records.header()?;
        let plan = self.header.plan;
        let mut done = 0;
        let mut history = super::HistoryBatch::default();
        loop {
            let step = records.step()?;
            match step {
                RestoreStep::History(revisions) => {
                    for revision in revisions {
                        done = plan.keys + (revision.revision - plan.base).max(0) as u64;
                        if let Some(full) = history.push(revision) {
                            sink.step(full).await?;
                            progress(done);
                        }
                    }
                    continue;
                }
                step => {
                    if let Some(rest) = history.take() {
                        sink.step(rest).await?;
                    }
                    if let RestoreStep::Keys(kvs) = &step {
                        done += kvs.len() as u64;
                    }
                    let last = matches!(step, RestoreStep::Finish { .. });
                    sink.step(step).await?;
                    if last {
                        progress(plan.total_work());
                        return Ok(());
                    }
                    progress(done);
                }
            }
        }
    }
}

/// Reads records in order.
struct Records {
    shown: String,
    input: BufReader<File>,
}

impl Records {
    fn open(path: &Path) -> Result<Self> {
        let shown = path.display().to_string();
        let file = File::open(path).map_err(io(&format!("opening {shown}")))?;
        let mut input = BufReader::new(file);
        let mut start = [0u8; 12];
        input
            .read_exact(&mut start)
            .map_err(io(&format!("reading {shown}")))?;
        if &start[..8] != MAGIC {
            return Err(bad(&shown, "it is not a Rudder snapshot"));
        }
        let format = u32::from_le_bytes([start[8], start[9], start[10], start[11]]);
        if format != FORMAT {
            return Err(bad(
                &shown,
                &format!("it is in format {format}, and this Rudder reads format {FORMAT}"),
            ));
        }
        Ok(Self { shown, input })
    }

    fn record(&mut self) -> Result<(u8, Vec<u8>)> {
        let mut head = [0u8; 5];
        self.input
            .read_exact(&mut head)
            .map_err(io(&format!("reading {}", self.shown)))?;
        let length = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
        if length > MAX_RECORD {
            return Err(bad(
                &self.shown,
                "a record is larger than any snapshot holds",
            ));
        }
        let mut payload = vec![0u8; length as usize];
        self.input
            .read_exact(&mut payload)
            .map_err(io(&format!("reading {}", self.shown)))?;
        Ok((head[0], payload))
    }

    fn header(&mut self) -> Result<Header> {
        let (tag, payload) = self.record()?;
        if tag != b'H' {
            return Err(bad(&self.shown, "it does not start with a header"));
        }
        let mut cursor = Cursor::new(&payload, &self.shown);
        let driver = String::from_utf8_lossy(&cursor.bytes()?).into_owned();
        let (revision, base, compacted) = (cursor.i64()?, cursor.i64()?, cursor.i64()?);
        let keys = cursor.i64()? as u64;
        let created_unix_ms = cursor.i64()?;
        Ok(Header {
            driver,
            plan: Plan {
                revision,
                base,
                compacted,
                keys,
            },
            created_unix_ms,
        })
    }

    fn step(&mut self) -> Result<RestoreStep> {
        let (tag, payload) = self.record()?;
        let mut cursor = Cursor::new(&payload, &self.shown);
        Ok(match tag {
            b'L' => {
                let count = cursor.len()?;
                let mut leases = Vec::with_capacity(count.min(1 << 16));
                for _ in 0..count {
                    leases.push(Lease {
                        id: cursor.i64()?,
                        ttl: cursor.i64()?,
                    });
                }
                RestoreStep::Leases(leases)
            }
            b'K' => {
                let count = cursor.len()?;
                let mut kvs = Vec::with_capacity(count.min(1 << 16));
                for _ in 0..count {
                    kvs.push(cursor.kv()?);
                }
                RestoreStep::Keys(kvs)
            }
            b'R' => {
                let revision = cursor.i64()?;
                let count = cursor.len()?;
                let mut events = Vec::with_capacity(count.min(1 << 16));
                for _ in 0..count {
                    let kind = match cursor.u8()? {
                        0 => EventKind::Put,
                        1 => EventKind::Delete,
                        other => return Err(bad(&self.shown, &format!("event kind {other}"))),
                    };
                    events.push(Event {
                        kind,
                        kv: cursor.kv()?,
                        prev_kv: None,
                    });
                }
                RestoreStep::History(vec![RevisionEvents { revision, events }])
            }
            b'F' => RestoreStep::Finish {
                revision: cursor.i64()?,
                compacted: cursor.i64()?,
            },
            other => {
                return Err(bad(
                    &self.shown,
                    &format!("unexpected record {:?}", char::from(other)),
                ))
            }
        })
    }
}

/// Reads fields from one record's payload.
struct Cursor<'a> {
    data: &'a [u8],
    shown: &'a str,
}

impl<'a> Cursor<'a> {
    fn new(data: &'a [u8], shown: &'a str) -> Self {
        Self { data, shown }
    }

    fn take(&mut self, count: usize) -> Result<&'a [u8]> {
        if self.data.len() < count {
            return Err(bad(self.shown, "a record ends early"));
        }
        let (head, rest) = self.data.split_at(count);
        self.data = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn len(&mut self) -> Result<usize> {
        let bytes = self.take(4)?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize)
    }

    fn i64(&mut self) -> Result<i64> {
        let bytes = self.take(8)?;
        let mut array = [0u8; 8];
        array.copy_from_slice(bytes);
        Ok(i64::from_le_bytes(array))
    }

    fn bytes(&mut self) -> Result<Vec<u8>> {
        let length = self.len()?;
        Ok(self.take(length)?.to_vec())
    }

    fn kv(&mut self) -> Result<KeyValue> {
        Ok(KeyValue {
            key: self.bytes()?,
            value: self.bytes()?,
            create_revision: self.i64()?,
            mod_revision: self.i64()?,
            version: self.i64()?,
            lease: self.i64()?,
        })
    }
}

fn put_i64(out: &mut Vec<u8>, number: i64) {
    out.extend_from_slice(&number.to_le_bytes());
}

fn put_len(out: &mut Vec<u8>, length: usize) {
    out.extend_from_slice(&(length as u32).to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

fn put_kv(out: &mut Vec<u8>, kv: &KeyValue) {
    put_bytes(out, &kv.key);
    put_bytes(out, &kv.value);
    for number in [kv.create_revision, kv.mod_revision, kv.version, kv.lease] {
        put_i64(out, number);
    }
}

fn io(what: &str) -> impl Fn(std::io::Error) -> Error + '_ {
    move |error| Error::backend(what.to_string(), error)
}

fn bad(shown: &str, why: &str) -> Error {
    Error::InvalidArgument(format!("{shown} cannot be restored: {why}"))
}

/// Writes a snapshot of `source` to `path` (through a temporary file beside it, renamed when
/// complete), returning its header and checksum.
pub async fn save(
    source: &dyn crate::Storage,
    path: &Path,
    history: bool,
    progress: super::Progress<'_>,
) -> Result<SnapshotFile> {
    let plan = super::plan(source, history).await?;
    let header = Header {
        driver: source.status().await?.driver,
        plan,
        created_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as i64),
    };
    let mut partial = path.as_os_str().to_owned();
    partial.push(".part");
    let partial = PathBuf::from(partial);
    let file = File::create(&partial).map_err(io(&format!("creating {}", partial.display())))?;
    let mut writer = SnapshotWriter::new(BufWriter::new(file), &header)?;
    let written = async {
        super::dump(source, &plan, &mut writer, progress).await?;
        let file = writer
            .finish()?
            .into_inner()
            .map_err(|error| Error::backend("writing the snapshot", error.into_error()))?;
        file.sync_all().map_err(io("writing the snapshot"))?;
        std::fs::rename(&partial, path).map_err(io(&format!("renaming to {}", path.display())))
    }
    .await;
    if let Err(error) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(error);
    }
    SnapshotFile::open(path)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            driver: "sqlite".into(),
            plan: Plan {
                revision: 9,
                base: 4,
                compacted: 4,
                keys: 1,
            },
            created_unix_ms: 1,
        }
    }

    fn kv(key: &str, mod_revision: Revision) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: b"v".to_vec(),
            create_revision: 2,
            mod_revision,
            version: 2,
            lease: 7,
        }
    }

    struct Collect(Vec<RestoreStep>);

    #[async_trait]
    impl Sink for Collect {
        async fn step(&mut self, step: RestoreStep) -> Result<()> {
            self.0.push(step);
            Ok(())
        }
    }

    async fn written(steps: &[RestoreStep]) -> Vec<u8> {
        let mut writer = SnapshotWriter::new(Vec::new(), &header()).unwrap();
        for step in steps {
            writer.step(step.clone()).await.unwrap();
        }
        writer.finish().unwrap()
    }

    fn steps() -> Vec<RestoreStep> {
        vec![
            RestoreStep::Leases(vec![Lease { id: 7, ttl: 60 }]),
            RestoreStep::Keys(vec![kv("/a", 3)]),
            RestoreStep::History(vec![RevisionEvents {
                revision: 6,
                events: vec![Event {
                    kind: EventKind::Delete,
                    kv: KeyValue {
                        key: b"/a".to_vec(),
                        mod_revision: 6,
                        ..KeyValue::default()
                    },
                    prev_kv: None,
                }],
            }]),
            RestoreStep::Finish {
                revision: 9,
                compacted: 4,
            },
        ]
    }

    #[tokio::test]
    async fn a_snapshot_reads_back_the_steps_it_was_written_with() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.snap");
        let bytes = written(&steps()).await;
        // Shaped as etcd's snapshots are: 512-byte multiples, then the SHA-256 of them.
        assert_eq!(bytes.len() % 512, 32);
        let (content, sum) = bytes.split_at(bytes.len() - 32);
        assert_eq!(Sha256::digest(content)[..], sum[..]);
        std::fs::write(&path, &bytes).unwrap();
        let file = SnapshotFile::open(&path).unwrap();
        assert_eq!(file.header, header());
        let mut collect = Collect(Vec::new());
        let mut seen = Vec::new();
        file.restore(&mut collect, &mut |done| seen.push(done))
            .await
            .unwrap();
        assert_eq!(collect.0, steps());
        assert_eq!(seen.last(), Some(&6));
    }

    #[tokio::test]
    async fn a_changed_byte_or_a_cut_file_is_refused_before_any_step() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = written(&steps()).await;
        let path = dir.path().join("flipped.snap");
        let mut flipped = bytes.clone();
        flipped[30] ^= 1;
        std::fs::write(&path, &flipped).unwrap();
        let error = SnapshotFile::open(&path).err().unwrap().to_string();
        assert!(error.contains("checksum does not match"), "{error}");

        let path = dir.path().join("cut.snap");
        std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
        let error = SnapshotFile::open(&path).err().unwrap().to_string();
        assert!(error.contains("cannot be restored"), "{error}");

        let path = dir.path().join("other.snap");
        std::fs::write(
            &path,
            b"SQLite format 3\0 and then some more bytes of a database file",
        )
        .unwrap();
        let error = SnapshotFile::open(&path).err().unwrap().to_string();
        assert!(error.contains("cannot be restored"), "{error}");
    }

    #[tokio::test]
    async fn an_unfinished_copy_leaves_no_snapshot() {
        let mut writer = SnapshotWriter::new(Vec::new(), &header()).unwrap();
        writer.step(steps()[0].clone()).await.unwrap();
        assert!(writer.finish().is_err());
    }
}
