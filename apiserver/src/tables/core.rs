//! Core (v1) tables other than Pod, Event and the volume kinds: Namespace, Node, Service,
//! Endpoints, ConfigMap, Secret, ServiceAccount, ResourceQuota, ReplicationController and
//! PodTemplate. LimitRange has no upstream printer and falls back to the default table.

use std::collections::BTreeSet;

use jiff::Timestamp;
use serde_json::Value;

use crate::json::{array_at, int_at, len_at, name, opt_int_at, opt_str_at, str_at, value_at};

use super::format::{
    age, age_col, col, container_cells, format_labels, name_col, quantity, wide, CONTAINERS_DESC,
    IMAGES_DESC,
};
use super::{Column, Printer};

/// The table of Namespaces.
pub struct NamespaceTable;

impl Printer for NamespaceTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col("Status", "string", "The namespace's lifecycle phase."),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));
        vec![n, str_at(obj, &["status", "phase"]).into(), age(obj, now)]
    }
}

/// The table of Nodes.
pub struct NodeTable;

impl Printer for NodeTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Status",
                "string",
                "Whether the node is ready, and whether scheduling on it is disabled.",
            ),
            col(
                "Roles",
                "string",
                "The roles named by the node's node-role.kubernetes.io labels.",
            ),
            age_col(),
            col("Version", "string", "The kubelet version the node reports."),
            wide("Internal-IP", "string", NODE_ADDR_DESC),
            wide("External-IP", "string", NODE_ADDR_DESC),
            wide(
                "OS-Image",
                "string",
                "The OS image the node reports, from /etc/os-release.",
            ),
            wide(
                "Kernel-Version",
                "string",
                "The kernel version the node reports (uname -r).",
            ),
            wide(
                "Container-Runtime",
                "string",
                "The container runtime and version the node reports, e.g. containerd://1.7.0.",
            ),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));
        node_cells(obj, n, now)
    }
}

/// The table of Services.
pub struct ServiceTable;

impl Printer for ServiceTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Type",
                "string",
                "How the service is exposed: ClusterIP (the default), NodePort, LoadBalancer or \
                 ExternalName.",
            ),
            col(
                "Cluster-IP",
                "string",
                "The service's IP address, usually assigned at random; \"None\" for headless \
                 services.",
            ),
            col(
                "External-IP",
                "string",
                "IP addresses, besides the cluster IP, on which nodes also accept traffic for \
                 this service.",
            ),
            col("Port(s)", "string", "The ports this service exposes."),
            age_col(),
            wide(
                "Selector",
                "string",
                "Pods whose labels match this selector receive the service's traffic; when \
                 empty, endpoints are managed by something else.",
            ),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));
        vec![
            n,
            service_type(obj).into(),
            cluster_ip(obj).into(),
            external_ip(obj).into(),
            service_ports(obj).into(),
            age(obj, now),
            format_labels(obj, &["spec", "selector"]).into(),
        ]
    }
}

/// The table of Endpointss.
pub struct EndpointsTable;

impl Printer for EndpointsTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Endpoints",
                "string",
                "The endpoints: the union of every subset's addresses and ports.",
            ),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));
        vec![n, format_endpoints(obj).into(), age(obj, now)]
    }
}

/// The table of ConfigMaps.
pub struct ConfigMapTable;

impl Printer for ConfigMapTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Data",
                "string",
                "The number of configuration entries (data and binaryData).",
            ),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));

        let count = len_at(obj, &["data"]) + len_at(obj, &["binaryData"]);
        vec![n, count.into(), age(obj, now)]
    }
}

/// The table of Secrets.
pub struct SecretTable;

impl Printer for SecretTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Type",
                "string",
                "The secret's type, which helps programs handle its data.",
            ),
            col("Data", "string", "The number of secret data entries."),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));

        // The API defaults a missing type to Opaque.
        vec![
            n,
            opt_str_at(obj, &["type"]).unwrap_or("Opaque").into(),
            len_at(obj, &["data"]).into(),
            age(obj, now),
        ]
    }
}

/// The table of ServiceAccounts.
pub struct ServiceAccountTable;

impl Printer for ServiceAccountTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Secrets",
                "string",
                "Secrets in the same namespace that pods using this service account may use.",
            ),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));
        vec![n, len_at(obj, &["secrets"]).into(), age(obj, now)]
    }
}

/// The table of ResourceQuotas.
pub struct ResourceQuotaTable;

impl Printer for ResourceQuotaTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Request",
                "string",
                "Used/hard amounts of the quota's request-side resources (the least a container \
                 may consume).",
            ),
            col(
                "Limit",
                "string",
                "Used/hard amounts of the quota's limits (the most a container may use, whatever \
                 the contention on the node).",
            ),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));

        let (request, limit) = quota_columns(obj);
        vec![n, request.into(), limit.into(), age(obj, now)]
    }
}

