//! PodSecurity: the Pod Security Standards by namespace label, as upstream's admission
//! plugin applies them. A namespace's `pod-security.kubernetes.io/enforce`, `warn` and
//! `audit` labels name a level (`privileged`, `baseline`, `restricted`), each with an optional
//! `-version` (`latest`, or `v1.N` to pin the rules of that release); namespaces without them
//! get the configured defaults ([`policy`]). A pod that violates the enforce level is refused —
//!
//! ```text
//! pods "web" is forbidden: violates PodSecurity "restricted:latest": privileged (container
//! "app" must not set securityContext.privileged=true), allowPrivilegeEscalation != false (…)
//! ```
//!
//! — one that violates the warn level gets `would violate PodSecurity "…": …` as a warning,
//! and the audit level's violations go into the request's audit event
//! (`pod-security.kubernetes.io/audit-violations`, beside `enforce-policy` and `exempt`).
//! Workloads (their pod templates) are only warned about and audited, never refused: their
//! pods are. Pod updates are judged only when an image changes or a container is added, as
//! upstream's.
//!
//! Namespaces are checked too: labels that do not parse refuse a create (and an update that
//! changes them) with upstream's field errors, and tightening the enforce level warns which of
//! the namespace's pods would now be refused ([`namespace`]). Exempt usernames, namespaces and
//! RuntimeClasses ([`PodSecurityConfig`]) skip it all. The checks themselves are [`checks`].

mod checks;
mod namespace;
mod policy;

use async_trait::async_trait;
use serde_json::Value;

use crate::{audit_annotations, Attributes, Denied, ObjectReader, Operation, Validating};

/// The audit annotation naming why a request was exempt (`namespace`, `user`, `runtimeClass`).
const EXEMPT_ANNOTATION: &str = "pod-security.kubernetes.io/exempt";

pub use checks::violations;
pub use policy::{Level, LevelVersion, PodSecurityConfig, Policy};

/// Pod subresources the plugin leaves alone (any other carries a pod to judge).
const IGNORED_POD_SUBRESOURCES: &[&str] = &[
    "exec",
    "attach",
    "binding",
    "eviction",
    "log",
    "portforward",
    "proxy",
    "status",
];

/// The pod spec and metadata of an object the plugin judges: a pod's own, or a workload's
/// template's.
fn pod_of<'a>(attributes: &Attributes, object: &'a Value) -> Option<(&'a Value, &'a Value)> {
    let template = match (attributes.group.as_str(), attributes.resource.as_str()) {
        ("", "pods") => object,
        ("", "podtemplates") => &object["template"],
        ("", "replicationcontrollers")
        | ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets")
        | ("batch", "jobs") => &object["spec"]["template"],
        ("batch", "cronjobs") => &object["spec"]["jobTemplate"]["spec"]["template"],
        _ => return None,
    };
    let spec = &template["spec"];
    spec.is_object().then_some((spec, &template["metadata"]))
}

/// An object's labels, as [`Policy::of_labels`] reads them.
fn labels_of(object: &Value) -> &Value {
    &object["metadata"]["labels"]
}

