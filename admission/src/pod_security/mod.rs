//! PodSecurity: the Pod Security Standards by namespace label, as upstream's admission
//! plugin applies them. A namespace's `pod-security.kubernetes.io/enforce`, `warn` and
//! `audit` labels name a level (`privileged`, `baseline`, `restricted`; each with an optional
//! `-version`, `latest` by default, and only the latest rules are known here); a pod that
//! violates the enforce level is refused —
//!
//! ```text
//! pods "web" is forbidden: violates PodSecurity "restricted:latest": privileged (container
//! "app" must not set securityContext.privileged=true), allowPrivilegeEscalation != false (…)
//! ```
//!
//! — one that violates the warn level gets `would violate PodSecurity "…": …` as a warning,
//! and a workload whose pod template violates either level gets that warning (workloads are
//! never refused: their pods are). Updates are judged only when the pod's spec changes.
//! The checks themselves are [`checks`].

mod checks;

use async_trait::async_trait;
use serde_json::Value;

use crate::{Attributes, Denied, ObjectReader, Operation, Validating};

pub use checks::{violations, Level};

const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";

/// The levels a namespace's labels ask for, per mode (a malformed level is `restricted`, as
/// upstream evaluates it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Modes {
    pub enforce: Level,
    pub warn: Level,
    pub audit: Level,
}

impl Modes {
    /// The modes of a Namespace object.
    pub fn of_namespace(namespace: &Value) -> Self {
        let labels = &namespace["metadata"]["labels"];
        let level = |mode: &str| {
            labels[format!("{LABEL_PREFIX}{mode}")]
                .as_str()
                .map_or(Level::Privileged, Level::parse)
        };
        Self {
            enforce: level("enforce"),
            warn: level("warn"),
            audit: level("audit"),
        }
    }
}

/// The pod spec of an object the plugin judges: a pod's own, or a workload's template's.
fn pod_spec<'a>(attributes: &Attributes, object: &'a Value) -> Option<&'a Value> {
    if !attributes.group.is_empty() && !matches!(attributes.group.as_str(), "apps" | "batch") {
        return None;
    }
    match (attributes.group.as_str(), attributes.resource.as_str()) {
        ("", "pods") => Some(&object["spec"]),
        ("", "podtemplates") => Some(&object["template"]["spec"]),
        ("", "replicationcontrollers")
        | ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets")
        | ("batch", "jobs") => Some(&object["spec"]["template"]["spec"]),
        ("batch", "cronjobs") => Some(&object["spec"]["jobTemplate"]["spec"]["template"]["spec"]),
        _ => None,
    }
    .filter(|spec| spec.is_object())
}

/// The plugin; reads namespaces through `reader`.
pub struct PodSecurity<R> {
    reader: R,
}

impl<R> PodSecurity<R> {
    pub fn new(reader: R) -> Self {
        Self { reader }
    }
}

fn verdict(level: Level, found: &[String]) -> String {
    format!("\"{}:latest\": {}", level.as_str(), found.join(", "))
}

#[async_trait]
impl<R: ObjectReader> Validating for PodSecurity<R> {
    fn name(&self) -> &'static str {
        "PodSecurity"
    }

    async fn validate(
        &self,
        attributes: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), Denied> {
        if !matches!(attributes.operation, Operation::Create | Operation::Update)
            || attributes.subresource.is_some()
        {
            return Ok(());
        }
        let Some(object) = object else {
            return Ok(());
        };
        let Some(spec) = pod_spec(attributes, object) else {
            return Ok(());
        };
        if let Some(old_spec) = old.and_then(|old| pod_spec(attributes, old)) {
            if old_spec == spec {
                return Ok(());
            }
        }
        let Some(namespace) = attributes.namespace.as_deref() else {
            return Ok(());
        };
        let Some(namespace) = self
            .reader
            .get_cluster_object("", "namespaces", namespace)
            .await?
        else {
            return Ok(());
        };
        let modes = Modes::of_namespace(&namespace);
        let is_pod = attributes.group.is_empty() && attributes.resource == "pods";
        let enforced = violations(modes.enforce, spec, &object["metadata"]);
        if !enforced.is_empty() {
            if is_pod {
                return Err(Denied::forbidden(format!(
                    "pods \"{}\" is forbidden: violates PodSecurity {}",
                    attributes.name,
                    verdict(modes.enforce, &enforced)
                )));
            }
            attributes.warnings.push(format!(
                "would violate PodSecurity {}",
                verdict(modes.enforce, &enforced)
            ));
            return Ok(());
        }
        if modes.warn != modes.enforce {
            let warned = violations(modes.warn, spec, &object["metadata"]);
            if !warned.is_empty() {
                attributes.warnings.push(format!(
                    "would violate PodSecurity {}",
                    verdict(modes.warn, &warned)
                ));
            }
        }
        if modes.audit != Level::Privileged {
            let audited = violations(modes.audit, spec, &object["metadata"]);
            if !audited.is_empty() {
                tracing::info!(
                    namespace = attributes.namespace.as_deref().unwrap_or(""),
                    name = %attributes.name,
                    violations = %verdict(modes.audit, &audited),
                    "pod-security audit"
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
