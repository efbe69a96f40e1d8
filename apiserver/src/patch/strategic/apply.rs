//! Applying a strategic merge patch to an object, as upstream's server does
//! (`StrategicMergeMapPatch`: parallel lists merged, unmatched `null`s ignored).
//!
//! Per map: `$patch` first (replace / delete the map), then `$retainKeys`, then each
//! `$setElementOrder/<list>` together with its list, then the other fields, and last the
//! `$deleteFromPrimitiveList/<list>` directives.

use serde_json::{Map, Value};

use super::directives::{self, Key};
use super::error::{go_list, go_type, PatchError, GO_MAP, GO_SLICE};
use super::identity::{identity, Positions};
use super::schema::Ty;

type Result<T> = std::result::Result<T, PatchError>;

/// The patch metadata in effect for one field of a map.
#[derive(Clone, Copy, Debug, Default)]
struct Meta {
    /// The type of the field's value, or of its list items.
    ty: Option<Ty>,
    merge_key: Option<&'static str>,
    /// The strategy (retainKeys aside) is `merge`.
    merge: bool,
    /// The strategy is `replace`.
    replace: bool,
}

fn meta(ty: Option<Ty>, name: &str) -> Meta {
    let Some(field) = ty.and_then(|ty| ty.field(name)) else {
        return Meta::default();
    };
    let strategies = || field.strategy.unwrap_or("").split(',');
    Meta {
        ty: field.ty,
        merge_key: field.merge_key,
        merge: strategies().any(|s| s == directives::MERGE),
        replace: strategies().any(|s| s == directives::REPLACE),
    }
}

/// Merges `patch` into `original`, a map of type `ty` (`None`: no metadata below here).
pub(super) fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    ty: Option<Ty>,
) -> Result<Map<String, Value>> {
    if let Some(directive) = patch.get(directives::PATCH) {
        return match directive.as_str() {
            Some(directives::REPLACE) => {
                patch.remove(directives::PATCH);
                directives::clean_fields(patch)
            }
            Some(directives::DELETE) => Ok(Map::new()),
            _ => Err(PatchError::bad_patch_type(directive, &patch)),
        };
    }

    if let Some(retain) = patch.remove(directives::RETAIN_KEYS) {
        retain_keys(&mut original, &patch, retain)?;
    }

    let mut orders = Vec::new();
    let mut deletions = Vec::new();
    let mut fields = Map::new();
    for (key, value) in patch {
        match directives::classify(&key)? {
            Key::Field(_) => {
                fields.insert(key, value);
            }
            Key::SetElementOrder(field) => orders.push((field.to_string(), value)),
            Key::DeleteFromPrimitiveList(field) => deletions.push((field.to_string(), value)),
            // Both were taken out of the patch above.
            Key::Patch | Key::RetainKeys => {}
        }
    }

    for (field, order) in orders {
        set_element_order(&mut original, &mut fields, &field, order, ty)?;
    }
    for (field, value) in fields {
        merge_field(&mut original, field, value, ty)?;
    }
    for (field, value) in deletions {
        delete_from_list(&mut original, field, value)?;
    }
    Ok(original)
}

/// `$retainKeys`: every key the patch sets must be listed; keys of the object that are not
/// listed are cleared.
fn retain_keys(
    original: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    retain: Value,
) -> Result<()> {
    let Value::Array(retain) = retain else {
        return Err(PatchError::BadPatchFormatForRetainKeys);
    };
    let listed = |key: &str| retain.iter().any(|k| k.as_str() == Some(key));
    for (key, value) in patch {
        if value.is_null() || directives::is_parallel_list(key) {
            continue;
        }
        if !listed(key) {
            return Err(PatchError::BadPatchFormatForRetainKeys);
        }
    }
    original.retain(|key, _| listed(key));
    Ok(())
}

