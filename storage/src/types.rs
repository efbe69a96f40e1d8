//! The request and result types of the storage interface: etcd v3's KV model with named fields.

/// A store-wide revision: 1 for an empty store, +1 for every committed write.
pub type Revision = i64;
/// A lease identifier; 0 means "no lease".
pub type LeaseId = i64;

/// One key's state at some revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyValue {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// Revision of the write that created the key (since its last delete).
    pub create_revision: Revision,
    /// Revision of the last write to the key.
    pub mod_revision: Revision,
    /// Number of writes since the key was created: 1 after creation.
    pub version: i64,
    /// The lease the key is attached to, 0 for none.
    pub lease: LeaseId,
}

/// A set of keys in etcd's encoding: `end` empty means the single key `start`; `end == [0]` means
/// every key `>= start`; otherwise the half-open interval `[start, end)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyRange {
    pub start: Vec<u8>,
    pub end: Vec<u8>,
}

impl KeyRange {
    /// Exactly one key.
    pub fn key(key: impl Into<Vec<u8>>) -> Self {
        Self {
            start: key.into(),
            end: Vec::new(),
        }
    }

    /// Every key that starts with `prefix` (every key at all for an empty prefix).
    pub fn prefix(prefix: impl Into<Vec<u8>>) -> Self {
        let start: Vec<u8> = prefix.into();
        if start.is_empty() {
            return Self {
                start: vec![0],
                end: vec![0],
            };
        }
        let end = prefix_end(&start);
        Self { start, end }
    }

    /// The half-open interval `[start, end)`.
    pub fn between(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> Self {
        Self {
            start: start.into(),
            end: end.into(),
        }
    }

    /// Every key `>= start`.
    pub fn from_key(start: impl Into<Vec<u8>>) -> Self {
        Self {
            start: start.into(),
            end: vec![0],
        }
    }

    /// True when the range names one key.
    pub fn is_single_key(&self) -> bool {
        self.end.is_empty()
    }

    /// True when the range is open-ended (`end == [0]`).
    pub fn is_unbounded(&self) -> bool {
        self.end == [0]
    }

    /// Whether `key` falls in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        if self.is_single_key() {
            return key == self.start.as_slice();
        }
        key >= self.start.as_slice() && (self.is_unbounded() || key < self.end.as_slice())
    }
}

/// The smallest key greater than every key that starts with `prefix`; `[0]` (no upper bound)
/// when the prefix is all `0xff` bytes.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A read of a key range.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeRequest {
    pub range: KeyRange,
    /// Read as of this revision; 0 reads the latest.
    pub revision: Revision,
    /// Return at most this many kvs; 0 for no limit.
    pub limit: i64,
    /// Leave values empty.
    pub keys_only: bool,
    /// Return only `count`, no kvs.
    pub count_only: bool,
}

impl RangeRequest {
    pub fn new(range: KeyRange) -> Self {
        Self {
            range,
            ..Self::default()
        }
    }
    pub fn at_revision(mut self, revision: Revision) -> Self {
        self.revision = revision;
        self
    }
    pub fn with_limit(mut self, limit: i64) -> Self {
        self.limit = limit;
        self
    }
    pub fn keys_only(mut self) -> Self {
        self.keys_only = true;
        self
    }
    pub fn count_only(mut self) -> Self {
        self.count_only = true;
        self
    }
}

/// The result of a range read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeResponse {
    /// The matching kvs in key order (at most `limit`).
    pub kvs: Vec<KeyValue>,
    /// True when more kvs matched than were returned.
    pub more: bool,
    /// How many kvs matched in all.
    pub count: i64,
    /// The revision the read was served at (the store's revision for a latest read).
    pub revision: Revision,
}

/// What a compare looks at, and the value it compares with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompareTarget {
    Version(i64),
    CreateRevision(Revision),
    ModRevision(Revision),
    Value(Vec<u8>),
    Lease(LeaseId),
}

/// How a compare compares: `key's field <op> target`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareOp {
    Equal,
    NotEqual,
    Greater,
    Less,
}

/// One guard of a transaction. A missing key compares as zero revisions, version and lease;
/// a value compare on a missing key is false. Over a range, every key must satisfy it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compare {
    pub range: KeyRange,
    pub op: CompareOp,
    pub target: CompareTarget,
}

impl Compare {
    pub fn mod_revision(key: impl Into<Vec<u8>>, op: CompareOp, revision: Revision) -> Self {
        Self {
            range: KeyRange::key(key),
            op,
            target: CompareTarget::ModRevision(revision),
        }
    }
    pub fn version(key: impl Into<Vec<u8>>, op: CompareOp, version: i64) -> Self {
        Self {
            range: KeyRange::key(key),
            op,
            target: CompareTarget::Version(version),
        }
    }
    pub fn value(key: impl Into<Vec<u8>>, op: CompareOp, value: impl Into<Vec<u8>>) -> Self {
        Self {
            range: KeyRange::key(key),
            op,
            target: CompareTarget::Value(value.into()),
        }
    }
}

/// A write of one key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PutRequest {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub lease: LeaseId,
    /// Return the key's previous state.
    pub prev_kv: bool,
    /// Keep the current value (the key must exist).
    pub ignore_value: bool,
    /// Keep the current lease (the key must exist).
    pub ignore_lease: bool,
}

impl PutRequest {
    pub fn new(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
            ..Self::default()
        }
    }
    pub fn with_lease(mut self, lease: LeaseId) -> Self {
        self.lease = lease;
        self
    }
    pub fn with_prev_kv(mut self) -> Self {
        self.prev_kv = true;
        self
    }
}

/// A delete of a key or a range of keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteRangeRequest {
    pub range: KeyRange,
    /// Return the deleted kvs.
    pub prev_kv: bool,
}

