//! From a stored CRD to the catalog entries of its served versions.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use serde_json::Value;

use super::jsonpath::JsonPath;
use super::resource::{CustomPrinter, CustomStrategy, PrinterColumn};
use super::rules::Rules;
use super::schema::Schema;
use super::CustomGroup;
use crate::catalog::{self, ResourceInfo, SubresourceInfo};
use crate::kinds::ScalePaths;
use crate::tables::{format, Column};

fn leak(text: &str) -> &'static str {
    Box::leak(text.to_string().into_boxed_str())
}

fn leak_all(texts: Option<&Value>) -> &'static [&'static str] {
    let texts: Vec<&'static str> = texts
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_str).map(leak).collect())
        .unwrap_or_default();
    Box::leak(texts.into_boxed_slice())
}

fn digest(value: &Value) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.to_string().hash(&mut hasher);
    hasher.finish()
}

fn as_is(value: Value) -> Result<Value, String> {
    Ok(value)
}

/// The catalog entries of `crd`'s served versions, reusing those `built` holds for an
/// unchanged spec.
pub fn resources_of(
    crd: &Value,
    built: &mut HashMap<(String, String, u64), &'static ResourceInfo>,
) -> Result<Vec<&'static ResourceInfo>, String> {
    let spec = &crd["spec"];
    let uid = crd["metadata"]["uid"].as_str().unwrap_or("").to_string();
    let spec_digest = digest(spec);
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    let mut infos = Vec::new();
    for version in versions.iter().filter(|v| v["served"] == true) {
        let name = version["name"].as_str().unwrap_or("").to_string();
        let key = (uid.clone(), name, spec_digest);
        if let Some(info) = built.get(&key) {
            infos.push(*info);
            continue;
        }
        let info: &'static ResourceInfo = Box::leak(Box::new(build(spec, version)?));
        built.insert(key, info);
        infos.push(info);
    }
    Ok(infos)
}