/// One ordinary field of the patch.
fn merge_field(
    original: &mut Map<String, Value>,
    key: String,
    patch: Value,
    ty: Option<Ty>,
) -> Result<()> {
    if patch.is_null() {
        original.remove(&key);
        return Ok(());
    }
    let Some(current) = original.get_mut(&key) else {
        if let Some(value) = directives::clean(patch)? {
            original.insert(key, value);
        }
        return Ok(());
    };
    let field = meta(ty, &key);
    match (current, patch) {
        (Value::Object(current), Value::Object(patch)) => {
            let current = std::mem::take(current);
            let merged = if field.replace {
                directives::clean(Value::Object(patch))?
            } else {
                Some(Value::Object(merge_map(current, patch, field.ty)?))
            };
            set_or_remove(original, key, merged);
        }
        (Value::Array(current), Value::Array(patch)) => {
            let merged = if field.merge {
                merge_list(std::mem::take(current), patch, &field, &key)?
            } else {
                directives::clean_items(patch)?
            };
            original.insert(key, Value::Array(merged));
        }
        (_, patch) => {
            let value = directives::clean(patch)?;
            set_or_remove(original, key, value);
        }
    }
    Ok(())
}

fn set_or_remove(map: &mut Map<String, Value>, key: String, value: Option<Value>) {
    match value {
        Some(value) => {
            map.insert(key, value);
        }
        None => {
            map.remove(&key);
        }
    }
}

/// `$deleteFromPrimitiveList/<field>`: removes every occurrence of the listed values, whatever
/// the field's strategy. `null` clears the field, as upstream does.
fn delete_from_list(original: &mut Map<String, Value>, key: String, patch: Value) -> Result<()> {
    let patch = match patch {
        Value::Null => {
            original.remove(&key);
            return Ok(());
        }
        Value::Array(patch) => patch,
        _ => return Err(PatchError::BadPatchFormatForPrimitiveList),
    };
    let Some(Value::Array(current)) = original.get_mut(&key) else {
        // Nothing (or no list) to delete from.
        return Ok(());
    };
    if current.is_empty() && patch.is_empty() {
        return Ok(());
    }
    if element_kind(current, &patch)? == GO_MAP {
        return Err(PatchError::BadPatchFormatForPrimitiveList);
    }
    let doomed: std::collections::HashSet<String> = patch.iter().map(identity).collect();
    current.retain(|item| !doomed.contains(&identity(item)));
    Ok(())
}

/// The Go type shared by all items of both lists (upstream's `sliceElementType`).
fn element_kind(original: &[Value], patch: &[Value]) -> Result<&'static str> {
    let mut kind: Option<&'static str> = None;
    for item in original.iter().chain(patch) {
        let this = go_type(item);
        match kind {
            None if this == GO_SLICE => return Err(PatchError::NoListOfLists),
            None => kind = Some(this),
            Some(kind) if kind != this => {
                let lists = format!("[{} {}]", go_list(original), go_list(patch));
                return Err(PatchError::MixedListElements(lists));
            }
            Some(_) => {}
        }
    }
    Ok(kind.unwrap_or("<nil>"))
}

