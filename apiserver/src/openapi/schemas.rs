//! The vendored upstream definitions (`apiserver/openapi/definitions.json`, see its README):
//! loading, lookup by group/version/kind, the closure of a set of definitions under `$ref`,
//! and the rewrite of a swagger 2.0 schema into the OpenAPI v3 form upstream serves.

use std::collections::{BTreeSet, HashMap};
use std::sync::LazyLock;

use serde_json::{json, Map, Value};

const RAW: &str = include_str!("../../openapi/definitions.json");

const V2_PREFIX: &str = "#/definitions/";
const V3_PREFIX: &str = "#/components/schemas/";
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
const INT_OR_STRING: &str = "io.k8s.apimachinery.pkg.util.intstr.IntOrString";
const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.";

/// The meta types every group-version document carries besides its kinds' closure.
pub(super) const EXTRA: &[&str] = &[
    "APIResourceList",
    "DeleteOptions",
    "Patch",
    "Status",
    "WatchEvent",
];

/// The parsed data file.
#[derive(Default)]
pub(super) struct Data {
    /// Upstream definitions by name, swagger 2.0 form.
    pub definitions: Map<String, Value>,
    /// Query parameters per operation (`list`, `create`, …) and the `namespace` / `pretty`
    /// path parameters, swagger 2.0 form.
    pub parameters: Map<String, Value>,
    /// Definition names by (group, version, kind).
    by_gvk: HashMap<(String, String, String), String>,
}

static DATA: LazyLock<Data> = LazyLock::new(|| load(RAW));

pub(super) fn data() -> &'static Data {
    &DATA
}

fn load(raw: &str) -> Data {
    let mut file = match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(file)) => file,
        other => {
            tracing::error!(error = ?other.err(), "openapi: definitions.json is not a JSON object");
            return Data::default();
        }
    };
    let mut take = |key: &str| match file.remove(key) {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    let definitions = take("definitions");
    let parameters = take("parameters");
    let mut by_gvk = HashMap::new();
    for (name, schema) in &definitions {
        let gvks = schema
            .get("x-kubernetes-group-version-kind")
            .and_then(Value::as_array);
        for gvk in gvks.into_iter().flatten() {
            let part = |key: &str| {
                gvk.get(key)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            by_gvk
                .entry((part("group"), part("version"), part("kind")))
                .or_insert_with(|| name.clone());
        }
    }
    Data {
        definitions,
        parameters,
        by_gvk,
    }
}

impl Data {
    /// The definition name of group (`""` = core) / version / kind, e.g.
    /// `io.k8s.api.apps.v1.Deployment`.
    pub(super) fn definition_of(&self, group: &str, version: &str, kind: &str) -> Option<&str> {
        let key = (group.to_string(), version.to_string(), kind.to_string());
        self.by_gvk.get(&key).map(String::as_str)
    }

    /// The name of a meta/v1 type (`Status`, `DeleteOptions`, …).
    pub(super) fn meta(name: &str) -> String {
        format!("{META}{name}")
    }

    /// `roots` and every definition they reach through `$ref`, sorted by name. Names without a
    /// definition are left out.
    pub(super) fn closure(&self, roots: impl IntoIterator<Item = String>) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<String> = roots.into_iter().collect();
        while let Some(name) = stack.pop() {
            if seen.contains(&name) {
                continue;
            }
            let Some(schema) = self.definitions.get(&name) else {
                continue;
            };
            collect_refs(schema, &mut stack);
            seen.insert(name);
        }
        seen
    }

    /// A copy with `added` definitions, each under its (group, version, kind).
    pub(super) fn with_definitions(
        &self,
        added: Vec<((&str, &str, String), String, Value)>,
    ) -> Data {
        let mut data = Data {
            definitions: self.definitions.clone(),
            parameters: self.parameters.clone(),
            by_gvk: self.by_gvk.clone(),
        };
        for ((group, version, kind), name, definition) in added {
            data.by_gvk
                .insert((group.to_string(), version.to_string(), kind), name.clone());
            data.definitions.insert(name, definition);
        }
        data
    }

    /// The v3 form of the definition `name`.
    pub(super) fn v3_schema(&self, name: &str) -> Option<Value> {
        let mut schema = to_v3(self.definitions.get(name)?.clone());
        // Upstream's v3 documents describe these two as a choice of types.
        let one_of = match name {
            QUANTITY => Some(json!([{"type": "string"}, {"type": "number"}])),
            INT_OR_STRING => Some(json!([{"type": "integer"}, {"type": "string"}])),
            _ => None,
        };
        if let (Some(one_of), Value::Object(map)) = (one_of, &mut schema) {
            map.remove("type");
            map.insert("oneOf".into(), one_of);
        }
        Some(schema)
    }
}

