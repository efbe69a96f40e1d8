//! The in-process watch fan-out.
//!
//! A backend has exactly one event source (the SQL log poller) that publishes every committed
//! revision here, in order, each as one shared [`Committed`] (`Arc`: watchers share events,
//! nothing is copied per watcher until a watch hands events to its client). The hub keeps a
//! ring of recent revisions so new watchers can start a little in the past without touching the
//! database, and queues for each subscriber the revisions that touch its range.
//!
//! Publishing never waits. A subscriber's queue is bounded in bytes: one that falls further
//! behind is not failed but unsubscribed with the revision it stopped at, and its watch catches
//! up from the log (history) and subscribes again — what etcd does with its unsynced watchers.
//! Only the source ending (the store closing, the log unreadable for too long, its rows
//! purged before this process read them) ends subscriptions with an error.
//!
//! ```text
//!   log poller ──publish(Arc<Committed>)──▶ Hub ──▶ queue of subscriber 1 (range A)
//!                                            │  └─▶ queue of subscriber 2 (range B)
//!                                            └ ring of recent revisions (watches from the past)
//! ```

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::types::{Event, KeyRange, Revision};

/// The events of one committed revision, always with `prev_kv` when the key had one.
#[derive(Debug)]
pub(crate) struct Committed {
    pub revision: Revision,
    pub events: Vec<Event>,
    /// Roughly what the events hold in memory, for the subscribers' queue bounds.
    pub bytes: usize,
}

impl Committed {
    pub fn new(revision: Revision, events: Vec<Event>) -> Self {
        let bytes = events
            .iter()
            .map(|event| {
                let prev = event
                    .prev_kv
                    .as_ref()
                    .map_or(0, |kv| kv.key.len() + kv.value.len() + 48);
                event.kv.key.len() + event.kv.value.len() + prev + 96
            })
            .sum();
        Self {
            revision,
            events,
            bytes,
        }
    }

    /// Whether any event of this revision falls in `range`.
    pub fn touches(&self, range: &KeyRange) -> bool {
        self.events
            .iter()
            .any(|event| range.contains(&event.kv.key))
    }
}

/// How many bytes of events one subscriber may have queued before it is sent to catch up from
/// the log instead.
const SUBSCRIBER_QUEUE_BYTES: usize = 16 * 1024 * 1024;
/// The most the ring of recent revisions holds, whatever its event count allows.
const RING_BYTES: usize = 64 * 1024 * 1024;

/// What a subscription attempt yields.
pub(crate) enum Subscription {
    /// Live from now on; `initial` holds the ring's revisions from the requested start.
    Live {
        initial: Vec<Arc<Committed>>,
        receiver: Receiver,
    },
    /// The start is older than the ring: read history up to `upto` from the database first,
    /// then subscribe again from `upto + 1`.
    NeedHistory { upto: Revision },
}

/// Why the hub stopped feeding a subscriber.
#[derive(Debug)]
pub(crate) enum Ended {
    /// Its queue grew past the bound: catch up from the log from this revision.
    Behind { resume_from: Revision },
    /// The watch must end with this error.
    Failed(Error),
}

/// The receiving end of a subscription.
pub(crate) struct Receiver {
    batches: mpsc::UnboundedReceiver<Arc<Committed>>,
    shared: Arc<Shared>,
    id: u64,
    hub: Arc<Hub>,
}

/// What a subscriber and the hub both see.
struct Shared {
    /// Bytes queued and not yet received.
    queued: std::sync::atomic::AtomicUsize,
    ended: Mutex<Option<Ended>>,
}

impl Receiver {
    /// The next queued revision; `Err` once the hub stopped feeding this subscriber and
    /// everything queued before that was received.
    pub async fn recv(&mut self) -> std::result::Result<Arc<Committed>, Ended> {
        match self.batches.recv().await {
            Some(committed) => {
                self.shared
                    .queued
                    .fetch_sub(committed.bytes, std::sync::atomic::Ordering::Relaxed);
                Ok(committed)
            }
            None => Err(self
                .shared
                .ended
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take()
                .unwrap_or(Ended::Failed(Error::Closed))),
        }
    }

    /// A revision already queued, without waiting.
    pub fn try_recv(&mut self) -> Option<Arc<Committed>> {
        let committed = self.batches.try_recv().ok()?;
        self.shared
            .queued
            .fetch_sub(committed.bytes, std::sync::atomic::Ordering::Relaxed);
        Some(committed)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.hub.state().subscribers.remove(&self.id);
    }
}

struct Subscriber {
    /// The first revision this subscriber wants; the source may still be publishing older ones.
    from: Revision,
    range: KeyRange,
    sender: mpsc::UnboundedSender<Arc<Committed>>,
    shared: Arc<Shared>,
}

impl Subscriber {
    fn end(self, why: Ended) {
        *self
            .shared
            .ended
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(why);
        // Dropping the sender closes the queue once what it holds has been received.
    }
}

