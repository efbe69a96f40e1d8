//! Merging an applied configuration into the live object, and pruning the fields an applier
//! no longer applies.
//!
//! The configuration wins on every leaf. Maps merge key by key (atomic maps are replaced),
//! associative lists merge item by item by key, set-lists are a union, atomic lists are
//! replaced. Items keep the live order except that items the configuration shares with the
//! live list come in the configuration's order, and new items follow the configuration item
//! they come after. A `null` in the configuration leaves the field unset.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::fieldset::{Element, FieldSet};
use super::types::{keyed_items, ListKind, Types};
use super::walk::{field_of, field_set, remove_fields, union_keys};

/// `live` with `config` merged in. `config` must have passed a strict [`field_set`].
pub(super) fn merge(types: Types, live: &Value, config: &Value) -> Value {
    merge_at(types, Some(live), Some(config), &mut Vec::new())
        .unwrap_or_else(|| Value::Object(Map::new()))
}

fn merge_at<'v>(
    types: Types,
    live: Option<&'v Value>,
    config: Option<&'v Value>,
    names: &mut Vec<&'v str>,
) -> Option<Value> {
    let Some(config) = config else {
        return live.cloned();
    };
    let empty_live = match live {
        None => true,
        Some(Value::Object(map)) => map.is_empty(),
        Some(Value::Array(items)) => items.is_empty(),
        Some(_) => false,
    };
    match (live, config) {
        (None | Some(Value::Object(_)), Value::Object(config_map))
            if !(types.atomic_map(names) || empty_live && config_map.is_empty()) =>
        {
            let live_map = live.and_then(Value::as_object);
            let mut out = Map::new();
            for name in union_keys(live_map, Some(config_map)) {
                names.push(name);
                let merged = merge_at(types, field_of(live_map, name), config_map.get(name), names);
                names.pop();
                if let Some(merged) = merged.filter(|v| !v.is_null()) {
                    out.insert(name.to_string(), merged);
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        (None | Some(Value::Array(_)), Value::Array(config_items))
            if !(empty_live && config_items.is_empty()) =>
        {
            let kind = types.list_kind(names);
            if kind == ListKind::Atomic {
                return Some(config.clone());
            }
            let live_items = live.and_then(Value::as_array).map(Vec::as_slice);
            let (Ok(live_keyed), Ok(config_keyed)) = (
                keyed_items(&kind, live_items.unwrap_or(&[])),
                keyed_items(&kind, config_items),
            ) else {
                return Some(config.clone());
            };
            let mut out = Vec::new();
            for (live_item, config_item) in merge_order(&live_keyed, &config_keyed) {
                out.extend(merge_at(types, live_item, config_item, names));
            }
            (!out.is_empty()).then_some(Value::Array(out))
        }
        _ => Some(config.clone()),
    }
}

pub(super) type Keyed<'v> = [(Element, &'v Value)];

/// The items of the merged list, as (live item, configuration item) pairs in output order.
fn merge_order<'v>(
    live: &Keyed<'v>,
    config: &Keyed<'v>,
) -> Vec<(Option<&'v Value>, Option<&'v Value>)> {
    // First occurrence of each element, for constant-time lookups (a scan per item made
    // applying a long list quadratic).
    let live_by_element = first_by_element(live);
    let config_by_element = first_by_element(config);
    let in_live = |element: &Element| live_by_element.get(element).copied();
    let in_config = |element: &Element| config_by_element.contains_key(element);
    // The items both lists hold, in the configuration's order: the live list's copies of
    // these are emitted when the configuration reaches them.
    let mut shared = config
        .iter()
        .filter(|(e, _)| in_live(e).is_some())
        .map(|(e, _)| e);
    let mut next_shared = shared.next();
    let mut emitted: HashSet<&Element> = HashSet::new();
    let mut out = Vec::with_capacity(live.len().max(config.len()));
    let (mut l, mut c) = (0, 0);
    while l < live.len() || c < config.len() {
        if l < live.len() && c < config.len() {
            let element = &live[l].0;
            if *element == config[c].0 {
                emitted.insert(element);
                out.push((Some(live[l].1), Some(config[c].1)));
                l += 1;
                c += 1;
                next_shared = shared.next();
                continue;
            }
            let listed_in_config = in_config(element);
            if listed_in_config && next_shared.is_some_and(|next| next != element) {
                l += 1;
                continue;
            }
        }
        if l < live.len() {
            let element = &live[l].0;
            if !in_config(element) {
                out.push((Some(live[l].1), None));
                l += 1;
                continue;
            }
            if emitted.contains(element) {
                l += 1;
            }
        }
        if c < config.len() {
            let element = &config[c].0;
            emitted.insert(element);
            out.push((in_live(element), Some(config[c].1)));
            c += 1;
            if next_shared == Some(element) {
                next_shared = shared.next();
            }
        }
    }
    out
}

/// Each element's first item in a keyed list.
pub(super) fn first_by_element<'e, 'v>(items: &'e Keyed<'v>) -> HashMap<&'e Element, &'v Value> {
    let mut first = HashMap::with_capacity(items.len());
    for (element, value) in items {
        first.entry(element).or_insert(*value);
    }
    first
}

/// Removes from `merged` the fields the applier applied last time (`last`) that nobody
/// manages any more (`managed`: every manager's set, the applier's new one included). A
/// struct the applier set and nobody else has a field in goes as a whole.
pub(super) fn prune(types: Types, merged: &Value, last: &FieldSet, managed: &FieldSet) -> Value {
    if last.is_empty() {
        return merged.clone();
    }
    let Ok(present) = field_set(types, merged, false) else {
        return merged.clone();
    };
    let doomed = present
        .with_named_fields()
        .intersection(&last.with_named_fields())
        .difference(&managed.with_named_fields());
    if doomed.is_empty() {
        return merged.clone();
    }
    remove_fields(types, merged, &doomed)
}
