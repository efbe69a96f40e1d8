//! Where a Service's port is served: a ready endpoint of its EndpointSlices, read from the
//! watch cache (as upstream's webhook and aggregator clients read their informers). Admission
//! webhooks and aggregated APIs behind a Service are called this way — at an endpoint's
//! address, as upstream's `--enable-aggregator-routing` does, since an apiserver host need
//! not route Service IPs.

use serde_json::Value;

use crate::catalog;
use crate::registry::Registry;

/// Why a Service's port has no endpoint to call, with upstream's availability reasons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unreachable {
    /// `ServiceNotFound`.
    ServiceNotFound,
    /// `ServicePortError`: the Service has no such port.
    PortNotFound,
    /// `MissingEndpoints`: no ready address for the port (its name, possibly empty).
    NoEndpoints { port_name: String },
}

impl Unreachable {
    /// The reason upstream's APIService availability reports.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ServiceNotFound => "ServiceNotFound",
            Self::PortNotFound => "ServicePortError",
            Self::NoEndpoints { .. } => "MissingEndpoints",
        }
    }

    /// upstream's message for the Service `namespace/name` and `port`.
    pub fn message(&self, namespace: &str, name: &str, port: i64) -> String {
        match self {
            Self::ServiceNotFound => format!("service/{name} in \"{namespace}\" is not present"),
            Self::PortNotFound => {
                format!("service/{name} in \"{namespace}\" is not listening on port {port}")
            }
            Self::NoEndpoints { port_name } => format!(
                "endpoints for service/{name} in \"{namespace}\" have no addresses with port name \"{port_name}\""
            ),
        }
    }
}

/// `host:port` of a ready endpoint serving `port` of the Service `namespace/name`.
pub async fn resolve(
    reader: &Registry,
    namespace: &str,
    name: &str,
    port: i64,
) -> Result<String, Unreachable> {
    let services = catalog::find("", "v1", "services").ok_or(Unreachable::ServiceNotFound)?;
    let service = reader
        .get_at(services, Some(namespace), name, Some("0"))
        .await
        .map_err(|_| Unreachable::ServiceNotFound)?;
    let service_port = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_i64() == Some(port))
        .ok_or(Unreachable::PortNotFound)?;
    let port_name = service_port["name"].as_str().unwrap_or("").to_string();
    let no_endpoints = || Unreachable::NoEndpoints {
        port_name: port_name.clone(),
    };
    let slices =
        catalog::find("discovery.k8s.io", "v1", "endpointslices").ok_or_else(no_endpoints)?;
    let listed = reader
        .list_cached(
            slices,
            Some(namespace),
            &format!("kubernetes.io/service-name={name}"),
            "",
        )
        .await
        .map_err(|_| no_endpoints())?;
    listed
        .iter()
        .find_map(|slice| ready_address(slice, &port_name))
        .ok_or_else(no_endpoints)
}

/// The first ready address of `slice` with the port named `port_name`, as `host:port`.
fn ready_address(slice: &Value, port_name: &str) -> Option<String> {
    let target_port = slice["ports"]
        .as_array()?
        .iter()
        .find(|p| p["name"].as_str().unwrap_or("") == port_name)?["port"]
        .as_i64()?;
    slice["endpoints"]
        .as_array()?
        .iter()
        .filter(|endpoint| endpoint["conditions"]["ready"] != false)
        .find_map(|endpoint| endpoint["addresses"][0].as_str())
        .map(|address| {
            if address.contains(':') {
                format!("[{address}]:{target_port}")
            } else {
                format!("{address}:{target_port}")
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_ready_address_of_the_named_port_is_picked() {
        let slice = json!({"ports": [{"name": "metrics", "port": 9100}, {"name": "https", "port": 8443}],
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": false}},
                          {"addresses": ["10.0.0.2"], "conditions": {"ready": true}},
                          {"addresses": ["fd00::3"]}]});
        assert_eq!(
            ready_address(&slice, "https").as_deref(),
            Some("10.0.0.2:8443")
        );
        assert_eq!(ready_address(&slice, "other"), None);
        let v6 = json!({"ports": [{"port": 443}], "endpoints": [{"addresses": ["fd00::3"]}]});
        assert_eq!(ready_address(&v6, "").as_deref(), Some("[fd00::3]:443"));
        assert_eq!(
            Unreachable::NoEndpoints {
                port_name: "https".into()
            }
            .message("wardle", "api", 443),
            "endpoints for service/api in \"wardle\" have no addresses with port name \"https\""
        );
    }
}
