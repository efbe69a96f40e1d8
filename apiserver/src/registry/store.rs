//! The generic store's reads and writes: get, create, update (PUT and the patch engines go
//! through `update_with`), delete with preconditions, finalizers and graceful deletion, and
//! delete-collection.

use rudder_admission::{Attributes, Operation};
use rudder_storage::{CreateOutcome, DeleteOutcome, KeyRange, RangeRequest, UpdateOutcome};
use serde_json::{json, Value};

use super::keys::object_key;
use super::object::{self, metadata_mut};
use super::{storable, strategy, Registry, Write, Written};
use crate::catalog::{ResourceInfo, Subresource};
use crate::codec;
use crate::error::{ApiError, Result};
use crate::kinds::Hold;
use crate::request::FieldValidation;

/// How many times a write that lost a compare-and-swap race is retried.
const MAX_CONFLICT_RETRIES: usize = 16;

/// `DeleteOptions.preconditions`.
#[derive(Clone, Debug, Default)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// An object as stored, and the revision that wrote it (the compare-and-swap guard of the
/// write that follows).
#[derive(Clone, Debug)]
pub struct Stored {
    pub object: Value,
    pub mod_revision: i64,
}

/// The parts of `DeleteOptions` the store acts on.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub preconditions: Preconditions,
    pub propagation_policy: Option<Propagation>,
}

/// What happens to an object's dependents when it is deleted (`propagationPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    /// Dependents are left, their owner reference removed (the `orphan` finalizer).
    Orphan,
    /// The object goes now, the garbage collector removes dependents after.
    Background,
    /// The object stays until its blocking dependents are gone (`foregroundDeletion`).
    Foreground,
}

impl Propagation {
    /// The policy a `propagationPolicy` value names.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "Orphan" => Some(Self::Orphan),
            "Background" => Some(Self::Background),
            "Foreground" => Some(Self::Foreground),
            _ => None,
        }
    }
}

/// The outcome of a delete.
#[derive(Clone, Debug)]
pub struct DeleteResult {
    /// The object: as it was when removed, or as it is now while deletion is pending.
    pub object: Value,
    /// False when the object stays, marked, until finalizers or a grace period end.
    pub finished: bool,
}

/// A request body after decoding, before it is checked.
#[derive(Clone, Debug)]
pub struct Input {
    pub object: Value,
    pub duplicate_fields: Vec<String>,
}

