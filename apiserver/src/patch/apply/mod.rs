//! Server-side apply (`application/apply-patch+yaml`) and `metadata.managedFields`, over
//! `serde_json::Value`, as upstream's structured-merge-diff and apiserver field manager do it.
//!
//! Every write records who set which fields: [`track_update`] for create, update and the
//! other patch types (operation `Update`), [`apply`] for server-side apply (operation
//! `Apply`), which also merges the applied configuration into the object, prunes what the
//! applier stopped applying, and refuses to change fields other managers own unless forced.
//! List and map semantics come from the strategic merge facts (see [`types`]).
//!
//! Never tracked: `apiVersion`, `kind`, the server-set parts of `metadata` (name, namespace,
//! uid, resourceVersion, generation, creationTimestamp, deletion*, selfLink, managedFields),
//! and `status` in writes of the main resource of a kind with a status subresource — writes
//! of `/status` track only `status`.

mod fieldset;
mod managed;
mod merge;
mod types;
mod walk;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_edge;
#[cfg(test)]
mod tests_update;

use serde_json::{Map, Value};

use crate::catalog::{ResourceInfo, Subresource};

pub use self::fieldset::{path_string, Element, FieldSet};
use self::managed::{Entry, ManagerId, Managers, Owned};
use self::types::Types;
use self::walk::{compare, field_set};

/// A field the applier would change that another manager owns.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    /// The other manager's name.
    pub manager: String,
    /// The field, e.g. `.spec.replicas`.
    pub field: String,
    /// E.g. `conflict with "kubectl-client-side-apply" using apps/v1`.
    pub message: String,
}

/// Why an apply failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// 409 Conflict; the Status message is [`conflict_message`], one `FieldManagerConflict`
    /// cause per conflict.
    #[error("{}", conflict_message(.0))]
    Conflicts(Vec<Conflict>),
    /// The applied configuration cannot be merged (a map-list item without its key, a
    /// duplicate key, a value of the wrong shape).
    #[error("{0}")]
    Invalid(String),
    /// The request is malformed: wrong apiVersion or kind, managedFields set, not an object.
    #[error("{0}")]
    BadRequest(String),
}

/// The 409 Status message for `conflicts`, upstream's wording.
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    let printed = |c: &Conflict| {
        c.message
            .strip_prefix("conflict with ")
            .unwrap_or(&c.message)
            .to_string()
    };
    if let [only] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            printed(only),
            only.field
        );
    }
    let mut managers: Vec<String> = conflicts.iter().map(printed).collect();
    managers.sort();
    managers.dedup();
    let mut lines = Vec::new();
    for manager in &managers {
        lines.push(format!("conflicts with {manager}:"));
        for conflict in conflicts.iter().filter(|c| printed(c) == *manager) {
            lines.push(format!("- {}", conflict.field));
        }
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// Which fields a write tracks.
#[derive(Clone, Copy, Debug)]
struct Scope {
    types: Types,
    without_status: bool,
    status_only: bool,
}

/// The metadata fields the server sets, never owned by anyone.
const SERVER_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
    "clusterName",
    "managedFields",
];

impl Scope {
    fn new(info: &ResourceInfo, subresource: Option<Subresource>) -> Self {
        let strategy: &'static dyn crate::kinds::Strategy = info.strategy;
        let has_status = info.subresource(Subresource::Status).is_some();
        Scope {
            types: Types {
                schema: info.strategy.merge_schema(),
                custom: strategy.apply_schema(),
            },
            without_status: has_status && subresource.is_none(),
            status_only: subresource == Some(Subresource::Status),
        }
    }

    /// `object` without the fields this write does not track.
    fn tracked(&self, object: &Value) -> Value {
        let Value::Object(map) = object else {
            return Value::Object(Map::new());
        };
        let mut out = map.clone();
        out.remove("apiVersion");
        out.remove("kind");
        if self.without_status {
            out.remove("status");
        }
        if self.status_only {
            out.retain(|key, _| key == "status");
        }
        if let Some(Value::Object(meta)) = out.get_mut("metadata") {
            for name in SERVER_METADATA {
                meta.remove(*name);
            }
            if meta.is_empty() {
                out.remove("metadata");
            }
        }
        Value::Object(out)
    }
}

fn managed_fields_of(object: &Value) -> Option<&Value> {
    object
        .get("metadata")
        .and_then(|meta| meta.get("managedFields"))
        .filter(|fields| !fields.is_null())
}

/// Sets (or, with `None`, removes) `metadata.managedFields`.
fn set_managed_fields(object: &mut Value, fields: Option<Value>) {
    let Value::Object(map) = object else {
        return;
    };
    match fields {
        Some(fields) => {
            let meta = map
                .entry("metadata")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(meta) = meta {
                meta.insert("managedFields".to_string(), fields);
            }
        }
        None => {
            if let Some(Value::Object(meta)) = map.get_mut("metadata") {
                meta.remove("managedFields");
            }
        }
    }
}

