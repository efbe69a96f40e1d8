//! `metadata.managedFields`: decoding and encoding its entries, and moving ownership between
//! managers when an object changes.
//!
//! A manager is identified by its name, operation, subresource and — for `Update` only — the
//! apiVersion it wrote with (an applier keeps one entry whatever version it applies with).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::catalog::Subresource;

use super::fieldset::{Element, FieldSet};
use super::walk::Comparison;

/// How many `Update` entries an object keeps; the oldest beyond this merge into
/// `ancient-changes`.
const MAX_UPDATE_MANAGERS: usize = 10;

/// The identity of a managedFields entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ManagerId {
    pub manager: String,
    pub apply: bool,
    /// Empty for `Apply`.
    pub api_version: String,
    /// Empty for the main resource.
    pub subresource: String,
}

impl ManagerId {
    pub fn update(manager: &str, api_version: &str, subresource: Option<Subresource>) -> Self {
        ManagerId {
            manager: if manager.is_empty() {
                "unknown"
            } else {
                manager
            }
            .to_string(),
            apply: false,
            api_version: api_version.to_string(),
            subresource: subresource
                .map(Subresource::as_str)
                .unwrap_or("")
                .to_string(),
        }
    }

    pub fn apply(manager: &str, subresource: Option<Subresource>) -> Self {
        ManagerId {
            apply: true,
            api_version: String::new(),
            ..ManagerId::update(manager, "", subresource)
        }
    }

    /// The manager as conflicts name it: `"kubectl"`, `"x" with subresource "status"`,
    /// `"kubectl-edit" using apps/v1`.
    pub fn describe(&self) -> String {
        let mut out = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            out.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if !self.apply {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }
}

/// What a manager owns.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Entry {
    pub set: FieldSet,
    pub api_version: String,
    /// RFC 3339, seconds.
    pub time: Option<String>,
}

pub(super) type Managers = BTreeMap<ManagerId, Entry>;

/// A field another manager owns that a write changes.
#[derive(Clone, Debug)]
pub(super) struct Owned {
    pub owner: ManagerId,
    pub path: Vec<Element>,
}

/// Whether a client's managedFields asks for a reset: `[]` or `[{}]`.
pub(super) fn is_reset(fields: Option<&Value>) -> bool {
    match fields {
        Some(Value::Array(entries)) => match entries.as_slice() {
            [] => true,
            [Value::Object(entry)] => entry
                .values()
                .all(|v| v.is_null() || v.as_str() == Some("")),
            _ => false,
        },
        _ => false,
    }
}

/// Decodes managedFields; `None` and `null` are no entries.
pub(super) fn decode(fields: Option<&Value>) -> Result<Managers, String> {
    let entries = match fields {
        None | Some(Value::Null) => return Ok(Managers::new()),
        Some(Value::Array(entries)) => entries,
        Some(_) => return Err("managedFields must be a list".to_string()),
    };
    let mut out = Managers::new();
    for (index, entry) in entries.iter().enumerate() {
        let Value::Object(entry) = entry else {
            return Err(format!("managed fields entry {index} must be an object"));
        };
        let text = |name: &str| entry.get(name).and_then(Value::as_str).unwrap_or("");
        let apply = match text("operation") {
            "Apply" => true,
            "Update" => false,
            _ => return Err("operation must be `Apply` or `Update`".to_string()),
        };
        let api_version = text("apiVersion");
        if api_version.is_empty() {
            return Err("apiVersion must not be empty".to_string());
        }
        match text("fieldsType") {
            "FieldsV1" => {}
            "" => {
                return Err(format!(
                    "missing fieldsType in managed fields entry {index}"
                ))
            }
            other => {
                return Err(format!(
                    "invalid fieldsType {other:?} in managed fields entry {index}"
                ))
            }
        }
        let set = match entry.get("fieldsV1") {
            None | Some(Value::Null) => FieldSet::new(),
            Some(fields) => FieldSet::from_fields_v1(fields)
                .map_err(|e| format!("error decoding set of entry {index}: {e}"))?,
        };
        let id = ManagerId {
            manager: text("manager").to_string(),
            apply,
            api_version: if apply {
                String::new()
            } else {
                api_version.to_string()
            },
            subresource: text("subresource").to_string(),
        };
        let time = entry
            .get("time")
            .and_then(Value::as_str)
            .map(str::to_string);
        let api_version = api_version.to_string();
        out.insert(
            id,
            Entry {
                set,
                api_version,
                time,
            },
        );
    }
    Ok(out)
}