impl Registry {
    /// Reads one object with its resourceVersion, or None.
    pub(super) async fn read(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Stored>> {
        let key = object_key(info, namespace, name);
        let Some(kv) = self.storage.get(&key, 0).await? else {
            return Ok(None);
        };
        let object = self
            .values
            .decode(info, &key, &kv.value)
            .map(|object| {
                info.strategy
                    .stored_to_api(object::with_resource_version(object, kv.mod_revision))
            })
            .map_err(|error| ApiError::internal(format!("reading the stored object: {error}")))?;
        let object = self.served_form(info, object).await?;
        Ok(Some(Stored {
            object,
            mod_revision: kv.mod_revision,
        }))
    }

    /// GET of one object.
    #[tracing::instrument(level = "debug", name = "registry.get", skip_all, fields(resource = info.plural, namespace, name))]
    pub async fn get(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value> {
        match self.read(info, namespace, name).await? {
            Some(stored) => Ok(stored.object),
            None => Err(ApiError::not_found(info, name)),
        }
    }

    /// GET of one object at a `resourceVersion`: `0` (any) and `N` (not older than N) are
    /// read from the watch cache, as upstream serves them (what a kubelet's GET of its Node
    /// with `resourceVersion=0` counts on); unset, or when the cache cannot answer, the store.
    pub async fn get_at(
        &self,
        info: &'static ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        resource_version: Option<&str>,
    ) -> Result<Value> {
        let minimum = match resource_version {
            Some("0") => Some(1),
            Some(version) => version.parse::<i64>().ok().filter(|v| *v > 0),
            None => None,
        };
        if let (Some(minimum), Some(cache)) = (minimum, self.caches(info)) {
            let key = object_key(info, namespace, name);
            if let Some(found) = cache.get(info, &key, minimum).await {
                return found
                    .map(|object| object.value())
                    .ok_or_else(|| ApiError::not_found(info, name));
            }
        }
        self.get(info, namespace, name).await
    }

    /// The object as the watch cache holds it (its cacher started if need be, once it has
    /// listed), or the store's when the cache lacks it or is off: what upstream's admission
    /// plugins read through their informers' listers, with a live lookup for what the lister
    /// has not seen yet. May be a little behind the store; for checks, not for writes.
    pub async fn read_recent(
        &self,
        info: &'static ResourceInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>> {
        if let Some(cache) = self.caches(info) {
            let key = object_key(info, namespace, name);
            if let Some(Some(object)) = cache.get(info, &key, 1).await {
                return Ok(Some(object.value()));
            }
        }
        Ok(self
            .read(info, namespace, name)
            .await?
            .map(|stored| stored.object))
    }

    /// POST: creates an object (a generated name is retried on collision).
    #[tracing::instrument(level = "debug", name = "registry.create", skip_all, fields(resource = info.plural, namespace))]
    pub async fn create(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        input: Input,
        write: &Write,
    ) -> Result<Written> {
        let mut object = input.object;
        check_body(info, namespace, None, &mut object)?;
        let (canonical, warnings) = canonicalize(
            info,
            &object,
            &input.duplicate_fields,
            write.field_validation,
        )?;
        let generate = object::name(&canonical).is_empty()
            && !object::meta_str(&canonical, "generateName").is_empty();
        for _attempt in 0..8 {
            let mut object = canonical.clone();
            if generate {
                let base = object::meta_str(&object, "generateName").to_string();
                object::set_meta(&mut object, "name", object::generated_name(&base));
            }
            // Upstream's order: mutating admission, then the kind's preparation, defaults
            // and validation of the result, then validating admission.
            strategy::default(info, &mut object);
            let attributes = attributes(info, Operation::Create, None, write, &object);
            self.admission_for(write)
                .mutate(&attributes, Some(&mut object), None)
                .await?;
            strategy::prepare_for_create(info, &mut object);
            info.strategy
                .prepare_for_create_by(&mut object, &write.caller);
            strategy::default(info, &mut object);
            strategy::validate(info, None, &object, None)?;
            self.admission_for(write)
                .validate(&attributes, Some(&object), None)
                .await?;
            let warnings: Vec<String> = warnings
                .iter()
                .cloned()
                .chain(attributes.warnings.take())
                .collect();
            let allocated = self
                .allocators
                .allocate(info, &mut object, None, write.dry_run)
                .await?;
            if !write.managed_fields_set {
                crate::patch::apply::track_update(
                    info,
                    None,
                    &mut object,
                    write.manager(),
                    None,
                    &object::now(),
                );
            }
            let name = object::name(&object).to_string();
            let key = object_key(info, namespace, &name);
            let checked = match self.storage_form(info, &object).await {
                Ok(stored) => storable::check_key(info, &key, &name)
                    .and_then(|()| storable::encode(&self.values, info, &key, &stored)),
                Err(error) => Err(error),
            };
            let value = match checked {
                Ok(value) => value,
                Err(error) => {
                    self.allocators.release_all(allocated).await;
                    return Err(error);
                }
            };
            if write.dry_run {
                return Ok(Written {
                    object,
                    created: true,
                    warnings,
                });
            }
            match self.storage.create(&key, &value, 0).await {
                Ok(CreateOutcome::Created { revision }) => {
                    return Ok(Written {
                        object: object::with_resource_version(object, revision),
                        created: true,
                        warnings,
                    })
                }
                Ok(CreateOutcome::AlreadyExists { .. }) => {
                    self.allocators.release_all(allocated).await;
                    if !generate {
                        return Err(ApiError::already_exists(info, &name));
                    }
                }
                Err(error) => {
                    self.allocators.release_all(allocated).await;
                    return Err(error.into());
                }
            }
        }
        Err(ApiError::already_exists(
            info,
            object::meta_str(&canonical, "generateName"),
        ))
    }

    /// PUT of an object or its `/status`.
    #[tracing::instrument(level = "debug", name = "registry.update", skip_all, fields(resource = info.plural, namespace, name))]
    pub async fn update(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<Subresource>,
        input: Input,
        write: &Write,
    ) -> Result<Written> {
        let mut body = input.object;
        check_body(info, namespace, Some(name), &mut body)?;
        let (body, warnings) =
            canonicalize(info, &body, &input.duplicate_fields, write.field_validation)?;
        let mut written = self
            .update_with(info, namespace, name, subresource, write, |_current| {
                Ok(body.clone())
            })
            .await?;
        written.warnings.extend(warnings);
        Ok(written)
    }

    /// Reads the object, asks `change` for its new state and writes that with a
    /// compare-and-swap. When the new state names a resourceVersion the write is pinned to it
    /// (409 on mismatch); otherwise a lost race is retried against the latest state.
    ///
    /// The first attempt starts from the watch cache's copy when it holds one, as upstream's
    /// `GuaranteedUpdate` does: the copy's revision guards the write, so a stale copy costs a
    /// lost compare-and-swap, not a wrong write. Whatever that attempt concludes other than a
    /// write — an error, a refusal, no change — is judged again on the store's current object.
    pub async fn update_with<F>(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<Subresource>,
        write: &Write,
        mut change: F,
    ) -> Result<Written>
    where
        F: FnMut(&Value) -> Result<Value> + Send,
    {
        let mut guess = !write.dry_run;
        for _attempt in 0..MAX_CONFLICT_RETRIES {
            let cached = if guess {
                self.cached(info, namespace, name)
            } else {
                None
            };
            guess = false;
            let from_cache = cached.is_some();
            let cached_revision = cached.as_ref().map(|stored| stored.mod_revision);
            let stored = match cached {
                Some(stored) => stored,
                None => match self.read(info, namespace, name).await? {
                    Some(stored) => stored,
                    None => return Err(ApiError::not_found(info, name)),
                },
            };
            let attempt = self
                .try_update(
                    info,
                    namespace,
                    name,
                    subresource,
                    write,
                    &mut change,
                    stored,
                    from_cache,
                )
                .await;
            match attempt {
                Ok(Some(written)) => return Ok(written),
                // A lost race, or a no-op on the cache's copy: again, from the store.
                Ok(None) => {
                    tracing::debug!(
                        resource = info.plural,
                        name,
                        from_cache,
                        "an update is made again on the store's object"
                    );
                }
                // A refusal of the cache's copy stands when that copy is the store's current
                // object (its revision is read without the value: no decode, no second
                // attempt); otherwise it is judged again on the store's object.
                Err(error) if from_cache => {
                    let key = object_key(info, namespace, name);
                    if self.current_revision(&key).await? == cached_revision {
                        return Err(error);
                    }
                    tracing::debug!(
                        resource = info.plural,
                        name,
                        "the cache's copy was behind: a refused update is judged again"
                    );
                }
                Err(error) => return Err(error),
            }
        }
        Err(ApiError::conflict(
            info,
            name,
            "too many concurrent updates; please retry",
        ))
    }

    /// The revision of the object under `key` in the store now (its value left unread),
    /// `None` when there is none.
    async fn current_revision(&self, key: &[u8]) -> Result<Option<i64>> {
        let mut request = RangeRequest::new(KeyRange::key(key.to_vec()));
        request.keys_only = true;
        let listed = self.storage.range(request).await?;
        Ok(listed.kvs.first().map(|kv| kv.mod_revision))
    }

    /// The watch cache's copy of an object, if it has one (never waiting for the cache).
    fn cached(&self, info: &ResourceInfo, namespace: Option<&str>, name: &str) -> Option<Stored> {
        let cache = self.caches(info)?;
        let object = cache
            .peek(info, &object_key(info, namespace, name))?
            .value();
        let mod_revision = object::meta_str(&object, "resourceVersion").parse().ok()?;
        Some(Stored {
            object,
            mod_revision,
        })
    }

    /// One attempt of [`Self::update_with`] from `stored`: `Ok(None)` when it must be made
    /// again (a lost compare-and-swap, or a no-op judged on the cache's copy).
    #[allow(clippy::too_many_arguments)]
    async fn try_update<F>(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<Subresource>,
        write: &Write,
        change: &mut F,
        stored: Stored,
        from_cache: bool,
    ) -> Result<Option<Written>>
    where
        F: FnMut(&Value) -> Result<Value> + Send,
    {
        let Stored {
            object: current,
            mod_revision: revision,
        } = stored;
        let mut object = change(&current)?;
        check_body(info, namespace, Some(name), &mut object)?;
        let pinned = object::meta_str(&object, "resourceVersion").to_string();
        if !pinned.is_empty() && pinned != revision.to_string() {
            return Err(ApiError::modified(info, name));
        }
        strategy::default(info, &mut object);
        let attributes = attributes(info, Operation::Update, subresource, write, &current);
        self.admission_for(write)
            .mutate(&attributes, Some(&mut object), Some(&current))
            .await?;
        strategy::prepare_for_update(info, subresource, &mut object, &current);
        strategy::default(info, &mut object);
        strategy::validate(info, subresource, &object, Some(&current))?;
        self.admission_for(write)
            .validate(&attributes, Some(&object), Some(&current))
            .await?;
        let warnings = attributes.warnings.take();
        self.allocators
            .allocate(info, &mut object, Some(&current), write.dry_run)
            .await?;
        object::remove_meta(&mut object, "resourceVersion");
        let mut unchanged = current.clone();
        object::remove_meta(&mut unchanged, "resourceVersion");
        // A binding always sets a pod's unset `spec.nodeName` (it refuses a bound pod): never
        // a no-op, so the costly comparison through the storage encoding is left out.
        let surely_changed = subresource == Some(Subresource::Binding);
        if !surely_changed
            && (object == unchanged || storable::alike(&self.values, info, &object, &unchanged))
        {
            let key = object_key(info, namespace, name);
            if from_cache && self.current_revision(&key).await? != Some(revision) {
                // Only the cache's copy was unchanged: judged again on the store's object.
                tracing::debug!(
                    resource = info.plural,
                    name,
                    "the cache's copy was behind: a no-op update is judged again"
                );
                return Ok(None);
            }
            return Ok(Some(Written {
                object: current,
                created: false,
                warnings,
            }));
        }
        // A binding is not a client's update of the pod: upstream writes it straight to the
        // store, and the pod's managedFields gain no entry for the scheduler.
        if !write.managed_fields_set && subresource != Some(Subresource::Binding) {
            crate::patch::apply::track_update(
                info,
                Some(&unchanged),
                &mut object,
                write.manager(),
                subresource.filter(|sub| matches!(sub, Subresource::Status | Subresource::Scale)),
                &object::now(),
            );
        }
        let key = object_key(info, namespace, name);
        let stored = self.storage_form(info, &object).await?;
        let value = storable::encode(&self.values, info, &key, &stored)?;
        if write.dry_run {
            return Ok(Some(Written {
                object: object::with_resource_version(object, revision),
                created: false,
                warnings,
            }));
        }
        if object::is_deleting(&object)
            && !holds_deletion(info, &object)
            && deletion_grace_period(&current) == 0
        {
            // The last finalizer is gone and no grace period runs (a gracefully deleted
            // pod waits for its kubelet's final delete): the deletion completes now.
            match self.storage.delete(&key, Some(revision)).await? {
                DeleteOutcome::Deleted { revision, .. } => {
                    self.allocators.release_for(info, &object).await;
                    return Ok(Some(Written {
                        object: object::with_resource_version(object, revision),
                        created: false,
                        warnings,
                    }));
                }
                DeleteOutcome::NotFound => return Err(ApiError::not_found(info, name)),
                DeleteOutcome::Conflict { .. } if !pinned.is_empty() => {
                    return Err(ApiError::modified(info, name))
                }
                DeleteOutcome::Conflict { .. } => return Ok(None),
            }
        }
        match self.storage.update(&key, &value, revision, 0).await? {
            UpdateOutcome::Updated { revision } => Ok(Some(Written {
                object: object::with_resource_version(object, revision),
                created: false,
                warnings,
            })),
            UpdateOutcome::Conflict { current: None } => Err(ApiError::not_found(info, name)),
            UpdateOutcome::Conflict { .. } if !pinned.is_empty() => {
                Err(ApiError::modified(info, name))
            }
            UpdateOutcome::Conflict { .. } => Ok(None),
        }
    }

    /// DELETE of one object.
    #[tracing::instrument(level = "debug", name = "registry.delete", skip_all, fields(resource = info.plural, namespace, name))]
    pub async fn delete(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
        write: &Write,
    ) -> Result<DeleteResult> {
        for _attempt in 0..MAX_CONFLICT_RETRIES {
            let Some(Stored {
                object: current,
                mod_revision: revision,
            }) = self.read(info, namespace, name).await?
            else {
                return Err(ApiError::not_found(info, name));
            };
            check_preconditions(info, name, &current, revision, &options.preconditions)?;
            let attributes = attributes(info, Operation::Delete, None, write, &current);
            self.admission_for(write)
                .mutate(&attributes, None, Some(&current))
                .await?;
            self.admission_for(write)
                .validate(&attributes, None, Some(&current))
                .await?;
            let pending = pending_deletion(info, &current, options);
            if write.dry_run {
                return Ok(DeleteResult {
                    object: pending.unwrap_or(current),
                    finished: false,
                });
            }
            let key = object_key(info, namespace, name);
            if let Some(marked) = pending {
                if marked == current {
                    return Ok(DeleteResult {
                        object: current,
                        finished: false,
                    });
                }
                let stored = self.storage_form(info, &marked).await?;
                match self
                    .storage
                    .update(
                        &key,
                        &storable::encode(&self.values, info, &key, &stored)?,
                        revision,
                        0,
                    )
                    .await?
                {
                    UpdateOutcome::Updated { revision } => {
                        // A namespace now waits for the namespace controller to empty it.
                        return Ok(DeleteResult {
                            object: object::with_resource_version(marked, revision),
                            finished: false,
                        });
                    }
                    UpdateOutcome::Conflict { current: None } => {
                        return Err(ApiError::not_found(info, name))
                    }
                    UpdateOutcome::Conflict { .. } => continue,
                }
            }
            match self.storage.delete(&key, Some(revision)).await? {
                DeleteOutcome::Deleted { revision, .. } => {
                    self.allocators.release_for(info, &current).await;
                    return Ok(DeleteResult {
                        object: object::with_resource_version(current, revision),
                        finished: true,
                    });
                }
                DeleteOutcome::NotFound => return Err(ApiError::not_found(info, name)),
                DeleteOutcome::Conflict { .. } => continue,
            }
        }
        Err(ApiError::conflict(
            info,
            name,
            "too many concurrent updates; please retry",
        ))
    }

    /// DELETE of a collection: every object the selectors match, each deleted as above.
    #[tracing::instrument(level = "debug", name = "registry.delete_collection", skip_all, fields(resource = info.plural, namespace))]
    pub async fn delete_collection(
        &self,
        info: &'static ResourceInfo,
        namespace: Option<&str>,
        label_selector: &str,
        field_selector: &str,
        options: &DeleteOptions,
        write: &Write,
    ) -> Result<Vec<Value>> {
        let listed = self
            .list(
                info,
                namespace,
                &crate::request::ListOptions {
                    label_selector: label_selector.to_string(),
                    field_selector: field_selector.to_string(),
                    ..crate::request::ListOptions::everything()
                },
            )
            .await?;
        let mut deleted = Vec::new();
        for item in listed.items {
            let item = item.into_value();
            let name = object::name(&item).to_string();
            let item_namespace = object::namespace(&item).to_string();
            let item_namespace = Some(item_namespace.as_str()).filter(|ns| !ns.is_empty());
            match self
                .delete(info, item_namespace, &name, options, write)
                .await
            {
                Ok(result) => deleted.push(result.object),
                Err(error) if error.is_not_found() => {}
                Err(error) => return Err(error),
            }
        }
        Ok(deleted)
    }

    /// The canonical form of a body (see `canonicalize`), for the patch engines.
    pub fn canonicalize(
        &self,
        info: &ResourceInfo,
        object: &Value,
        validation: FieldValidation,
    ) -> Result<(Value, Vec<String>)> {
        canonicalize(info, object, &[], validation)
    }
}

/// What admission plugins learn about a write of `object` (the body on create, the stored
/// object on update and delete: names and namespaces do not change).
pub(super) fn attributes(
    info: &ResourceInfo,
    operation: Operation,
    subresource: Option<Subresource>,
    write: &Write,
    object: &Value,
) -> Attributes {
    let namespace = Some(object::namespace(object).to_string()).filter(|ns| !ns.is_empty());
    Attributes {
        operation,
        group: info.group.to_string(),
        version: info.version.to_string(),
        kind: info.kind.to_string(),
        kind_group: info.group.to_string(),
        kind_version: info.version.to_string(),
        resource: info.plural.to_string(),
        subresource: subresource.map(|sub| sub.as_str().to_string()),
        namespace,
        name: object::name(object).to_string(),
        user: write.caller.user.clone(),
        groups: write.caller.groups.clone(),
        dry_run: write.dry_run,
        uid: write.caller.uid.clone(),
        extra: write.caller.extra.clone(),
        warnings: Default::default(),
    }
}

/// Whether something still holds a deleting object: its finalizers (and, for a namespace,
/// the finalizers in its spec).
fn holds_deletion(info: &ResourceInfo, object: &Value) -> bool {
    !object::finalizers(object).is_empty() || info.strategy.holds_deletion(object)
}

/// Checks a body against the URL: kind and apiVersion, namespace, name.
fn check_body(
    info: &ResourceInfo,
    namespace: Option<&str>,
    url_name: Option<&str>,
    object: &mut Value,
) -> Result<()> {
    if !object.is_object() {
        return Err(ApiError::bad_request(format!(
            "the body of the request is not a {} object",
            info.kind
        )));
    }
    let api_version = info.api_version();
    match object.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => object["apiVersion"] = api_version.clone().into(),
        Some(given) if given == api_version => {}
        Some(given) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({given}) does not match the expected API version ({api_version})"
            )))
        }
    }
    match object.get("kind").and_then(Value::as_str) {
        None | Some("") => object["kind"] = info.kind.into(),
        Some(given) if given == info.kind => {}
        Some(given) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({given}) does not match the expected kind ({})",
                info.kind
            )))
        }
    }
    if info.namespaced {
        let url_namespace = namespace.unwrap_or("");
        let body_namespace = object::namespace(object).to_string();
        if body_namespace.is_empty() {
            object::set_meta(object, "namespace", url_namespace);
        } else if body_namespace != url_namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    if let Some(url_name) = url_name {
        let body_name = object::name(object).to_string();
        if body_name.is_empty() {
            object::set_meta(object, "name", url_name);
        } else if body_name != url_name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({url_name})"
            )));
        }
    }
    Ok(())
}

