//! The `paths` of the documents, generated from the catalog: per resource the collection path
//! (list / create / deletecollection), the item path (read / replace / patch / delete), the
//! all-namespaces list, and the subresources, each operation named, tagged and annotated
//! (`x-kubernetes-action`, `x-kubernetes-group-version-kind`) as upstream does, with the
//! query parameters upstream declares (notably `fieldValidation` on patch, which kubectl's
//! `QueryParamVerifierV3` looks for). Rendered in the v3 or the swagger 2.0 form.

use serde_json::{json, Map, Value};

use super::schemas::{v2_ref, v3_ref, Data};
use crate::catalog::{GroupVersionKind, ResourceInfo};

const MEDIA: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
];
const WATCH_MEDIA: &[&str] = &[
    "application/json;stream=watch",
    "application/vnd.kubernetes.protobuf;stream=watch",
];
const PATCH_MEDIA: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

/// What an operation does; fixes its method, action, parameters, body and responses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verb {
    List,
    Create,
    DeleteCollection,
    Read,
    Replace,
    Patch,
    Delete,
}

impl Verb {
    /// (HTTP method, `x-kubernetes-action`, key of its parameters in the data file).
    fn facts(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Verb::List => ("get", "list", "list"),
            Verb::Create => ("post", "post", "create"),
            Verb::DeleteCollection => ("delete", "deletecollection", "deletecollection"),
            Verb::Read => ("get", "get", "read"),
            Verb::Replace => ("put", "put", "replace"),
            Verb::Patch => ("patch", "patch", "patch"),
            Verb::Delete => ("delete", "delete", "delete"),
        }
    }

    /// The catalog verb that allows it.
    fn from_catalog(verb: &str) -> Option<Verb> {
        Some(match verb {
            "get" => Verb::Read,
            "update" => Verb::Replace,
            "patch" => Verb::Patch,
            "create" => Verb::Create,
            "delete" => Verb::Delete,
            _ => return None,
        })
    }
}

/// One operation.
struct Op {
    verb: Verb,
    id: String,
    description: String,
    /// The definition read and written (the kind, its list, or a subresource's kind).
    subject: String,
    gvk: GroupVersionKind,
    tag: String,
}

/// One path and its operations.
struct Item {
    path: String,
    /// The kind named by the path's `{name}`, if it has one.
    name_of: Option<&'static str>,
    namespaced: bool,
    ops: Vec<Op>,
}

/// `rbac.authorization.k8s.io` → `RbacAuthorization`, `""` → `Core`.
fn group_camel(group: &str) -> String {
    if group.is_empty() {
        return "Core".into();
    }
    group
        .trim_end_matches(".k8s.io")
        .split('.')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect()
}

fn tag(group: &str, version: &str) -> String {
    let camel = group_camel(group);
    let mut chars = camel.chars();
    let lower = chars.next().map_or_else(String::new, |first| {
        first.to_ascii_lowercase().to_string() + chars.as_str()
    });
    format!("{lower}_{version}")
}