/// The table of ReplicationControllers.
pub struct ReplicationControllerTable;

impl Printer for ReplicationControllerTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col("Desired", "integer", "The desired number of replicas."),
            col(
                "Current",
                "integer",
                "The most recently observed number of replicas.",
            ),
            col("Ready", "integer", "How many replicas are ready."),
            age_col(),
            wide("Containers", "string", CONTAINERS_DESC),
            wide("Images", "string", IMAGES_DESC),
            wide(
                "Selector",
                "string",
                "A label query over the pods this controller manages.",
            ),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));

        let (names, images) = container_cells(value_at(obj, &["spec", "template", "spec"]));
        vec![
            n,
            opt_int_at(obj, &["spec", "replicas"]).unwrap_or(1).into(),
            int_at(obj, &["status", "replicas"]).into(),
            int_at(obj, &["status", "readyReplicas"]).into(),
            age(obj, now),
            names,
            images,
            format_labels(obj, &["spec", "selector"]).into(),
        ]
    }
}

/// The table of PodTemplates.
pub struct PodTemplateTable;

impl Printer for PodTemplateTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col("Containers", "string", CONTAINERS_DESC),
            col("Images", "string", IMAGES_DESC),
            col("Pod Labels", "string", "The labels of the pod template."),
        ]
    }

    fn cells(&self, obj: &Value, _now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));

        let (names, images) = container_cells(value_at(obj, &["template", "spec"]));
        vec![
            n,
            names,
            images,
            format_labels(obj, &["template", "metadata", "labels"]).into(),
        ]
    }
}

const NODE_ADDR_DESC: &str =
    "Addresses the node can be reached at, as reported by the node or its cloud provider.";

fn or_unknown(x: &str) -> Value {
    if x.is_empty() { "<unknown>" } else { x }.into()
}

fn node_address(obj: &Value, kind: &str) -> Value {
    array_at(obj, &["status", "addresses"])
        .iter()
        .find(|a| str_at(a, &["type"]) == kind)
        .map(|a| str_at(a, &["address"]))
        .unwrap_or("<none>")
        .into()
}

fn node_cells(obj: &Value, n: Value, now: Timestamp) -> Vec<Value> {
    // Upstream keys conditions by type, so the last Ready condition wins.
    let ready = array_at(obj, &["status", "conditions"])
        .iter()
        .rev()
        .find(|c| str_at(c, &["type"]) == "Ready")
        .map(|c| {
            if str_at(c, &["status"]) == "True" {
                "Ready"
            } else {
                "NotReady"
            }
        });
    let mut status = vec![ready.unwrap_or("Unknown")];
    if value_at(obj, &["spec", "unschedulable"]).and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled");
    }
    let mut roles = BTreeSet::new();
    if let Some(Value::Object(labels)) = value_at(obj, &["metadata", "labels"]) {
        for (k, v) in labels {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                if !role.is_empty() {
                    roles.insert(role.to_string());
                }
            } else if k == "kubernetes.io/role" {
                if let Some(role) = v.as_str().filter(|r| !r.is_empty()) {
                    roles.insert(role.to_string());
                }
            }
        }
    }
    let roles = if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.into_iter().collect::<Vec<_>>().join(",")
    };
    let info = |field: &str| str_at(obj, &["status", "nodeInfo", field]);
    vec![
        n,
        status.join(",").into(),
        roles.into(),
        age(obj, now),
        info("kubeletVersion").into(),
        node_address(obj, "InternalIP"),
        node_address(obj, "ExternalIP"),
        or_unknown(info("osImage")),
        or_unknown(info("kernelVersion")),
        or_unknown(info("containerRuntimeVersion")),
    ]
}

/// The service type; the API defaults a missing one to ClusterIP.
fn service_type(obj: &Value) -> &str {
    opt_str_at(obj, &["spec", "type"]).unwrap_or("ClusterIP")
}

fn cluster_ip(obj: &Value) -> String {
    let first = array_at(obj, &["spec", "clusterIPs"])
        .first()
        .and_then(Value::as_str);
    let ip = first.unwrap_or_else(|| str_at(obj, &["spec", "clusterIP"]));
    if ip.is_empty() { "<none>" } else { ip }.to_string()
}

