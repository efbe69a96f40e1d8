//! apps/v1 tables: Deployment, ReplicaSet, StatefulSet, DaemonSet and ControllerRevision.

use jiff::Timestamp;
use serde_json::Value;

use crate::json::{array_at, int_at, name, opt_bool_at, opt_int_at, str_at, value_at};

use super::format::{
    age, age_col, col, container_cells, format_labels, format_selector, name_col, selector_string,
    wide, CONTAINERS_DESC, IMAGES_DESC,
};
use super::{Column, Printer};

const READY_DESC: &str = "Ready pods out of the desired number of replicas.";
const DESIRED_DESC: &str = "The desired number of replicas.";
const CURRENT_DESC: &str = "The most recently observed number of replicas.";

fn containers() -> Column {
    wide("Containers", "string", CONTAINERS_DESC)
}

fn images() -> Column {
    wide("Images", "string", IMAGES_DESC)
}

/// The table of Deployments.
pub struct DeploymentTable;

impl Printer for DeploymentTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col("Ready", "string", READY_DESC),
            col(
                "Up-to-date",
                "string",
                "Non-terminated pods of this deployment that run the desired template.",
            ),
            col(
                "Available",
                "string",
                "Pods of this deployment that have been ready for at least minReadySeconds.",
            ),
            age_col(),
            containers(),
            images(),
            wide(
                "Selector",
                "string",
                "The label selector for the deployment's pods.",
            ),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));
        let desired = || opt_int_at(obj, &["spec", "replicas"]).unwrap_or(1);
        let ready = || int_at(obj, &["status", "readyReplicas"]);
        let (names, images) = container_cells(value_at(obj, &["spec", "template", "spec"]));

        let selector = selector_string(value_at(obj, &["spec", "selector"]))
            .unwrap_or_else(|()| "<invalid>".to_string());
        vec![
            n,
            format!("{}/{}", ready(), desired()).into(),
            int_at(obj, &["status", "updatedReplicas"]).into(),
            int_at(obj, &["status", "availableReplicas"]).into(),
            age(obj, now),
            names,
            images,
            selector.into(),
        ]
    }
}

/// The table of ReplicaSets.
pub struct ReplicaSetTable;

impl Printer for ReplicaSetTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col("Desired", "integer", DESIRED_DESC),
            col("Current", "integer", CURRENT_DESC),
            col(
                "Ready",
                "integer",
                "How many of the replica set's replicas are ready.",
            ),
            age_col(),
            containers(),
            images(),
            wide(
                "Selector",
                "string",
                "A label query over the pods the replica count covers.",
            ),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));
        let desired = || opt_int_at(obj, &["spec", "replicas"]).unwrap_or(1);
        let ready = || int_at(obj, &["status", "readyReplicas"]);
        let (names, images) = container_cells(value_at(obj, &["spec", "template", "spec"]));
        vec![
            n,
            desired().into(),
            int_at(obj, &["status", "replicas"]).into(),
            ready().into(),
            age(obj, now),
            names,
            images,
            format_selector(obj, &["spec", "selector"]).into(),
        ]
    }
}

/// The table of StatefulSets.
pub struct StatefulSetTable;

impl Printer for StatefulSetTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col("Ready", "string", READY_DESC),
            age_col(),
            containers(),
            images(),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));
        let desired = || opt_int_at(obj, &["spec", "replicas"]).unwrap_or(1);
        let ready = || int_at(obj, &["status", "readyReplicas"]);
        let (names, images) = container_cells(value_at(obj, &["spec", "template", "spec"]));

        vec![
            n,
            format!("{}/{}", ready(), desired()).into(),
            age(obj, now),
            names,
            images,
        ]
    }
}

/// The table of DaemonSets.
pub struct DaemonSetTable;

impl Printer for DaemonSetTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Desired",
                "integer",
                "How many nodes should run the daemon pod.",
            ),
            col(
                "Current",
                "integer",
                "How many nodes that should run the daemon pod run at least one.",
            ),
            col("Ready", "integer", "How many nodes run a ready daemon pod."),
            col(
                "Up-to-date",
                "integer",
                "How many nodes run an updated daemon pod.",
            ),
            col(
                "Available",
                "integer",
                "How many nodes run a daemon pod that has been ready for minReadySeconds.",
            ),
            col(
                "Node Selector",
                "string",
                "Labels a node must have for the pod to fit on it.",
            ),
            age_col(),
            containers(),
            images(),
            wide(
                "Selector",
                "string",
                "A label query over the pods the daemon set manages.",
            ),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));
        let (names, images) = container_cells(value_at(obj, &["spec", "template", "spec"]));

        let status = |f: &str| Value::from(int_at(obj, &["status", f]));
        vec![
            n,
            status("desiredNumberScheduled"),
            status("currentNumberScheduled"),
            status("numberReady"),
            status("updatedNumberScheduled"),
            status("numberAvailable"),
            format_labels(obj, &["spec", "template", "spec", "nodeSelector"]).into(),
            age(obj, now),
            names,
            images,
            format_selector(obj, &["spec", "selector"]).into(),
        ]
    }
}

