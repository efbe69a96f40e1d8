//! Field indexes of the watch cache, as upstream's cacher keeps for `spec.nodeName` of pods:
//! a LIST that selects one value of an indexed field (`fieldSelector=spec.nodeName=n1`, what
//! every kubelet asks for) reads that value's objects instead of filtering every object, and
//! a watch that selects one value is woken only by batches that touch that value (upstream's
//! "triggers"), so a thousand kubelets' watches do not all wake for every pod event.
//!
//! The index is a persistent ordered map from (value, key) to the cached object, shared with
//! the cache's map: cloning it with a snapshot is O(1), and an object's entry costs its key.
//! Namespaces need no index: a namespace's objects are a key prefix already.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use imbl::OrdMap;
use tokio::sync::broadcast;

use super::{Batch, Change, BROADCAST_BATCHES};
use crate::catalog::ResourceInfo;
use crate::registry::decoded::Object;
use crate::selectors::FieldSet;

/// The indexed fields: (group, plural, field).
const INDEXED: &[(&str, &str, &str)] = &[("", "pods", "spec.nodeName")];

/// The field `info`'s cache indexes, if any.
pub(super) fn indexed_field(info: &ResourceInfo) -> Option<&'static str> {
    INDEXED
        .iter()
        .find(|(group, plural, _)| *group == info.group && *plural == info.plural)
        .map(|(_, _, field)| *field)
}

/// One field's index over a cache's objects.
#[derive(Clone)]
pub(super) struct Index {
    pub field: &'static str,
    set: &'static FieldSet,
    entries: OrdMap<(String, Vec<u8>), Arc<Object>>,
}

impl Index {
    pub fn new(field: &'static str, set: &'static FieldSet) -> Self {
        Self {
            field,
            set,
            entries: OrdMap::new(),
        }
    }

    /// The indexed field's value in `object` (empty when the object does not set it, as a
    /// field selector sees it).
    pub fn value_of(&self, object: &Object) -> String {
        object
            .fields(self.set)
            .get(self.field)
            .cloned()
            .unwrap_or_default()
    }

    /// Records that `key` now holds `new` (none: deleted) instead of `old`.
    pub fn update(&mut self, key: &[u8], old: Option<&Arc<Object>>, new: Option<&Arc<Object>>) {
        if let Some(old) = old {
            self.entries.remove(&(self.value_of(old), key.to_vec()));
        }
        if let Some(new) = new {
            self.entries
                .insert((self.value_of(new), key.to_vec()), new.clone());
        }
    }

    /// The objects whose field is `value`, with keys in `[start, end)`, in key order.
    pub fn range<'a>(
        &'a self,
        value: &str,
        start: &[u8],
        end: &[u8],
    ) -> impl Iterator<Item = (&'a Vec<u8>, &'a Arc<Object>)> + 'a {
        let from = (value.to_string(), start.to_vec());
        let to = (value.to_string(), end.to_vec());
        self.entries
            .range(from..to)
            .map(|((_, key), object)| (key, object))
    }
}

/// The watchers of one generation of a cache that select one value of its indexed field,
/// each value's watchers on a broadcast of their own.
#[derive(Default)]
pub(super) struct Triggers {
    by_value: HashMap<String, broadcast::Sender<Arc<Batch>>>,
}

impl Triggers {
    /// A receiver of the batches that touch `value`.
    pub fn subscribe(&mut self, value: &str) -> broadcast::Receiver<Arc<Batch>> {
        self.by_value
            .entry(value.to_string())
            .or_insert_with(|| broadcast::Sender::new(BROADCAST_BATCHES))
            .subscribe()
    }

    pub fn receiver_count(&self) -> usize {
        self.by_value
            .values()
            .map(broadcast::Sender::receiver_count)
            .sum()
    }