/// Maintains managedFields for a write that is not an apply (create, update, any other patch
/// type): the fields `new` sets that differ from `old` (all of them on create) become owned
/// by (manager, `Update`, api_version, subresource) and no one else; `new`'s managedFields
/// is replaced with the result.
///
/// As upstream: managedFields in `new` that decode are taken as given (for `/subresource`
/// writes they are ignored), `[]` or `[{}]` clears them, and an existing object with no
/// managedFields is not tracked (so a cleared object stays untracked until applied to).
pub fn track_update(
    info: &ResourceInfo,
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<Subresource>,
    now: &str,
) {
    let scope = Scope::new(info, subresource);
    let api_version = &info.api_version();
    let live = old.and_then(managed_fields_of);
    let requested = managed_fields_of(new).cloned();
    let from_live = || managed::decode(live).unwrap_or_default();
    let mut managers = if subresource.is_some() {
        from_live()
    } else if managed::is_reset(requested.as_ref()) {
        Managers::new()
    } else {
        match managed::decode(requested.as_ref()) {
            Ok(managers) if !managers.is_empty() => managers,
            _ => from_live(),
        }
    };
    set_managed_fields(new, None);
    if managers.is_empty() && old.is_some() {
        return;
    }
    let empty = Value::Object(Map::new());
    let comparison = compare(
        scope.types,
        &scope.tracked(old.unwrap_or(&empty)),
        &scope.tracked(new),
    );
    let writer = ManagerId::update(manager, api_version, subresource);
    managed::record_update(&mut managers, &writer, &comparison, now);
    managed::cap_updaters(&mut managers);
    set_managed_fields(new, managed::encode(&managers));
}

/// Who applies, how, and when.
#[derive(Clone, Copy, Debug)]
pub struct Applier<'a> {
    /// The field manager.
    pub manager: &'a str,
    /// Take over fields other managers own instead of failing with a conflict.
    pub force: bool,
    /// The main resource or its status.
    pub subresource: Option<Subresource>,
    /// The time the managedFields entry records.
    pub now: &'a str,
}

/// Server-side apply of `applied` (the user's partial object) by `applier` onto `current`
/// (`None`: the object is created). Returns the new object with its managedFields; when
/// nothing changes, `current` itself (managedFields included, unless ownership moved).
pub fn apply(
    info: &ResourceInfo,
    current: Option<&Value>,
    applied: &Value,
    applier: &Applier,
) -> Result<Value, ApplyError> {
    let Applier {
        manager,
        force,
        subresource,
        now,
    } = *applier;
    let api_version = &info.api_version();
    check_applied(info.kind, api_version, applied)?;
    let scope = Scope::new(info, subresource);
    let mut live = current
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let mut managers = managed::decode(managed_fields_of(&live))
        .map_err(|e| ApplyError::Invalid(format!("failed to decode managed fields: {e}")))?;
    set_managed_fields(&mut live, None);
    if managers.is_empty() && current.is_some() {
        // What the object holds before its first apply belongs to a placeholder updater.
        let empty = Value::Object(Map::new());
        let comparison = compare(scope.types, &empty, &scope.tracked(&live));
        let placeholder = ManagerId::update("before-first-apply", api_version, subresource);
        managed::record_update(&mut managers, &placeholder, &comparison, now);
    }
    let attempt = Attempt {
        scope,
        live: &live,
        applied,
        applier: ManagerId::apply(manager, subresource),
        api_version,
        now,
    };
    let run = |managers: &Managers, force: bool| attempt.run(managers, force);
    let (mut object, managers) = match run(&managers, force) {
        Ok(done) => done,
        Err(Failed::Invalid(message)) => return Err(ApplyError::Invalid(message)),
        Err(Failed::Conflicts(conflicts)) => {
            // kubectl moving an object from client-side to server-side apply may take over
            // what its last-applied configuration says it set.
            let allowed = (manager == "kubectl")
                .then(|| allowed_by_last_applied(scope, &live, api_version))
                .flatten();
            let Some(allowed) = allowed else {
                return Err(ApplyError::Conflicts(describe(&conflicts)));
            };
            let left: Vec<Owned> = conflicts
                .into_iter()
                .filter(|c| !allowed.has(&c.path))
                .collect();
            if !left.is_empty() {
                return Err(ApplyError::Conflicts(describe(&left)));
            }
            match run(&managers, true) {
                Ok(done) => done,
                Err(Failed::Invalid(message)) => return Err(ApplyError::Invalid(message)),
                Err(Failed::Conflicts(conflicts)) => {
                    return Err(ApplyError::Conflicts(describe(&conflicts)))
                }
            }
        }
    };
    if manager == "kubectl" {
        refresh_last_applied(&mut object, applied);
    }
    set_managed_fields(&mut object, managed::encode(&managers));
    Ok(object)
}