fn strings(list: &[Value]) -> Vec<String> {
    list.iter()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

fn external_ip(obj: &Value) -> String {
    let external = strings(array_at(obj, &["spec", "externalIPs"]));
    match service_type(obj) {
        "ClusterIP" | "NodePort" if external.is_empty() => "<none>".to_string(),
        "ClusterIP" | "NodePort" => external.join(","),
        "LoadBalancer" => {
            let lb = load_balancer_ingress(obj);
            match (lb.is_empty(), external.is_empty()) {
                (true, true) => "<pending>".to_string(),
                (_, true) => lb.join(","),
                _ => lb.into_iter().chain(external).collect::<Vec<_>>().join(","),
            }
        }
        "ExternalName" => str_at(obj, &["spec", "externalName"]).to_string(),
        _ => "<unknown>".to_string(),
    }
}

/// Sorted, de-duplicated load-balancer ingress points (IP, else hostname).
pub fn load_balancer_ingress(obj: &Value) -> Vec<String> {
    let set: BTreeSet<String> = array_at(obj, &["status", "loadBalancer", "ingress"])
        .iter()
        .map(|e| {
            if str_at(e, &["ip"]).is_empty() {
                str_at(e, &["hostname"])
            } else {
                str_at(e, &["ip"])
            }
        })
        .filter(|x| !x.is_empty())
        .map(str::to_string)
        .collect();
    set.into_iter().collect()
}

fn service_ports(obj: &Value) -> String {
    let ports: Vec<String> = array_at(obj, &["spec", "ports"])
        .iter()
        .map(|p| {
            let proto = opt_str_at(p, &["protocol"]).unwrap_or("TCP");
            match int_at(p, &["nodePort"]) {
                np if np > 0 => format!("{}:{np}/{proto}", int_at(p, &["port"])),
                _ => format!("{}/{proto}", int_at(p, &["port"])),
            }
        })
        .collect();
    if ports.is_empty() {
        "<none>".to_string()
    } else {
        ports.join(",")
    }
}

fn host_port(ip: &str, port: i64) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

fn format_endpoints(obj: &Value) -> String {
    let subsets = array_at(obj, &["subsets"]);
    if subsets.is_empty() {
        return "<none>".to_string();
    }
    let mut all = Vec::new();
    for ss in subsets {
        let ips: Vec<&str> = array_at(ss, &["addresses"])
            .iter()
            .map(|a| str_at(a, &["ip"]))
            .collect();
        let ports = array_at(ss, &["ports"]);
        if ports.is_empty() {
            all.extend(ips.iter().map(|ip| ip.to_string()));
        }
        for p in ports {
            all.extend(ips.iter().map(|ip| host_port(ip, int_at(p, &["port"]))));
        }
    }
    super::format::list_with_more(&all, 3, "")
}

fn quota_columns(obj: &Value) -> (String, String) {
    let (mut request, mut limit) = (Vec::new(), Vec::new());
    if let Some(Value::Object(hard)) = value_at(obj, &["status", "hard"]) {
        let mut names: Vec<&String> = hard.keys().collect();
        names.sort();
        for res in names {
            let hard_q = quantity(hard.get(res));
            let used_q = quantity(value_at(obj, &["status", "used", res.as_str()]));
            let text = format!("{res}: {used_q}/{hard_q}");
            let mut pieces = res.split('.');
            if pieces.next() == Some("limits") && pieces.next().is_some() {
                limit.push(text);
            } else {
                request.push(text);
            }
        }
    }
    (request.join(", "), limit.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2024-05-01T12:00:00Z".parse().unwrap()
    }

    fn row(printer: &dyn Printer, obj: Value) -> Vec<Value> {
        printer.cells(&obj, now())
    }

    const CREATED_3H: &str = "2024-05-01T09:00:00Z";

    #[test]
    fn namespaces_show_phase_and_age() {
        let obj = json!({"metadata": {"name": "default", "creationTimestamp": CREATED_3H},
                         "status": {"phase": "Active"}});
        assert_eq!(
            row(&NamespaceTable, obj),
            [json!("default"), json!("Active"), json!("3h")]
        );
    }

    #[test]
    fn a_cordoned_control_plane_node_shows_roles_and_scheduling_disabled() {
        let obj = json!({
            "metadata": {"name": "n1", "creationTimestamp": CREATED_3H, "labels": {
                "node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "etcd"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                "addresses": [{"type": "InternalIP", "address": "10.1.0.1"}],
                "nodeInfo": {"kubeletVersion": "v1.33.1", "osImage": "Debian",
                             "kernelVersion": "6.1", "containerRuntimeVersion": "containerd://2.0"}}
        });
        assert_eq!(
            row(&NodeTable, obj),
            [
                json!("n1"),
                json!("Ready,SchedulingDisabled"),
                json!("control-plane,etcd"),
                json!("3h"),
                json!("v1.33.1"),
                json!("10.1.0.1"),
                json!("<none>"),
                json!("Debian"),
                json!("6.1"),
                json!("containerd://2.0")
            ]
        );
    }

    #[test]
    fn a_bare_node_is_unknown_with_no_roles() {
        let r = row(
            &NodeTable,
            json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}),
        );
        assert_eq!(r[1], json!("NotReady"));
        let r = row(&NodeTable, json!({"metadata": {"name": "n"}}));
        assert_eq!(r[1], json!("Unknown"));
        assert_eq!(r[2], json!("<none>"));
        assert_eq!(r[7], json!("<unknown>"));
    }

    #[test]
    fn services_show_type_ips_ports_and_selector() {
        let obj = json!({"metadata": {"name": "web", "creationTimestamp": CREATED_3H},
            "spec": {"type": "NodePort", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
                "selector": {"app": "web"}}});
        assert_eq!(
            row(&ServiceTable, obj),
            [
                json!("web"),
                json!("NodePort"),
                json!("10.96.0.10"),
                json!("<none>"),
                json!("80:30080/TCP,53/UDP"),
                json!("3h"),
                json!("app=web")
            ]
        );
    }

    #[test]
    fn load_balancers_are_pending_until_they_get_an_ingress() {
        let pending = json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}});
        let r = row(&ServiceTable, pending);
        assert_eq!(r[3], json!("<pending>"));
        assert_eq!(r[2], json!("<none>"));
        assert_eq!(r[4], json!("80/TCP"));
        let ready = json!({"spec": {"type": "LoadBalancer", "externalIPs": ["9.9.9.9"]},
            "status": {"loadBalancer": {"ingress": [{"hostname": "lb.example"}, {"ip": "1.2.3.4"}]}}});
        assert_eq!(
            row(&ServiceTable, ready)[3],
            json!("1.2.3.4,lb.example,9.9.9.9")
        );
        let ext = json!({"spec": {"type": "ExternalName", "externalName": "db.example"}});
        let r = row(&ServiceTable, ext);
        assert_eq!(r[3], json!("db.example"));
        assert_eq!(r[4], json!("<none>"));
        assert_eq!(r[6], json!("<none>"));
    }

    #[test]
    fn endpoints_list_three_addresses_then_count_the_rest() {
        let obj = json!({"subsets": [
            {"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}], "ports": [{"port": 80}, {"port": 443}]},
            {"addresses": [{"ip": "fd00::1"}]}]});
        assert_eq!(
            row(&EndpointsTable, obj)[1],
            json!("10.0.0.1:80,10.0.0.2:80,10.0.0.1:443 + 2 more...")
        );
        let v6 = json!({"subsets": [{"addresses": [{"ip": "fd00::1"}], "ports": [{"port": 80}]}]});
        assert_eq!(row(&EndpointsTable, v6)[1], json!("[fd00::1]:80"));
        assert_eq!(row(&EndpointsTable, json!({}))[1], json!("<none>"));
    }

    #[test]
    fn config_maps_secrets_and_service_accounts_count_entries_as_numbers() {
        let cm = json!({"data": {"a": "1"}, "binaryData": {"b": "AA=="}});
        assert_eq!(row(&ConfigMapTable, cm)[1], json!(2));
        let secret = json!({"type": "Opaque", "data": {"a": "MQ=="}});
        let r = row(&SecretTable, secret);
        assert_eq!((r[1].clone(), r[2].clone()), (json!("Opaque"), json!(1)));
        assert_eq!(row(&ServiceAccountTable, json!({}))[1], json!(0));
        assert_eq!(row(&SecretTable, json!({}))[1], json!("Opaque"));
    }

    #[test]
    fn resource_quotas_split_requests_from_limits() {
        let obj = json!({"status": {
            "hard": {"pods": "10", "limits.cpu": "2", "requests.cpu": "1", "limits.memory": "1Gi"},
            "used": {"pods": "3", "limits.cpu": "500m"}}});
        let r = row(&ResourceQuotaTable, obj);
        assert_eq!(r[1], json!("pods: 3/10, requests.cpu: 0/1"));
        assert_eq!(r[2], json!("limits.cpu: 500m/2, limits.memory: 0/1Gi"));
    }

    #[test]
    fn replication_controllers_show_integer_counts_and_wide_columns() {
        let obj = json!({"metadata": {"name": "rc"},
            "spec": {"replicas": 3, "selector": {"app": "x"},
                "template": {"spec": {"containers": [{"name": "a", "image": "img:1"}, {"name": "b", "image": "img:2"}]}}},
            "status": {"replicas": 3, "readyReplicas": 2}});
        let r = row(&ReplicationControllerTable, obj);
        assert_eq!(r[1..4], [json!(3), json!(3), json!(2)]);
        assert_eq!(r[5..], [json!("a,b"), json!("img:1,img:2"), json!("app=x")]);
    }

    #[test]
    fn pod_templates_show_containers_images_and_labels() {
        let obj = json!({"metadata": {"name": "t"}, "template": {
            "metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}});
        assert_eq!(
            row(&PodTemplateTable, obj),
            [json!("t"), json!("c"), json!("nginx"), json!("app=x")]
        );
    }
}
