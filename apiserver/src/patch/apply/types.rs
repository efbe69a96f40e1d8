//! What server-side apply needs to know about a kind's fields, derived from the strategic
//! merge patch facts ([`crate::patch::strategic::field_strategy`]): a `merge` list with a merge
//! key is an associative list (`x-kubernetes-list-type: map`) keyed by it, a `merge` list
//! without one is a set, every other list is atomic. A few lists are keyed by more than one
//! field, and a few maps are atomic (`x-kubernetes-map-type: atomic` / `structType=atomic`);
//! those are the small tables below.

use serde_json::{Map, Value};

use super::fieldset::Element;
use crate::crd::schema::Schema;
use crate::patch::strategic::{field_strategy, Ty};

/// How the items of a list are identified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ListKind {
    /// The list is one value.
    Atomic,
    /// Scalar items, identified by value.
    Set,
    /// Map items, identified by these fields; a missing key field takes its default if any.
    Map {
        keys: Vec<&'static str>,
        defaults: &'static [(&'static str, &'static str)],
    },
}

/// A list keyed by several fields: (the list's field name, its strategic merge key, all its
/// keys, key defaults).
type MultiKey = (
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
);

const TCP: &[(&str, &str)] = &[("protocol", "TCP")];

const MULTI_KEYS: &[MultiKey] = &[
    // Container ports: containerPort + protocol.
    (
        "ports",
        "containerPort",
        &["containerPort", "protocol"],
        TCP,
    ),
    // Service ports: port + protocol.
    ("ports", "port", &["port", "protocol"], TCP),
    (
        "topologySpreadConstraints",
        "topologyKey",
        &["topologyKey", "whenUnsatisfiable"],
        &[],
    ),
];

/// Fields whose (map) value is atomic wherever they appear: label selectors
/// (`metav1.LabelSelector` is `structType=atomic`), `nodeSelector` maps and structs.
const ATOMIC_MAPS: &[&str] = &[
    "selector",
    "nodeSelector",
    "podSelector",
    "namespaceSelector",
    "labelSelector",
];

/// Fields holding string maps rather than structs: a map newly set there is itself owned
/// (`.`) by the writer, as upstream records it.
const STRING_MAPS: &[&str] = &["labels", "annotations"];

/// The field facts of one kind.
#[derive(Clone, Copy, Debug)]
pub(super) struct Types {
    /// The kind's strategic-merge schema, whose list strategies SSA follows.
    pub schema: Ty,
    /// A custom resource's structural schema, whose list and map types SSA follows instead.
    pub custom: Option<&'static Schema>,
}

impl Types {
    /// The kind of the list at `names` (field names from the root, list items skipped).
    pub fn list_kind(&self, names: &[&str]) -> ListKind {
        if let Some(custom) = self.custom {
            let Some(node) = custom.at_names(names) else {
                return ListKind::Atomic;
            };
            return match node.list_type() {
                Some("set") => ListKind::Set,
                Some("map") => ListKind::Map {
                    keys: node.list_map_keys().iter().map(String::as_str).collect(),
                    defaults: &[],
                },
                _ => ListKind::Atomic,
            };
        }
        let Some(strategy) = field_strategy(self.schema, names) else {
            return ListKind::Atomic;
        };
        if !strategy.strategy.split(',').any(|s| s == "merge") {
            return ListKind::Atomic;
        }
        let Some(key) = strategy.merge_key else {
            return ListKind::Set;
        };
        let last = names.last().copied().unwrap_or("");
        match MULTI_KEYS
            .iter()
            .find(|(field, merge_key, _, _)| *field == last && *merge_key == key)
        {
            Some((_, _, keys, defaults)) => ListKind::Map {
                keys: keys.to_vec(),
                defaults,
            },
            None => ListKind::Map {
                keys: vec![key],
                defaults: &[],
            },
        }
    }

    /// Whether the map at `names` is atomic.
    pub fn atomic_map(&self, names: &[&str]) -> bool {
        if let Some(custom) = self.custom {
            return custom.at_names(names).is_some_and(Schema::is_atomic_map);
        }
        names.last().is_some_and(|last| ATOMIC_MAPS.contains(last))
    }

    /// Whether the map at `names` is a string map (owned as a whole when it appears).
    pub fn string_map(&self, names: &[&str]) -> bool {
        names.len() >= 2 && names.last().is_some_and(|last| STRING_MAPS.contains(last))
    }
}

/// The path element of one item of a list of `kind` (not [`ListKind::Atomic`]).
pub(super) fn item_element(kind: &ListKind, item: &Value) -> Result<Element, String> {
    match kind {
        ListKind::Atomic => Err("an atomic list has no item keys".to_string()),
        ListKind::Set => match item {
            Value::Object(_) | Value::Array(_) => {
                Err("a set-list may only hold scalar values".to_string())
            }
            _ => Ok(Element::Value(item.to_string())),
        },
        ListKind::Map { keys, defaults } => {
            let Value::Object(fields) = item else {
                return Err("an associative list may only hold objects".to_string());
            };
            let mut key = Map::new();
            for name in keys {
                let value = match fields.get(*name) {
                    Some(Value::Object(_) | Value::Array(_)) => {
                        return Err(format!("key field {name:?} must be a scalar"));
                    }
                    Some(value) if !value.is_null() => value.clone(),
                    _ => match defaults.iter().find(|(field, _)| field == name) {
                        Some((_, default)) => Value::String((*default).to_string()),
                        None => {
                            return Err(format!(
                                "associative list with keys has an element that omits key field {name:?} (and doesn't have default value)"
                            ))
                        }
                    },
                };
                key.insert((*name).to_string(), value);
            }
            Ok(Element::Key(Value::Object(key).to_string()))
        }
    }
}

/// The items of a keyed list with their path elements, or an error when an item has no key or
/// two items share one.
pub(super) fn keyed_items<'v>(
    kind: &ListKind,
    items: &'v [Value],
) -> Result<Vec<(Element, &'v Value)>, String> {
    let mut out: Vec<(Element, &'v Value)> = Vec::with_capacity(items.len());
    let mut seen = std::collections::HashSet::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let element = item_element(kind, item).map_err(|e| format!("element {index}: {e}"))?;
        if !seen.insert(element.clone()) {
            return Err(format!(
                "duplicate entries for key {}",
                super::fieldset::path_string(std::slice::from_ref(&element))
            ));
        }
        out.push((element, item));
    }
    Ok(out)
}
