//! The ValidatingAdmissionPolicy status controller (upstream runs it in the
//! controller-manager; here every apiserver runs it, as the CRD and APIService controllers,
//! and they agree): it lists and watches the policies and, for each whose
//! `status.observedGeneration` is behind its `metadata.generation`, writes the type check's
//! warnings ([`super::typecheck`]) and the generation they are of.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::kinds::admissionregistration::VALIDATING_ADMISSION_POLICIES;
use crate::registry::{Registry, WatchEventKind};
use crate::request::ListOptions;

/// Runs until `shutdown`: a list, then the watch after it, again after a second when the
/// watch ends.
pub async fn run(registry: Registry, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = follow(&registry) => {}
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

async fn follow(registry: &Registry) {
    let listed = match registry
        .list(
            &VALIDATING_ADMISSION_POLICIES,
            None,
            &ListOptions::everything(),
        )
        .await
    {
        Ok(listed) => listed,
        Err(error) => {
            tracing::warn!(error = %error.message, "listing ValidatingAdmissionPolicies");
            return;
        }
    };
    let revision = listed.resource_version;
    for policy in listed.by_name().values() {
        reconcile(registry, policy).await;
    }
    let Some(mut events) = registry
        .watch_kind_from(
            &VALIDATING_ADMISSION_POLICIES,
            revision,
            "ValidatingAdmissionPolicies",
        )
        .await
    else {
        return;
    };
    while let Some(event) = events.next().await {
        match event.kind {
            WatchEventKind::Added | WatchEventKind::Modified => {
                reconcile(registry, &event.into_value()).await;
            }
            WatchEventKind::Deleted | WatchEventKind::Bookmark => {}
            WatchEventKind::Error => return,
        }
    }
}

/// Writes the policy's type check when its status is of an older generation.
async fn reconcile(registry: &Registry, policy: &Value) {
    let generation = policy["metadata"]["generation"].as_i64().unwrap_or(0);
    if policy["status"]["observedGeneration"].as_i64() == Some(generation) {
        return;
    }
    let warnings = super::typecheck::expression_warnings(policy, &registry.custom().served());
    crate::registry::write_own_status(
        registry,
        &VALIDATING_ADMISSION_POLICIES,
        crate::json::name(policy),
        |current| {
            // A newer generation arrived meanwhile: its own event writes its status.
            if current["metadata"]["generation"].as_i64() != Some(generation) {
                return None;
            }
            let mut status = current["status"].clone();
            let mut type_checking = json!({});
            if !warnings.is_empty() {
                type_checking["expressionWarnings"] = json!(warnings);
            }
            status["observedGeneration"] = json!(generation);
            status["typeChecking"] = type_checking;
            Some(status)
        },
    )
    .await;
}