fn check_applied(kind: &str, api_version: &str, applied: &Value) -> Result<(), ApplyError> {
    if !applied.is_object() {
        return Err(ApplyError::BadRequest(
            "the applied configuration must be an object".into(),
        ));
    }
    let text = |name: &str| applied.get(name).and_then(Value::as_str).unwrap_or("");
    if text("apiVersion") != api_version {
        return Err(ApplyError::BadRequest(format!(
            "Incorrect version specified in apply patch. Specified patch version: {}, expected: {api_version}",
            text("apiVersion")
        )));
    }
    if text("kind") != kind {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gv = if group.is_empty() {
            format!("/{version}")
        } else {
            format!("{group}/{version}")
        };
        return Err(ApplyError::BadRequest(format!(
            "invalid object type: {gv}, Kind={}",
            text("kind")
        )));
    }
    if managed_fields_of(applied).is_some() {
        return Err(ApplyError::BadRequest(
            "metadata.managedFields must be nil".into(),
        ));
    }
    Ok(())
}

enum Failed {
    Invalid(String),
    Conflicts(Vec<Owned>),
}

/// What one apply works on; [`Attempt::run`] may run twice (the second time forced).
struct Attempt<'a> {
    scope: Scope,
    live: &'a Value,
    applied: &'a Value,
    applier: ManagerId,
    api_version: &'a str,
    now: &'a str,
}

impl Attempt<'_> {
    /// One apply: merge, prune, then settle ownership against the live object.
    fn run(&self, managers: &Managers, force: bool) -> Result<(Value, Managers), Failed> {
        let Attempt {
            scope,
            live,
            applied,
            ref applier,
            api_version,
            now,
        } = *self;
        let types = scope.types;
        let whole = field_set(types, applied, true).map_err(Failed::Invalid)?;
        let set = field_set(types, &scope.tracked(applied), true).map_err(Failed::Invalid)?;
        let merged = merge::merge(types, live, applied);
        let mut managers = managers.clone();
        let previous = managers.remove(applier);
        let last = previous.as_ref().map(|e| e.set.clone()).unwrap_or_default();
        managers.insert(
            applier.clone(),
            Entry {
                set,
                api_version: api_version.to_string(),
                time: previous.and_then(|e| e.time),
            },
        );
        // The whole configuration (name included) counts as managed, so pruning never takes
        // what it names.
        let managed = managers
            .values()
            .fold(whole, |all, entry| all.union(&entry.set));
        let object = merge::prune(types, &merged, &last, &managed);
        let comparison = compare(types, &scope.tracked(live), &scope.tracked(&object));
        managed::settle(&mut managers, Some(applier), &comparison, force)
            .map_err(Failed::Conflicts)?;
        if object == *live {
            return Ok((live.clone(), managers));
        }
        if let Some(entry) = managers.get_mut(applier) {
            entry.time = Some(now.to_string());
        }
        Ok((object, managers))
    }
}

fn describe(conflicts: &[Owned]) -> Vec<Conflict> {
    conflicts
        .iter()
        .map(|c| Conflict {
            manager: c.owner.manager.clone(),
            field: path_string(&c.path),
            message: format!("conflict with {}", c.owner.describe()),
        })
        .collect()
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn last_applied_of(object: &Value) -> Option<&str> {
    object
        .get("metadata")?
        .get("annotations")?
        .get(LAST_APPLIED)?
        .as_str()
        .filter(|text| !text.is_empty())
}

/// The fields kubectl's last-applied configuration sets to what the live object holds.
fn allowed_by_last_applied(scope: Scope, live: &Value, api_version: &str) -> Option<FieldSet> {
    let last: Value = serde_json::from_str(last_applied_of(live)?).ok()?;
    if last.get("apiVersion").and_then(Value::as_str) != Some(api_version) {
        return None;
    }
    let set = field_set(scope.types, &last, false).ok()?;
    let comparison = compare(scope.types, &last, live);
    Some(
        set.difference(&comparison.modified)
            .difference(&comparison.added)
            .difference(&comparison.removed),
    )
}

/// kubectl applying server-side to an object that has a last-applied annotation keeps it
/// current: it becomes the applied configuration (without the annotation itself).
fn refresh_last_applied(object: &mut Value, applied: &Value) {
    if last_applied_of(object).is_none() {
        return;
    }
    let mut config = applied.clone();
    if let Some(Value::Object(annotations)) = config
        .get_mut("metadata")
        .and_then(|meta| meta.get_mut("annotations"))
    {
        annotations.remove(LAST_APPLIED);
    }
    let text = format!("{config}\n");
    if let Some(Value::Object(annotations)) = object
        .get_mut("metadata")
        .and_then(|meta| meta.get_mut("annotations"))
    {
        annotations.insert(LAST_APPLIED.to_string(), Value::String(text));
    }
}