/// Round-trips the body through its typed form; unknown and duplicate fields become an error
/// (Strict), warnings (Warn) or nothing (Ignore).
fn canonicalize(
    info: &ResourceInfo,
    object: &Value,
    duplicate_fields: &[String],
    validation: FieldValidation,
) -> Result<(Value, Vec<String>)> {
    let Some(canonicalize) = info.canonicalize else {
        return Ok((object.clone(), Vec::new()));
    };
    let canonical = match info.strategy.canonical(object) {
        Some(result) => result,
        None => canonicalize(object.clone()),
    };
    let canonical = canonical.map_err(|error| {
        ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {error}",
            kind = info.kind,
            version = info.version
        ))
    })?;
    if validation == FieldValidation::Ignore {
        return Ok((canonical, Vec::new()));
    }
    let mut problems: Vec<String> = codec::unknown_fields(object, &canonical)
        .into_iter()
        .map(|field| format!("unknown field \"{field}\""))
        .collect();
    problems.extend(
        duplicate_fields
            .iter()
            .map(|field| format!("duplicate field \"{field}\"")),
    );
    if problems.is_empty() {
        return Ok((canonical, Vec::new()));
    }
    match validation {
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
            problems.join(", "),
            kind = info.kind,
            version = info.version
        ))),
        _ => Ok((canonical, problems)),
    }
}

