//! The in-process watch fan-out.
//!
//! A backend has exactly one event source (the SQL log poller) that publishes every committed
//! revision here, in order. The hub keeps a ring of recent events so new watchers can start a
//! little in the past without touching the database, and hands each subscriber the events of its
//! range through a bounded channel. A subscriber whose channel is full is dropped and flagged as
//! lagging; its stream then ends with [`Error::WatcherTooSlow`]. Publishing never waits.
//!
//! ```text
//!   log poller ──publish(rev, events)──▶ Hub ──try_send──▶ subscriber 1 (range A)
//!                                         │  └─try_send──▶ subscriber 2 (range B)
//!                                         └ ring of recent events (for watches from the past)
//! ```

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::types::{Event, KeyRange, Revision, WatchBatch};

/// Events of one revision as published: always with `prev_kv` when the key had one.
#[derive(Clone, Debug)]
pub(crate) struct Committed {
    pub revision: Revision,
    pub events: Vec<Event>,
}

/// How many batches a subscriber may have queued before it is dropped as too slow.
const SUBSCRIBER_QUEUE: usize = 1024;

/// What a subscription attempt yields.
pub(crate) enum Subscription {
    /// Live from now on; `initial` holds buffered events from the requested start.
    Live {
        initial: Vec<Event>,
        receiver: Receiver,
    },
    /// The start is older than the ring: read history up to `upto` from the database first,
    /// then subscribe again from `upto + 1`.
    NeedHistory { upto: Revision },
}

/// The receiving end of a subscription.
pub(crate) struct Receiver {
    pub batches: mpsc::Receiver<WatchBatch>,
    pub lagged: Arc<AtomicBool>,
    id: u64,
    hub: Arc<Hub>,
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
    prev_kv: bool,
    sender: mpsc::Sender<WatchBatch>,
    lagged: Arc<AtomicBool>,
}

struct HubState {
    /// The last revision published.
    revision: Revision,
    /// Every revision above `floor` is in `recent`.
    floor: Revision,
    recent: VecDeque<Committed>,
    recent_events: usize,
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

    /// Publishes committed revisions, which must follow the last one without a gap.
    pub fn publish(&self, batch: Vec<Committed>) {
        let mut state = self.state();
        for committed in batch {
            if committed.revision <= state.revision {
                continue;
            }
            state.revision = committed.revision;
            state.recent_events += committed.events.len();
            state.recent.push_back(committed.clone());
            while state.recent_events > self.ring_capacity && state.recent.len() > 1 {
                if let Some(old) = state.recent.pop_front() {
                    state.recent_events -= old.events.len();
                    state.floor = old.revision;
                }
            }
            let revision = state.revision;
            state.subscribers.retain(|_, subscriber| {
                if committed.revision < subscriber.from {
                    return true;
                }
                let events = select(&committed.events, &subscriber.range, subscriber.prev_kv);
                if events.is_empty() {
                    return true;
                }
                match subscriber.sender.try_send(WatchBatch { events, revision }) {
                    Ok(()) => true,
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        subscriber.lagged.store(true, Ordering::SeqCst);
                        false
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => false,
                }
            });
        }
    }

    /// Subscribes to `range` from revision `from` (which must be > 0).
    pub fn subscribe(
        self: &Arc<Self>,
        range: &KeyRange,
        from: Revision,
        prev_kv: bool,
    ) -> Result<Subscription> {
        let mut state = self.state();
        if state.closed {
            return Err(Error::Closed);
        }
        if from <= state.floor {
            return Ok(Subscription::NeedHistory {
                upto: state.revision,
            });
        }
        let mut initial = Vec::new();
        for committed in state.recent.iter().filter(|c| c.revision >= from) {
            initial.extend(select(&committed.events, range, prev_kv));
        }
        let (sender, batches) = mpsc::channel(SUBSCRIBER_QUEUE);
        let lagged = Arc::new(AtomicBool::new(false));
        let id = state.next_id;
        state.next_id += 1;
        state.subscribers.insert(
            id,
            Subscriber {
                from,
                range: range.clone(),
                prev_kv,
                sender,
                lagged: lagged.clone(),
            },
        );
        Ok(Subscription::Live {
            initial,
            receiver: Receiver {
                batches,
                lagged,
                id,
                hub: self.clone(),
            },
        })
    }