fn build(spec: &Value, version: &Value) -> Result<ResourceInfo, String> {
    let group = leak(spec["group"].as_str().unwrap_or(""));
    let names = &spec["names"];
    let kind = leak(names["kind"].as_str().unwrap_or(""));
    let plural = leak(names["plural"].as_str().unwrap_or(""));
    let singular_text = names["singular"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map_or_else(|| kind.to_ascii_lowercase(), str::to_string);
    let version_name = leak(version["name"].as_str().unwrap_or(""));
    let storage_version = spec["versions"]
        .as_array()
        .and_then(|all| all.iter().find(|v| v["storage"] == true))
        .and_then(|v| v["name"].as_str())
        .unwrap_or(version_name);
    let schema_value = version["schema"]["openAPIV3Schema"].clone();
    let schema = if schema_value.is_object() {
        Some(Schema::compile(&schema_value, "openAPIV3Schema")?)
    } else {
        None
    };
    let rules = Rules::compile(
        &schema_value,
        kube_cel::RootContext {
            api_version: format!("{group}/{version_name}"),
            api_group: group.to_string(),
            kind: kind.to_string(),
        },
    )
    .map_err(|problems| problems.join("; "))?;
    let subresources = &version["subresources"];
    let mut subs: Vec<SubresourceInfo> = Vec::new();
    if subresources.get("status").is_some_and(Value::is_object) {
        subs.push(catalog::status_of(group, version_name, kind));
    }
    let scale = subresources
        .get("scale")
        .filter(|s| s.is_object())
        .map(scale_paths)
        .transpose()?;
    if scale.is_some() {
        subs.push(catalog::SCALE);
    }
    let strategy = CustomStrategy {
        kind,
        api_version: leak(&format!("{group}/{version_name}")),
        storage_api_version: leak(&format!("{group}/{storage_version}")),
        schema,
        rules,
        scale,
        openapi: schema_value,
        fields: super::selectable::field_set(version),
        converter: super::conversion::WebhookConverter::of(spec)
            .filter(|_| version_name != storage_version),
    };
    let printer = CustomPrinter {
        columns: printer_columns(version)?,
    };
    Ok(ResourceInfo {
        group,
        version: version_name,
        kind,
        plural,
        singular: leak(&singular_text),
        namespaced: spec["scope"] != "Cluster",
        short_names: leak_all(names.get("shortNames")),
        categories: leak_all(names.get("categories")),
        verbs: catalog::ALL_VERBS,
        subresources: Box::leak(subs.into_boxed_slice()),
        storage_prefix: leak(&format!("/registry/{group}/{plural}")),
        canonicalize: Some(as_is),
        strategy: Box::leak(Box::new(strategy)),
        printer: Box::leak(Box::new(printer)),
    })
}

fn field_path(value: &Value, what: &str) -> Result<Vec<String>, String> {
    let text = value.as_str().unwrap_or("");
    JsonPath::parse(text)?
        .fields()
        .map(|fields| fields.into_iter().map(str::to_string).collect())
        .ok_or_else(|| format!("{what}: {text}: must be a path of fields"))
}

fn scale_paths(scale: &Value) -> Result<ScalePaths, String> {
    Ok(ScalePaths {
        spec_replicas: field_path(&scale["specReplicasPath"], "specReplicasPath")?,
        status_replicas: field_path(&scale["statusReplicasPath"], "statusReplicasPath")?,
        label_selector: scale
            .get("labelSelectorPath")
            .filter(|p| p.is_string())
            .map(|p| field_path(p, "labelSelectorPath"))
            .transpose()?,
    })
}

fn printer_columns(version: &Value) -> Result<Vec<PrinterColumn>, String> {
    let declared = version["additionalPrinterColumns"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if declared.is_empty() {
        return Ok(vec![PrinterColumn {
            column: Column {
                name: "Age",
                type_: "date",
                format: "",
                description: format::AGE_DESC,
                priority: 0,
            },
            path: JsonPath::parse(".metadata.creationTimestamp")?,
        }]);
    }
    declared
        .iter()
        .map(|column| {
            Ok(PrinterColumn {
                column: Column {
                    name: leak(column["name"].as_str().unwrap_or("")),
                    type_: leak(column["type"].as_str().unwrap_or("string")),
                    format: leak(column["format"].as_str().unwrap_or("")),
                    description: leak(column["description"].as_str().unwrap_or("")),
                    priority: column["priority"].as_i64().unwrap_or(0) as i32,
                },
                path: JsonPath::parse(column["jsonPath"].as_str().unwrap_or(""))?,
            })
        })
        .collect()
}

/// Upstream's version priority: GA versions by major number (highest first), then betas,
/// then alphas (by major, then minor number), then anything else alphabetically.
pub fn version_order(a: &str, b: &str) -> Ordering {
    fn rank(v: &str) -> (u8, u64, u64, String) {
        let parsed = v.strip_prefix('v').and_then(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let major: u64 = digits.parse().ok()?;
            let tail = &rest[digits.len()..];
            if tail.is_empty() {
                return Some((0, major, 0));
            }
            let (level, minor) = if let Some(m) = tail.strip_prefix("beta") {
                (1, m)
            } else if let Some(m) = tail.strip_prefix("alpha") {
                (2, m)
            } else {
                return None;
            };
            Some((level, major, minor.parse().ok()?))
        });
        match parsed {
            Some((level, major, minor)) => {
                (level, u64::MAX - major, u64::MAX - minor, String::new())
            }
            None => (3, 0, 0, v.to_string()),
        }
    }
    rank(a).cmp(&rank(b))
}

/// The custom groups of `resources`, each with its versions in priority order.
pub fn groups_of(resources: &[&'static ResourceInfo]) -> Vec<CustomGroup> {
    let mut groups: Vec<CustomGroup> = Vec::new();
    for info in resources {
        match groups.iter_mut().find(|g| g.name == info.group) {
            Some(group) => {
                if !group.versions.contains(&info.version) {
                    group.versions.push(info.version);
                }
            }
            None => groups.push(CustomGroup {
                name: info.group,
                versions: vec![info.version],
            }),
        }
    }
    for group in &mut groups {
        group.versions.sort_by(|a, b| version_order(a, b));
    }
    groups.sort_by(|a, b| a.name.cmp(b.name));
    groups
}
