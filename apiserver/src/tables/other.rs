//! Tables for the smaller groups: coordination.k8s.io Lease, rbac.authorization.k8s.io
//! (Cluster)RoleBinding, policy PodDisruptionBudget, storage.k8s.io StorageClass and
//! scheduling.k8s.io PriorityClass. Roles, ClusterRoles and CustomResourceDefinitions have no
//! upstream printer and use the default table.

use jiff::Timestamp;
use serde_json::Value;

use crate::json::{array_at, int_at, name, opt_bool_at, opt_str_at, str_at};

use super::format::{age, age_col, col, int_or_string, name_col, wide};
use super::{Column, Printer};

/// The table of Leases.
pub struct LeaseTable;

impl Printer for LeaseTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col("Holder", "string", "Who currently holds the lease."),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));

        vec![
            n,
            str_at(obj, &["spec", "holderIdentity"]).into(),
            age(obj, now),
        ]
    }
}

/// The table of RoleBindings.
pub struct RoleBindingTable;

impl Printer for RoleBindingTable {
    fn columns(&self) -> Vec<Column> {
        binding_columns(
            "The Role or ClusterRole this binding grants, as Kind/name.",
            [
                "The users in the role binding.",
                "The groups in the role binding.",
                "The service accounts in the role binding.",
            ],
        )
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));
        binding_cells(obj, n, now)
    }
}

/// The table of ClusterRoleBindings.
pub struct ClusterRoleBindingTable;

impl Printer for ClusterRoleBindingTable {
    fn columns(&self) -> Vec<Column> {
        binding_columns(
            "The ClusterRole this binding grants, as Kind/name.",
            [
                "The users in the cluster role binding.",
                "The groups in the cluster role binding.",
                "The service accounts in the cluster role binding.",
            ],
        )
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));
        binding_cells(obj, n, now)
    }
}

/// The table of PodDisruptionBudgets.
pub struct PodDisruptionBudgetTable;

impl Printer for PodDisruptionBudgetTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Min Available",
                "string",
                "How many pods must stay available (a count or a percentage).",
            ),
            col(
                "Max Unavailable",
                "string",
                "How many pods may be unavailable (a count or a percentage).",
            ),
            col(
                "Allowed Disruptions",
                "integer",
                "How many pods may be disrupted right now.",
            ),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));

        let or_na =
            |field: &str| int_or_string(obj, &["spec", field]).unwrap_or_else(|| "N/A".to_string());
        vec![
            n,
            or_na("minAvailable").into(),
            or_na("maxUnavailable").into(),
            int_at(obj, &["status", "disruptionsAllowed"]).into(),
            age(obj, now),
        ]
    }
}

/// The table of StorageClasss.
pub struct StorageClassTable;

impl Printer for StorageClassTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Provisioner",
                "string",
                "The provisioner that creates volumes of this class.",
            ),
            col(
                "ReclaimPolicy",
                "string",
                "What happens to dynamically provisioned volumes once released; Delete by default.",
            ),
            col(
                "VolumeBindingMode",
                "string",
                "When claims get provisioned and bound: Immediate (the default) or \
                 WaitForFirstConsumer.",
            ),
            col(
                "AllowVolumeExpansion",
                "string",
                "Whether volumes of this class may be expanded.",
            ),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let is_default = |key: &str| str_at(obj, &["metadata", "annotations", key]) == "true";
        let mut shown = name(obj).to_string();
        if is_default("storageclass.kubernetes.io/is-default-class")
            || is_default("storageclass.beta.kubernetes.io/is-default-class")
        {
            shown.push_str(" (default)");
        }
        vec![
            shown.into(),
            str_at(obj, &["provisioner"]).into(),
            opt_str_at(obj, &["reclaimPolicy"])
                .unwrap_or("Delete")
                .into(),
            opt_str_at(obj, &["volumeBindingMode"])
                .unwrap_or("Immediate")
                .into(),
            opt_bool_at(obj, &["allowVolumeExpansion"])
                .unwrap_or(false)
                .into(),
            age(obj, now),
        ]
    }
}

/// The table of PriorityClasss.
pub struct PriorityClassTable;

impl Printer for PriorityClassTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Value",
                "integer",
                "The priority that pods naming this class receive.",
            ),
            col(
                "Global-Default",
                "boolean",
                "Whether this class is the default for pods that name no priority class.",
            ),
            age_col(),
            col(
                "PreemptionPolicy",
                "string",
                "Whether pods of this class may preempt lower-priority pods: \
                 PreemptLowerPriority (the default) or Never.",
            ),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));
        vec![
            n,
            int_at(obj, &["value"]).into(),
            opt_bool_at(obj, &["globalDefault"]).unwrap_or(false).into(),
            age(obj, now),
            str_at(obj, &["preemptionPolicy"]).into(),
        ]
    }
}