/// The table of ControllerRevisions.
pub struct ControllerRevisionTable;

impl Printer for ControllerRevisionTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Controller",
                "string",
                "The object that controls this revision.",
            ),
            col(
                "Revision",
                "string",
                "The revision number of the state this object holds.",
            ),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));

        vec![
            n,
            controller_of(obj).into(),
            int_at(obj, &["revision"]).into(),
            age(obj, now),
        ]
    }
}

/// "kind.group/name" of the controlling owner, lower-cased like upstream; "<none>" if none.
fn controller_of(obj: &Value) -> String {
    let owner = array_at(obj, &["metadata", "ownerReferences"])
        .iter()
        .find(|o| opt_bool_at(o, &["controller"]) == Some(true));
    let Some(owner) = owner else {
        return "<none>".to_string();
    };
    let owner_name = str_at(owner, &["name"]);
    let api_version = str_at(owner, &["apiVersion"]);
    let group = match api_version.split('/').collect::<Vec<_>>()[..] {
        [group, _] => group,
        [_] => "",
        // Not a group/version; show the bare name.
        _ => return owner_name.to_string(),
    };
    let kind = str_at(owner, &["kind"]);
    let group_kind = match (group, kind) {
        ("", "") => return owner_name.to_string(),
        ("", k) => k.to_string(),
        (g, k) => format!("{k}.{g}"),
    };
    format!("{}/{owner_name}", group_kind.to_lowercase())
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

    fn template() -> Value {
        json!({"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}})
    }

    #[test]
    fn deployments_show_ready_over_desired_and_numeric_counts() {
        let obj = json!({"metadata": {"name": "web", "creationTimestamp": "2024-05-01T11:58:30Z"},
            "spec": {"replicas": 3, "template": template(),
                "selector": {"matchLabels": {"app": "web"}}},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}});
        assert_eq!(
            row(&DeploymentTable, obj),
            [
                json!("web"),
                json!("2/3"),
                json!(3),
                json!(2),
                json!("90s"),
                json!("nginx"),
                json!("nginx:1.27"),
                json!("app=web")
            ]
        );
    }

    #[test]
    fn a_deployment_without_status_reads_zero_of_one() {
        let r = row(&DeploymentTable, json!({}));
        assert_eq!(r[1..4], [json!("0/1"), json!(0), json!(0)]);
        assert_eq!(r[7], json!(""));
    }

    #[test]
    fn replica_sets_show_desired_current_ready_and_selector() {
        let obj = json!({"spec": {"replicas": 2, "template": template(),
                "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a"]}]}},
            "status": {"replicas": 2, "readyReplicas": 1}});
        let r = row(&ReplicaSetTable, obj);
        assert_eq!(r[1..4], [json!(2), json!(2), json!(1)]);
        assert_eq!(r[7], json!("app in (a)"));
        assert_eq!(row(&ReplicaSetTable, json!({}))[7], json!("<none>"));
    }

    #[test]
    fn stateful_sets_show_ready_over_desired() {
        let obj = json!({"spec": {"replicas": 3, "template": template()},
                         "status": {"readyReplicas": 3}});
        let r = row(&StatefulSetTable, obj);
        assert_eq!(r[1], json!("3/3"));
        assert_eq!(r.len(), 5);
    }

    #[test]
    fn daemon_sets_show_scheduling_counts_and_node_selector() {
        let obj = json!({"spec": {"template": {"spec": {"nodeSelector": {"os": "linux"},
                "containers": [{"name": "agent", "image": "agent:1"}]}},
                "selector": {"matchLabels": {"app": "agent"}}},
            "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2,
                "updatedNumberScheduled": 3, "numberAvailable": 2}});
        let r = row(&DaemonSetTable, obj);
        assert_eq!(
            r[1..7],
            [
                json!(3),
                json!(3),
                json!(2),
                json!(3),
                json!(2),
                json!("os=linux")
            ]
        );
        assert_eq!(
            r[8..],
            [json!("agent"), json!("agent:1"), json!("app=agent")]
        );
    }

    #[test]
    fn controller_revisions_name_their_controller_with_kind_and_group() {
        let obj = json!({"metadata": {"name": "web-5d8", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "controller": true}]},
            "revision": 4});
        let r = row(&ControllerRevisionTable, obj);
        assert_eq!(r[1..3], [json!("statefulset.apps/web"), json!(4)]);
        let core_owner = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "controller": true}]}});
        assert_eq!(row(&ControllerRevisionTable, core_owner)[1], json!("pod/p"));
        assert_eq!(row(&ControllerRevisionTable, json!({}))[1], json!("<none>"));
    }
}