    /// Hands `batch` to the watchers of every value its changes had before or have after; a
    /// batch without changes (progress) goes to all. A value whose watchers are all gone is
    /// forgotten when a batch finds no one to take it.
    pub fn publish(&mut self, index: &Index, batch: &Arc<Batch>) {
        if self.by_value.is_empty() {
            return;
        }
        if batch.events.is_empty() {
            self.by_value
                .retain(|_, sender| sender.send(batch.clone()).is_ok());
            return;
        }
        let mut touched = BTreeSet::new();
        for event in &batch.events {
            match &event.change {
                Change::Put { new, old } => {
                    touched.insert(index.value_of(new));
                    if let Some(old) = old {
                        touched.insert(index.value_of(old));
                    }
                }
                Change::Delete { old } => {
                    touched.insert(index.value_of(old));
                }
            }
        }
        for value in touched {
            let unwatched = self
                .by_value
                .get(&value)
                .is_some_and(|sender| sender.send(batch.clone()).is_err());
            if unwatched {
                self.by_value.remove(&value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::cache::CachedEvent;
    use serde_json::json;

    fn pod(node: &str) -> Arc<Object> {
        let pods = crate::catalog::find("", "v1", "pods").expect("served");
        Arc::new(Object::new(
            json!({"spec": {"nodeName": node}}),
            pods.strategy.fields(),
        ))
    }

    fn pods_index() -> Index {
        let pods = crate::catalog::find("", "v1", "pods").expect("served");
        Index::new(
            indexed_field(pods).expect("pods are indexed"),
            pods.strategy.fields(),
        )
    }

    #[test]
    fn the_index_follows_puts_moves_and_deletes() {
        let mut index = pods_index();
        let (a, b) = (pod("n1"), pod("n2"));
        index.update(b"/p/a", None, Some(&a));
        index.update(b"/p/b", None, Some(&b));
        let keys = |index: &Index, node: &str| -> Vec<Vec<u8>> {
            index
                .range(node, b"/p/", b"/p0")
                .map(|(key, _)| key.clone())
                .collect()
        };
        assert_eq!(keys(&index, "n1"), [b"/p/a".to_vec()]);
        let moved = pod("n1");
        index.update(b"/p/b", Some(&b), Some(&moved));
        assert_eq!(keys(&index, "n1"), [b"/p/a".to_vec(), b"/p/b".to_vec()]);
        assert!(keys(&index, "n2").is_empty());
        index.update(b"/p/a", Some(&a), None);
        assert_eq!(keys(&index, "n1"), [b"/p/b".to_vec()]);
        assert_eq!(index.entries.len(), 1);
        // A key range restricts the value's objects (a namespace's part of them).
        assert!(index.range("n1", b"/p/c", b"/p0").next().is_none());
    }

    #[test]
    fn triggered_watchers_get_the_batches_of_their_value_and_all_progress() {
        let index = pods_index();
        let mut triggers = Triggers::default();
        let mut n1 = triggers.subscribe("n1");
        let mut n2 = triggers.subscribe("n2");
        let batch = |events: Vec<CachedEvent>, revision| Arc::new(Batch { revision, events });
        let put = |key: &str, new: &str, old: Option<&str>| CachedEvent {
            key: key.as_bytes().to_vec(),
            revision: 1,
            change: Change::Put {
                new: pod(new),
                old: old.map(pod),
            },
        };
        triggers.publish(&index, &batch(vec![put("/p/a", "n1", None)], 1));
        triggers.publish(&index, &batch(vec![put("/p/b", "n2", Some("n1"))], 2));
        triggers.publish(&index, &batch(vec![put("/p/c", "n3", None)], 3));
        triggers.publish(&index, &batch(Vec::new(), 4));
        let revisions = |receiver: &mut broadcast::Receiver<Arc<Batch>>| {
            std::iter::from_fn(|| receiver.try_recv().ok())
                .map(|batch| batch.revision)
                .collect::<Vec<_>>()
        };
        assert_eq!(revisions(&mut n1), [1, 2, 4], "n1 left by the move");
        assert_eq!(revisions(&mut n2), [2, 4]);
        drop(n1);
        triggers.publish(&index, &batch(Vec::new(), 5));
        assert_eq!(triggers.receiver_count(), 1);
        assert_eq!(triggers.by_value.len(), 1, "n1's channel is forgotten");
    }
}
