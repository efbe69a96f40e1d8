//! `pods/{name}/eviction`: a delete that respects the pod's PodDisruptionBudget, as upstream's
//! eviction subresource. A pod that is already terminal, pending or being deleted goes at
//! once. Otherwise the one budget whose selector picks the pod must allow a disruption: its
//! `status.disruptionsAllowed` is decremented and the pod recorded in `disruptedPods` by a
//! compare-and-swap write of the budget's status, and only then is the pod deleted (with the
//! eviction's DeleteOptions). No allowance left is 429 TooManyRequests with a
//! `DisruptionBudget` cause, which `kubectl drain` retries; more than one budget is a 500.
//! A pod that is not Ready spends nothing when its budget is healthy without it (or its
//! `unhealthyPodEvictionPolicy` is `AlwaysAllow`), but is deleted only if it has not changed
//! since it was read.

use std::time::Duration;

use serde_json::{json, Value};

use super::object;
use super::store::DeleteOptions;
use super::{Registry, Write};
use crate::catalog::{self, ResourceInfo, Subresource};
use crate::error::{ApiError, Cause, Details, Reason, Result};
use crate::request::ListOptions;
use crate::selectors::LabelSelector;

/// Upstream's bound on `status.disruptedPods`: beyond it the controller has fallen behind.
pub const MAX_DISRUPTED_PODS: usize = 2000;

/// How often a delete that lost a race with a change of the pod is tried again.
const ATTEMPTS: usize = 20;
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// What the eviction body asks: its DeleteOptions, and whether they ask for a dry run.
#[derive(Clone, Debug, Default)]
pub struct Eviction {
    pub options: DeleteOptions,
    /// `deleteOptions.dryRun: [All]` in the body (joins the query's `dryRun`).
    pub dry_run: bool,
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

/// Evicting such a pod disrupts nothing more: it is deleted without consulting a budget.
fn can_ignore_budget(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed" | "Pending") || object::is_deleting(pod)
}

/// Whether the delete must be pinned to the pod's resourceVersion, so a pod that became Ready
/// meanwhile is not deleted behind its budget's back.
fn pins_version(pod: &Value) -> bool {
    !matches!(phase(pod), "Succeeded" | "Failed") && !object::is_deleting(pod)
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|all| {
        all.iter()
            .any(|condition| condition["type"] == "Ready" && condition["status"] == "True")
    })
}

fn int(value: &Value) -> i64 {
    value.as_i64().unwrap_or(0)
}

/// 429 with the cause upstream gives, and the seconds to wait (0: none said).
fn too_many_requests(cause: String, retry_after: i64) -> ApiError {
    ApiError {
        details: Some(Box::new(Details {
            causes: vec![Cause {
                reason: "DisruptionBudget".into(),
                message: cause,
                field: String::new(),
            }],
            retry_after_seconds: (retry_after > 0).then_some(retry_after),
            ..Details::default()
        })),
        ..ApiError::new(
            Reason::TooManyRequests,
            "Cannot evict pod as it would violate the pod's disruption budget.",
        )
    }
}

fn still_processing(budget: &str) -> ApiError {
    too_many_requests(
        format!("The disruption budget {budget} is still being processed by the server."),
        10,
    )
}

fn budget_forbids(budget: &str, why: &str) -> ApiError {
    ApiError {
        details: Some(Box::new(Details {
            name: budget.to_string(),
            group: "policy".into(),
            kind: "poddisruptionbudget".into(),
            ..Details::default()
        })),
        ..ApiError::forbidden(format!(
            "poddisruptionbudget.policy \"{budget}\" is forbidden: {why}"
        ))
    }
}

/// Whether `budget` picks `pod` (an empty or unreadable selector picks nothing here).
fn picks(budget: &Value, pod: &Value) -> bool {
    let selector = &budget["spec"]["selector"];
    if !selector.is_object() {
        return false;
    }
    match LabelSelector::from_object(selector) {
        Ok(selector) if !selector.is_empty() => selector.matches_object(pod),
        _ => false,
    }
}