/// One operation of a transaction branch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnOp {
    Range(RangeRequest),
    Put(PutRequest),
    DeleteRange(DeleteRangeRequest),
    Txn(TxnRequest),
}

/// If every compare holds, run `success`, else `failure`; all writes share one new revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnRequest {
    pub compare: Vec<Compare>,
    pub success: Vec<TxnOp>,
    pub failure: Vec<TxnOp>,
}

/// The result of a put.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PutResponse {
    pub prev_kv: Option<KeyValue>,
}

/// The result of a delete-range.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteRangeResponse {
    pub deleted: i64,
    /// The deleted kvs, when asked for.
    pub prev_kvs: Vec<KeyValue>,
}

/// The result of one transaction operation, in the order of the branch that ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnOpResponse {
    Range(RangeResponse),
    Put(PutResponse),
    DeleteRange(DeleteRangeResponse),
    Txn(TxnResponse),
}

/// The result of a transaction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnResponse {
    /// True when the compares held and `success` ran.
    pub succeeded: bool,
    pub responses: Vec<TxnOpResponse>,
    /// The store's revision after the transaction: its own revision when it wrote.
    pub revision: Revision,
}

/// The result of [`crate::Storage::create`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateOutcome {
    Created {
        revision: Revision,
    },
    /// The key exists; its current state.
    AlreadyExists {
        current: KeyValue,
    },
}

/// The result of [`crate::Storage::update`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpdateOutcome {
    Updated {
        revision: Revision,
    },
    /// The key's mod_revision was not the expected one; its current state (None: it is gone).
    Conflict {
        current: Option<KeyValue>,
    },
}

/// The result of [`crate::Storage::delete`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// Deleted at `revision`; `deleted` is the state it had.
    Deleted {
        revision: Revision,
        deleted: KeyValue,
    },
    /// The key's mod_revision was not the expected one; its current state.
    Conflict { current: KeyValue },
    /// There was no such key.
    NotFound,
}

/// What a watch event says happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change to one key. A delete's `kv` holds the key and the delete's revision as
/// `mod_revision`, everything else zero, as etcd sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub kv: KeyValue,
    /// The key's state before this change, when the watch asked for it and there was one.
    pub prev_kv: Option<KeyValue>,
}

/// A watch over a key range.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchRequest {
    pub range: KeyRange,
    /// The first revision to deliver; 0 means "changes after now".
    pub start_revision: Revision,
    pub prev_kv: bool,
}

impl WatchRequest {
    pub fn new(range: KeyRange) -> Self {
        Self {
            range,
            ..Self::default()
        }
    }
    pub fn from_revision(mut self, revision: Revision) -> Self {
        self.start_revision = revision;
        self
    }
    pub fn with_prev_kv(mut self) -> Self {
        self.prev_kv = true;
        self
    }
}

/// Events delivered together, in revision order; all of them are at or below `revision`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchBatch {
    pub events: Vec<Event>,
    /// The store's revision as far as this watch has seen it: every event of the watch at or
    /// below it has been delivered, in this batch or before (a promise consumers rely on to
    /// skip what they have seen and to report progress).
    pub revision: Revision,
}

/// A granted lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    pub id: LeaseId,
    /// The TTL granted, in seconds.
    pub ttl: i64,
}

/// A lease's remaining time and, when asked for, its keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseInfo {
    pub id: LeaseId,
    /// Seconds left before it expires.
    pub ttl: i64,
    pub granted_ttl: i64,
    pub keys: Vec<Vec<u8>>,
}

/// One step of loading a copy of another store into an empty one (`rudder storage migrate`,
/// snapshot restore), so that every key keeps its revisions, version and lease and clients'
/// resourceVersions stay valid. Steps come in this order: `Leases`, then `Keys` (any number of
/// times), then `History` (revisions ascending, any number of times), then `Finish` once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreStep {
    /// Leases to grant, with their ids and TTLs.
    Leases(Vec<Lease>),
    /// Live keys as of the copy's base revision, in any order, each with its own
    /// `create_revision`, `mod_revision`, `version` and `lease`.
    Keys(Vec<KeyValue>),
    /// Revisions after the base, ascending, each with its events.
    History(Vec<RevisionEvents>),
    /// The copy is complete: the store's revision becomes `revision` and history below
    /// `compacted` (the base) is reported compacted.
    Finish {
        revision: Revision,
        compacted: Revision,
    },
}

/// One revision of a copied history: its events in order (a delete's `kv` holds just the key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevisionEvents {
    pub revision: Revision,
    pub events: Vec<Event>,
}

/// The store's vital signs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    pub driver: String,
    pub revision: Revision,
    /// The revision below which history is gone (0 if never compacted).
    pub compact_revision: Revision,
    pub db_size_bytes: i64,
    /// The server version, for drivers that talk to a server (etcd, PostgreSQL, SQLite library).
    pub server_version: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_the_last_byte_below_ff() {
        assert_eq!(prefix_end(b"/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b".to_vec());
        assert_eq!(prefix_end(&[0xff, 0xff]), vec![0]);
    }

    #[test]
    fn key_range_contains_follows_etcd_encoding() {
        let single = KeyRange::key("a");
        assert!(single.contains(b"a") && !single.contains(b"ab"));
        let prefix = KeyRange::prefix("/r/");
        assert!(prefix.contains(b"/r/x") && !prefix.contains(b"/r0") && !prefix.contains(b"/q"));
        let open = KeyRange::from_key("m");
        assert!(open.contains(b"zzz") && !open.contains(b"a"));
        assert!(KeyRange::prefix("").contains(b"anything"));
    }
}
