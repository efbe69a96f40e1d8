//! Discovery, legacy (`APIVersions`, `APIGroupList`, `APIGroup`, `APIResourceList`) and
//! aggregated (`APIGroupDiscoveryList`, apidiscovery.k8s.io v2 and v2beta1, with the exact
//! content types kubectl checks), all generated from the catalog.

use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::aggregator::discovery::{remote_groups, version_entry};
use crate::aggregator::Routes;
use crate::catalog::{self, GroupVersionKind, ResourceInfo, RESOURCES};
use crate::crd::Served;

/// Every group with its served versions, the preferred first: the built-in groups in
/// catalog order, then those of CRDs, then those of APIServices served elsewhere.
fn all_groups(custom: &Served, routes: &Routes) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = catalog::groups()
        .into_iter()
        .map(|group| {
            let versions = catalog::versions_of(group);
            (
                group.to_string(),
                versions.iter().map(|v| v.to_string()).collect(),
            )
        })
        .collect();
    for group in &custom.groups {
        if !groups.iter().any(|(name, _)| name == group.name) {
            let versions = group.versions.iter().map(|v| v.to_string()).collect();
            groups.push((group.name.to_string(), versions));
        }
    }
    for (group, versions) in remote_groups(routes) {
        match groups.iter_mut().find(|(name, _)| *name == group) {
            Some((_, served)) => {
                for version in versions {
                    if !served.contains(&version) {
                        served.push(version);
                    }
                }
            }
            None => groups.push((group, versions)),
        }
    }
    groups
}

/// The resources served here in group/version, built-in or custom.
fn resources_in<'a>(
    group: &'a str,
    version: &'a str,
    custom: &'a Served,
) -> impl Iterator<Item = &'static ResourceInfo> + 'a {
    RESOURCES
        .iter()
        .filter(move |info| info.group == group && info.version == version)
        .chain(custom.in_group_version(group, version))
}

/// The aggregated-discovery version an Accept header asks for, if any.
pub fn aggregated_version(accept: Option<&str>) -> Option<&'static str> {
    let accept = accept?;
    for alternative in accept.split(',') {
        let params: Vec<&str> = alternative.split(';').map(str::trim).collect();
        let has = |wanted: &str| params.iter().any(|param| param.replace(' ', "") == wanted);
        if params.first() != Some(&"application/json") && params.first() != Some(&"*/*") {
            continue;
        }
        if !has("g=apidiscovery.k8s.io") || !has("as=APIGroupDiscoveryList") {
            if params.len() == 1 {
                // A plain alternative listed before any aggregated one wins.
                return None;
            }
            continue;
        }
        if has("v=v2") {
            return Some("v2");
        }
        if has("v=v2beta1") {
            return Some("v2beta1");
        }
    }
    None
}

fn json_response(content_type: String, body: &Value) -> Response {
    (
        [(http::header::CONTENT_TYPE, content_type)],
        body.to_string(),
    )
        .into_response()
}

