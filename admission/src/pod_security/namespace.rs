//! PodSecurity on namespaces: labels that do not parse refuse a create (and an update that
//! changes them) with upstream's field errors; an exempt namespace that asks for a policy is
//! warned that it will be ignored; and tightening the enforce level warns which of the
//! namespace's pods would now be refused — a headline, then one line per distinct violation
//! naming its first pod and how many others share it (at most [`MAX_PODS_TO_CHECK`] pods
//! looked at, one per controller first).

use std::collections::HashSet;

use serde_json::Value;

use super::{labels_of, policy, violations, Level, LevelVersion, PodSecurity, Policy};
use crate::{Attributes, Denied, ObjectReader, Operation};

/// How many of a namespace's pods a tightened enforce level is tried on.
const MAX_PODS_TO_CHECK: usize = 3000;

impl<R: ObjectReader> PodSecurity<R> {
    /// The warning for an exempt namespace whose labels ask for a policy that will be ignored.
    fn exempt_namespace_warning(
        &self,
        name: &str,
        policy: &Policy,
        labels: &Value,
    ) -> Option<String> {
        if policy.fully_privileged() || *policy == self.config.defaults {
            return None;
        }
        let set = |mode: &str| {
            labels
                .get(format!("{}{mode}", policy::LABEL_PREFIX))
                .is_some()
                || labels
                    .get(format!("{}{mode}-version", policy::LABEL_PREFIX))
                    .is_some()
        };
        let shown: Vec<String> = [
            ("enforce", policy.enforce),
            ("audit", policy.audit),
            ("warn", policy.warn),
        ]
        .into_iter()
        .filter(|(mode, of)| of.level != Level::Privileged && set(mode))
        .map(|(mode, of)| format!("{mode}={of}"))
        .collect();
        Some(format!(
            "namespace \"{name}\" is exempt from Pod Security, and the policy ({}) will be ignored",
            shown.join(", ")
        ))
    }

    pub(super) async fn validate_namespace(
        &self,
        attributes: &Attributes,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), Denied> {
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or(&attributes.name)
            .to_string();
        let labels = labels_of(object);
        let (policy, errors) = Policy::of_labels(labels, self.config.defaults);
        let invalid = || Denied {
            code: 422,
            reason: "Invalid",
            message: match errors.as_slice() {
                [one] => format!("Namespace \"{name}\" is invalid: {one}"),
                many => format!("Namespace \"{name}\" is invalid: [{}]", many.join(", ")),
            },
        };
        let old = match (attributes.operation, old) {
            (Operation::Create, _) => {
                if !errors.is_empty() {
                    return Err(invalid());
                }
                if self.exempt_namespace(&name) {
                    if let Some(warning) = self.exempt_namespace_warning(&name, &policy, labels) {
                        attributes.warnings.push(warning);
                    }
                }
                return Ok(());
            }
            (Operation::Update, Some(old)) => old,
            _ => return Ok(()),
        };
        let (old_policy, old_errors) = Policy::of_labels(labels_of(old), self.config.defaults);
        if !errors.is_empty() && errors != old_errors {
            return Err(invalid());
        }
        let relaxed = policy.enforce.version == old_policy.enforce.version
            && policy.enforce.level <= old_policy.enforce.level;
        if policy.enforce == old_policy.enforce
            || policy.enforce.level == Level::Privileged
            || relaxed
        {
            return Ok(());
        }
        if self.exempt_namespace(&name) {
            if let Some(warning) = self.exempt_namespace_warning(&name, &policy, labels) {
                attributes.warnings.push(warning);
            }
            return Ok(());
        }
        for warning in self.existing_pod_warnings(&name, policy.enforce).await {
            attributes.warnings.push(warning);
        }
        Ok(())
    }

    /// What the namespace's pods would violate under a new enforce level, as upstream's
    /// namespace dry run words it: a headline, then one line per distinct violation naming
    /// the first pod (by name) and how many others share it.
    async fn existing_pod_warnings(&self, namespace: &str, enforce: LevelVersion) -> Vec<String> {
        let pods = match self
            .reader
            .list_namespaced_objects("", "pods", namespace)
            .await
        {
            Ok(pods) => pods,
            Err(_) => {
                return vec![
                    "failed to list pods while checking new PodSecurity enforce level".into(),
                ]
            }
        };
        // One pod per controller first, then the rest of each controller's pods.
        let mut seen_controllers = HashSet::new();
        let (mut first, mut rest) = (Vec::new(), Vec::new());
        for pod in &pods {
            if self.exempt_runtime_class(&pod["spec"]) {
                continue;
            }
            let controller = pod["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|owner| owner["controller"] == true)
                .and_then(|owner| owner["uid"].as_str());
            match controller {
                Some(uid) if !seen_controllers.insert(uid) => rest.push(pod),
                _ => first.push(pod),
            }
        }
        first.extend(rest);
        let total = first.len();
        let checked = total.min(MAX_PODS_TO_CHECK);
        // violation → (first pod name, count), in the order first seen.
        let mut found: Vec<(String, String, usize)> = Vec::new();
        for pod in first.into_iter().take(checked) {
            let reasons = violations(enforce, &pod["spec"], &pod["metadata"]);
            if reasons.is_empty() {
                continue;
            }
            // Each violation is `<reason> (<detail>)`, and no reason holds " (".
            let reason = reasons
                .iter()
                .map(|r| r.split(" (").next().unwrap_or(r))
                .collect::<Vec<_>>()
                .join(", ");
            let pod_name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
            match found.iter_mut().find(|(r, _, _)| *r == reason) {
                Some((_, name, count)) => {
                    *count += 1;
                    if pod_name < *name {
                        *name = pod_name;
                    }
                }
                None => found.push((reason, pod_name, 1)),
            }
        }
        let mut warnings = Vec::new();
        if checked < total {
            warnings.push(format!(
                "new PodSecurity enforce level only checked against the first {checked} of {total} existing pods"
            ));
        }
        if !found.is_empty() {
            warnings.push(format!(
                "existing pods in namespace \"{namespace}\" violate the new PodSecurity enforce level \"{enforce}\""
            ));
        }
        let mut lines: Vec<String> = found
            .into_iter()
            .map(|(reason, name, count)| match count {
                1 => format!("{name}: {reason}"),
                2 => format!("{name} (and 1 other pod): {reason}"),
                n => format!("{name} (and {} other pods): {reason}", n - 1),
            })
            .collect();
        lines.sort();
        warnings.extend(lines);
        warnings
    }
}
