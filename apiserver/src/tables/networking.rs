//! networking.k8s.io tables (Ingress, IngressClass, NetworkPolicy) and the
//! discovery.k8s.io EndpointSlice table.

use jiff::Timestamp;
use serde_json::Value;

use crate::json::{array_at, name, opt_int_at, opt_str_at, str_at, value_at};

use super::format::{age, age_col, col, format_selector, list_with_more, name_col};
use super::{Column, Printer};

/// The table of Ingresss.
pub struct IngressTable;

impl Printer for IngressTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Class",
                "string",
                "The IngressClass that configures this ingress.",
            ),
            col(
                "Hosts",
                "string",
                "The hosts incoming requests are matched against.",
            ),
            col("Address", "string", "The load balancer's ingress points."),
            col(
                "Ports",
                "string",
                "The ports served: 80, plus 443 when TLS is configured.",
            ),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));

        let tls = !array_at(obj, &["spec", "tls"]).is_empty();
        vec![
            n,
            opt_str_at(obj, &["spec", "ingressClassName"])
                .unwrap_or("<none>")
                .into(),
            ingress_hosts(array_at(obj, &["spec", "rules"])).into(),
            super::core::load_balancer_ingress(obj).join(",").into(),
            if tls { "80, 443" } else { "80" }.into(),
            age(obj, now),
        ]
    }
}

/// The table of IngressClasss.
pub struct IngressClassTable;

impl Printer for IngressClassTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Controller",
                "string",
                "The controller that implements this class.",
            ),
            col(
                "Parameters",
                "string",
                "The resource that holds extra parameters for the controller.",
            ),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));

        let params = match value_at(obj, &["spec", "parameters"]).filter(|p| p.is_object()) {
            None => "<none>".to_string(),
            Some(p) => {
                let group = opt_str_at(p, &["apiGroup"])
                    .map(|g| format!(".{g}"))
                    .unwrap_or_default();
                format!("{}{group}/{}", str_at(p, &["kind"]), str_at(p, &["name"]))
            }
        };
        vec![
            n,
            str_at(obj, &["spec", "controller"]).into(),
            params.into(),
            age(obj, now),
        ]
    }
}

/// The table of NetworkPolicys.
pub struct NetworkPolicyTable;

impl Printer for NetworkPolicyTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Pod-Selector",
                "string",
                "The pods this policy applies to; an empty selector means every pod in the \
                 namespace.",
            ),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));

        vec![
            n,
            format_selector(obj, &["spec", "podSelector"]).into(),
            age(obj, now),
        ]
    }
}

/// The table of EndpointSlices.
pub struct EndpointSliceTable;

impl Printer for EndpointSliceTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "AddressType",
                "string",
                "The kind of address the slice carries: IPv4, IPv6 or FQDN.",
            ),
            col(
                "Ports",
                "string",
                "The network ports each endpoint in the slice exposes.",
            ),
            col(
                "Endpoints",
                "string",
                "The addresses of the endpoints in the slice.",
            ),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));

        let ports: Vec<String> = array_at(obj, &["ports"])
            .iter()
            .map(
                |p| match (opt_int_at(p, &["port"]), opt_str_at(p, &["name"])) {
                    (Some(num), _) => num.to_string(),
                    (None, Some(port_name)) => port_name.to_string(),
                    (None, None) => "*".to_string(),
                },
            )
            .collect();
        let addresses: Vec<String> = array_at(obj, &["endpoints"])
            .iter()
            .flat_map(|e| array_at(e, &["addresses"]))
            .map(|a| a.as_str().unwrap_or("").to_string())
            .collect();
        vec![
            n,
            str_at(obj, &["addressType"]).into(),
            list_with_more(&ports, 3, "<unset>").into(),
            list_with_more(&addresses, 3, "<unset>").into(),
            age(obj, now),
        ]
    }
}

/// Up to three rule hosts; "+ N more..." counts every rule past the third; "*" when none.
fn ingress_hosts(rules: &[Value]) -> String {
    const MAX: usize = 3;
    let mut hosts = Vec::new();
    let mut more = false;
    for rule in rules {
        if hosts.len() == MAX {
            more = true;
        }
        let host = str_at(rule, &["host"]);
        if !more && !host.is_empty() {
            hosts.push(host);
        }
    }
    if hosts.is_empty() {
        return "*".to_string();
    }
    let shown = hosts.join(",");
    if more {
        format!("{shown} + {} more...", rules.len() - MAX)
    } else {
        shown
    }
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

    #[test]
    fn ingresses_show_class_hosts_address_and_ports() {
        let obj = json!({"metadata": {"name": "web", "creationTimestamp": "2024-04-29T12:00:00Z"},
            "spec": {"ingressClassName": "nginx", "tls": [{"hosts": ["a.example"]}],
                "rules": [{"host": "a.example"}, {"host": "b.example"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}});
        assert_eq!(
            row(&IngressTable, obj),
            [
                json!("web"),
                json!("nginx"),
                json!("a.example,b.example"),
                json!("192.0.2.1"),
                json!("80, 443"),
                json!("2d")
            ]
        );
    }

    #[test]
    fn an_ingress_without_class_rules_or_address() {
        let r = row(&IngressTable, json!({"spec": {"rules": [{}]}}));
        assert_eq!(
            r[1..5],
            [json!("<none>"), json!("*"), json!(""), json!("80")]
        );
    }

    #[test]
    fn many_ingress_hosts_are_cut_at_three() {
        let rules: Vec<Value> = ["a", "b", "", "c", "d"]
            .iter()
            .map(|h| json!({"host": h}))
            .collect();
        assert_eq!(ingress_hosts(&rules), "a,b,c + 2 more...");
    }

    #[test]
    fn ingress_classes_show_controller_and_parameters() {
        let obj = json!({"spec": {"controller": "k8s.io/ingress-nginx",
            "parameters": {"apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "p"}}});
        let r = row(&IngressClassTable, obj);
        assert_eq!(
            r[1..3],
            [
                json!("k8s.io/ingress-nginx"),
                json!("IngressParameters.k8s.example.com/p")
            ]
        );
        let bare = row(&IngressClassTable, json!({}));
        assert_eq!(bare[2], json!("<none>"));
    }

    #[test]
    fn network_policies_show_the_pod_selector() {
        let obj = json!({"spec": {"podSelector": {"matchLabels": {"role": "db"}}}});
        assert_eq!(row(&NetworkPolicyTable, obj)[1], json!("role=db"));
        let all = json!({"spec": {"podSelector": {}}});
        assert_eq!(row(&NetworkPolicyTable, all)[1], json!("<none>"));
    }

    #[test]
    fn endpoint_slices_show_ports_and_addresses_with_limits() {
        let obj = json!({"addressType": "IPv4",
            "ports": [{"port": 80}, {"name": "metrics"}, {}, {"port": 9}],
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}]});
        let r = row(&EndpointSliceTable, obj);
        assert_eq!(
            r[1..4],
            [
                json!("IPv4"),
                json!("80,metrics,* + 1 more..."),
                json!("10.0.0.1,10.0.0.2")
            ]
        );
        let empty = row(&EndpointSliceTable, json!({}));
        assert_eq!(empty[2..4], [json!("<unset>"), json!("<unset>")]);
    }
}
