//! Walks over objects with the kind's field facts: the set of fields an object sets, the
//! fields that differ between two objects, and an object without some fields.
//!
//! Maps are granular unless atomic, lists follow their [`ListKind`]. Scalars, atomic lists
//! and maps, and empty lists and maps are leaves; list items are members of their own
//! (`.`). Items of a live list that cannot be keyed (a missing key, a duplicate) make that
//! list a leaf, so stored data never fails a walk; only an applied configuration is strict.

use serde_json::{Map, Value};

use super::fieldset::{path_string, Element, FieldSet};
use super::types::{keyed_items, ListKind, Types};

/// The fields set in `value`. With `strict`, a list whose items cannot be keyed is an error.
pub(super) fn field_set(types: Types, value: &Value, strict: bool) -> Result<FieldSet, String> {
    let mut out = FieldSet::new();
    collect(
        types,
        strict,
        value,
        &mut Vec::new(),
        &mut Vec::new(),
        &mut out,
    )?;
    Ok(out)
}

fn collect<'v>(
    types: Types,
    strict: bool,
    value: &'v Value,
    names: &mut Vec<&'v str>,
    path: &mut Vec<Element>,
    out: &mut FieldSet,
) -> Result<(), String> {
    match value {
        Value::Object(map) if !map.is_empty() && !types.atomic_map(names) => {
            for (name, child) in map {
                names.push(name);
                path.push(Element::field(name));
                let result = collect(types, strict, child, names, path, out);
                path.pop();
                names.pop();
                result?;
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let kind = types.list_kind(names);
            if kind == ListKind::Atomic {
                out.insert(path);
                return Ok(());
            }
            let keyed = match keyed_items(&kind, items) {
                Ok(keyed) => keyed,
                Err(error) if strict => return Err(format!("{}: {error}", path_string(path))),
                Err(_) => {
                    out.insert(path);
                    return Ok(());
                }
            };
            for (element, item) in keyed {
                path.push(element);
                let result = collect(types, strict, item, names, path, out);
                out.insert(path);
                path.pop();
                result?;
            }
        }
        _ => out.insert(path),
    }
    Ok(())
}

/// The fields that `new` adds, changes and removes relative to `old`.
#[derive(Debug, Default)]
pub(super) struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

impl Comparison {
    /// Added or modified.
    pub fn changed(&self) -> FieldSet {
        self.added.union(&self.modified)
    }
}

/// Compares `old` with `new`.
pub(super) fn compare(types: Types, old: &Value, new: &Value) -> Comparison {
    let mut out = Comparison::default();
    let mut walker = Comparer {
        types,
        out: &mut out,
    };
    walker.walk(
        Some(old),
        Some(new),
        &mut Vec::new(),
        &mut Vec::new(),
        false,
    );
    out
}

struct Comparer<'a> {
    types: Types,
    out: &'a mut Comparison,
}

fn is_empty_or_absent(value: Option<&Value>) -> bool {
    match value {
        None => true,
        Some(Value::Object(map)) => map.is_empty(),
        Some(Value::Array(items)) => items.is_empty(),
        Some(_) => false,
    }
}

