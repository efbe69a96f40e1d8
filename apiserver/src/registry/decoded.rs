//! Watch events decoded once for every watcher: N watches of one resource (every kubelet
//! watches pods, each with its own `spec.nodeName` selector) see the same storage events, and
//! decoding each stored object N times was most of a busy apiserver's CPU. Decoded objects are
//! kept by (the kind's rules, key, the revision of the bytes, the revision shown as
//! `resourceVersion`; two APIs may show one stored kind differently, as Events do) — stored
//! bytes at a revision never change, so an entry is never stale — in a small bounded map shared
//! by the registry's watches; a watcher clones an object only when its selectors match it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

use crate::selectors::{self, FieldSet, Fields};

/// A decoded object and, once asked, its selectable fields and its JSON encoding — each
/// worked out once for every watcher and list that shares the object.
pub struct Object {
    pub value: Value,
    fields: OnceLock<Fields>,
    json: OnceLock<bytes::Bytes>,
}

impl Object {
    pub fn new(value: Value) -> Self {
        Self {
            value,
            fields: OnceLock::new(),
            json: OnceLock::new(),
        }
    }

    /// The object as JSON, encoded on first use and shared from then on (a watch event goes
    /// to every watcher it matches as the same bytes).
    pub fn json(&self) -> &bytes::Bytes {
        self.json
            .get_or_init(|| bytes::Bytes::from(serde_json::to_vec(&self.value).unwrap_or_default()))
    }

    /// The fields field selectors compare, worked out once for all watchers.
    pub fn fields(&self, set: &FieldSet) -> &Fields {
        self.fields
            .get_or_init(|| selectors::selectable_fields(set, &self.value))
    }

    /// The value, moved out when no other watcher holds it.
    pub fn into_value(this: Arc<Self>) -> Value {
        match Arc::try_unwrap(this) {
            Ok(object) => object.value,
            Err(shared) => shared.value.clone(),
        }
    }
}

/// How many decoded objects are kept (the most recent events of all resources).
const CAPACITY: usize = 4096;

/// (the strategy's address, key, bytes revision, shown revision).
type Key = (usize, Vec<u8>, i64, i64);

#[derive(Default)]
struct Entries {
    map: HashMap<Key, Arc<Object>>,
    order: VecDeque<Key>,
}

/// The shared cache.
#[derive(Default)]
pub struct Decoded {
    entries: Mutex<Entries>,
}

impl Decoded {
    /// The object stored under `key` at `bytes_revision`, shown at `shown_revision` through the
    /// rules `view` identifies; `decode`
    /// runs only when no watcher has decoded it yet (outside the lock).
    pub fn get_or_decode(
        &self,
        view: usize,
        key: &[u8],
        bytes_revision: i64,
        shown_revision: i64,
        decode: impl FnOnce() -> Option<Value>,
    ) -> Option<Arc<Object>> {
        let lookup: Key = (view, key.to_vec(), bytes_revision, shown_revision);
        if let Ok(entries) = self.entries.lock() {
            if let Some(found) = entries.map.get(&lookup) {
                return Some(found.clone());
            }
        }
        let decoded = Arc::new(Object::new(decode()?));
        if let Ok(mut entries) = self.entries.lock() {
            if entries
                .map
                .insert(lookup.clone(), decoded.clone())
                .is_none()
            {
                entries.order.push_back(lookup);
            }
            while entries.order.len() > CAPACITY {
                if let Some(oldest) = entries.order.pop_front() {
                    entries.map.remove(&oldest);
                }
            }
        }
        Some(decoded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_decode_serves_every_watcher_and_the_map_stays_bounded() {
        let cache = Decoded::default();
        let mut decodes = 0;
        for _ in 0..3 {
            let got = cache.get_or_decode(0, b"/pods/a", 5, 5, || {
                decodes += 1;
                Some(json!({"n": 1}))
            });
            assert_eq!(got.map(|o| o.value.clone()), Some(json!({"n": 1})));
        }
        assert_eq!(decodes, 1);
        // Another shown revision is another entry (the old state of a later event).
        cache.get_or_decode(0, b"/pods/a", 5, 6, || Some(json!({"n": 2})));
        let again = cache.get_or_decode(0, b"/pods/a", 5, 6, || None);
        assert_eq!(again.map(|o| o.value.clone()), Some(json!({"n": 2})));
        for i in 0..(CAPACITY as i64 + 10) {
            cache.get_or_decode(0, b"/k", i, i, || Some(json!(i)));
        }
        let entries = cache.entries.lock().expect("lock");
        assert_eq!(entries.map.len(), CAPACITY);
        assert_eq!(entries.order.len(), CAPACITY);
    }
}
