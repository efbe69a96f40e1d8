//! Server-side Table conversion: the columns and cells `kubectl get` prints, following
//! upstream's printers for every built-in kind we serve, with upstream's default
//! Name / "Created At" table for kinds that have no printer.
//!
//! Like upstream's server, rows always carry every column, including the priority-1 ones
//! that `-o wide` shows; kubectl hides those itself.

mod apps;
mod batch;
mod core;
mod events;
mod format;
mod networking;
mod other;
mod pod;
mod volumes;

use serde_json::Value;

/// One Table column definition (`meta.k8s.io/v1` TableColumnDefinition).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Column {
    pub name: &'static str,
    #[serde(rename = "type")]
    pub type_: &'static str,
    pub format: &'static str,
    pub description: &'static str,
    pub priority: i32,
}

/// Upstream's column definitions for this group ("" = core) and kind; for kinds without
/// printers: Name + "Created At" (type date).
pub fn columns(group: &str, kind: &str) -> Vec<Column> {
    let found = match group {
        "" => self::core::columns(kind)
            .or_else(|| volumes::columns(kind))
            .or_else(|| pod::columns(kind))
            .or_else(|| events::columns(kind)),
        "events.k8s.io" => events::columns(kind),
        "apps" => apps::columns(kind),
        "batch" => batch::columns(kind),
        "networking.k8s.io" | "discovery.k8s.io" => networking::columns(group, kind),
        _ => other::columns(group, kind),
    };
    found.unwrap_or_else(default_columns)
}

/// One row's cells (same length and order as columns()), from the object's JSON (as served,
/// k8s API JSON). `now` is for ages.
pub fn cells(group: &str, kind: &str, obj: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let found = match group {
        "" => self::core::cells(kind, obj, now)
            .or_else(|| volumes::cells(kind, obj, now))
            .or_else(|| pod::cells(kind, obj, now))
            .or_else(|| events::cells(group, kind, obj, now)),
        "events.k8s.io" => events::cells(group, kind, obj, now),
        "apps" => apps::cells(kind, obj, now),
        "batch" => batch::cells(kind, obj, now),
        "networking.k8s.io" | "discovery.k8s.io" => networking::cells(group, kind, obj, now),
        _ => other::cells(group, kind, obj, now),
    };
    found.unwrap_or_else(|| default_cells(obj))
}

/// The table upstream's apiserver serves for kinds without a printer.
fn default_columns() -> Vec<Column> {
    vec![
        format::name_col(),
        format::col("Created At", "date", format::AGE_DESC),
    ]
}

