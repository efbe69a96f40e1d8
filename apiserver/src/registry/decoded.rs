//! Objects as the watch cache and watches share them, and the store watches' decode cache.
//!
//! An [`Object`] is kept in its compact form: its JSON encoding (what most clients are sent,
//! encoded once for every watcher and list that shares it), its labels and its selectable
//! fields (what selectors compare) — not the decoded JSON tree, which is ten times the size of
//! its encoding (a pod of 2 KiB of JSON is 21 KiB as a `serde_json::Value`). A reader that
//! needs the tree (a Table, metadata-only or protobuf response, an admission check) parses
//! its own copy and drops it when done.
//!
//! Watch events decoded once for every watcher: N watches of one resource (every kubelet
//! watches pods, each with its own `spec.nodeName` selector) see the same storage events, and
//! decoding each stored object N times was most of a busy apiserver's CPU. Decoded objects are
//! kept by (the kind's rules, key, the revision of the bytes, the revision shown as
//! `resourceVersion`; two APIs may show one stored kind differently, as Events do) — stored
//! bytes at a revision never change, so an entry is never stale — in a small bounded map shared
//! by the registry's watches; a watcher clones an object only when its selectors match it.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Map, Value};

use crate::protobuf;
use crate::selectors::{self, FieldSet, Fields};

/// An object in its compact, shared form: JSON, labels and selectable fields, plus its
/// protobuf encoding once a protobuf client has been sent it.
pub struct Object {
    json: bytes::Bytes,
    labels: Map<String, Value>,
    /// The selectable fields under `field_set`'s rules.
    fields: Fields,
    field_set: &'static FieldSet,
    /// None: the object has no protobuf form (a custom resource).
    protobuf: OnceLock<Option<protobuf::Encoded>>,
}

impl Object {
    /// `value` in its compact form, its fields worked out under `field_set` (the kind's).
    pub fn new(value: Value, field_set: &'static FieldSet) -> Self {
        let fields = selectors::selectable_fields(field_set, &value);
        let labels = match value.pointer("/metadata/labels") {
            Some(Value::Object(labels)) => labels.clone(),
            _ => Map::new(),
        };
        let mut json = serde_json::to_vec(&value).unwrap_or_default();
        // Kept for as long as the object lives: no spare capacity.
        json.shrink_to_fit();
        Self {
            json: bytes::Bytes::from(json),
            labels,
            fields,
            field_set,
            protobuf: OnceLock::new(),
        }
    }

    /// An object no selector looks at (a bookmark, an error, a list item already selected).
    pub fn plain(value: Value) -> Self {
        Self::new(value, &selectors::METADATA_ONLY)
    }

    /// The object as JSON, shared by every response it goes into.
    pub fn json(&self) -> &bytes::Bytes {
        &self.json
    }

    /// The object as protobuf, encoded on first use and shared from then on; `None` when its
    /// kind has no protobuf form.
    pub fn protobuf(&self) -> Option<&protobuf::Encoded> {
        self.protobuf
            .get_or_init(|| match protobuf::encode_object(&self.value()) {
                Ok(encoded) => Some(encoded),
                Err(error) => {
                    tracing::debug!(%error, "an object has no protobuf form");
                    None
                }
            })
            .as_ref()
    }

    /// The object, parsed from its JSON into a tree of the caller's own.
    pub fn value(&self) -> Value {
        match serde_json::from_slice(&self.json) {
            Ok(value) => value,
            Err(error) => {
                // Its own encoding of a JSON value: cannot fail to parse.
                tracing::error!(%error, "a cached object's JSON does not parse");
                Value::Null
            }
        }
    }

    /// `metadata.labels` (empty when it has none).
    pub fn labels(&self) -> &Map<String, Value> {
        &self.labels
    }