pub(super) fn check_preconditions(
    info: &ResourceInfo,
    name: &str,
    current: &Value,
    revision: i64,
    preconditions: &Preconditions,
) -> Result<()> {
    if let Some(uid) = preconditions.uid.as_deref().filter(|uid| !uid.is_empty()) {
        let actual = object::meta_str(current, "uid");
        if uid != actual {
            return Err(ApiError::conflict(
                info,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                ),
            ));
        }
    }
    if let Some(version) = preconditions
        .resource_version
        .as_deref()
        .filter(|v| !v.is_empty())
    {
        if version != revision.to_string() {
            return Err(ApiError::conflict(
                info,
                name,
                &format!("Precondition failed: ResourceVersion in precondition: {version}, ResourceVersion in object meta: {revision}"),
            ));
        }
    }
    Ok(())
}

/// The grace period an object being deleted waits for (0 when none, or not being deleted).
fn deletion_grace_period(object: &Value) -> i64 {
    object["metadata"]["deletionGracePeriodSeconds"]
        .as_i64()
        .unwrap_or(0)
}

/// A delete of an object already being deleted may only shorten its grace period, moving
/// its deletionTimestamp earlier by as much (as upstream's BeforeDelete).
fn shorten_grace_period(metadata: &mut serde_json::Map<String, Value>, requested: Option<i64>) {
    let current = metadata
        .get("deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let Some(requested) = requested.map(|r| r.max(0)).filter(|r| *r < current) else {
        return;
    };
    let Some(when) = metadata
        .get("deletionTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    else {
        return;
    };
    let earlier = when
        .checked_sub(jiff::SignedDuration::from_secs(current - requested))
        .unwrap_or(when);
    metadata.insert(
        "deletionTimestamp".into(),
        earlier.strftime("%Y-%m-%dT%H:%M:%SZ").to_string().into(),
    );
    metadata.insert("deletionGracePeriodSeconds".into(), requested.into());
}