impl Comparer<'_> {
    fn walk<'v>(
        &mut self,
        old: Option<&'v Value>,
        new: Option<&'v Value>,
        names: &mut Vec<&'v str>,
        path: &mut Vec<Element>,
        item: bool,
    ) {
        if old.is_none() && new.is_none() {
            return;
        }
        let both_empty = is_empty_or_absent(old) && is_empty_or_absent(new);
        let descended = match (old, new) {
            _ if both_empty => false,
            (None | Some(Value::Object(_)), None | Some(Value::Object(_))) => {
                !self.types.atomic_map(names) && {
                    self.walk_maps(old, new, names, path);
                    true
                }
            }
            (None | Some(Value::Array(_)), None | Some(Value::Array(_))) => {
                self.walk_lists(old, new, names, path)
            }
            _ => false,
        };
        if !descended {
            match (old, new) {
                (None, _) => self.out.added.insert(path),
                (_, None) => self.out.removed.insert(path),
                (Some(a), Some(b)) if a != b => self.out.modified.insert(path),
                _ => {}
            }
            return;
        }
        if old.is_none() && (item || self.types.string_map(names)) {
            self.out.added.insert(path);
        }
        if new.is_none() {
            self.out.removed.insert(path);
        }
    }

    fn walk_maps<'v>(
        &mut self,
        old: Option<&'v Value>,
        new: Option<&'v Value>,
        names: &mut Vec<&'v str>,
        path: &mut Vec<Element>,
    ) {
        let (old_map, new_map) = (
            old.and_then(Value::as_object),
            new.and_then(Value::as_object),
        );
        for name in union_keys(old_map, new_map) {
            names.push(name);
            path.push(Element::field(name));
            let (a, b) = (field_of(old_map, name), field_of(new_map, name));
            self.walk(a, b, names, path, false);
            path.pop();
            names.pop();
        }
    }

    /// Compares two granular lists item by item; false when the list is a leaf.
    fn walk_lists<'v>(
        &mut self,
        old: Option<&'v Value>,
        new: Option<&'v Value>,
        names: &mut Vec<&'v str>,
        path: &mut Vec<Element>,
    ) -> bool {
        let kind = self.types.list_kind(names);
        if kind == ListKind::Atomic {
            return false;
        }
        let items = |value: Option<&'v Value>| {
            let list = value.and_then(Value::as_array).map(Vec::as_slice);
            keyed_items(&kind, list.unwrap_or(&[]))
        };
        let (Ok(old_items), Ok(new_items)) = (items(old), items(new)) else {
            return false;
        };
        let old_by_element = super::merge::first_by_element(&old_items);
        let new_by_element = super::merge::first_by_element(&new_items);
        for (element, old_item) in &old_items {
            path.push(element.clone());
            let new_item = new_by_element.get(element).copied();
            self.walk(Some(old_item), new_item, names, path, true);
            path.pop();
        }
        for (element, new_item) in &new_items {
            if !old_by_element.contains_key(element) {
                path.push(element.clone());
                self.walk(None, Some(new_item), names, path, true);
                path.pop();
            }
        }
        true
    }
}

/// The keys of two optional maps: the first's, then the second's new ones.
pub(super) fn union_keys<'v>(
    first: Option<&'v Map<String, Value>>,
    second: Option<&'v Map<String, Value>>,
) -> Vec<&'v str> {
    let mut keys: Vec<&'v str> = first
        .into_iter()
        .flat_map(|m| m.keys())
        .map(String::as_str)
        .collect();
    keys.extend(
        second
            .into_iter()
            .flat_map(|m| m.keys())
            .map(String::as_str)
            .filter(|k| field_of(first, k).is_none()),
    );
    keys
}

/// A field of an optional map.
pub(super) fn field_of<'v>(map: Option<&'v Map<String, Value>>, name: &str) -> Option<&'v Value> {
    map.and_then(|m| m.get(name))
}

/// `value` without the fields of `set`; a member takes its whole subtree, and a map or list
/// left empty by the removal goes as well.
pub(super) fn remove_fields(types: Types, value: &Value, set: &FieldSet) -> Value {
    remove(types, value, set, &mut Vec::new()).unwrap_or_else(|| Value::Object(Map::new()))
}

fn remove<'v>(
    types: Types,
    value: &'v Value,
    set: &FieldSet,
    names: &mut Vec<&'v str>,
) -> Option<Value> {
    match value {
        Value::Object(map) if !map.is_empty() => {
            if types.atomic_map(names) {
                return None;
            }
            let mut out = Map::new();
            for (name, child) in map {
                let element = Element::field(name);
                if set.has_member(&element) {
                    continue;
                }
                match set.child(&element) {
                    Some(below) => {
                        names.push(name);
                        let kept = remove(types, child, below, names);
                        names.pop();
                        if let Some(kept) = kept {
                            out.insert(name.clone(), kept);
                        }
                    }
                    None => {
                        out.insert(name.clone(), child.clone());
                    }
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        Value::Array(items) if !items.is_empty() => {
            let kind = types.list_kind(names);
            if kind == ListKind::Atomic {
                return None;
            }
            let Ok(keyed) = keyed_items(&kind, items) else {
                return Some(value.clone());
            };
            let mut out = Vec::with_capacity(items.len());
            for (element, item) in keyed {
                if set.has_member(&element) {
                    continue;
                }
                match set.child(&element) {
                    Some(below) => out.extend(remove(types, item, below, names)),
                    None => out.push(item.clone()),
                }
            }
            (!out.is_empty()).then_some(Value::Array(out))
        }
        _ => Some(value.clone()),
    }
}