    /// The fields field selectors compare under `set`'s rules: those worked out when the
    /// object was made, unless another kind's rules are asked for (rules are `static`s, known
    /// by their address).
    pub fn fields(&self, set: &'static FieldSet) -> Cow<'_, Fields> {
        if std::ptr::eq(set, self.field_set) {
            Cow::Borrowed(&self.fields)
        } else {
            Cow::Owned(selectors::selectable_fields(set, &self.value()))
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
    /// rules `view` identifies (whose selectable fields are `field_set`'s); `decode`
    /// runs only when no watcher has decoded it yet (outside the lock).
    pub fn get_or_decode(
        &self,
        view: usize,
        key: &[u8],
        bytes_revision: i64,
        shown_revision: i64,
        field_set: &'static FieldSet,
        decode: impl FnOnce() -> Option<Value>,
    ) -> Option<Arc<Object>> {
        let lookup: Key = (view, key.to_vec(), bytes_revision, shown_revision);
        if let Ok(entries) = self.entries.lock() {
            if let Some(found) = entries.map.get(&lookup) {
                return Some(found.clone());
            }
        }
        let decoded = Arc::new(Object::new(decode()?, field_set));
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
    use crate::selectors::METADATA_ONLY;
    use serde_json::json;

    #[test]
    fn the_compact_form_keeps_json_labels_and_fields_and_gives_the_tree_back() {
        let pod = json!({
            "metadata": {"name": "web-1", "namespace": "prod", "labels": {"app": "web"}},
            "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"},
        });
        let pods = crate::catalog::find("", "v1", "pods")
            .expect("served")
            .strategy
            .fields();
        let object = Object::new(pod.clone(), pods);
        assert_eq!(object.value(), pod);
        let reparsed: Value = serde_json::from_slice(object.json()).expect("JSON");
        assert_eq!(reparsed, pod);
        assert_eq!(object.labels().get("app"), Some(&json!("web")));
        let fields = object.fields(pods);
        assert!(
            matches!(fields, Cow::Borrowed(_)),
            "its own kind's fields are kept"
        );
        assert_eq!(
            fields.get("spec.nodeName").map(String::as_str),
            Some("node-a")
        );
        assert_eq!(
            fields.get("status.phase").map(String::as_str),
            Some("Running")
        );
        // Another kind's rules are worked out from the JSON.
        let other = object.fields(&METADATA_ONLY);
        assert!(matches!(other, Cow::Owned(_)));
        assert_eq!(
            other.get("metadata.name").map(String::as_str),
            Some("web-1")
        );
        assert_eq!(other.get("spec.nodeName"), None);
        // No labels: an empty set. A kind with only the metadata fields finds them kept too.
        let plain = Object::plain(json!({"metadata": {"name": "x"}}));
        assert!(plain.labels().is_empty());
        let configmaps = crate::catalog::find("", "v1", "configmaps").expect("served");
        assert!(matches!(
            plain.fields(configmaps.strategy.fields()),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn one_decode_serves_every_watcher_and_the_map_stays_bounded() {
        let cache = Decoded::default();
        let mut decodes = 0;
        for _ in 0..3 {
            let got = cache.get_or_decode(0, b"/pods/a", 5, 5, &METADATA_ONLY, || {
                decodes += 1;
                Some(json!({"n": 1}))
            });
            assert_eq!(got.map(|o| o.value()), Some(json!({"n": 1})));
        }
        assert_eq!(decodes, 1);
        // Another shown revision is another entry (the old state of a later event).
        cache.get_or_decode(0, b"/pods/a", 5, 6, &METADATA_ONLY, || {
            Some(json!({"n": 2}))
        });
        let again = cache.get_or_decode(0, b"/pods/a", 5, 6, &METADATA_ONLY, || None);
        assert_eq!(again.map(|o| o.value()), Some(json!({"n": 2})));
        for i in 0..(CAPACITY as i64 + 10) {
            cache.get_or_decode(0, b"/k", i, i, &METADATA_ONLY, || Some(json!(i)));
        }
        let entries = cache.entries.lock().expect("lock");
        assert_eq!(entries.map.len(), CAPACITY);
        assert_eq!(entries.order.len(), CAPACITY);
    }
}
