//! Copying a whole store to another, of any driver, keeping every key's revisions, version and
//! lease and the store's revision and compacted revision, so that clients' resourceVersions
//! stay valid on the copy: `rudder storage migrate`, and snapshots ([`snapshot`]) saved from
//! one store and restored into another.
//!
//! A copy is a stream of [`RestoreStep`]s read from the source at one revision `R`: its live
//! leases, the keys live at the *base* revision (the source's compacted revision, so that the
//! history clients may still resume from comes along; or `R` itself without history), every
//! revision after the base up to `R` as its events, and the end. [`dump`] reads them; a
//! [`Sink`] takes them — a store's [`Storage::restore`], or a snapshot file. [`verify`]
//! compares two stores key by key at one revision.
//!
//! The source must not be written meanwhile (stop the servers first): a write after `R` is not
//! copied, and a compaction of the source during the copy fails it with `Compacted`.

pub mod snapshot;

use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::interface::{Storage, WatchStream};
use crate::types::*;

/// Keys of Rudder's own bookkeeping in an etcd without a prefix (the watch-progress fence, a
/// copy's filler): never copied, never compared.
pub const INTERNAL_PREFIX: &[u8] = b"\0rudder/";

/// Keys per base page.
const PAGE: i64 = 1000;

/// What a copy will read: fixed when it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The source's revision: the copy ends there.
    pub revision: Revision,
    /// The revision the base keys are read at.
    pub base: Revision,
    /// The compacted revision the copy reports (the source's, or `revision` without history).
    pub compacted: Revision,
    /// Live keys at the base revision.
    pub keys: u64,
}

impl Plan {
    /// Base keys plus history revisions: the units of progress.
    pub fn total_work(&self) -> u64 {
        self.keys + (self.revision - self.base).max(0) as u64
    }
}

/// How far a copy has got, in the units of [`Plan::total_work`].
pub type Progress<'a> = &'a mut (dyn FnMut(u64) + Send);

/// Takes a copy's steps.
#[async_trait]
pub trait Sink: Send {
    async fn step(&mut self, step: RestoreStep) -> Result<()>;
}

/// A store as a sink: each step goes to [`Storage::restore`].
pub struct StoreSink<'a>(pub &'a dyn Storage);

#[async_trait]
impl Sink for StoreSink<'_> {
    async fn step(&mut self, step: RestoreStep) -> Result<()> {
        self.0.restore(step).await
    }
}

/// Reads the source's revision and what the copy will take. Without `history` the copy is
/// the state at the current revision alone, and the target reports everything before it
/// compacted.
pub async fn plan(source: &dyn Storage, history: bool) -> Result<Plan> {
    let status = source.status().await?;
    let (base, compacted) = if history {
        (status.compact_revision.max(1), status.compact_revision)
    } else {
        (status.revision, status.revision)
    };
    let keys = count_keys(source, base).await?;
    Ok(Plan {
        revision: status.revision,
        base,
        compacted,
        keys,
    })
}

/// Whether a store holds no keys (Rudder's own bookkeeping aside).
pub async fn is_empty(store: &dyn Storage) -> Result<bool> {
    Ok(count_keys(store, 0).await? == 0)
}

async fn count_keys(store: &dyn Storage, revision: Revision) -> Result<u64> {
    let all = store
        .range(
            RangeRequest::new(KeyRange::prefix(""))
                .at_revision(revision)
                .count_only(),
        )
        .await?
        .count;
    let internal = store
        .range(
            RangeRequest::new(KeyRange::prefix(INTERNAL_PREFIX))
                .at_revision(revision)
                .count_only(),
        )
        .await?
        .count;
    Ok((all - internal).max(0) as u64)
}

/// Reads the copy `plan` describes from `source` into `sink`, reporting progress.
pub async fn dump(
    source: &dyn Storage,
    plan: &Plan,
    sink: &mut dyn Sink,
    progress: Progress<'_>,
) -> Result<()> {
    let mut done = 0;
    let leases = live_leases(source).await?;
    if !leases.is_empty() {
        sink.step(RestoreStep::Leases(leases)).await?;
    }
    let mut pages = Pages::new(plan.base);
    while let Some(page) = pages.next(source).await? {
        done += page.len() as u64;
        sink.step(RestoreStep::Keys(page)).await?;
        progress(done);
    }
    if plan.revision > plan.base {
        let request = WatchRequest::new(KeyRange::prefix("")).from_revision(plan.base + 1);
        let mut history = History::new(source.watch(request).await?, plan.revision);
        let mut batch = HistoryBatch::default();
        while let Some((revision, events)) = history.next().await? {
            if let Some(full) = batch.push(RevisionEvents { revision, events }) {
                sink.step(full).await?;
                progress(plan.keys + (revision - plan.base) as u64);
            }
        }
        if let Some(rest) = batch.take() {
            sink.step(rest).await?;
        }
    }
    sink.step(RestoreStep::Finish {
        revision: plan.revision,
        compacted: plan.compacted,
    })
    .await?;
    progress(plan.total_work());
    Ok(())
}

