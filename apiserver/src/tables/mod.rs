//! Server-side Table conversion: the columns and cells `kubectl get` prints, following
//! upstream's printers for every built-in kind we serve, with upstream's default
//! Name / "Created At" table for kinds that have no printer.
//!
//! Like upstream's server, rows always carry every column, including the priority-1 ones
//! that `-o wide` shows; kubectl hides those itself.

pub mod apps;
pub mod batch;
pub mod certificates;
pub mod core;
pub mod events;
pub(crate) mod format;
pub mod networking;
pub mod other;
pub mod pod;
pub mod volumes;

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

/// How one kind prints as a Table: its columns and, for each object, the cells of its row
/// (same length and order as the columns), from the object's API JSON. `now` is for ages.
pub trait Printer: Sync {
    fn columns(&self) -> Vec<Column>;
    fn cells(&self, obj: &Value, now: jiff::Timestamp) -> Vec<Value>;
}

/// The table upstream's apiserver serves for kinds without a printer: Name and "Created At".
pub struct DefaultTable;

impl Printer for DefaultTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            format::name_col(),
            format::col("Created At", "date", format::AGE_DESC),
        ]
    }

    fn cells(&self, obj: &Value, _now: jiff::Timestamp) -> Vec<Value> {
        let created = format::time_at(obj, &["metadata", "creationTimestamp"]);
        vec![
            Value::from(crate::json::name(obj)),
            Value::from(format::rfc3339(created)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::catalog;

    /// Every served kind, by the printer its catalog entry names.
    fn kinds() -> impl Iterator<Item = (&'static str, &'static str)> {
        catalog::RESOURCES
            .iter()
            .map(|info| (info.group, info.kind))
    }

    fn columns(group: &str, kind: &str) -> Vec<Column> {
        let info = catalog::by_kind(group, kind).expect("a served kind");
        info.printer.columns()
    }

    fn cells(group: &str, kind: &str, obj: &Value, now: jiff::Timestamp) -> Vec<Value> {
        let info = catalog::by_kind(group, kind).expect("a served kind");
        info.printer.cells(obj, now)
    }

    fn now() -> jiff::Timestamp {
        "2024-05-01T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn every_kind_gives_as_many_cells_as_columns_even_for_empty_objects() {
        let odd = json!({"metadata": 5, "spec": "x", "status": [1]});
        for (group, kind) in kinds() {
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
        for (group, kind) in kinds() {
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
    fn the_default_table_is_name_and_created_at() {
        let cols = DefaultTable.columns();
        let names: Vec<_> = cols.iter().map(|c| (c.name, c.type_)).collect();
        assert_eq!(names, [("Name", "string"), ("Created At", "date")]);
        let obj = json!({"metadata": {"name": "w", "creationTimestamp": "2024-01-02T03:04:05Z"}});
        assert_eq!(
            DefaultTable.cells(&obj, now()),
            [json!("w"), json!("2024-01-02T03:04:05Z")]
        );
    }

    #[test]
    fn roles_and_limit_ranges_use_the_default_table() {
        for (group, kind) in [
            ("rbac.authorization.k8s.io", "Role"),
            ("rbac.authorization.k8s.io", "ClusterRole"),
            ("", "LimitRange"),
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