fn default_cells(obj: &Value) -> Vec<Value> {
    let created = format::time_at(obj, &["metadata", "creationTimestamp"]);
    vec![
        Value::from(format::name(obj)),
        Value::from(format::rfc3339(created)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every (group, kind) with a dedicated printer or an explicitly default table.
    const KINDS: &[(&str, &str)] = &[
        ("", "Pod"),
        ("", "Namespace"),
        ("", "Node"),
        ("", "Service"),
        ("", "Endpoints"),
        ("", "ConfigMap"),
        ("", "Secret"),
        ("", "ServiceAccount"),
        ("", "Event"),
        ("", "LimitRange"),
        ("", "ResourceQuota"),
        ("", "PersistentVolume"),
        ("", "PersistentVolumeClaim"),
        ("", "ReplicationController"),
        ("", "PodTemplate"),
        ("apps", "Deployment"),
        ("apps", "ReplicaSet"),
        ("apps", "StatefulSet"),
        ("apps", "DaemonSet"),
        ("apps", "ControllerRevision"),
        ("batch", "Job"),
        ("batch", "CronJob"),
        ("coordination.k8s.io", "Lease"),
        ("discovery.k8s.io", "EndpointSlice"),
        ("events.k8s.io", "Event"),
        ("rbac.authorization.k8s.io", "Role"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("rbac.authorization.k8s.io", "RoleBinding"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ("networking.k8s.io", "Ingress"),
        ("networking.k8s.io", "IngressClass"),
        ("networking.k8s.io", "NetworkPolicy"),
        ("policy", "PodDisruptionBudget"),
        ("storage.k8s.io", "StorageClass"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ];

    fn now() -> jiff::Timestamp {
        "2024-05-01T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn every_kind_gives_as_many_cells_as_columns_even_for_empty_objects() {
        let odd = json!({"metadata": 5, "spec": "x", "status": [1]});
        for (group, kind) in KINDS {
            let n = columns(group, kind).len();
            assert_eq!(
                cells(group, kind, &json!({}), now()).len(),
                n,
                "{group}/{kind}"
            );
            assert_eq!(
                cells(group, kind, &odd, now()).len(),
                n,
                "{group}/{kind} odd"
            );
            assert_eq!(
                cells(group, kind, &json!(null), now()).len(),
                n,
                "{group}/{kind} null"
            );
        }
    }

    #[test]
    fn every_table_has_exactly_one_name_formatted_column_called_name() {
        for (group, kind) in KINDS {
            let cols = columns(group, kind);
            let named: Vec<_> = cols.iter().filter(|c| c.format == "name").collect();
            assert_eq!(named.len(), 1, "{group}/{kind}");
            assert_eq!(named[0].name, "Name", "{group}/{kind}");
            for c in &cols {
                assert!(
                    ["string", "integer", "date", "boolean"].contains(&c.type_),
                    "{}",
                    c.name
                );
                assert!(!c.description.is_empty(), "{group}/{kind} {}", c.name);
            }
        }
    }

    fn names(group: &str, kind: &str, priority: i32) -> Vec<&'static str> {
        let cols = columns(group, kind);
        cols.iter()
            .filter(|c| c.priority == priority)
            .map(|c| c.name)
            .collect()
    }

    #[test]
    fn column_names_and_priorities_match_upstream_printers() {
        assert_eq!(
            names("", "Pod", 0),
            ["Name", "Ready", "Status", "Restarts", "Age"]
        );
        assert_eq!(
            names("", "Pod", 1),
            ["IP", "Node", "Nominated Node", "Readiness Gates"]
        );
        assert_eq!(
            names("", "Node", 0),
            ["Name", "Status", "Roles", "Age", "Version"]
        );
        assert_eq!(
            names("", "Node", 1),
            [
                "Internal-IP",
                "External-IP",
                "OS-Image",
                "Kernel-Version",
                "Container-Runtime"
            ]
        );
        assert_eq!(
            names("", "Service", 0),
            [
                "Name",
                "Type",
                "Cluster-IP",
                "External-IP",
                "Port(s)",
                "Age"
            ]
        );
        assert_eq!(names("", "PersistentVolume", 1), ["VolumeMode"]);
        assert_eq!(
            names("apps", "Deployment", 0),
            ["Name", "Ready", "Up-to-date", "Available", "Age"]
        );
        assert_eq!(
            names("apps", "Deployment", 1),
            ["Containers", "Images", "Selector"]
        );
        assert_eq!(
            names("batch", "Job", 0),
            ["Name", "Status", "Completions", "Duration", "Age"]
        );
        assert_eq!(
            names("batch", "CronJob", 0),
            [
                "Name",
                "Schedule",
                "Timezone",
                "Suspend",
                "Active",
                "Last Schedule",
                "Age"
            ]
        );
        assert_eq!(names("events.k8s.io", "Event", 1), names("", "Event", 1));
        let restarts = &columns("", "Pod")[3];
        assert_eq!((restarts.type_, restarts.format), ("string", ""));
    }

    #[test]
    fn unknown_kinds_get_name_and_created_at() {
        let cols = columns("example.com", "Widget");
        let names: Vec<_> = cols.iter().map(|c| (c.name, c.type_)).collect();
        assert_eq!(names, [("Name", "string"), ("Created At", "date")]);
        let obj = json!({"metadata": {"name": "w", "creationTimestamp": "2024-01-02T03:04:05Z"}});
        assert_eq!(
            cells("example.com", "Widget", &obj, now()),
            [json!("w"), json!("2024-01-02T03:04:05Z")]
        );
    }

    #[test]
    fn roles_limit_ranges_and_crds_use_the_default_table() {
        for (group, kind) in [
            ("rbac.authorization.k8s.io", "Role"),
            ("rbac.authorization.k8s.io", "ClusterRole"),
            ("", "LimitRange"),
            ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ] {
            let names: Vec<_> = columns(group, kind).iter().map(|c| c.name).collect();
            assert_eq!(names, ["Name", "Created At"], "{group}/{kind}");
        }
    }

    #[test]
    fn columns_serialize_with_the_wire_field_names() {
        let v = serde_json::to_value(&columns("", "Namespace")[0]).unwrap();
        assert_eq!(v["name"], "Name");
        assert_eq!(v["type"], "string");
        assert_eq!(v["format"], "name");
        assert_eq!(v["priority"], 0);
        assert!(v["description"].is_string());
    }
}