/// Revisions gathered into one `History` step (one database transaction on SQL targets):
/// up to [`HISTORY_REVISIONS`] revisions or [`HISTORY_BYTES`] of keys and values.
#[derive(Default)]
pub(crate) struct HistoryBatch {
    revisions: Vec<RevisionEvents>,
    bytes: usize,
}

const HISTORY_REVISIONS: usize = 1000;
const HISTORY_BYTES: usize = 4 * 1024 * 1024;

impl HistoryBatch {
    /// Adds a revision; returns the step to hand on once the batch is full.
    pub(crate) fn push(&mut self, revision: RevisionEvents) -> Option<RestoreStep> {
        self.bytes += revision
            .events
            .iter()
            .map(|event| event.kv.key.len() + event.kv.value.len())
            .sum::<usize>();
        self.revisions.push(revision);
        if self.revisions.len() >= HISTORY_REVISIONS || self.bytes >= HISTORY_BYTES {
            return self.take();
        }
        None
    }

    /// What is gathered, if anything.
    pub(crate) fn take(&mut self) -> Option<RestoreStep> {
        self.bytes = 0;
        (!self.revisions.is_empty())
            .then(|| RestoreStep::History(std::mem::take(&mut self.revisions)))
    }
}

/// Live leases with their granted TTLs.
async fn live_leases(source: &dyn Storage) -> Result<Vec<Lease>> {
    let mut leases = Vec::new();
    for id in source.lease_list().await? {
        match source.lease_time_to_live(id, false).await {
            Ok(info) => leases.push(Lease {
                id,
                ttl: info.granted_ttl.max(1),
            }),
            // Expired between the list and now.
            Err(Error::LeaseNotFound(_)) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(leases)
}

/// Pages of the keys live at one revision, in key order, Rudder's own keys left out.
struct Pages {
    revision: Revision,
    next: Option<Vec<u8>>,
}

impl Pages {
    fn new(revision: Revision) -> Self {
        Self {
            revision,
            next: Some(KeyRange::prefix("").start),
        }
    }

    async fn next(&mut self, store: &dyn Storage) -> Result<Option<Vec<KeyValue>>> {
        loop {
            let Some(start) = self.next.take() else {
                return Ok(None);
            };
            let range = KeyRange {
                start,
                end: KeyRange::prefix("").end,
            };
            let response = store
                .range(
                    RangeRequest::new(range)
                        .at_revision(self.revision)
                        .with_limit(PAGE),
                )
                .await?;
            if response.more {
                if let Some(last) = response.kvs.last() {
                    let mut after = last.key.clone();
                    after.push(0);
                    self.next = Some(after);
                }
            }
            let page: Vec<KeyValue> = response
                .kvs
                .into_iter()
                .filter(|kv| !kv.key.starts_with(INTERNAL_PREFIX))
                .collect();
            if !page.is_empty() {
                return Ok(Some(page));
            }
        }
    }
}

/// The source's history after the base, one revision at a time, up to `end`.
struct History {
    watch: WatchStream,
    end: Revision,
    /// Events read but not yet handed out, in revision order.
    buffered: std::collections::VecDeque<Event>,
    /// Everything up to this revision has been read from the watch.
    seen: Revision,
}

impl History {
    fn new(watch: WatchStream, end: Revision) -> Self {
        Self {
            watch,
            end,
            buffered: Default::default(),
            seen: 0,
        }
    }

    /// The next revision with events of the copy's keys, and its events.
    async fn next(&mut self) -> Result<Option<(Revision, Vec<Event>)>> {
        loop {
            if let Some(first) = self.buffered.front() {
                let revision = first.kv.mod_revision;
                // A revision is whole once something later was seen.
                if self.seen > revision || self.seen >= self.end {
                    let mut events = Vec::new();
                    while self
                        .buffered
                        .front()
                        .is_some_and(|event| event.kv.mod_revision == revision)
                    {
                        events.extend(self.buffered.pop_front());
                    }
                    return Ok(Some((revision, events)));
                }
            } else if self.seen >= self.end {
                return Ok(None);
            }
            self.read().await?;
        }
    }

    async fn read(&mut self) -> Result<()> {
        // Quiet for a while: the revisions left wrote nothing this copy sees, so ask the store
        // to say how far it has delivered.
        let batch = match tokio::time::timeout(Duration::from_millis(300), self.watch.next()).await
        {
            Ok(batch) => batch,
            Err(_) => {
                self.watch.request_progress();
                return Ok(());
            }
        };
        let batch = batch.ok_or_else(|| Error::Unavailable {
            message: "the source's watch ended before the copy's last revision".into(),
            source: None,
        })??;
        // Only a batch without events promises that everything up to its revision has come
        // (etcd's event batches carry the store's revision while it still catches up).
        if batch.events.is_empty() {
            self.seen = self.seen.max(batch.revision);
        }
        for event in batch.events {
            let revision = event.kv.mod_revision;
            self.seen = self.seen.max(revision);
            if revision <= self.end && !event.kv.key.starts_with(INTERNAL_PREFIX) {
                self.buffered.push_back(event);
            }
        }
        Ok(())
    }
}

/// What [`verify`] found the same on both sides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Totals {
    pub keys: u64,
    pub value_bytes: u64,
    /// SHA-256 over every key, value hash and revisions, in key order: equal digests, equal
    /// stores.
    pub digest: String,
}

/// Compares two stores at `revision`, key by key (value hashes, create and mod revisions,
/// versions, leases); the first difference is the error.
pub async fn verify(
    source: &dyn Storage,
    target: &dyn Storage,
    revision: Revision,
) -> Result<Totals> {
    let mut left = Pages::new(revision);
    let mut right = Pages::new(revision);
    let (mut left_page, mut right_page) = (Vec::new().into_iter(), Vec::new().into_iter());
    let mut digest = Sha256::new();
    let (mut keys, mut value_bytes) = (0u64, 0u64);
    loop {
        let a = next_kv(&mut left, &mut left_page, source).await?;
        let b = next_kv(&mut right, &mut right_page, target).await?;
        let (a, b) = match (a, b) {
            (None, None) => break,
            (Some(a), Some(b)) => (a, b),
            (Some(only), None) | (None, Some(only)) => {
                return Err(Error::InvalidArgument(format!(
                    "at revision {revision}, {} is in one store only",
                    String::from_utf8_lossy(&only.key)
                )))
            }
        };
        let (ha, hb) = (summary(&a), summary(&b));
        if ha != hb {
            return Err(Error::InvalidArgument(format!(
                "at revision {revision} the stores differ: {ha} against {hb}"
            )));
        }
        digest.update(ha.as_bytes());
        keys += 1;
        value_bytes += a.value.len() as u64;
    }
    Ok(Totals {
        keys,
        value_bytes,
        digest: hex(&digest.finalize()),
    })
}

async fn next_kv(
    pages: &mut Pages,
    page: &mut std::vec::IntoIter<KeyValue>,
    store: &dyn Storage,
) -> Result<Option<KeyValue>> {
    if let Some(kv) = page.next() {
        return Ok(Some(kv));
    }
    match pages.next(store).await? {
        Some(next) => {
            *page = next.into_iter();
            Ok(page.next())
        }
        None => Ok(None),
    }
}

/// One key as compared: its name, value hash and revisions.
fn summary(kv: &KeyValue) -> String {
    format!(
        "{} value sha256:{} create {} mod {} version {} lease {}",
        String::from_utf8_lossy(&kv.key),
        hex(&Sha256::digest(&kv.value)),
        kv.create_revision,
        kv.mod_revision,
        kv.version,
        kv.lease
    )
}

/// A copied key's revisions must be those of a real history: created after the empty store's
/// revision 1, and each of its versions written at a revision of its own up to its last write.
pub(crate) fn check_revisions(kv: &KeyValue) -> Result<()> {
    if kv.create_revision < 2
        || kv.version < 1
        || kv.create_revision + kv.version - 1 > kv.mod_revision
    {
        return Err(Error::InvalidArgument(format!(
            "{} has impossible revisions (create {}, mod {}, version {})",
            String::from_utf8_lossy(&kv.key),
            kv.create_revision,
            kv.mod_revision,
            kv.version
        )));
    }
    Ok(())
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn revision(revision: Revision, value_bytes: usize) -> RevisionEvents {
        RevisionEvents {
            revision,
            events: vec![Event {
                kind: EventKind::Put,
                kv: KeyValue {
                    key: b"/k".to_vec(),
                    value: vec![b'v'; value_bytes],
                    create_revision: 2,
                    mod_revision: revision,
                    version: 1,
                    lease: 0,
                },
                prev_kv: None,
            }],
        }
    }

    fn revisions(step: Option<RestoreStep>) -> Vec<Revision> {
        match step {
            Some(RestoreStep::History(revisions)) => {
                revisions.iter().map(|revision| revision.revision).collect()
            }
            other => panic!("expected a history step, got {other:?}"),
        }
    }

    #[test]
    fn history_goes_on_in_steps_of_a_thousand_revisions_or_four_mebibytes() {
        let mut batch = HistoryBatch::default();
        for number in 2..1001 {
            assert!(batch.push(revision(number, 10)).is_none());
        }
        let full = revisions(batch.push(revision(1001, 10)));
        assert_eq!((full.len(), full[0], full[999]), (1000, 2, 1001));
        assert!(batch.take().is_none(), "nothing left once handed on");

        assert!(batch.push(revision(1002, 3 * 1024 * 1024)).is_none());
        let big = revisions(batch.push(revision(1003, 1024 * 1024)));
        assert_eq!(big, [1002, 1003]);
        assert!(batch.push(revision(1004, 10)).is_none());
        assert_eq!(revisions(batch.take()), [1004]);
    }
}