struct HubState {
    /// The last revision published.
    revision: Revision,
    /// Every revision above `floor` is in `recent`.
    floor: Revision,
    recent: VecDeque<Arc<Committed>>,
    recent_events: usize,
    recent_bytes: usize,
    subscribers: HashMap<u64, Subscriber>,
    next_id: u64,
    closed: bool,
}

/// The fan-out point between one event source and many watchers.
pub(crate) struct Hub {
    state: Mutex<HubState>,
    ring_capacity: usize,
}

impl Hub {
    /// A hub whose source has published everything up to `revision`.
    pub fn new(revision: Revision, ring_capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(HubState {
                revision,
                floor: revision,
                recent: VecDeque::new(),
                recent_events: 0,
                recent_bytes: 0,
                subscribers: HashMap::new(),
                next_id: 0,
                closed: false,
            }),
            ring_capacity,
        })
    }

    fn state(&self) -> MutexGuard<'_, HubState> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Publishes committed revisions, which must follow the last one without a gap; `upto` is
    /// the revision the source has read up to (revisions without events in between count).
    pub fn publish(&self, batch: Vec<Committed>, upto: Revision) {
        let mut state = self.state();
        for committed in batch {
            if committed.revision <= state.revision {
                continue;
            }
            let committed = Arc::new(committed);
            state.revision = committed.revision;
            state.recent_events += committed.events.len();
            state.recent_bytes += committed.bytes;
            state.recent.push_back(committed.clone());
            while (state.recent_events > self.ring_capacity || state.recent_bytes > RING_BYTES)
                && state.recent.len() > 1
            {
                if let Some(old) = state.recent.pop_front() {
                    state.recent_events -= old.events.len();
                    state.recent_bytes -= old.bytes;
                    state.floor = old.revision;
                }
            }
            let behind: Vec<u64> = state
                .subscribers
                .iter()
                .filter(|(_, subscriber)| {
                    committed.revision >= subscriber.from && committed.touches(&subscriber.range)
                })
                .filter_map(|(id, subscriber)| {
                    let queued = subscriber
                        .shared
                        .queued
                        .fetch_add(committed.bytes, std::sync::atomic::Ordering::Relaxed);
                    let over = queued > 0 && queued + committed.bytes > SUBSCRIBER_QUEUE_BYTES;
                    // A receiver that is gone makes send fail; drop its subscriber too.
                    if over || subscriber.sender.send(committed.clone()).is_err() {
                        Some(*id)
                    } else {
                        None
                    }
                })
                .collect();
            for id in behind {
                if let Some(subscriber) = state.subscribers.remove(&id) {
                    subscriber.end(Ended::Behind {
                        resume_from: committed.revision,
                    });
                }
            }
        }
        if upto > state.revision {
            state.revision = upto;
            if state.recent.is_empty() {
                state.floor = upto;
            }
        }
    }

    /// The source lost revisions up to `purged - 1` (their rows were removed before it read
    /// them): every subscriber ends with `Compacted`, and the hub continues from `purged - 1`.
    pub fn purged_under_the_source(&self, purged: Revision) {
        let mut state = self.state();
        let compacted = Error::Compacted {
            requested: state.revision + 1,
            compacted: purged,
        };
        for (_, subscriber) in state.subscribers.drain() {
            subscriber.end(Ended::Failed(compacted.clone_plain()));
        }
        state.recent.clear();
        state.recent_events = 0;
        state.recent_bytes = 0;
        state.revision = state.revision.max(purged - 1);
        state.floor = state.revision;
    }

    /// Ends every subscription with `error` (the source cannot read the log).
    pub fn fail_all(&self, error: &Error) {
        let mut state = self.state();
        for (_, subscriber) in state.subscribers.drain() {
            subscriber.end(Ended::Failed(error.clone_plain()));
        }
    }

    /// Subscribes to `range` from revision `from` (which must be > 0).
    pub fn subscribe(self: &Arc<Self>, range: &KeyRange, from: Revision) -> Result<Subscription> {
        let mut state = self.state();
        if state.closed {
            return Err(Error::Closed);
        }
        if from <= state.floor {
            return Ok(Subscription::NeedHistory {
                upto: state.revision,
            });
        }
        let initial: Vec<Arc<Committed>> = state
            .recent
            .iter()
            .filter(|committed| committed.revision >= from && committed.touches(range))
            .cloned()
            .collect();
        let (sender, batches) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            queued: std::sync::atomic::AtomicUsize::new(0),
            ended: Mutex::new(None),
        });
        let id = state.next_id;
        state.next_id += 1;
        state.subscribers.insert(
            id,
            Subscriber {
                from,
                range: range.clone(),
                sender,
                shared: shared.clone(),
            },
        );
        Ok(Subscription::Live {
            initial,
            receiver: Receiver {
                batches,
                shared,
                id,
                hub: self.clone(),
            },
        })
    }

    /// The revision up to which `receiver` has been handed every event, if it has received
    /// everything queued for it (checked under the lock publishing holds, so nothing is in
    /// flight); `None` while revisions are still queued or it was unsubscribed.
    pub fn progress(&self, receiver: &Receiver) -> Option<Revision> {
        let state = self.state();
        (receiver.batches.is_empty() && state.subscribers.contains_key(&receiver.id))
            .then_some(state.revision)
    }

    /// Ends every subscription; their streams see their queue close.
    pub fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        for (_, subscriber) in state.subscribers.drain() {
            subscriber.end(Ended::Failed(Error::Closed));
        }
    }

    /// How many watchers are subscribed.
    #[cfg(test)]
    pub fn subscriber_count(&self) -> usize {
        self.state().subscribers.len()
    }
}