/// Encodes managers as managedFields, in upstream's order (operation, time, manager,
/// apiVersion, subresource); `None` when there are none.
pub(super) fn encode(managers: &Managers) -> Option<Value> {
    if managers.is_empty() {
        return None;
    }
    let mut entries: Vec<(&ManagerId, &Entry)> = managers.iter().collect();
    entries.sort_by(|(a, x), (b, y)| {
        (
            !a.apply,
            x.time.as_deref().unwrap_or(""),
            &a.manager,
            &x.api_version,
            &a.subresource,
        )
            .cmp(&(
                !b.apply,
                y.time.as_deref().unwrap_or(""),
                &b.manager,
                &y.api_version,
                &b.subresource,
            ))
    });
    let encoded = entries
        .into_iter()
        .map(|(id, entry)| {
            let mut out = Map::new();
            out.insert("manager".into(), Value::String(id.manager.clone()));
            let operation = if id.apply { "Apply" } else { "Update" };
            out.insert("operation".into(), Value::String(operation.into()));
            out.insert(
                "apiVersion".into(),
                Value::String(entry.api_version.clone()),
            );
            if let Some(time) = &entry.time {
                out.insert("time".into(), Value::String(time.clone()));
            }
            out.insert("fieldsType".into(), Value::String("FieldsV1".into()));
            out.insert("fieldsV1".into(), entry.set.to_fields_v1());
            if !id.subresource.is_empty() {
                out.insert("subresource".into(), Value::String(id.subresource.clone()));
            }
            Value::Object(out)
        })
        .collect();
    Some(Value::Array(encoded))
}

/// Settles ownership after a write by `writer` (`None`: nobody is spared): every other
/// manager loses the fields the write removed and — unless they conflict and `force` is
/// false — the fields it added or changed. Managers left with nothing are dropped.
pub(super) fn settle(
    managers: &mut Managers,
    writer: Option<&ManagerId>,
    comparison: &Comparison,
    force: bool,
) -> Result<(), Vec<Owned>> {
    let changed = comparison.changed();
    let others = || managers.iter().filter(move |(id, _)| Some(*id) != writer);
    if !force {
        let conflicts: Vec<Owned> = others()
            .flat_map(|(id, entry)| {
                entry
                    .set
                    .intersection(&changed)
                    .paths()
                    .into_iter()
                    .map(|path| Owned {
                        owner: id.clone(),
                        path,
                    })
            })
            .collect();
        if !conflicts.is_empty() {
            return Err(conflicts);
        }
    }
    for (id, entry) in managers.iter_mut() {
        if Some(id) != writer {
            entry.set = entry
                .set
                .difference(&changed)
                .difference(&comparison.removed);
        }
    }
    managers.retain(|_, entry| !entry.set.is_empty());
    Ok(())
}

/// Records an `Update` by `writer`: the fields it added or changed become its own (and no
/// one else's); its entry's time moves on only when it changed something.
pub(super) fn record_update(
    managers: &mut Managers,
    writer: &ManagerId,
    comparison: &Comparison,
    now: &str,
) {
    // Nobody is spared: the writer's own earlier entry loses removed fields too.
    let _ = settle(managers, None, comparison, true);
    let changed = comparison.changed();
    if changed.is_empty() {
        return;
    }
    let entry = managers.entry(writer.clone()).or_insert_with(|| Entry {
        set: FieldSet::new(),
        api_version: writer.api_version.clone(),
        time: None,
    });
    entry.set = entry.set.union(&changed);
    entry.time = Some(now.to_string());
}

/// Keeps at most [`MAX_UPDATE_MANAGERS`] `Update` entries: the oldest are folded, per
/// apiVersion, into an `ancient-changes` entry.
pub(super) fn cap_updaters(managers: &mut Managers) {
    let mut updaters: Vec<ManagerId> = managers.keys().filter(|id| !id.apply).cloned().collect();
    if updaters.len() <= MAX_UPDATE_MANAGERS {
        return;
    }
    updaters.sort_by(|a, b| {
        let time = |id: &ManagerId| managers.get(id).and_then(|e| e.time.clone());
        (time(a), a).cmp(&(time(b), b))
    });
    let mut first_of_version: BTreeMap<String, ManagerId> = BTreeMap::new();
    let mut remaining = updaters.len();
    for id in updaters {
        if remaining <= MAX_UPDATE_MANAGERS {
            break;
        }
        let Some(entry) = managers.get(&id).cloned() else {
            continue;
        };
        let version = entry.api_version.clone();
        let Some(first) = first_of_version.get(&version).cloned() else {
            first_of_version.insert(version, id);
            continue;
        };
        let bucket = ManagerId::update("ancient-changes", &version, None);
        if !managers.contains_key(&bucket) {
            if let Some(moved) = managers.remove(&first) {
                managers.insert(bucket.clone(), moved);
            }
        }
        managers.remove(&id);
        if let Some(target) = managers.get_mut(&bucket) {
            target.set = target.set.union(&entry.set);
            target.time = entry.time.clone();
        }
        remaining -= 1;
    }
}