fn binding_columns(role_desc: &'static str, wide_desc: [&'static str; 3]) -> Vec<Column> {
    vec![
        name_col(),
        col("Role", "string", role_desc),
        age_col(),
        wide("Users", "string", wide_desc[0]),
        wide("Groups", "string", wide_desc[1]),
        wide("ServiceAccounts", "string", wide_desc[2]),
    ]
}

fn binding_cells(obj: &Value, n: Value, now: Timestamp) -> Vec<Value> {
    let role = format!(
        "{}/{}",
        str_at(obj, &["roleRef", "kind"]),
        str_at(obj, &["roleRef", "name"])
    );
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for subject in array_at(obj, &["subjects"]) {
        let subject_name = str_at(subject, &["name"]);
        match str_at(subject, &["kind"]) {
            "User" => users.push(subject_name.to_string()),
            "Group" => groups.push(subject_name.to_string()),
            "ServiceAccount" => {
                sas.push(format!(
                    "{}/{subject_name}",
                    str_at(subject, &["namespace"])
                ));
            }
            _ => {}
        }
    }
    vec![
        n,
        role.into(),
        age(obj, now),
        users.join(", ").into(),
        groups.join(", ").into(),
        sas.join(", ").into(),
    ]
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
    fn leases_show_their_holder() {
        let obj =
            json!({"metadata": {"name": "kube-scheduler"}, "spec": {"holderIdentity": "cp-1_abc"}});
        let r = row(&LeaseTable, obj);
        assert_eq!(r[..2], [json!("kube-scheduler"), json!("cp-1_abc")]);
        assert_eq!(row(&LeaseTable, json!({}))[1], json!(""));
    }

    #[test]
    fn role_bindings_show_the_role_and_subjects_by_kind() {
        let obj = json!({"metadata": {"name": "rb", "creationTimestamp": "2024-05-01T11:59:59Z"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [
                {"kind": "User", "name": "alice"}, {"kind": "User", "name": "bob"},
                {"kind": "Group", "name": "devs"},
                {"kind": "ServiceAccount", "namespace": "ci", "name": "builder"}]});
        assert_eq!(
            row(&RoleBindingTable, obj),
            [
                json!("rb"),
                json!("Role/reader"),
                json!("1s"),
                json!("alice, bob"),
                json!("devs"),
                json!("ci/builder")
            ]
        );
    }

    #[test]
    fn cluster_role_bindings_without_subjects_have_empty_wide_cells() {
        let obj = json!({"roleRef": {"kind": "ClusterRole", "name": "admin"}});
        let r = row(&ClusterRoleBindingTable, obj);
        assert_eq!(r[1], json!("ClusterRole/admin"));
        assert_eq!(r[3..], [json!(""), json!(""), json!("")]);
    }

    #[test]
    fn pod_disruption_budgets_show_int_or_percent_and_na() {
        let obj = json!({"spec": {"minAvailable": 2}, "status": {"disruptionsAllowed": 1}});
        let r = row(&PodDisruptionBudgetTable, obj);
        assert_eq!(r[1..4], [json!("2"), json!("N/A"), json!(1)]);
        let pct = json!({"spec": {"maxUnavailable": "25%"}});
        assert_eq!(
            row(&PodDisruptionBudgetTable, pct)[1..3],
            [json!("N/A"), json!("25%")]
        );
    }

    #[test]
    fn storage_classes_mark_the_default_and_fill_defaults() {
        let obj = json!({"metadata": {"name": "standard",
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"});
        let r = row(&StorageClassTable, obj);
        assert_eq!(
            r[..5],
            [
                json!("standard (default)"),
                json!("rancher.io/local-path"),
                json!("Delete"),
                json!("WaitForFirstConsumer"),
                json!(false)
            ]
        );
        let plain = json!({"metadata": {"name": "fast"}, "reclaimPolicy": "Retain",
                           "allowVolumeExpansion": true});
        let r = row(&StorageClassTable, plain);
        assert_eq!(
            r[..5],
            [
                json!("fast"),
                json!(""),
                json!("Retain"),
                json!("Immediate"),
                json!(true)
            ]
        );
    }

    #[test]
    fn priority_classes_show_value_default_flag_and_policy() {
        let obj = json!({"metadata": {"name": "system-node-critical"}, "value": 2000001000,
                         "globalDefault": false, "preemptionPolicy": "PreemptLowerPriority"});
        let r = row(&PriorityClassTable, obj);
        assert_eq!(r[1..3], [json!(2000001000), json!(false)]);
        assert_eq!(r[4], json!("PreemptLowerPriority"));
        let cols = PriorityClassTable.columns();
        assert_eq!(cols[4].name, "PreemptionPolicy");
    }
}