/// The events of `committed` that fall in `range`, with or without their previous state.
pub(crate) fn select(committed: &Committed, range: &KeyRange, prev_kv: bool) -> Vec<Event> {
    committed
        .events
        .iter()
        .filter(|event| range.contains(&event.kv.key))
        .map(|event| {
            let mut event = event.clone();
            if !prev_kv {
                event.prev_kv = None;
            }
            event
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{EventKind, KeyValue};

    fn put(revision: Revision, key: &str, bytes: usize) -> Committed {
        Committed::new(
            revision,
            vec![Event {
                kind: EventKind::Put,
                kv: KeyValue {
                    key: key.into(),
                    value: vec![b'v'; bytes],
                    mod_revision: revision,
                    ..KeyValue::default()
                },
                prev_kv: None,
            }],
        )
    }

    fn live(hub: &Arc<Hub>, from: Revision) -> (Vec<Arc<Committed>>, Receiver) {
        match hub.subscribe(&KeyRange::prefix("/"), from).unwrap() {
            Subscription::Live { initial, receiver } => (initial, receiver),
            Subscription::NeedHistory { .. } => panic!("expected a live subscription"),
        }
    }

    #[tokio::test]
    async fn a_subscriber_past_its_bound_is_sent_to_history_while_others_keep_receiving() {
        let hub = Hub::new(1, 16);
        let (_, mut stuck) = live(&hub, 2);
        let (_, mut reader) = live(&hub, 2);
        let megabyte = 1024 * 1024;
        let last = 2 + (SUBSCRIBER_QUEUE_BYTES / megabyte) as i64 + 4;
        for revision in 2..=last {
            let committed = put(revision, "/a", megabyte);
            hub.publish(vec![committed], revision);
            assert_eq!(reader.recv().await.unwrap().revision, revision);
        }
        assert_eq!(hub.subscriber_count(), 1, "the stuck one was unsubscribed");
        // It still receives what was queued for it, in order, then where to resume.
        let mut received = Vec::new();
        let resume = loop {
            match stuck.recv().await {
                Ok(committed) => received.push(committed.revision),
                Err(Ended::Behind { resume_from }) => break resume_from,
                Err(other) => panic!("unexpected end {other:?}"),
            }
        };
        let expected: Vec<Revision> = (2..resume).collect();
        assert_eq!(received, expected);
        assert!(resume < last);
    }

    #[tokio::test]
    async fn a_subscriber_ahead_of_the_source_skips_older_revisions() {
        let hub = Hub::new(1, 16);
        let (initial, mut receiver) = live(&hub, 4);
        assert!(initial.is_empty());
        for revision in 2..6 {
            hub.publish(vec![put(revision, "/a", 1)], revision);
        }
        assert_eq!(receiver.recv().await.unwrap().revision, 4);
        assert_eq!(receiver.recv().await.unwrap().revision, 5);
    }

    #[test]
    fn a_start_older_than_the_ring_asks_for_history() {
        let hub = Hub::new(1, 2);
        for revision in 2..6 {
            hub.publish(vec![put(revision, "/a", 1)], revision);
        }
        assert!(matches!(
            hub.subscribe(&KeyRange::prefix("/"), 2).unwrap(),
            Subscription::NeedHistory { upto: 5 }
        ));
        let (initial, _) = live(&hub, 5);
        assert_eq!(initial.len(), 1);
    }

    #[tokio::test]
    async fn rows_purged_under_the_source_end_every_subscriber_with_compacted() {
        let hub = Hub::new(1, 16);
        let (_, mut receiver) = live(&hub, 2);
        hub.publish(vec![put(2, "/a", 1)], 2);
        hub.purged_under_the_source(10);
        assert_eq!(receiver.recv().await.unwrap().revision, 2);
        assert!(matches!(
            receiver.recv().await,
            Err(Ended::Failed(Error::Compacted { compacted: 10, .. }))
        ));
        // New watchers start after the lost revisions.
        assert!(matches!(
            hub.subscribe(&KeyRange::prefix("/"), 5).unwrap(),
            Subscription::NeedHistory { upto: 9 }
        ));
    }
}
