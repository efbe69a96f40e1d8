//! Discovery of aggregated group-versions: what this server adds to `/apis`, aggregated
//! `/apis` and `/apis/<group>` for the APIServices served elsewhere. Their groups follow the
//! local ones, ordered by `groupPriorityMinimum` and their versions by `versionPriority`, as
//! upstream orders them; the resources of each come from the APIResourceList its extension
//! apiserver last answered (converted to apidiscovery's form), marked `Stale` while it is
//! unavailable, as upstream's aggregated discovery marks them.

use serde_json::{json, Value};

use super::{Remote, Routes};

/// The groups only remote APIServices serve, and the versions of each, preferred first —
/// plus remote versions of local groups, to be served beside them.
pub fn remote_groups(routes: &Routes) -> Vec<(String, Vec<String>)> {
    let mut remotes: Vec<&Remote> = routes.remote.values().map(AsRef::as_ref).collect();
    remotes.sort_by(|a, b| {
        b.group_priority
            .cmp(&a.group_priority)
            .then_with(|| a.group.cmp(&b.group))
            .then_with(|| b.version_priority.cmp(&a.version_priority))
            .then_with(|| crate::crd::version_order(&a.version, &b.version))
    });
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for remote in remotes {
        match groups.iter_mut().find(|(name, _)| *name == remote.group) {
            Some((_, versions)) => versions.push(remote.version.clone()),
            None => groups.push((remote.group.clone(), vec![remote.version.clone()])),
        }
    }
    groups
}

/// The aggregated-discovery entry of a remote group-version: its resources and freshness.
pub fn version_entry(remote: &Remote) -> Value {
    let resources = remote
        .resources
        .as_deref()
        .map(|resources| aggregated_resources(&remote.group, &remote.version, resources))
        .unwrap_or_default();
    let fresh = remote.available && remote.resources.is_some();
    json!({"version": remote.version, "resources": resources,
        "freshness": if fresh { "Current" } else { "Stale" }})
}

/// apidiscovery's `APIResourceDiscovery` entries from the `resources` of an APIResourceList of
/// `group`/`version`: `parent/sub` entries become the parent's subresources.
pub fn aggregated_resources(group: &str, version: &str, resources: &[Value]) -> Vec<Value> {
    let kind_of = |entry: &Value| {
        json!({
            "group": entry["group"].as_str().unwrap_or(group),
            "version": entry["version"].as_str().unwrap_or(version),
            "kind": entry["kind"].as_str().unwrap_or(""),
        })
    };
    let mut out: Vec<Value> = Vec::new();
    for entry in resources {
        let Some(name) = entry["name"].as_str() else {
            continue;
        };
        if name.contains('/') {
            continue;
        }
        let mut resource = json!({
            "resource": name,
            "responseKind": kind_of(entry),
            "scope": if entry["namespaced"].as_bool().unwrap_or(false) { "Namespaced" } else { "Cluster" },
            "singularResource": entry["singularName"].as_str().unwrap_or(""),
            "verbs": entry["verbs"].clone(),
        });
        for field in ["shortNames", "categories"] {
            if entry[field].as_array().is_some_and(|list| !list.is_empty()) {
                resource[field] = entry[field].clone();
            }
        }
        out.push(resource);
    }
    for entry in resources {
        let Some((parent, sub)) = entry["name"].as_str().and_then(|name| name.split_once('/'))
        else {
            continue;
        };
        let Some(resource) = out.iter_mut().find(|r| r["resource"] == parent) else {
            continue;
        };
        let subresource = json!({"subresource": sub, "responseKind": kind_of(entry),
            "verbs": entry["verbs"].clone()});
        match resource["subresources"].as_array_mut() {
            Some(list) => list.push(subresource),
            None => resource["subresources"] = json!([subresource]),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregator::ServiceRef;
    use std::sync::Arc;

    fn remote(group: &str, version: &str, group_priority: i64, version_priority: i64) -> Remote {
        Remote {
            name: format!("{version}.{group}"),
            group: group.into(),
            version: version.into(),
            group_priority,
            version_priority,
            service: ServiceRef {
                namespace: "ns".into(),
                name: "api".into(),
                port: 443,
            },
            ca_bundle: None,
            insecure_skip_tls_verify: false,
            available: true,
            resources: None,
            openapi_v3: None,
        }
    }

    #[test]
    fn groups_order_by_priority_and_versions_by_theirs() {
        let mut routes = Routes::default();
        for r in [
            remote("b.example.com", "v1", 100, 10),
            remote("a.example.com", "v1beta1", 2000, 5),
            remote("a.example.com", "v1", 2000, 20),
        ] {
            routes
                .remote
                .insert((r.group.clone(), r.version.clone()), Arc::new(r));
        }
        assert_eq!(
            remote_groups(&routes),
            vec![
                (
                    "a.example.com".to_string(),
                    vec!["v1".to_string(), "v1beta1".to_string()]
                ),
                ("b.example.com".to_string(), vec!["v1".to_string()]),
            ]
        );
    }

    #[test]
    fn a_resource_list_becomes_aggregated_entries_with_subresources() {
        let mut wardle = remote("wardle.example.com", "v1alpha1", 2000, 200);
        wardle.resources = Some(vec![
            json!({"name": "flunders", "singularName": "flunder", "namespaced": true,
                "kind": "Flunder", "verbs": ["get", "list"], "shortNames": ["fl"]}),
            json!({"name": "flunders/status", "namespaced": true, "kind": "Flunder",
                "verbs": ["get", "update"]}),
            json!({"name": "fischers", "namespaced": false, "kind": "Fischer", "verbs": ["get"]}),
        ]);
        let entry = version_entry(&wardle);
        assert_eq!(entry["freshness"], "Current");
        let resources = entry["resources"].as_array().expect("resources");
        assert_eq!(resources.len(), 2);
        assert_eq!(resources[0]["scope"], "Namespaced");
        assert_eq!(resources[0]["shortNames"], json!(["fl"]));
        assert_eq!(resources[0]["responseKind"]["group"], "wardle.example.com");
        assert_eq!(resources[0]["subresources"][0]["subresource"], "status");
        assert_eq!(resources[1]["scope"], "Cluster");
        wardle.available = false;
        assert_eq!(version_entry(&wardle)["freshness"], "Stale");
    }
}