/// The budget's status after one more disruption is spent on `pod`, or why it cannot be.
pub fn spend(budget: &Value, pod: &str, dry_run: bool) -> Result<Value> {
    let name = object::name(budget);
    let status = &budget["status"];
    let generation = budget["metadata"]["generation"].as_i64().unwrap_or(0);
    if int(&status["observedGeneration"]) < generation {
        return Err(still_processing(name));
    }
    let allowed = int(&status["disruptionsAllowed"]);
    if allowed < 0 {
        return Err(budget_forbids(name, "pdb disruptions allowed is negative"));
    }
    let disrupted = status["disruptedPods"]
        .as_object()
        .map_or(0, |map| map.len());
    if disrupted > MAX_DISRUPTED_PODS {
        return Err(budget_forbids(
            name,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if allowed == 0 {
        return Err(too_many_requests(
            format!(
                "The disruption budget {name} needs {} healthy pods and has {} currently",
                int(&status["desiredHealthy"]),
                int(&status["currentHealthy"])
            ),
            0,
        ));
    }
    let mut next = budget.clone();
    next["status"]["disruptionsAllowed"] = json!(allowed - 1);
    if allowed == 1 {
        no_disruption_allowed(&mut next);
    }
    if !dry_run {
        if !next["status"]["disruptedPods"].is_object() {
            next["status"]["disruptedPods"] = json!({});
        }
        next["status"]["disruptedPods"][pod] = json!(object::now());
    }
    Ok(next)
}

/// The `DisruptionAllowed` condition False, as the budget has no allowance left.
fn no_disruption_allowed(budget: &mut Value) {
    let observed = budget["status"]["observedGeneration"].clone();
    if !budget["status"]["conditions"].is_array() {
        budget["status"]["conditions"] = json!([]);
    }
    let Some(conditions) = budget["status"]["conditions"].as_array_mut() else {
        return;
    };
    let condition = json!({"type": "DisruptionAllowed", "status": "False",
        "reason": "InsufficientPods", "message": "", "observedGeneration": observed,
        "lastTransitionTime": object::now()});
    match conditions
        .iter_mut()
        .find(|c| c["type"] == "DisruptionAllowed")
    {
        Some(existing) if existing["status"] == "False" => {
            existing["observedGeneration"] = condition["observedGeneration"].clone();
        }
        Some(existing) => *existing = condition,
        None => conditions.push(condition),
    }
}

impl Registry {
    /// POST of `pods/<name>/eviction`.
    pub async fn evict_pod(
        &self,
        pods: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        eviction: &Value,
        asked: Eviction,
        write: &Write,
    ) -> Result<Vec<String>> {
        match eviction.get("kind").and_then(Value::as_str) {
            None | Some("" | "Eviction") => {}
            Some(kind) => {
                return Err(ApiError::bad_request(format!(
                    "the kind in the data ({kind}) does not match the expected kind (Eviction)"
                )))
            }
        }
        if object::name(eviction) != name {
            return Err(ApiError::bad_request(
                "name in URL does not match name in Eviction object",
            ));
        }
        // The budget's status is written as upstream's eviction writes it, through the API
        // (admitted as an update of `poddisruptionbudgets/status`); the pod's delete is not.
        let mut budget_write = write.clone();
        budget_write.dry_run |= asked.dry_run;
        let mut eviction = eviction.clone();
        let (write, warnings) = self
            .admit_subresource_create(
                pods,
                Subresource::Eviction,
                namespace,
                name,
                &mut eviction,
                &budget_write,
                |_| Ok(()),
            )
            .await?;
        let options = asked.options;
        let version_given = options
            .preconditions
            .resource_version
            .as_deref()
            .is_some_and(|version| !version.is_empty());

        // Pods that are already done, not yet running or going anyway need no budget.
        let mut attempt = 0;
        let pod = loop {
            attempt += 1;
            let pod = self.get(pods, namespace, name).await?;
            if !can_ignore_budget(&pod) {
                break pod;
            }
            let mut pinned = options.clone();
            if pins_version(&pod) && !version_given {
                pinned.preconditions.resource_version =
                    Some(object::meta_str(&pod, "resourceVersion").to_string());
            }
            match self.delete(pods, namespace, name, &pinned, &write).await {
                Err(error) if error.is_conflict() && !version_given && attempt < ATTEMPTS => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(error) => return Err(error),
                Ok(_) => return Ok(warnings),
            }
        };

        let budgets = catalog::find("policy", "v1", "poddisruptionbudgets")
            .ok_or_else(|| ApiError::internal("PodDisruptionBudgets are not served"))?;
        let listed = self
            .list(budgets, namespace, &ListOptions::everything())
            .await?;
        let matching: Vec<Value> = listed
            .items
            .into_iter()
            .map(|item| item.into_value())
            .filter(|budget| picks(budget, &pod))
            .collect();
        if matching.len() > 1 {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        let mut options = options;
        let mut pinned_here = false;
        if let Some(budget) = matching.first() {
            let budget_name = object::name(budget).to_string();
            let status = &budget["status"];
            let (current, desired) = (
                int(&status["currentHealthy"]),
                int(&status["desiredHealthy"]),
            );
            let always = budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow";
            let spare_unhealthy =
                !is_ready(&pod) && (always || (current >= desired && desired > 0));
            if spare_unhealthy {
                if !version_given {
                    options.preconditions.resource_version =
                        Some(object::meta_str(&pod, "resourceVersion").to_string());
                    pinned_here = true;
                }
            } else {
                // Checked and spent on the budget's latest state; a lost race reads again.
                let dry_run = write.dry_run;
                self.update_with(
                    budgets,
                    namespace,
                    &budget_name,
                    Some(Subresource::Status),
                    &budget_write,
                    |latest| {
                        let mut next = spend(latest, name, dry_run)?;
                        // Unpinned: a lost race is retried on the budget's newer state.
                        object::remove_meta(&mut next, "resourceVersion");
                        Ok(next)
                    },
                )
                .await
                .map_err(|error| {
                    if error.is_conflict() {
                        ApiError::timeout(format!(
                            "couldn't update PodDisruptionBudget \"{budget_name}\" due to conflicts"
                        ))
                    } else {
                        error
                    }
                })?;
            }
            match self.delete(pods, namespace, name, &options, &write).await {
                Err(error) if error.is_conflict() && pinned_here => {
                    return Err(still_processing(&budget_name))
                }
                Err(error) => return Err(error),
                Ok(_) => return Ok(warnings),
            }
        }
        self.delete(pods, namespace, name, &options, &write).await?;
        Ok(warnings)
    }
}

#[cfg(test)]
#[path = "eviction_tests.rs"]
mod tests;