/// Merges a list whose strategy is `merge`: a set union for primitives, a merge by key for
/// maps (with `$patch: delete` / `$patch: replace` items), then upstream's ordering.
fn merge_list(
    original: Vec<Value>,
    patch: Vec<Value>,
    field: &Meta,
    name: &str,
) -> Result<Vec<Value>> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    if element_kind(&original, &patch)? != GO_MAP {
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        let mut seen = Positions::default();
        for item in original.iter().chain(&patch) {
            if seen.insert(item, merged.len()) {
                merged.push(item.clone());
            }
        }
        return reorder(merged, &patch, &original, None);
    }
    let Some(key) = field.merge_key else {
        return Err(PatchError::NoMergeKeyForList(name.to_string()));
    };
    let (mut merged, patch) = apply_list_directives(original, patch, key)?;
    let patch_ids = ids(&patch, Some(key))?;
    let server_ids = ids(&merged, Some(key))?;
    // Where each key first appears in the merged list (items without the key never match).
    let mut at_key = Positions::default();
    for (at, current) in merged.iter().enumerate() {
        if let Some(id) = current.as_object().and_then(|map| map.get(key)) {
            at_key.insert(id, at);
        }
    }
    for item in patch {
        let Value::Object(item) = item else {
            return Err(PatchError::bad_arg(GO_MAP, &item));
        };
        let Some(id) = item.get(key) else {
            return Err(PatchError::no_merge_key(&item, key));
        };
        let found = at_key
            .get(id)
            .and_then(|at| merged.get_mut(at))
            .and_then(Value::as_object_mut);
        match found {
            Some(current) => *current = merge_map(std::mem::take(current), item, field.ty)?,
            None => {
                let id = id.clone();
                if let Some(item) = directives::clean(Value::Object(item))? {
                    if item
                        .as_object()
                        .is_some_and(|map| map.get(key) == Some(&id))
                    {
                        at_key.insert(&id, merged.len());
                    }
                    merged.push(item);
                }
            }
        }
    }
    reorder(merged, &patch_ids, &server_ids, Some(key))
}

/// Handles the list items carrying `$patch`: `delete` removes the object's items with the same
/// key, `replace` makes the patch's other items the whole list. Returns the list to merge into
/// and the patch items left to merge.
fn apply_list_directives(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut rest = Vec::with_capacity(patch.len());
    let mut replace = false;
    let mut deleted = std::collections::HashSet::new();
    for item in patch {
        let Value::Object(map) = &item else {
            return Err(PatchError::bad_arg(GO_MAP, &item));
        };
        let Some(directive) = map.get(directives::PATCH) else {
            rest.push(item);
            continue;
        };
        match directive.as_str() {
            Some(directives::DELETE) => {
                let Some(id) = map.get(key) else {
                    return Err(PatchError::no_merge_key(map, key));
                };
                deleted.insert(identity(id));
            }
            Some(directives::REPLACE) => replace = true,
            Some(directives::MERGE) => return Err(PatchError::MergeListDirective),
            _ => return Err(PatchError::bad_patch_type(directive, map)),
        }
    }
    if replace {
        return Ok((directives::clean_items(rest)?, Vec::new()));
    }
    if !deleted.is_empty() {
        original.retain(|current| {
            current
                .get(key)
                .is_none_or(|id| !deleted.contains(&identity(id)))
        });
    }
    Ok((original, rest))
}

/// `$setElementOrder/<field>`: merges the field's patch list (if any) as usual, then orders the
/// result: the listed items in the given order, the object's other items kept where they were
/// relative to them (upstream's `normalizeElementOrder`).
fn set_element_order(
    original: &mut Map<String, Value>,
    fields: &mut Map<String, Value>,
    name: &str,
    order: Value,
    ty: Option<Ty>,
) -> Result<()> {
    let Value::Array(order) = order else {
        return Err(PatchError::bad_arg(GO_SLICE, &order));
    };
    let field = meta(ty, name);
    let current = match original.remove(name) {
        None => None,
        Some(Value::Array(list)) => Some(list),
        Some(other) => return Err(PatchError::bad_arg(GO_SLICE, &other)),
    };
    let patch = match fields.remove(name) {
        None => None,
        Some(Value::Array(list)) => Some(list),
        Some(other) => return Err(PatchError::bad_arg(GO_SLICE, &other)),
    };
    validate_order(
        patch.as_deref().unwrap_or_default(),
        &order,
        field.merge_key,
    )?;
    let first = current.iter().chain(&patch).flatten().next();
    let key = match first {
        Some(Value::Object(_)) => field.merge_key,
        _ => None,
    };
    let server_ids = ids(current.as_deref().unwrap_or_default(), key)?;
    let merged = match (current, patch) {
        (None, None) => return Ok(()),
        (Some(current), None) => current,
        (Some(current), Some(patch)) if field.merge => merge_list(current, patch, &field, name)?,
        (_, Some(patch)) => directives::clean_items(patch)?,
    };
    let order_ids = ids(&order, key)?;
    let ordered = reorder(merged, &order_ids, &server_ids, key)?;
    original.insert(name.to_string(), Value::Array(ordered));
    Ok(())
}