    /// The revision up to which `receiver` has been handed every event, if it has consumed
    /// everything queued for it (checked under the lock publishing holds, so nothing is in
    /// flight); `None` while batches are still queued.
    pub fn progress(&self, receiver: &Receiver) -> Option<Revision> {
        let state = self.state();
        receiver.batches.is_empty().then_some(state.revision)
    }

    /// Ends every subscription; their streams see their channel close.
    pub fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        state.subscribers.clear();
    }

    /// How many watchers are subscribed.
    #[cfg(test)]
    pub fn subscriber_count(&self) -> usize {
        self.state().subscribers.len()
    }
}

/// The events of `events` that fall in `range`, with or without their previous state.
pub(crate) fn select(events: &[Event], range: &KeyRange, prev_kv: bool) -> Vec<Event> {
    events
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

    fn put(revision: Revision, key: &str) -> Committed {
        Committed {
            revision,
            events: vec![Event {
                kind: EventKind::Put,
                kv: KeyValue {
                    key: key.into(),
                    mod_revision: revision,
                    ..KeyValue::default()
                },
                prev_kv: None,
            }],
        }
    }

    #[tokio::test]
    async fn a_subscriber_that_never_reads_is_dropped_and_flagged_while_others_keep_receiving() {
        let hub = Hub::new(1, 16);
        let Subscription::Live {
            receiver: stuck, ..
        } = hub.subscribe(&KeyRange::prefix("/"), 2, false).unwrap()
        else {
            panic!("expected a live subscription");
        };
        let Subscription::Live {
            receiver: mut reader,
            ..
        } = hub.subscribe(&KeyRange::prefix("/"), 2, false).unwrap()
        else {
            panic!("expected a live subscription");
        };
        for revision in 2..(SUBSCRIBER_QUEUE as i64 + 10) {
            hub.publish(vec![put(revision, "/a")]);
            let batch = reader.batches.recv().await.unwrap();
            assert_eq!(batch.events[0].kv.mod_revision, revision);
        }
        assert!(stuck.lagged.load(Ordering::SeqCst));
        assert_eq!(hub.subscriber_count(), 1);
    }

    #[tokio::test]
    async fn a_subscriber_ahead_of_the_source_skips_older_revisions() {
        let hub = Hub::new(1, 16);
        let Subscription::Live {
            mut receiver,
            initial,
        } = hub.subscribe(&KeyRange::prefix("/"), 4, false).unwrap()
        else {
            panic!("expected a live subscription");
        };
        assert!(initial.is_empty());
        for revision in 2..6 {
            hub.publish(vec![put(revision, "/a")]);
        }
        assert_eq!(
            receiver.batches.recv().await.unwrap().events[0]
                .kv
                .mod_revision,
            4
        );
        assert_eq!(
            receiver.batches.recv().await.unwrap().events[0]
                .kv
                .mod_revision,
            5
        );
    }

    #[test]
    fn a_start_older_than_the_ring_asks_for_history() {
        let hub = Hub::new(1, 2);
        for revision in 2..6 {
            hub.publish(vec![put(revision, "/a")]);
        }
        assert!(matches!(
            hub.subscribe(&KeyRange::prefix("/"), 2, false).unwrap(),
            Subscription::NeedHistory { upto: 5 }
        ));
        match hub.subscribe(&KeyRange::prefix("/"), 5, false).unwrap() {
            Subscription::Live { initial, .. } => assert_eq!(initial.len(), 1),
            Subscription::NeedHistory { .. } => panic!("revision 5 is in the ring"),
        }
    }
}
