//! Facts about pods: QoS class, readiness, whether a pod still counts.

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A pod's quality-of-service class, as the kubelet and the scheduler compute it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QosClass {
    /// Every container has CPU and memory limits, and requests equal to them.
    Guaranteed,
    /// Some container has a request or a limit, short of `Guaranteed`.
    Burstable,
    /// No container has any CPU or memory request or limit.
    BestEffort,
}

impl QosClass {
    /// The name the API uses in `status.qosClass`.
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

const COMPUTE: [&str; 2] = ["cpu", "memory"];

fn is_zero(quantity: &Quantity) -> bool {
    let text = quantity.0.trim();
    text.trim_start_matches(['+', '-'])
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .all(|c| c == '0' || c == '.')
}

/// The QoS class of `pod` (init containers count like containers, as upstream).
pub fn qos_class(pod: &Pod) -> QosClass {
    let Some(spec) = pod.spec.as_ref() else {
        return QosClass::BestEffort;
    };
    let containers: Vec<&Container> = spec
        .containers
        .iter()
        .chain(spec.init_containers.as_deref().unwrap_or_default())
        .collect();
    let mut any_set = false;
    let mut guaranteed = true;
    for container in containers {
        let resources = container.resources.as_ref();
        let requests = resources.and_then(|r| r.requests.as_ref());
        let limits = resources.and_then(|r| r.limits.as_ref());
        for name in COMPUTE {
            let request = requests.and_then(|r| r.get(name)).filter(|q| !is_zero(q));
            let limit = limits.and_then(|l| l.get(name)).filter(|q| !is_zero(q));
            if request.is_some() || limit.is_some() {
                any_set = true;
            }
            // Without an explicit request, the API server defaults it to the limit.
            match (request, limit) {
                (_, None) => guaranteed = false,
                (Some(request), Some(limit)) if request != limit => guaranteed = false,
                _ => {}
            }
        }
    }
    match (any_set, guaranteed) {
        (false, _) => QosClass::BestEffort,
        (true, true) => QosClass::Guaranteed,
        (true, false) => QosClass::Burstable,
    }
}

/// Whether the pod's `Ready` condition is `True`.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True")
        })
}

/// Whether the pod has finished for good (`Succeeded` or `Failed`).
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status
            .as_ref()
            .and_then(|status| status.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether the pod still counts toward its controller's replicas: not terminal and not being
/// deleted.
pub fn is_active(pod: &Pod) -> bool {
    !is_terminal(pod) && pod.metadata.deletion_timestamp.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus, ResourceRequirements};
    use std::collections::BTreeMap;

    fn resources(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
        Some(
            pairs
                .iter()
                .map(|(name, value)| (name.to_string(), Quantity(value.to_string())))
                .collect(),
        )
    }

    fn pod(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: resources(requests),
                        limits: resources(limits),
                        ..ResourceRequirements::default()
                    }),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn qos_follows_requests_and_limits() {
        assert_eq!(qos_class(&pod(&[], &[])), QosClass::BestEffort);
        assert_eq!(qos_class(&pod(&[("cpu", "0")], &[])), QosClass::BestEffort);
        assert_eq!(
            qos_class(&pod(&[("cpu", "100m")], &[])),
            QosClass::Burstable
        );
        let both = [("cpu", "1"), ("memory", "1Gi")];
        assert_eq!(qos_class(&pod(&both, &both)), QosClass::Guaranteed);
        assert_eq!(qos_class(&pod(&[], &both)), QosClass::Guaranteed);
        assert_eq!(
            qos_class(&pod(&[("cpu", "500m"), ("memory", "1Gi")], &both)),
            QosClass::Burstable
        );
        assert_eq!(qos_class(&pod(&[], &[("cpu", "1")])), QosClass::Burstable);
    }

    #[test]
    fn readiness_and_activity() {
        let ready = Pod {
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        };
        assert!(is_ready(&ready) && is_active(&ready));
        let done = Pod {
            status: Some(PodStatus {
                phase: Some("Succeeded".into()),
                ..PodStatus::default()
            }),
            ..Pod::default()
        };
        assert!(!is_ready(&done) && is_terminal(&done) && !is_active(&done));
    }
}