/// The paths of every resource in `resources`, in the given form.
pub(super) fn render(data: &Data, resources: &[&'static ResourceInfo], v3: bool) -> Value {
    let mut paths = Map::new();
    for info in resources {
        for item in items(data, info) {
            paths.insert(item.path.clone(), render_item(data, &item, v3));
        }
    }
    Value::Object(paths)
}

fn items(data: &Data, info: &'static ResourceInfo) -> Vec<Item> {
    let (group, version, kind) = (info.group, info.version, info.kind);
    let Some(def) = data.definition_of(group, version, kind).map(str::to_string) else {
        return Vec::new();
    };
    let list_def = data.definition_of(group, version, &info.list_kind());
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let gv = format!("{}{}", group_camel(group), version.replace('v', "V"));
    let scope = if info.namespaced { "Namespaced" } else { "" };
    let collection = if info.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", info.plural)
    } else {
        format!("{prefix}/{}", info.plural)
    };
    let op = |verb: Verb, id: String, description: String, subject: &str| Op {
        verb,
        id,
        description,
        subject: subject.to_string(),
        gvk: GroupVersionKind {
            group,
            version,
            kind,
        },
        tag: tag(group, version),
    };
    let item = |path: String, name_of: Option<&'static str>, ops: Vec<Op>| Item {
        path,
        name_of,
        namespaced: info.namespaced,
        ops,
    };

    let mut out = Vec::new();
    let mut ops = Vec::new();
    if let (true, Some(list_def)) = (info.allows("list"), list_def) {
        let description = format!("list or watch objects of kind {kind}");
        let id = format!("list{gv}{scope}{kind}");
        ops.push(op(Verb::List, id, description.clone(), list_def));
        if info.namespaced {
            let id = format!("list{gv}{kind}ForAllNamespaces");
            let all = op(Verb::List, id, description, list_def);
            out.push(Item {
                namespaced: false,
                ..item(format!("{prefix}/{}", info.plural), None, vec![all])
            });
        }
    }
    if info.allows("create") {
        ops.push(op(
            Verb::Create,
            format!("create{gv}{scope}{kind}"),
            format!("create a {kind}"),
            &def,
        ));
    }
    if info.allows("deletecollection") {
        let id = format!("delete{gv}Collection{scope}{kind}");
        ops.push(op(
            Verb::DeleteCollection,
            id,
            format!("delete collection of {kind}"),
            &def,
        ));
    }
    if !ops.is_empty() {
        out.push(item(collection.clone(), None, ops));
    }

    let mut ops = Vec::new();
    for (verb, word, what) in [
        (Verb::Read, "read", "read the specified"),
        (Verb::Replace, "replace", "replace the specified"),
        (Verb::Patch, "patch", "partially update the specified"),
        (Verb::Delete, "delete", "delete a"),
    ] {
        let allowed = match verb {
            Verb::Read => "get",
            Verb::Replace => "update",
            other => other.facts().1,
        };
        if info.allows(allowed) {
            ops.push(op(
                verb,
                format!("{word}{gv}{scope}{kind}"),
                format!("{what} {kind}"),
                &def,
            ));
        }
    }
    if !ops.is_empty() {
        out.push(item(format!("{collection}/{{name}}"), Some(kind), ops));
    }

    for sub in info.subresources {
        let Some(sub_def) = data.definition_of(sub.kind.group, sub.kind.version, sub.kind.kind)
        else {
            continue;
        };
        let camel = group_camel(sub.name.as_str());
        let ops = sub
            .verbs
            .iter()
            .filter_map(|verb| Verb::from_catalog(verb))
            .map(|verb| {
                let (word, what) = match verb {
                    Verb::Read => ("read", format!("read {} of the specified", sub.name)),
                    Verb::Replace => ("replace", format!("replace {} of the specified", sub.name)),
                    Verb::Patch => (
                        "patch",
                        format!("partially update {} of the specified", sub.name),
                    ),
                    Verb::Create => ("create", format!("create {} of a", sub.name)),
                    _ => ("delete", format!("delete {} of a", sub.name)),
                };
                Op {
                    gvk: sub.kind,
                    ..op(
                        verb,
                        format!("{word}{gv}{scope}{kind}{camel}"),
                        format!("{what} {kind}"),
                        sub_def,
                    )
                }
            })
            .collect();
        out.push(item(
            format!("{collection}/{{name}}/{}", sub.name),
            Some(kind),
            ops,
        ));
    }
    out
}

fn render_item(data: &Data, item: &Item, v3: bool) -> Value {
    let mut out = Map::new();
    let mut path_params = Vec::new();
    if let Some(kind) = item.name_of {
        path_params.push(json!({
            "description": format!("name of the {kind}"),
            "in": "path", "name": "name", "required": true, "type": "string", "uniqueItems": true
        }));
    }
    if item.namespaced {
        path_params.extend(data.parameters.get("namespace").cloned());
    }
    path_params.extend(data.parameters.get("pretty").cloned());
    out.insert("parameters".into(), params(path_params, v3));
    for op in &item.ops {
        out.insert(op.verb.facts().0.into(), render_op(data, op, v3));
    }
    Value::Object(out)
}