/// Whether a pod update changes what the standards look at: upstream judges an update only
/// when a container is added or removed or an image changes.
fn significant_update(spec: &Value, old: &Value) -> bool {
    let images = |spec: &Value, field: &str| -> Vec<(String, String)> {
        spec[field]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or("").to_string(),
                    c["image"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    };
    for field in ["containers", "initContainers"] {
        let (new, old) = (images(spec, field), images(old, field));
        if new.len() != old.len() || new.iter().zip(&old).any(|(n, o)| n.1 != o.1) {
            return true;
        }
    }
    let old_ephemeral = images(old, "ephemeralContainers");
    images(spec, "ephemeralContainers")
        .iter()
        .any(|(name, image)| {
            old_ephemeral
                .iter()
                .find(|(old_name, _)| old_name == name)
                .is_none_or(|(_, old_image)| old_image != image)
        })
}

/// `reason (detail), reason (detail)`, as upstream joins a pod's violations.
fn joined(found: &[String]) -> String {
    found.join(", ")
}

/// The plugin; reads namespaces (and, on an enforce change, their pods) through `reader`.
pub struct PodSecurity<R> {
    reader: R,
    config: PodSecurityConfig,
}

impl<R> PodSecurity<R> {
    pub fn new(reader: R) -> Self {
        Self::with_config(reader, PodSecurityConfig::default())
    }

    pub fn with_config(reader: R, config: PodSecurityConfig) -> Self {
        Self { reader, config }
    }

    fn exempt_namespace(&self, namespace: &str) -> bool {
        !namespace.is_empty() && self.config.exempt_namespaces.iter().any(|n| n == namespace)
    }

    fn exempt_user(&self, user: &str) -> bool {
        !user.is_empty() && self.config.exempt_usernames.iter().any(|u| u == user)
    }

    fn exempt_runtime_class(&self, spec: &Value) -> bool {
        spec["runtimeClassName"].as_str().is_some_and(|class| {
            !class.is_empty()
                && self
                    .config
                    .exempt_runtime_classes
                    .iter()
                    .any(|c| c == class)
        })
    }
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
        if !matches!(attributes.operation, Operation::Create | Operation::Update) {
            return Ok(());
        }
        let Some(object) = object else {
            return Ok(());
        };
        let core = attributes.group.is_empty();
        if core && attributes.resource == "namespaces" {
            if attributes.subresource.is_some() {
                return Ok(());
            }
            return self.validate_namespace(attributes, object, old).await;
        }
        let is_pod = core && attributes.resource == "pods";
        match attributes.subresource.as_deref() {
            None => {}
            Some(sub) if is_pod && !IGNORED_POD_SUBRESOURCES.contains(&sub) => {}
            Some(_) => return Ok(()),
        }
        let Some((spec, metadata)) = pod_of(attributes, object) else {
            return Ok(());
        };
        let Some(namespace) = attributes.namespace.as_deref() else {
            return Ok(());
        };
        if self.exempt_namespace(namespace) {
            audit_annotations::record(EXEMPT_ANNOTATION, "namespace");
            return Ok(());
        }
        if self.exempt_user(&attributes.user) {
            audit_annotations::record(EXEMPT_ANNOTATION, "user");
            return Ok(());
        }
        let Some(namespace_object) = self
            .reader
            .get_cluster_object("", "namespaces", namespace)
            .await?
        else {
            if is_pod {
                return Err(Denied {
                    code: 500,
                    reason: "InternalError",
                    message: format!(
                        "Internal error occurred: failed to lookup namespace \"{namespace}\""
                    ),
                });
            }
            return Ok(());
        };
        let (policy, errors) =
            Policy::of_labels(labels_of(&namespace_object), self.config.defaults);
        let judged_by_enforce = is_pod;
        let quiet = if judged_by_enforce {
            policy.fully_privileged()
        } else {
            policy.warn.level == Level::Privileged && policy.audit.level == Level::Privileged
        };
        if errors.is_empty() && quiet {
            return Ok(());
        }
        if is_pod && attributes.operation == Operation::Update {
            if let Some((old_spec, _)) = old.and_then(|old| pod_of(attributes, old)) {
                if !significant_update(spec, old_spec) {
                    return Ok(());
                }
            }
        }
        if self.exempt_runtime_class(spec) {
            audit_annotations::record(EXEMPT_ANNOTATION, "runtimeClass");
            return Ok(());
        }
        if !errors.is_empty() {
            audit_annotations::record(
                "pod-security.kubernetes.io/error",
                format!("Failed to parse policy: {}", errors.join(", ")),
            );
        }
        let mut cache: Vec<(LevelVersion, Vec<String>)> = Vec::new();
        let mut evaluate = |of: LevelVersion| -> Vec<String> {
            if let Some((_, found)) = cache.iter().find(|(at, _)| *at == of) {
                return found.clone();
            }
            let found = violations(of, spec, metadata);
            cache.push((of, found.clone()));
            found
        };
        if judged_by_enforce {
            audit_annotations::record(
                "pod-security.kubernetes.io/enforce-policy",
                policy.enforce.to_string(),
            );
            let enforced = evaluate(policy.enforce);
            if !enforced.is_empty() {
                return Err(Denied::forbidden(format!(
                    "pods \"{}\" is forbidden: violates PodSecurity \"{}\": {}",
                    attributes.name,
                    policy.enforce,
                    joined(&enforced)
                )));
            }
        }
        let audited = evaluate(policy.audit);
        if !audited.is_empty() {
            audit_annotations::record(
                "pod-security.kubernetes.io/audit-violations",
                format!(
                    "would violate PodSecurity \"{}\": {}",
                    policy.audit,
                    joined(&audited)
                ),
            );
        }
        let warned = evaluate(policy.warn);
        if !warned.is_empty() {
            attributes.warnings.push(format!(
                "would violate PodSecurity \"{}\": {}",
                policy.warn,
                joined(&warned)
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
