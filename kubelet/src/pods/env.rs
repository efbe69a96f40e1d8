//! A container's environment, resolved as upstream does: `envFrom` sources first (with their
//! prefix), then `env` entries, each of which may use `$(VAR)` of those before it; values from
//! ConfigMaps, Secrets, the pod's own fields and its resources. A missing required source is a
//! `CreateContainerConfigError` with upstream's message.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::Api;

use super::spec::{expand, pod_name, pod_namespace, pod_uid};
use rudder_facts::quantity::{milli_value, value};

/// Reads ConfigMaps and Secrets of one namespace, each at most once per sync.
pub struct Sources {
    configmaps: Api<ConfigMap>,
    secrets: Api<Secret>,
    cache_configmaps: HashMap<String, Option<BTreeMap<String, String>>>,
    cache_secrets: HashMap<String, Option<BTreeMap<String, Vec<u8>>>>,
}

/// Why a container's config could not be built (reason `CreateContainerConfigError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl Sources {
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            configmaps: Api::namespaced(client.clone(), namespace),
            secrets: Api::namespaced(client, namespace),
            cache_configmaps: HashMap::new(),
            cache_secrets: HashMap::new(),
        }
    }

    /// The data of ConfigMap `name` (binaryData decoded lossily), `None` when it does not exist.
    pub async fn configmap(
        &mut self,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, ConfigError> {
        if let Some(found) = self.cache_configmaps.get(name) {
            return Ok(found.clone());
        }
        let found = self
            .configmaps
            .get_opt(name)
            .await
            .map_err(|e| ConfigError(format!("reading configmap {name:?}: {e}")))?
            .map(|cm| {
                let mut data = cm.data.unwrap_or_default();
                for (key, bytes) in cm.binary_data.unwrap_or_default() {
                    data.insert(key, String::from_utf8_lossy(&bytes.0).into_owned());
                }
                data
            });
        self.cache_configmaps.insert(name.to_owned(), found.clone());
        Ok(found)
    }

    /// The decoded data of Secret `name`, `None` when it does not exist.
    pub async fn secret(
        &mut self,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, ConfigError> {
        Ok(self.secret_bytes(name).await?.map(|data| {
            data.into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
                .collect()
        }))
    }

    pub async fn secret_bytes(
        &mut self,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, ConfigError> {
        if let Some(found) = self.cache_secrets.get(name) {
            return Ok(found.clone());
        }
        let found = self
            .secrets
            .get_opt(name)
            .await
            .map_err(|e| ConfigError(format!("reading secret {name:?}: {e}")))?
            .map(|secret| {
                let mut data: BTreeMap<String, Vec<u8>> = secret
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                for (k, v) in secret.string_data.unwrap_or_default() {
                    data.insert(k, v.into_bytes());
                }
                data
            });
        self.cache_secrets.insert(name.to_owned(), found.clone());
        Ok(found)
    }
}

/// A field of the pod, as `fieldRef` and the downward API name them.
pub fn pod_field(pod: &Pod, path: &str, host_ip: &str) -> Option<String> {
    let meta = &pod.metadata;
    let status = pod.status.as_ref();
    let indexed = |prefix: &str, map: &Option<BTreeMap<String, String>>| {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(
            map.as_ref()
                .and_then(|m| m.get(key))
                .cloned()
                .unwrap_or_default(),
        )
    };
    let joined = |map: &Option<BTreeMap<String, String>>| {
        map.iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", serde_json::Value::String(v.clone())))
            .collect::<Vec<_>>()
            .join("\n")
    };
    match path {
        "metadata.name" => Some(pod_name(pod).to_owned()),
        "metadata.namespace" => Some(pod_namespace(pod).to_owned()),
        "metadata.uid" => Some(pod_uid(pod).to_owned()),
        "metadata.labels" => Some(joined(&meta.labels)),
        "metadata.annotations" => Some(joined(&meta.annotations)),
        "spec.nodeName" => pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        "spec.serviceAccountName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone()),
        "status.hostIP" => Some(host_ip.to_owned()),
        "status.hostIPs" => Some(host_ip.to_owned()),
        "status.podIP" => status.and_then(|s| s.pod_ip.clone()),
        "status.podIPs" => status.and_then(|s| {
            s.pod_ips.as_ref().map(|ips| {
                ips.iter()
                    .map(|ip| ip.ip.clone())
                    .collect::<Vec<_>>()
                    .join(",")
            })
        }),
        _ => indexed("metadata.labels['", &meta.labels)
            .or_else(|| indexed("metadata.annotations['", &meta.annotations)),
    }
}

/// A container resource (`limits.cpu`, `requests.memory` …) divided by `divisor` and rounded
/// up, as upstream's resourceFieldRef; limits fall back to the node's allocatable.
pub fn resource_field(
    container: &Container,
    resource: &str,
    divisor: Option<&str>,
    node_allocatable: &BTreeMap<String, String>,
) -> Option<String> {
    let (kind, name) = resource.split_once('.')?;
    let requirements = container.resources.as_ref();
    let list = match kind {
        "limits" => requirements.and_then(|r| r.limits.as_ref()),
        "requests" => requirements.and_then(|r| r.requests.as_ref()),
        _ => return None,
    };
    let quantity = list
        .and_then(|l| l.get(name))
        .map(|q| q.0.clone())
        .or_else(|| {
            (kind == "limits")
                .then(|| node_allocatable.get(name).cloned())
                .flatten()
        })
        .unwrap_or_else(|| "0".into());
    let divisor = divisor.filter(|d| !d.is_empty()).unwrap_or("1");
    if name == "cpu" {
        let milli = milli_value(&quantity);
        let per = milli_value(divisor).max(1);
        Some(
            ((milli + per - 1) / per)
                .max(if milli > 0 { 1 } else { 0 })
                .to_string(),
        )
    } else {
        let amount = value(&quantity);
        let per = value(divisor).max(1);
        Some(((amount + per - 1) / per).to_string())
    }
}

/// The container's environment in order, later names replacing earlier ones.
pub async fn resolve(
    pod: &Pod,
    container: &Container,
    sources: &mut Sources,
    host_ip: &str,
    node_allocatable: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut order: Vec<String> = Vec::new();
    let mut values: HashMap<String, String> = HashMap::new();
    let set = |name: String,
               value: String,
               order: &mut Vec<String>,
               values: &mut HashMap<String, String>| {
        if values.insert(name.clone(), value).is_none() {
            order.push(name);
        }
    };
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (data, name, optional, kind) = if let Some(cm) = &from.config_map_ref {
            (
                sources.configmap(&cm.name).await?,
                cm.name.clone(),
                cm.optional.unwrap_or(false),
                "configmap",
            )
        } else if let Some(secret) = &from.secret_ref {
            (
                sources.secret(&secret.name).await?,
                secret.name.clone(),
                secret.optional.unwrap_or(false),
                "secret",
            )
        } else {
            continue;
        };
        match data {
            Some(data) => {
                for (key, value) in data {
                    set(format!("{prefix}{key}"), value, &mut order, &mut values);
                }
            }
            None if optional => {}
            None => return Err(ConfigError(format!("{kind} \"{name}\" not found"))),
        }
    }
    for var in container.env.iter().flatten() {
        let resolved = match &var.value_from {
            None => Some(expand(var.value.as_deref().unwrap_or(""), &values)),
            Some(from) => {
                if let Some(field) = &from.field_ref {
                    pod_field(pod, &field.field_path, host_ip)
                } else if let Some(resource) = &from.resource_field_ref {
                    let target = match resource.container_name.as_deref() {
                        Some(name) if !name.is_empty() => pod
                            .spec
                            .as_ref()
                            .and_then(|s| s.containers.iter().find(|c| c.name == name))
                            .unwrap_or(container),
                        _ => container,
                    };
                    resource_field(
                        target,
                        &resource.resource,
                        resource.divisor.as_ref().map(|d| d.0.as_str()),
                        node_allocatable,
                    )
                } else if let Some(key) = &from.config_map_key_ref {
                    let optional = key.optional.unwrap_or(false);
                    match sources.configmap(&key.name).await? {
                        Some(data) => match data.get(&key.key) {
                            Some(value) => Some(value.clone()),
                            None if optional => None,
                            None => {
                                return Err(ConfigError(format!(
                                    "couldn't find key {} in ConfigMap {}/{}",
                                    key.key,
                                    pod_namespace(pod),
                                    key.name
                                )))
                            }
                        },
                        None if optional => None,
                        None => {
                            return Err(ConfigError(format!(
                                "configmap \"{}\" not found",
                                key.name
                            )))
                        }
                    }
                } else if let Some(key) = &from.secret_key_ref {
                    let optional = key.optional.unwrap_or(false);
                    match sources.secret(&key.name).await? {
                        Some(data) => match data.get(&key.key) {
                            Some(value) => Some(value.clone()),
                            None if optional => None,
                            None => {
                                return Err(ConfigError(format!(
                                    "couldn't find key {} in Secret {}/{}",
                                    key.key,
                                    pod_namespace(pod),
                                    key.name
                                )))
                            }
                        },
                        None if optional => None,
                        None => {
                            return Err(ConfigError(format!("secret \"{}\" not found", key.name)))
                        }
                    }
                } else {
                    None
                }
            }
        };
        if let Some(value) = resolved {
            set(var.name.clone(), value, &mut order, &mut values);
        }
    }
    Ok(order
        .into_iter()
        .filter_map(|name| values.remove(&name).map(|value| (name, value)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[test]
    fn resource_fields_divide_and_round_up() {
        let container = Container {
            resources: Some(ResourceRequirements {
                limits: Some(
                    [
                        ("cpu".to_string(), Quantity("250m".into())),
                        ("memory".to_string(), Quantity("64Mi".into())),
                    ]
                    .into_iter()
                    .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        let node = BTreeMap::new();
        assert_eq!(
            resource_field(&container, "limits.cpu", None, &node).as_deref(),
            Some("1")
        );
        assert_eq!(
            resource_field(&container, "limits.cpu", Some("1m"), &node).as_deref(),
            Some("250")
        );
        assert_eq!(
            resource_field(&container, "limits.memory", Some("1Mi"), &node).as_deref(),
            Some("64")
        );
        assert_eq!(
            resource_field(&container, "requests.memory", None, &node).as_deref(),
            Some("0")
        );
    }

    #[test]
    fn pod_fields_by_path() {
        let pod = Pod {
            metadata: kube::api::ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                labels: Some([("app".to_string(), "x".to_string())].into_iter().collect()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(pod_field(&pod, "metadata.name", "").as_deref(), Some("web"));
        assert_eq!(
            pod_field(&pod, "metadata.labels['app']", "").as_deref(),
            Some("x")
        );
        assert_eq!(
            pod_field(&pod, "metadata.labels", "").as_deref(),
            Some("app=\"x\"")
        );
        assert_eq!(
            pod_field(&pod, "status.hostIP", "10.0.0.1").as_deref(),
            Some("10.0.0.1")
        );
    }
}
