//! A Job's `podFailurePolicy`: the rules are tried in order against a failed pod and the first
//! that matches decides what the failure means — fail the whole Job (`FailJob`), fail only the
//! pod's index (`FailIndex`, with `backoffLimitPerIndex`), not count it at all (`Ignore`), or
//! count it as usual (`Count`, also what happens when no rule matches). A rule matches on a
//! container's exit code (`onExitCodes`: `In` or `NotIn` a list, optionally one container by
//! name; a container that exited 0 never matches) or on a pod condition (`onPodConditions`:
//! type and status). Rules with an action this controller does not know are skipped, as the
//! API asks of clients.

use k8s_openapi::api::batch::v1::{PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::ResourceExt;

/// What a failed pod's failure means for its Job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The Job fails at once; `message` names the pod and what matched (upstream's wording).
    FailJob { message: String },
    /// The pod's index fails at once and is not retried (Indexed Jobs with
    /// `backoffLimitPerIndex`).
    FailIndex,
    /// The failure is not counted towards any limit; the pod is replaced.
    Ignore,
    /// The failure counts towards `backoffLimit` (or the index's `backoffLimitPerIndex`).
    Count,
}

impl Verdict {
    /// Whether the failure counts towards the Job's (or its index's) limit.
    pub fn counts(&self) -> bool {
        !matches!(self, Verdict::Ignore)
    }
}

/// The verdict on `pod`'s failure under `policy` (no policy: every failure counts).
pub fn judge(policy: Option<&PodFailurePolicy>, pod: &Pod) -> Verdict {
    let Some(policy) = policy else {
        return Verdict::Count;
    };
    for (position, rule) in policy.rules.iter().enumerate() {
        let matched = if let Some(requirement) = rule.on_exit_codes.as_ref() {
            exit_code_match(pod, requirement).map(|(container, code)| {
                format!(
                    "Container {container} for pod {}/{} failed with exit code {code} matching {} rule at index {position}",
                    pod.namespace().unwrap_or_default(),
                    pod.name_any(),
                    rule.action,
                )
            })
        } else if let Some(patterns) = rule.on_pod_conditions.as_ref() {
            condition_match(pod, patterns).map(|type_| {
                format!(
                    "Pod {}/{} has condition {type_} matching {} rule at index {position}",
                    pod.namespace().unwrap_or_default(),
                    pod.name_any(),
                    rule.action,
                )
            })
        } else {
            None
        };
        let Some(message) = matched else {
            continue;
        };
        match rule.action.as_str() {
            "FailJob" => return Verdict::FailJob { message },
            "FailIndex" => return Verdict::FailIndex,
            "Ignore" => return Verdict::Ignore,
            "Count" => return Verdict::Count,
            // An action from a newer API: the rule is skipped.
            _ => continue,
        }
    }
    Verdict::Count
}

/// The first terminated container (app containers first, then init containers) whose exit
/// code satisfies `requirement`: its name and exit code.
fn exit_code_match(
    pod: &Pod,
    requirement: &PodFailurePolicyOnExitCodesRequirement,
) -> Option<(String, i32)> {
    let status = pod.status.as_ref()?;
    let app = status.container_statuses.as_deref().unwrap_or_default();
    let init = status
        .init_container_statuses
        .as_deref()
        .unwrap_or_default();
    app.iter()
        .chain(init)
        .find_map(|container| satisfies(container, requirement))
}

fn satisfies(
    container: &ContainerStatus,
    requirement: &PodFailurePolicyOnExitCodesRequirement,
) -> Option<(String, i32)> {
    let code = container.state.as_ref()?.terminated.as_ref()?.exit_code;
    if code == 0 {
        return None;
    }
    if requirement
        .container_name
        .as_ref()
        .is_some_and(|name| *name != container.name)
    {
        return None;
    }
    let listed = requirement.values.contains(&code);
    let matched = match requirement.operator.as_str() {
        "In" => listed,
        "NotIn" => !listed,
        _ => false,
    };
    matched.then(|| (container.name.clone(), code))
}

/// The type of the first pod condition that one of `patterns` names with its status.
fn condition_match(
    pod: &Pod,
    patterns: &[k8s_openapi::api::batch::v1::PodFailurePolicyOnPodConditionsPattern],
) -> Option<String> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    conditions
        .iter()
        .find(|condition| {
            patterns
                .iter()
                .any(|p| p.type_ == condition.type_ && p.status == condition.status)
        })
        .map(|condition| condition.type_.clone())
}
