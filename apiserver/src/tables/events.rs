//! Event tables. Upstream serves core/v1 and events.k8s.io/v1 Events from one internal type,
//! so both print the same columns; the events.k8s.io field names are mapped here.

use jiff::Timestamp;
use serde_json::Value;

use crate::json::{int_at, name, opt_int_at, str_at, value_at};

use super::format::{col, name_col, since, time_at, wide};
use super::{Column, Printer};

/// The table of core/v1 Events.
pub struct CoreEventTable;

/// The table of events.k8s.io/v1 Events: the same columns, from that API's field names.
pub struct EventsV1Table;

impl Printer for CoreEventTable {
    fn columns(&self) -> Vec<Column> {
        columns()
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        cells(&CORE, obj, now)
    }
}

impl Printer for EventsV1Table {
    fn columns(&self) -> Vec<Column> {
        columns()
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        cells(&EVENTS_V1, obj, now)
    }
}

fn columns() -> Vec<Column> {
    vec![
        col(
            "Last Seen",
            "string",
            "When the most recent occurrence of this event was recorded.",
        ),
        col(
            "Type",
            "string",
            "The event's type, such as Normal or Warning.",
        ),
        col(
            "Reason",
            "string",
            "A short, machine-readable reason for the transition into the object's current status.",
        ),
        col("Object", "string", "The object the event is about."),
        wide(
            "Subobject",
            "string",
            "The part of the object the event is about, as a field path such as \
             spec.containers{name}.",
        ),
        wide(
            "Source",
            "string",
            "The component, and host if any, that reported the event.",
        ),
        col(
            "Message",
            "string",
            "A human-readable description of what happened.",
        ),
        wide("First Seen", "string", "When the event was first recorded."),
        wide("Count", "string", "How many times the event has occurred."),
        wide_name(),
    ]
}

fn wide_name() -> Column {
    Column {
        priority: 1,
        ..name_col()
    }
}

/// Where each piece of an Event lives in its API version's JSON.
struct Fields {
    first: &'static str,
    last: &'static str,
    count: &'static str,
    regarding: &'static str,
    message: &'static str,
    source: &'static str,
}

const CORE: Fields = Fields {
    first: "firstTimestamp",
    last: "lastTimestamp",
    count: "count",
    regarding: "involvedObject",
    message: "message",
    source: "source",
};

const EVENTS_V1: Fields = Fields {
    first: "deprecatedFirstTimestamp",
    last: "deprecatedLastTimestamp",
    count: "deprecatedCount",
    regarding: "regarding",
    message: "note",
    source: "deprecatedSource",
};

fn cells(f: &Fields, obj: &Value, now: Timestamp) -> Vec<Value> {
    let first = match time_at(obj, &[f.first]) {
        Some(t) => since(Some(t), now),
        None => since(time_at(obj, &["eventTime"]), now),
    };
    let mut last = match time_at(obj, &[f.last]) {
        Some(t) => since(Some(t), now),
        None => first.clone(),
    };
    let mut count = int_at(obj, &[f.count]);
    if let Some(series) = value_at(obj, &["series"]).filter(|v| v.is_object()) {
        last = since(time_at(series, &["lastObservedTime"]), now);
        count = opt_int_at(series, &["count"]).unwrap_or(0);
    } else if count == 0 {
        // Singleton events from the new API carry no count.
        count = 1;
    }

    let kind_lower = str_at(obj, &[f.regarding, "kind"]).to_lowercase();
    let target_name = str_at(obj, &[f.regarding, "name"]);
    let target = if target_name.is_empty() {
        kind_lower
    } else {
        format!("{kind_lower}/{target_name}")
    };

    vec![
        Value::from(last),
        Value::from(str_at(obj, &["type"])),
        Value::from(str_at(obj, &["reason"])),
        Value::from(target),
        Value::from(str_at(obj, &[f.regarding, "fieldPath"])),
        Value::from(source(obj, f)),
        Value::from(str_at(obj, &[f.message]).trim()),
        Value::from(first),
        Value::from(count),
        Value::from(name(obj)),
    ]
}

/// "component, host", falling back to the reporting controller and instance.
fn source(obj: &Value, f: &Fields) -> String {
    let pick = |a: &str, b: &str| {
        if a.is_empty() {
            b.to_string()
        } else {
            a.to_string()
        }
    };
    let component = pick(
        str_at(obj, &[f.source, "component"]),
        str_at(obj, &["reportingController"]),
    );
    let host = pick(
        str_at(obj, &[f.source, "host"]),
        str_at(obj, &["reportingInstance"]),
    );
    if host.is_empty() {
        component
    } else {
        format!("{component}, {host}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2024-05-01T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn core_events_print_last_seen_object_and_wide_columns() {
        let obj = json!({
            "metadata": {"name": "web.17a"},
            "involvedObject": {"kind": "Pod", "name": "web", "fieldPath": "spec.containers{c}"},
            "reason": "Pulled", "type": "Normal", "message": "  Pulled image  \n",
            "source": {"component": "kubelet", "host": "node1"},
            "firstTimestamp": "2024-05-01T11:00:00Z", "lastTimestamp": "2024-05-01T11:58:00Z",
            "count": 4
        });
        assert_eq!(
            CoreEventTable.cells(&obj, now()),
            [
                json!("2m"),
                json!("Normal"),
                json!("Pulled"),
                json!("pod/web"),
                json!("spec.containers{c}"),
                json!("kubelet, node1"),
                json!("Pulled image"),
                json!("60m"),
                json!(4),
                json!("web.17a")
            ]
        );
    }

    #[test]
    fn new_style_events_use_event_time_series_and_reporting_controller() {
        let obj = json!({
            "metadata": {"name": "e"},
            "regarding": {"kind": "Node"},
            "note": "rebooted", "reason": "Rebooted", "type": "Warning",
            "reportingController": "kubelet",
            "eventTime": "2024-05-01T11:59:00.000000Z",
            "series": {"count": 7, "lastObservedTime": "2024-05-01T11:59:30.000000Z"}
        });
        let row = EventsV1Table.cells(&obj, now());
        assert_eq!(row[0], json!("30s"));
        assert_eq!(row[3], json!("node"));
        assert_eq!(row[5], json!("kubelet"));
        assert_eq!(row[6], json!("rebooted"));
        assert_eq!(row[7], json!("60s"));
        assert_eq!(row[8], json!(7));
    }

    #[test]
    fn an_event_without_times_or_count_reads_unknown_and_one() {
        let row = CoreEventTable.cells(&json!({}), now());
        assert_eq!(row[0], json!("<unknown>"));
        assert_eq!(row[7], json!("<unknown>"));
        assert_eq!(row[8], json!(1));
    }

    #[test]
    fn event_columns_put_name_last_and_wide() {
        let cols = CoreEventTable.columns();
        let last = cols.last().unwrap();
        assert_eq!((last.name, last.format, last.priority), ("Name", "name", 1));
        let shown: Vec<_> = cols
            .iter()
            .filter(|c| c.priority == 0)
            .map(|c| c.name)
            .collect();
        assert_eq!(shown, ["Last Seen", "Type", "Reason", "Object", "Message"]);
    }
}