/// Pushes the definition names `value` refers to.
fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(name) = map
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix(V2_PREFIX))
            {
                out.push(name.to_string());
            }
            map.values().for_each(|child| collect_refs(child, out));
        }
        Value::Array(items) => items.iter().for_each(|child| collect_refs(child, out)),
        _ => {}
    }
}

/// A `$ref` to a definition, v2 form.
pub(super) fn v2_ref(name: &str) -> Value {
    json!({ "$ref": format!("{V2_PREFIX}{name}") })
}

/// A `$ref` to a definition, v3 form.
pub(super) fn v3_ref(name: &str) -> Value {
    json!({ "$ref": format!("{V3_PREFIX}{name}") })
}

/// Rewrites a swagger 2.0 schema to v3: refs point into `components.schemas`, and a `$ref`
/// with siblings (a field's description) becomes `allOf: [{$ref}]` beside them, as OpenAPI
/// 3.0 ignores a `$ref`'s siblings.
fn to_v3(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut map: Map<String, Value> = map
                .into_iter()
                .map(|(key, child)| (key, to_v3(child)))
                .collect();
            if let Some(Value::String(target)) = map.get("$ref") {
                let target = match target.strip_prefix(V2_PREFIX) {
                    Some(name) => format!("{V3_PREFIX}{name}"),
                    None => target.clone(),
                };
                if map.len() == 1 {
                    map.insert("$ref".into(), Value::String(target));
                } else {
                    map.remove("$ref");
                    map.insert("allOf".into(), json!([{ "$ref": target }]));
                }
            }
            Value::Object(map)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(to_v3).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_with_siblings_become_all_of() {
        let v2 = json!({"properties": {
            "metadata": {"$ref": "#/definitions/X", "description": "d"},
            "items": {"type": "array", "items": {"$ref": "#/definitions/Y"}}
        }});
        let v3 = to_v3(v2);
        assert_eq!(
            v3["properties"]["metadata"],
            json!({"allOf": [{"$ref": "#/components/schemas/X"}], "description": "d"})
        );
        assert_eq!(
            v3["properties"]["items"]["items"],
            json!({"$ref": "#/components/schemas/Y"})
        );
    }

    #[test]
    fn a_broken_data_file_loads_as_empty() {
        let data = load("not json");
        assert!(data.definitions.is_empty());
        assert!(data.definition_of("apps", "v1", "Deployment").is_none());
    }

    #[test]
    fn special_types_take_upstream_v3_forms() {
        let data = data();
        let quantity = data.v3_schema(QUANTITY).expect("quantity");
        assert!(quantity.get("type").is_none());
        assert_eq!(quantity["oneOf"][1]["type"], "number");
        let int_or_string = data.v3_schema(INT_OR_STRING).expect("int-or-string");
        assert_eq!(int_or_string["format"], "int-or-string");
        let time = data.v3_schema(&Data::meta("Time")).expect("time");
        assert_eq!(
            (time["type"].as_str(), time["format"].as_str()),
            (Some("string"), Some("date-time"))
        );
        let raw = data.v3_schema("io.k8s.apimachinery.pkg.runtime.RawExtension");
        assert_eq!(raw.expect("raw extension")["type"], "object");
    }
}
