//! One home per kind. Each built-in kind has a file here holding its catalog entry (names,
//! scope, verbs, subresources, storage prefix, the typed struct that canonicalizes bodies) and
//! its [`Strategy`]: the rules the generic store applies to it — create and update
//! preparation, defaulting, validation, whether the generation moves, status handling, name
//! rules, selectable fields, the strategic-merge schema and what a delete does — plus the
//! [`Printer`](crate::tables::Printer) its Tables use. The store and the HTTP layer know no kind
//! by name; they ask the entry.
//!
//! Adding a built-in kind is one file here plus one line in [`crate::catalog::RESOURCES`]; the
//! compiler names each rule the new kind has not decided. Validation, defaulting and printing
//! helpers shared by several kinds stay in `validation/`, `defaults/` and `tables/`, as
//! upstream keeps them beside its registry strategies.

use serde_json::Value;

use std::borrow::Cow;

use futures::future::BoxFuture;

use crate::authn::{Authenticator, UserInfo};
use crate::authz::Authorizer;
use crate::catalog::Subresource;
use crate::error::ApiError;
use crate::patch::strategic::Ty;
use crate::selectors::FieldSet;
use crate::validation::{Errs, NameRule};

/// What [`Strategy::converter`] names: the webhook, the served and the storage apiVersion.
pub type Converter<'a> = (
    &'a crate::crd::conversion::WebhookConverter,
    &'static str,
    &'static str,
);

pub mod admissionregistration;
pub mod apiregistration;
pub mod apps;
pub mod authorization;
pub mod batch;
pub mod certificates;
pub mod config;
pub mod coordination;
pub mod discovery;
pub mod events;
pub mod metrics;
pub mod namespace;
pub mod networking;
pub mod node;
pub mod pod;
pub mod policy;
pub mod quota;
pub mod rbac;
pub mod replication_controller;
pub mod runtime_class;
pub mod scheduling;
pub mod service;
pub mod volumes;

/// What a delete waits for beyond the object's `metadata.finalizers`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// The object's own finalizers (a namespace's `spec.finalizers`): it is marked, and
    /// [`Strategy::begin_deletion`] runs the first time.
    Finalizers,
    /// A grace period in seconds (a bound pod): the deletionTimestamp is set that far ahead.
    Grace(i64),
}

/// Where a custom resource's `/scale` reads and writes (a CRD's `subresources.scale`), each
/// a path of plain fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    pub spec_replicas: Vec<String>,
    pub status_replicas: Vec<String>,
    /// Where the selector is kept, already in its string form (`status.selector`).
    pub label_selector: Option<Vec<String>>,
}