/// Parameters in the requested form: v3 moves the type into `schema`.
fn params(list: Vec<Value>, v3: bool) -> Value {
    if !v3 {
        return Value::Array(list);
    }
    let converted = list.into_iter().map(|param| {
        let Value::Object(mut param) = param else {
            return param;
        };
        let mut schema = Map::new();
        for key in ["type", "uniqueItems", "format"] {
            if let Some(value) = param.remove(key) {
                schema.insert(key.into(), value);
            }
        }
        param.insert("schema".into(), Value::Object(schema));
        Value::Object(param)
    });
    Value::Array(converted.collect())
}

fn render_op(data: &Data, op: &Op, v3: bool) -> Value {
    let (_, action, params_key) = op.verb.facts();
    let query: Vec<Value> = data
        .parameters
        .get(params_key)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let status = Data::meta("Status");
    let (body, body_required, consumes): (Option<String>, bool, &[&str]) = match op.verb {
        Verb::Create | Verb::Replace => (Some(op.subject.clone()), true, &["*/*"]),
        Verb::Patch => (Some(Data::meta("Patch")), true, PATCH_MEDIA),
        Verb::Delete | Verb::DeleteCollection => {
            (Some(Data::meta("DeleteOptions")), false, &["*/*"])
        }
        Verb::List | Verb::Read => (None, false, &["*/*"]),
    };
    let responses: &[(&str, &str)] = match op.verb {
        Verb::Create => &[("200", "OK"), ("201", "Created"), ("202", "Accepted")],
        Verb::Replace | Verb::Patch => &[("200", "OK"), ("201", "Created")],
        Verb::Delete => &[("200", "OK"), ("202", "Accepted")],
        Verb::List | Verb::Read | Verb::DeleteCollection => &[("200", "OK")],
    };
    let subject = match op.verb {
        Verb::Delete | Verb::DeleteCollection => &status,
        _ => &op.subject,
    };
    let produces: Vec<&str> = match op.verb {
        Verb::List => MEDIA.iter().chain(WATCH_MEDIA).copied().collect(),
        _ => MEDIA.to_vec(),
    };
    let mut response_map = Map::new();
    for (code, description) in responses {
        let response = if v3 {
            let content: Map<String, Value> = produces
                .iter()
                .map(|media| (media.to_string(), json!({"schema": v3_ref(subject)})))
                .collect();
            json!({"content": content, "description": description})
        } else {
            json!({"description": description, "schema": v2_ref(subject)})
        };
        response_map.insert(code.to_string(), response);
    }
    response_map.insert("401".into(), json!({"description": "Unauthorized"}));

    let GroupVersionKind {
        group,
        version,
        kind,
    } = op.gvk;
    let mut out = json!({
        "description": op.description,
        "operationId": op.id,
        "responses": response_map,
        "tags": [op.tag],
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": group, "kind": kind, "version": version},
    });
    let Value::Object(map) = &mut out else {
        return out;
    };
    if v3 {
        if let Some(body) = &body {
            let content: Map<String, Value> = consumes
                .iter()
                .map(|media| (media.to_string(), json!({"schema": v3_ref(body)})))
                .collect();
            let mut request = json!({ "content": content });
            if body_required {
                request["required"] = Value::Bool(true);
            }
            map.insert("requestBody".into(), request);
        }
        if !query.is_empty() {
            map.insert("parameters".into(), params(query, true));
        }
    } else {
        let mut all = Vec::new();
        if let Some(body) = &body {
            let mut param = json!({"in": "body", "name": "body", "schema": v2_ref(body)});
            if body_required {
                param["required"] = Value::Bool(true);
            }
            all.push(param);
        }
        all.extend(query);
        if !all.is_empty() {
            map.insert("parameters".into(), Value::Array(all));
        }
        map.insert("consumes".into(), json!(consumes));
        map.insert("produces".into(), json!(produces));
        map.insert("schemes".into(), json!(["https"]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_upstream() {
        assert_eq!(
            group_camel("rbac.authorization.k8s.io"),
            "RbacAuthorization"
        );
        assert_eq!(group_camel(""), "Core");
        assert_eq!(group_camel("apps"), "Apps");
        assert_eq!(
            tag("rbac.authorization.k8s.io", "v1"),
            "rbacAuthorization_v1"
        );
        assert_eq!(tag("", "v1"), "core_v1");
    }
}
