//! The RBAC policy in memory, kept current by the store's watches (authz/follow.rs) on the
//! four RBAC prefixes.

use std::sync::Arc;

use rudder_storage::Storage;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Policy, CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS, ROLES, ROLE_BINDINGS};
use crate::authz::follow::{Followed, Follows};
use crate::values::Values;

/// The policy, shared by the authorizer and the watches that keep it current.
pub type PolicyCache = Followed<Policy>;

const PREFIXES: &[&str] = &[CLUSTER_ROLES, ROLES, CLUSTER_ROLE_BINDINGS, ROLE_BINDINGS];

impl Follows for Policy {
    fn clear(&mut self, prefix: &str) {
        Policy::clear(self, prefix);
    }

    fn apply_all<'a>(
        &mut self,
        changes: impl IntoIterator<Item = (&'a str, Option<&'a serde_json::Value>)>,
    ) {
        Policy::apply_all(self, changes);
    }
}

/// Lists the RBAC objects and keeps them current until `shutdown`.
pub async fn start(
    storage: Arc<dyn Storage>,
    values: Arc<Values>,
    tasks: &TaskTracker,
    shutdown: CancellationToken,
) -> rudder_storage::Result<Arc<PolicyCache>> {
    PolicyCache::start(storage, values, PREFIXES, tasks, shutdown).await
}