/// The rules one kind's objects follow in the generic store.
pub trait Strategy: Sync {
    /// Whether `metadata.generation` starts at 1 and counts spec changes.
    fn uses_generation(&self) -> bool;
    /// The rule the kind's names (and generateName prefixes) follow.
    fn name_rule(&self) -> NameRule;
    /// Fills in upstream's defaults in place; never fails (wrong types are left to validation).
    fn default(&self, object: &mut Value);
    /// The kind's own checks, after the ObjectMeta checks every kind shares; `old` is the
    /// stored object on an update.
    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs);
    /// The root type of the kind's strategic-merge schema.
    fn merge_schema(&self) -> Ty;
    /// The fields field selectors may name, and how they are read.
    fn fields(&self) -> &'static FieldSet;

    /// Sets what a create starts with, after the common metadata reset (and after a kind with
    /// a status subresource has had the client's status dropped).
    fn prepare_for_create(&self, _object: &mut Value) {}
    /// Records on a create what only the server knows: who is asking (a
    /// CertificateSigningRequest's requestor). Runs right after [`Strategy::prepare_for_create`].
    fn prepare_for_create_by(&self, _object: &mut Value, _caller: &crate::registry::Caller) {}
    /// Whether a create keeps the client's status although the kind has a status
    /// subresource (the kubelet registers its node with one).
    fn keeps_status_on_create(&self) -> bool {
        false
    }
    /// Carries over what an update through the main resource (or `subresource`, other than
    /// status) may not change.
    fn prepare_for_update(
        &self,
        _new: &mut Value,
        _old: &Value,
        _subresource: Option<Subresource>,
    ) {
    }
    /// What a delete of `current` waits for besides its finalizers; `grace_period_seconds`
    /// is the one the request asked for.
    fn deletion_hold(&self, _current: &Value, _grace_period_seconds: Option<i64>) -> Option<Hold> {
        None
    }
    /// Whether the object itself still holds a pending deletion (beyond its finalizers).
    fn holds_deletion(&self, _object: &Value) -> bool {
        false
    }
    /// Marks an object whose deletion has just begun (a namespace turns Terminating).
    fn begin_deletion(&self, _object: &mut Value) {}
    /// Whether a finished delete answers with the object rather than a Status.
    fn delete_returns_object(&self) -> bool {
        false
    }
    /// Whether writes of this kind allocate ClusterIPs and NodePorts (Services).
    fn allocates_service_addresses(&self) -> bool {
        false
    }
    /// The object as this API shows it, from its stored form: a kind stored in another API's
    /// form (events.k8s.io Events are stored as core Events, as upstream stores one internal
    /// Event) converts here; the rest are stored as they are shown.
    fn stored_to_api(&self, object: Value) -> Value {
        object
    }
    /// The stored form of an object of this API (the inverse of [`Strategy::stored_to_api`]);
    /// borrowed when it is stored as it is, as most kinds are (no copy on the write path).
    fn api_to_stored<'a>(&self, object: &'a Value) -> Cow<'a, Value> {
        Cow::Borrowed(object)
    }
    /// The canonical form of a body for a kind whose schema is known only at run time (a
    /// custom resource prunes what its CRD's schema does not declare); `None` for the kinds
    /// the catalog's typed struct canonicalizes.
    fn canonical(&self, _object: &Value) -> Option<Result<Value, String>> {
        None
    }
    /// Whether PATCH takes a strategic merge patch (custom resources answer 415, as upstream).
    fn accepts_strategic_merge(&self) -> bool {
        true
    }
    /// Where a kind whose `/scale` its definition describes (a custom resource) keeps its
    /// replicas and selector; `None` for the built-in workloads' `spec.replicas`.
    fn scale_paths(&self) -> Option<&ScalePaths> {
        None
    }
    /// The structural schema server-side apply follows for a kind whose schema is known only
    /// at run time (a custom resource's `x-kubernetes-list-type`s and map types).
    fn apply_schema(&self) -> Option<&crate::crd::schema::Schema> {
        None
    }
    /// For a custom resource version other than the storage version of a CRD converting by
    /// webhook: the webhook, this version's apiVersion and the storage version's. Its objects
    /// are then converted on their way from and to the store (`registry::conversion`), and
    /// [`Strategy::stored_to_api`] / [`Strategy::api_to_stored`] leave them as they are.
    fn converter(&self) -> Option<Converter<'_>> {
        None
    }

    /// The kind's OpenAPI schema, for a kind the vendored definitions do not describe (a
    /// custom resource's `openAPIV3Schema`).
    fn openapi_schema(&self) -> Option<&Value> {
        None
    }
    /// For a kind that is answered rather than stored (access and token reviews): the answer
    /// to a create of `object` by `asker` in `namespace`. `None` for a stored kind.
    fn review<'a>(
        &'a self,
        _reviewers: &'a Reviewers<'a>,
        _asker: &'a UserInfo,
        _namespace: Option<&'a str>,
        _object: &'a Value,
    ) -> Option<BoxFuture<'a, Result<Value, ApiError>>> {
        None
    }
}

/// What answers the review kinds.
pub struct Reviewers<'a> {
    pub authorizer: &'a dyn Authorizer,
    pub authenticator: &'a Authenticator,
}