fn legacy_resource_entries(group: &str, version: &str, custom: &Served) -> Vec<Value> {
    let mut entries = Vec::new();
    for info in resources_in(group, version, custom) {
        let mut entry = json!({
            "name": info.plural,
            "singularName": info.singular,
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": info.verbs,
        });
        if !info.short_names.is_empty() {
            entry["shortNames"] = json!(info.short_names);
        }
        if !info.categories.is_empty() {
            entry["categories"] = json!(info.categories);
        }
        entries.push(entry);
        for sub in info.subresources {
            let GroupVersionKind {
                group: sub_group,
                version: sub_version,
                kind: sub_kind,
            } = sub.kind;
            let mut entry = json!({
                "name": format!("{}/{}", info.plural, sub.name),
                "singularName": "",
                "namespaced": info.namespaced,
                "kind": sub_kind,
                "verbs": sub.verbs,
            });
            if sub_group != info.group || sub_version != info.version {
                entry["group"] = json!(sub_group);
                entry["version"] = json!(sub_version);
            }
            entries.push(entry);
        }
    }
    entries
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

fn api_group(group: &str, versions: &[String]) -> Value {
    let entries: Vec<Value> = versions
        .iter()
        .map(|version| json!({"groupVersion": group_version(group, version), "version": version}))
        .collect();
    let preferred = entries.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": entries, "preferredVersion": preferred})
}

fn aggregated_resource(info: &ResourceInfo) -> Value {
    let mut entry = json!({
        "resource": info.plural,
        "responseKind": {"group": info.group, "version": info.version, "kind": info.kind},
        "scope": if info.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": info.singular,
        "verbs": info.verbs,
    });
    if !info.short_names.is_empty() {
        entry["shortNames"] = json!(info.short_names);
    }
    if !info.categories.is_empty() {
        entry["categories"] = json!(info.categories);
    }
    if !info.subresources.is_empty() {
        let subresources: Vec<Value> = info
            .subresources
            .iter()
            .map(|sub| {
                let GroupVersionKind {
                    group,
                    version,
                    kind,
                } = sub.kind;
                json!({"subresource": sub.name.as_str(),
                    "responseKind": {"group": group, "version": version, "kind": kind},
                    "verbs": sub.verbs})
            })
            .collect();
        entry["subresources"] = json!(subresources);
    }
    entry
}

fn aggregated_list(legacy: bool, version: &str, custom: &Served, routes: &Routes) -> Value {
    let items: Vec<Value> = all_groups(custom, routes)
        .into_iter()
        .filter(|(group, _)| group.is_empty() == legacy)
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|group_version| {
                    if let Some(remote) = routes.remote.get(&(group.clone(), group_version.clone())) {
                        return version_entry(remote);
                    }
                    let resources: Vec<Value> = resources_in(&group, group_version, custom)
                        .map(aggregated_resource)
                        .collect();
                    json!({"version": group_version, "resources": resources, "freshness": "Current"})
                })
                .collect();
            let mut metadata = json!({"creationTimestamp": null});
            if !group.is_empty() {
                metadata["name"] = json!(group);
            }
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    })
}

/// `/api` or `/apis`.
pub fn root(
    legacy: bool,
    accept: Option<&str>,
    advertise: &str,
    custom: &Served,
    routes: &Routes,
) -> Response {
    if let Some(version) = aggregated_version(accept) {
        let content_type =
            format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList");
        return json_response(
            content_type,
            &aggregated_list(legacy, version, custom, routes),
        );
    }
    let body = if legacy {
        json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": advertise}],
        })
    } else {
        let groups: Vec<Value> = all_groups(custom, routes)
            .into_iter()
            .filter(|(group, _)| !group.is_empty())
            .map(|(group, versions)| api_group(&group, &versions))
            .collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    };
    json_response("application/json".into(), &body)
}

/// `/apis/<group>`.
pub fn group(group: &str, custom: &Served, routes: &Routes) -> Option<Response> {
    if group.is_empty() {
        return None;
    }
    let (_, versions) = all_groups(custom, routes)
        .into_iter()
        .find(|(name, _)| name == group)?;
    let mut body = api_group(group, &versions);
    body["kind"] = json!("APIGroup");
    body["apiVersion"] = json!("v1");
    Some(json_response("application/json".into(), &body))
}

/// `/api/v1` or `/apis/<group>/<version>`.
pub fn resource_list(group: &str, version: &str, custom: &Served) -> Response {
    let body = json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version(group, version),
        "resources": legacy_resource_entries(group, version, custom),
    });
    json_response("application/json".into(), &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_accept_headers_select_aggregated_discovery() {
        let v133 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        let v127 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(aggregated_version(Some(v133)), Some("v2"));
        assert_eq!(aggregated_version(Some(v127)), Some("v2beta1"));
        assert_eq!(aggregated_version(Some("application/json, */*")), None);
        assert_eq!(aggregated_version(None), None);
    }

    #[test]
    fn aggregated_core_group_has_pods_with_short_names_and_subresources() {
        let list = aggregated_list(true, "v2", &Served::default(), &Routes::default());
        let items = list["items"].as_array().expect("items");
        assert_eq!(items.len(), 1);
        let resources = items[0]["versions"][0]["resources"]
            .as_array()
            .expect("resources");
        let pods = resources
            .iter()
            .find(|r| r["resource"] == "pods")
            .expect("pods");
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["categories"], json!(["all"]));
        assert!(pods["subresources"]
            .as_array()
            .expect("subs")
            .iter()
            .any(|s| s["subresource"] == "status"));
    }

    #[test]
    fn legacy_lists_name_subresources_with_a_slash() {
        let entries = legacy_resource_entries("apps", "v1", &Served::default());
        let scale = entries
            .iter()
            .find(|e| e["name"] == "deployments/scale")
            .expect("scale");
        assert_eq!(scale["kind"], "Scale");
        assert_eq!(scale["group"], "autoscaling");
    }
}
