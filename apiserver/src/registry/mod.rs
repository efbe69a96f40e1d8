//! The registry: one generic store that serves every resource in the catalog, with the
//! per-kind rules (defaults, validation, status handling, allocations) applied in a fixed
//! order. See docs/apiserver.md for the create/update/delete flows.
//!
//! ```text
//! create: canonicalize → mutating admission → prepare_for_create → defaults → validate
//!         → validating admission → storage.create
//! update: read → (patch) → canonicalize → mutating admission → prepare_for_update → defaults
//!         → validate → validating admission → storage.update (compare-and-swap on
//!         mod_revision, retried when the client did not pin a resourceVersion)
//! delete: read → preconditions → admission → finalizers? mark : storage.delete
//! ```

mod allocator;
mod cache;
pub mod cluster_info;
mod conversion;
mod decoded;
pub mod eviction;
mod keys;
mod list;
pub mod metrics;
mod namespaces;
pub mod object;
mod object_count;
mod storable;
mod store;
mod strategy;
mod subresource_admission;
mod subresources;
mod watch;

pub use allocator::{Allocators, Cidr};
pub use cluster_info::publish_cluster_info;
pub use list::{decode_continue, ListResult, Listed};
pub use metrics::WatchMetrics;
pub use namespaces::{bootstrap, system_write, write_own_status, StoredNamespaces};
pub use object_count::{spawn_object_counter, DEFAULT_COUNT_PERIOD};
pub use store::{DeleteOptions, DeleteResult, Input, Preconditions, Propagation};
pub use watch::{WatchEvent, WatchEventKind, WatchEvents};

use std::sync::Arc;

use rudder_admission::Chain;
use rudder_storage::Storage;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::catalog::{ResourceInfo, Subresource};
use crate::crd::CustomResources;
use crate::request::FieldValidation;
use crate::values::Values;

/// What a request addresses: a resource, and in it a namespace, an object and a subresource.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    pub resource: &'static ResourceInfo,
    pub namespace: Option<&'a str>,
    /// Empty for a collection.
    pub name: &'a str,
    pub subresource: Option<Subresource>,
}

/// Who is asking, for admission and authorization.
#[derive(Clone, Debug, Default)]
pub struct Caller {
    pub user: String,
    pub groups: Vec<String>,
    pub uid: String,
    /// The user's extra attributes (recorded by CertificateSigningRequests).
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

/// Options of one write, resolved from the query.
#[derive(Clone, Debug)]
pub struct Write {
    pub caller: Caller,
    pub dry_run: bool,
    pub field_validation: FieldValidation,
    /// Who owns the fields this write sets (`fieldManager`, or the client's user agent).
    pub field_manager: Option<String>,
    /// The object's managedFields were computed already (server-side apply): do not track
    /// this write as an Update.
    pub managed_fields_set: bool,
    /// Admission ran already, on the request's own object: the writes a subresource's create
    /// makes (a Binding's update of its pod, an Eviction's delete) are not admitted again as
    /// writes of the parent, as upstream's.
    pub admitted: bool,
}

impl Write {
    fn manager(&self) -> &str {
        self.field_manager.as_deref().unwrap_or("unknown")
    }
}

/// The outcome of a write: the object as stored, and any warnings for the client.
#[derive(Clone, Debug)]
pub struct Written {
    pub object: serde_json::Value,
    pub created: bool,
    pub warnings: Vec<String>,
}

/// The generic store over every cataloged resource.
#[derive(Clone)]
pub struct Registry {
    storage: Arc<dyn Storage>,
    admission: Arc<Chain>,
    allocators: Arc<Allocators>,
    /// Where the tasks a request leaves running (watches) are tracked, and what ends them.
    tasks: TaskTracker,
    shutdown: CancellationToken,
    /// Storage events decoded once for all watches.
    decoded: Arc<decoded::Decoded>,
    /// How objects become stored values and back (codec, encryption at rest).
    values: Arc<Values>,
    /// Lists served from memory (`None`: `--watch-cache=false`, every read goes to the store).
    cache: Option<Arc<cache::WatchCache>>,
    /// The custom resources this server serves (from the CRDs in the store).
    custom: Arc<CustomResources>,
    /// What the watch cache and the watches do.
    watch_metrics: Arc<WatchMetrics>,
}

impl Registry {
    pub fn new(storage: Arc<dyn Storage>, admission: Arc<Chain>, allocators: Allocators) -> Self {
        Self {
            storage,
            admission,
            allocators: Arc::new(allocators),
            tasks: TaskTracker::new(),
            shutdown: CancellationToken::new(),
            decoded: Arc::default(),
            values: Arc::default(),
            cache: None,
            custom: Arc::default(),
            watch_metrics: Arc::default(),
        }
    }

    /// The same store counting what its cache and watches do into `metrics` (call before
    /// [`Registry::with_watch_cache`]).
    pub fn with_watch_metrics(mut self, metrics: Arc<WatchMetrics>) -> Self {
        self.watch_metrics = metrics;
        self
    }

    pub fn watch_metrics(&self) -> &Arc<WatchMetrics> {
        &self.watch_metrics
    }

    /// The same store serving lists from a watch cache (started per resource on first use,
    /// its feeding watches on the registry's tasks — so call after [`Registry::with_tasks`]
    /// and [`Registry::with_values`]).
    pub fn with_watch_cache(mut self) -> Self {
        self.cache = Some(Arc::new(cache::WatchCache::new(
            self.storage.clone(),
            self.values.clone(),
            self.watch_metrics.clone(),
            self.tasks.clone(),
            self.shutdown.clone(),
        )));
        self
    }

    /// The same store writing and reading values through `values`.
    pub fn with_values(mut self, values: Arc<Values>) -> Self {
        self.values = values;
        self
    }

    pub fn values(&self) -> &Arc<Values> {
        &self.values
    }

    /// The same store with `admission` as its chain.
    pub fn with_admission(mut self, admission: Arc<Chain>) -> Self {
        self.admission = admission;
        self
    }

    /// The chain that admits `write`: none when admission ran on the request's own object
    /// already (see [`Write::admitted`]).
    fn admission_for(&self, write: &Write) -> &Chain {
        static NONE: Chain = Chain::new();
        if write.admitted {
            &NONE
        } else {
            &self.admission
        }
    }

    /// Spawns request tasks on `tasks` and ends them when `shutdown` is cancelled (the server
    /// waits for them before it reports stopped).
    pub fn with_tasks(mut self, tasks: TaskTracker, shutdown: CancellationToken) -> Self {
        self.tasks = tasks;
        self.shutdown = shutdown;
        self
    }

    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The custom resources this server serves.
    pub fn custom(&self) -> &Arc<CustomResources> {
        &self.custom
    }

    /// The same store serving `custom`'s resources (a registry of its own over the same
    /// store, such as admission's, shares the server's).
    pub fn with_custom(mut self, custom: Arc<CustomResources>) -> Self {
        self.custom = custom;
        self
    }

    /// The resource at group/version/plural: built-in, or from a CRD.
    pub fn resource(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<&'static ResourceInfo> {
        crate::catalog::find(group, version, plural)
            .or_else(|| self.custom.find(group, version, plural))
    }
}