/// The marked object when deletion must wait (finalizers, a terminating namespace, a bound
/// pod's grace period), or None when the object can go now.
fn pending_deletion(
    info: &ResourceInfo,
    current: &Value,
    options: &DeleteOptions,
) -> Option<Value> {
    let mut marked = current.clone();
    let mut finalizers = object::finalizers(current);
    match options.propagation_policy {
        Some(Propagation::Orphan) if !finalizers.iter().any(|f| f == "orphan") => {
            finalizers.push("orphan".into())
        }
        Some(Propagation::Foreground) if !finalizers.iter().any(|f| f == "foregroundDeletion") => {
            finalizers.push("foregroundDeletion".into())
        }
        _ => {}
    }
    let hold = info
        .strategy
        .deletion_hold(current, options.grace_period_seconds);
    if finalizers.is_empty() && hold.is_none() {
        return None;
    }
    if hold == Some(Hold::Finalizers) && !object::is_deleting(current) {
        info.strategy.begin_deletion(&mut marked);
    }
    let metadata = metadata_mut(&mut marked);
    if !finalizers.is_empty() {
        metadata.insert("finalizers".into(), json!(finalizers));
    }
    if metadata.contains_key("deletionTimestamp") {
        shorten_grace_period(metadata, options.grace_period_seconds);
    } else {
        let grace = match hold {
            Some(Hold::Grace(seconds)) => seconds,
            _ => 0,
        };
        let when = jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::from_secs(grace))
            .unwrap_or_else(|_| jiff::Timestamp::now());
        metadata.insert(
            "deletionTimestamp".into(),
            when.strftime("%Y-%m-%dT%H:%M:%SZ").to_string().into(),
        );
        metadata.insert("deletionGracePeriodSeconds".into(), grace.into());
    }
    Some(marked)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::catalog;

    #[test]
    fn bodies_with_another_namespace_or_kind_are_bad_requests() {
        let configmaps = catalog::find("", "v1", "configmaps").expect("cm");
        let mut other_ns = json!({"metadata": {"name": "a", "namespace": "b"}});
        assert_eq!(
            check_body(configmaps, Some("a"), None, &mut other_ns)
                .err()
                .map(|e| e.code),
            Some(400)
        );
        let mut other_kind = json!({"kind": "Secret", "metadata": {"name": "a"}});
        assert_eq!(
            check_body(configmaps, Some("a"), None, &mut other_kind)
                .err()
                .map(|e| e.code),
            Some(400)
        );
        let mut other_name = json!({"metadata": {"name": "a"}});
        assert_eq!(
            check_body(configmaps, Some("n"), Some("b"), &mut other_name)
                .err()
                .map(|e| e.code),
            Some(400)
        );
        let mut bare = json!({"metadata": {"name": "a"}});
        check_body(configmaps, Some("n"), None, &mut bare).expect("fills in");
        assert_eq!(bare["metadata"]["namespace"], "n");
        assert_eq!(bare["kind"], "ConfigMap");
        assert_eq!(bare["apiVersion"], "v1");
    }

    #[test]
    fn strict_validation_rejects_unknown_fields_and_warn_reports_them() {
        let configmaps = catalog::find("", "v1", "configmaps").expect("cm");
        let body =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {}});
        let body_with_unknown = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "spec": {"x": 1}});
        assert!(canonicalize(configmaps, &body, &[], FieldValidation::Strict).is_ok());
        let error = canonicalize(configmaps, &body_with_unknown, &[], FieldValidation::Strict)
            .expect_err("strict");
        assert_eq!(
            error.message,
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"spec\""
        );
        let (_, warnings) = canonicalize(
            configmaps,
            &body_with_unknown,
            &["metadata.name".into()],
            FieldValidation::Warn,
        )
        .expect("warn");
        assert_eq!(
            warnings,
            vec![
                "unknown field \"spec\"",
                "duplicate field \"metadata.name\""
            ]
        );
    }

    #[test]
    fn objects_with_finalizers_are_marked_not_removed() {
        let configmaps = catalog::find("", "v1", "configmaps").expect("cm");
        let plain = json!({"metadata": {"name": "a"}});
        assert!(pending_deletion(configmaps, &plain, &DeleteOptions::default()).is_none());
        let held = json!({"metadata": {"name": "a", "finalizers": ["x/y"]}});
        let marked =
            pending_deletion(configmaps, &held, &DeleteOptions::default()).expect("marked");
        assert!(object::is_deleting(&marked));
        let orphan = DeleteOptions {
            propagation_policy: Some(Propagation::Orphan),
            ..DeleteOptions::default()
        };
        let marked = pending_deletion(configmaps, &plain, &orphan).expect("orphan finalizer");
        assert_eq!(object::finalizers(&marked), vec!["orphan"]);
    }

    #[test]
    fn namespaces_go_terminating() {
        let namespaces = catalog::find("", "v1", "namespaces").expect("ns");
        let ns = json!({"metadata": {"name": "a"}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
        let marked = pending_deletion(namespaces, &ns, &DeleteOptions::default()).expect("marked");
        assert_eq!(marked["status"]["phase"], "Terminating");
    }

    /// A mutating plugin that sets a label no object may carry, and remembers whether a
    /// validating plugin ran after it.
    struct BadLabel;

    #[async_trait::async_trait]
    impl rudder_admission::Mutating for BadLabel {
        fn name(&self) -> &'static str {
            "BadLabel"
        }
        async fn admit(
            &self,
            _attributes: &Attributes,
            object: Option<&mut Value>,
            _old: Option<&Value>,
        ) -> std::result::Result<(), rudder_admission::Denied> {
            if let Some(object) = object {
                object["metadata"]["labels"] = json!({"bad label": "x"});
            }
            Ok(())
        }
    }

    /// A registry on a fresh SQLite store, with `chain` for admission (shared with the
    /// eviction tests).
    pub(in crate::registry) async fn registry_with(
        chain: rudder_admission::Chain,
    ) -> (Registry, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temporary directory");
        let url = format!("sqlite://{}", dir.path().join("state.db").display());
        let storage = rudder_storage::open(&url).await.expect("sqlite opens");
        let cidr = super::super::allocator::Cidr::parse("10.96.0.0/12").expect("cidr");
        let allocators = super::super::Allocators::new(storage.clone(), cidr, 30000..=32767);
        let registry = Registry::new(storage, std::sync::Arc::new(chain), allocators);
        (registry, dir)
    }

    /// A plain write by nobody in particular (shared with the cache's tests).
    pub(in crate::registry) fn write() -> Write {
        Write {
            caller: Default::default(),
            dry_run: false,
            field_validation: FieldValidation::Strict,
            field_manager: None,
            managed_fields_set: false,
            admitted: false,
        }
    }

    /// A write that stores the same bytes is no write (upstream's GuaranteedUpdate): a status
    /// with zero counts, which protobuf storage reads back without them, must not take a new
    /// resourceVersion each time a controller writes it again — that fed a controller's own
    /// watch and made it rewrite the status many times a second.
    #[tokio::test]
    async fn rewriting_what_is_stored_takes_no_new_resource_version() {
        let (registry, _dir) = registry_with(rudder_admission::Chain::new()).await;
        let deployments = catalog::find("apps", "v1", "deployments").expect("deployments");
        let deployment = json!({"metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        let input = |object: Value| Input {
            object,
            duplicate_fields: Vec::new(),
        };
        let created = registry
            .create(deployments, Some("default"), input(deployment), &write())
            .await
            .expect("created")
            .object;
        let mut with_status = created.clone();
        with_status["status"] = json!({"observedGeneration": 1, "replicas": 3,
            "updatedReplicas": 3, "readyReplicas": 0, "availableReplicas": 0,
            "unavailableReplicas": 3});
        object::remove_meta(&mut with_status, "resourceVersion");
        let rv = |object: &Value| object::meta_str(object, "resourceVersion").to_string();
        let mut first = None;
        for _ in 0..4 {
            let written = registry
                .update(
                    deployments,
                    Some("default"),
                    "web",
                    Some(Subresource::Status),
                    input(with_status.clone()),
                    &write(),
                )
                .await
                .expect("status written")
                .object;
            match &first {
                None => {
                    assert_ne!(rv(&written), rv(&created), "a real change is written");
                    first = Some(written);
                }
                Some(first) => {
                    assert_eq!(rv(&written), rv(first), "the same status is no new write")
                }
            }
        }
    }

    #[tokio::test]
    async fn what_a_mutating_plugin_sets_is_validated() {
        let (registry, _dir) =
            registry_with(rudder_admission::Chain::new().with_mutating(BadLabel)).await;
        let configmaps = catalog::find("", "v1", "configmaps").expect("cm");
        let input = Input {
            object: json!({"metadata": {"name": "a", "namespace": "default"}}),
            duplicate_fields: Vec::new(),
        };
        let refused = registry
            .create(configmaps, Some("default"), input, &write())
            .await
            .expect_err("the mutated object is invalid");
        assert_eq!(refused.code, 422, "{refused:?}");
        assert!(
            registry
                .get(configmaps, Some("default"), "a")
                .await
                .is_err(),
            "nothing was stored"
        );
    }

    /// A kind made up for this test: one strategy, one entry, and the generic store serves
    /// it with its rules (names are DNS labels, the generation counts spec changes, a
    /// default fills `spec.size`, validation refuses a negative one).
    struct WidgetStrategy;

    impl crate::kinds::Strategy for WidgetStrategy {
        fn uses_generation(&self) -> bool {
            true
        }
        fn name_rule(&self) -> crate::validation::NameRule {
            crate::validation::NameRule::Label
        }
        fn default(&self, object: &mut Value) {
            if object["spec"]["size"].is_null() {
                object["spec"]["size"] = json!(1);
            }
        }
        fn validate(
            &self,
            object: &Value,
            _old: Option<&Value>,
            errors: &mut crate::validation::Errs,
        ) {
            if object["spec"]["size"].as_i64().is_some_and(|size| size < 0) {
                errors.push(crate::validation::FieldError::invalid(
                    "spec.size",
                    object["spec"]["size"].clone(),
                    "must be greater than or equal to 0",
                ));
            }
        }
        fn merge_schema(&self) -> crate::patch::strategic::Ty {
            crate::patch::strategic::Ty::Object
        }
        fn fields(&self) -> &'static crate::selectors::FieldSet {
            &crate::selectors::METADATA_ONLY
        }
    }

    const WIDGETS: ResourceInfo = ResourceInfo {
        group: "example.rudder.dev",
        version: "v1",
        kind: "Widget",
        plural: "widgets",
        singular: "widget",
        namespaced: true,
        short_names: &[],
        categories: &[],
        verbs: catalog::ALL_VERBS,
        subresources: &[],
        storage_prefix: "/registry/example.rudder.dev/widgets",
        canonicalize: Some(Ok),
        strategy: &WidgetStrategy,
        printer: &crate::tables::DefaultTable,
    };

    #[tokio::test]
    async fn a_made_up_kind_needs_only_its_entry_and_strategy() {
        let (registry, _dir) = registry_with(rudder_admission::Chain::new()).await;
        let input = |spec: Value| Input {
            object: json!({"metadata": {"name": "w", "namespace": "default"}, "spec": spec}),
            duplicate_fields: Vec::new(),
        };
        let created = registry
            .create(&WIDGETS, Some("default"), input(json!({})), &write())
            .await
            .expect("created");
        assert_eq!(created.object["spec"]["size"], 1, "defaulted");
        assert_eq!(created.object["metadata"]["generation"], 1);
        assert_eq!(created.object["kind"], "Widget");
        let refused = registry
            .create(
                &WIDGETS,
                Some("default"),
                input(json!({"size": -1})),
                &write(),
            )
            .await
            .expect_err("invalid");
        assert_eq!(refused.code, 422);
        let dotted = Input {
            object: json!({"metadata": {"name": "a.b", "namespace": "default"}}),
            duplicate_fields: Vec::new(),
        };
        let refused = registry
            .create(&WIDGETS, Some("default"), dotted, &write())
            .await
            .expect_err("a DNS label has no dots");
        assert_eq!(refused.code, 422);
        let resized = registry
            .update_with(&WIDGETS, Some("default"), "w", None, &write(), |current| {
                let mut next = current.clone();
                next["spec"]["size"] = json!(3);
                Ok(next)
            })
            .await
            .expect("updated");
        assert_eq!(resized.object["metadata"]["generation"], 2);
        let row = WIDGETS
            .printer
            .cells(&resized.object, jiff::Timestamp::now());
        assert_eq!(row[0], "w");
    }
}
