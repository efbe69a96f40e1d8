//! Events, in both APIs: core/v1 and events.k8s.io/v1 select by their own field names and
//! print the same table.

use k8s_openapi::api as k8s;
use std::borrow::Cow;

use serde_json::Value;

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::field_set::{at, first_of};
use crate::selectors::{FieldSet, Fields, Refusal};
use crate::tables;
use crate::validation::{Errs, NameRule};

/// core/v1 Event.
pub const CORE_EVENTS: ResourceInfo = resource!("", "v1", "Event", "events", "event", true, short: &["ev"], categories: NONE,
        sub: &[], prefix: "/registry/events", k8s::core::v1::Event,
        strategy: &CoreEventStrategy, printer: &tables::events::CoreEventTable);

/// events.k8s.io/v1 Event: stored with the core Events, in their form (as upstream stores one
/// internal Event), so `kubectl describe` shows what controllers record through this API.
pub const EVENTS: ResourceInfo = resource!("events.k8s.io", "v1", "Event", "events", "event", true, short: &["ev"], categories: NONE,
        sub: &[], prefix: "/registry/events", k8s::events::v1::Event,
        strategy: &EventStrategy, printer: &tables::events::EventsV1Table);

/// The rules of Event objects.
pub struct CoreEventStrategy;

impl Strategy for CoreEventStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, _object: &mut Value) {}

    fn validate(&self, _object: &Value, _old: Option<&Value>, _errors: &mut Errs) {}

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &CORE_EVENT_FIELDS
    }
}

/// The rules of Event objects.
pub struct EventStrategy;

impl Strategy for EventStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, _object: &mut Value) {}

    fn validate(&self, _object: &Value, _old: Option<&Value>, _errors: &mut Errs) {}

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &EVENTS_V1_FIELDS
    }

    fn stored_to_api(&self, object: Value) -> Value {
        convert(object, true, "events.k8s.io/v1")
    }

    fn api_to_stored<'a>(&self, object: &'a Value) -> Cow<'a, Value> {
        Cow::Owned(convert(object.clone(), false, "v1"))
    }
}

/// core/v1 Events select by `involvedObject.*` and the core names.
static CORE_EVENT_FIELDS: FieldSet = FieldSet {
    accepted: &[
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
        "metadata.namespace",
        "metadata.name",
    ],
    refusal: Refusal::Plain,
    paths: &[],
    extract: |obj: &Value, fields: &mut Fields| event_fields(obj, fields, true),
};

/// events.k8s.io/v1 Events select by `regarding.*` and `reportingController`, and refuse the
/// core names.
static EVENTS_V1_FIELDS: FieldSet = FieldSet {
    accepted: &[
        "reason",
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "regarding.apiVersion",
        "regarding.resourceVersion",
        "regarding.fieldPath",
        "reportingController",
        "source",
        "type",
        "metadata.namespace",
        "metadata.name",
    ],
    refusal: Refusal::Plain,
    paths: &[],
    extract: |obj: &Value, fields: &mut Fields| event_fields(obj, fields, false),
};

/// The fields the two Event APIs name differently, (core, events.k8s.io/v1) — upstream's
/// conversion; the rest (reason, type, action, eventTime, series, related, reportingInstance)
/// are the same in both.
const RENAMED: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
];

/// `object` with its fields under the other API's names (core's to events.k8s.io/v1's when
/// `to_v1`, else back) and `api_version`.
fn convert(mut object: Value, to_v1: bool, api_version: &str) -> Value {
    let Some(map) = object.as_object_mut() else {
        return object;
    };
    for (core, v1) in RENAMED {
        let (from, to) = if to_v1 { (core, v1) } else { (v1, core) };
        if let Some(value) = map.remove(*from) {
            map.insert((*to).to_string(), value);
        }
    }
    map.insert("apiVersion".into(), Value::String(api_version.into()));
    map.insert("kind".into(), Value::String("Event".into()));
    object
}

const OBJECT_REFERENCE_FIELDS: &[&str] = &[
    "kind",
    "namespace",
    "name",
    "uid",
    "apiVersion",
    "resourceVersion",
    "fieldPath",
];

/// An Event's fields under one API's names, read from either API's (upstream serves both from
/// one internal type).
fn event_fields(obj: &Value, fields: &mut Fields, core: bool) {
    let (prefix, controller_key) = if core {
        ("involvedObject", "reportingComponent")
    } else {
        ("regarding", "reportingController")
    };
    for f in OBJECT_REFERENCE_FIELDS {
        let (core_path, v1_path) = (format!("/involvedObject/{f}"), format!("/regarding/{f}"));
        let v = first_of(obj, &[core_path.as_str(), v1_path.as_str()]);
        fields.insert(format!("{prefix}.{f}"), v);
    }
    let controller = first_of(obj, &["/reportingComponent", "/reportingController"]);
    let component = first_of(obj, &["/source/component", "/deprecatedSource/component"]);
    let source = if component.is_empty() {
        controller.clone()
    } else {
        component
    };
    fields.insert(controller_key.into(), controller);
    fields.insert("source".into(), source);
    fields.insert("reason".into(), at(obj, "/reason"));
    fields.insert("type".into(), at(obj, "/type"));
}

#[cfg(test)]
mod conversion_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_events_v1_event_is_stored_as_a_core_event_and_back() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "a"},
            "regarding": {"kind": "Deployment", "name": "web"}, "note": "Scaled up",
            "reason": "ScalingReplicaSet", "type": "Normal", "reportingController": "deployment-controller",
            "reportingInstance": "rudder-1", "action": "Scale", "deprecatedCount": 2});
        let stored = EventStrategy.api_to_stored(&v1).into_owned();
        assert_eq!(stored["apiVersion"], "v1");
        assert_eq!(stored["involvedObject"]["name"], "web");
        assert_eq!(stored["message"], "Scaled up");
        assert_eq!(stored["reportingComponent"], "deployment-controller");
        assert_eq!(stored["count"], 2);
        assert!(stored.get("note").is_none() && stored.get("regarding").is_none());
        assert_eq!(EventStrategy.stored_to_api(stored), v1);
    }
}