/// Checks that the patch list's items (deletions and directives aside) appear in the
/// `$setElementOrder` list, in the same relative order.
fn validate_order(patch: &[Value], order: &[Value], key: Option<&str>) -> Result<()> {
    if patch.is_empty() || order.is_empty() {
        return Ok(());
    }
    let mut items = Vec::with_capacity(patch.len());
    for item in patch {
        if key.is_some() {
            let Value::Object(map) = item else {
                return Err(PatchError::bad_arg(GO_MAP, item));
            };
            if map.get(directives::PATCH).and_then(Value::as_str) == Some(directives::DELETE) {
                continue;
            }
        }
        if !directives::has_patch_directive(item) {
            items.push(item);
        }
    }
    let mut next = 0;
    for wanted in order {
        let Some(item) = items.get(next) else { break };
        if same_id(item, wanted, key)? {
            next += 1;
        }
    }
    if next < items.len() {
        return Err(PatchError::OrderMismatch {
            patch: go_list(patch),
            order: go_list(order),
        });
    }
    Ok(())
}

/// Whether two items are the same list entry: equal merge keys, or equal values.
fn same_id(left: &Value, right: &Value, key: Option<&str>) -> Result<bool> {
    let Some(key) = key else {
        return Ok(left == right);
    };
    Ok(id_of(left, key)? == id_of(right, key)?)
}

fn id_of<'a>(item: &'a Value, key: &str) -> Result<&'a Value> {
    let Value::Object(map) = item else {
        return Err(PatchError::bad_arg(GO_MAP, item));
    };
    map.get(key)
        .ok_or_else(|| PatchError::no_merge_key(map, key))
}

/// The identities of a list's items: merge-key values, or the values themselves.
fn ids(items: &[Value], key: Option<&str>) -> Result<Vec<Value>> {
    items
        .iter()
        .map(|item| match key {
            Some(key) => id_of(item, key).cloned(),
            None => Ok(item.clone()),
        })
        .collect()
}

/// Upstream's ordering of a merged list: the items named by `wanted` (patch or
/// `$setElementOrder` list) sorted in that order, the other ("server-only") items sorted as in
/// `server` (the object's list), then the two interleaved, a server-only item going first
/// only when the object's list had it before the next wanted item.
fn reorder(
    merged: Vec<Value>,
    wanted: &[Value],
    server_ids: &[Value],
    key: Option<&str>,
) -> Result<Vec<Value>> {
    let wanted_at = Positions::of(wanted);
    let server_at = Positions::of(server_ids);
    let mut chosen = Vec::new();
    let mut others = Vec::new();
    for item in merged {
        let id = match key {
            Some(key) => id_of(&item, key)?.clone(),
            None => item.clone(),
        };
        match wanted_at.get(&id) {
            Some(at) => chosen.push((at, id, item)),
            None => others.push((server_at.get(&id).unwrap_or(usize::MAX), id, item)),
        }
    }
    chosen.sort_by_key(|(at, _, _)| *at);
    others.sort_by_key(|(at, _, _)| *at);

    let mut out = Vec::with_capacity(chosen.len() + others.len());
    let mut chosen = chosen.into_iter().peekable();
    let mut others = others.into_iter().peekable();
    loop {
        let take_other = match (others.peek(), chosen.peek()) {
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
            (Some((server_position, _, _)), Some((_, id, _))) => {
                match (*server_position, server_at.get(id)) {
                    (left, Some(right)) if left != usize::MAX => left < right,
                    _ => false,
                }
            }
        };
        let next = if take_other {
            others.next()
        } else {
            chosen.next()
        };
        if let Some((_, _, item)) = next {
            out.push(item);
        }
    }
    Ok(out)
}
