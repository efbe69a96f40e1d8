//! A CRD version's `selectableFields` (custom resource field selectors, GA in 1.32): each is a
//! simple JSON path (`.spec.color`) to a string, integer or boolean field of the version's
//! schema, and `kubectl get <plural> --field-selector spec.color=blue` then filters by it —
//! from the watch cache, for watches and for lists alike. A path to an absent field reads as
//! `""`. Up to 8 per version, no duplicates, none under `metadata`.

use serde_json::Value;

use crate::selectors::{FieldSet, Refusal, METADATA_ONLY};
use crate::validation::{Errs, FieldError};

/// The most selectable fields one version may declare.
const MAX_SELECTABLE_FIELDS: usize = 8;

/// The selector name of a `jsonPath` (`.spec.color` → `spec.color`), or why it is not one.
fn label_of(json_path: &str) -> Result<&str, &'static str> {
    let Some(label) = json_path.strip_prefix('.') else {
        return Err("must be a simple JSON path starting with '.'");
    };
    let simple = !label.is_empty()
        && label.split('.').all(|segment| {
            !segment.is_empty()
                && segment
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        });
    if !simple {
        return Err("must be a simple JSON path of field names, without array indices or filters");
    }
    if label == "metadata" || label.starts_with("metadata.") {
        return Err("must not point to metadata fields");
    }
    Ok(label)
}

/// The type of the field at `label` in an `openAPIV3Schema`, if the schema declares it.
fn schema_type<'a>(schema: &'a Value, label: &str) -> Option<&'a str> {
    label
        .split('.')
        .try_fold(schema, |at, segment| at["properties"].get(segment))
        .and_then(|field| field["type"].as_str())
}

/// Checks `version`'s selectableFields (at `path`, e.g. `spec.versions[0]`).
pub fn validate(version: &Value, path: &str, errors: &mut Errs) {
    let Some(fields) = version["selectableFields"].as_array() else {
        return;
    };
    let at = format!("{path}.selectableFields");
    if fields.len() > MAX_SELECTABLE_FIELDS {
        errors.push(FieldError::too_many(
            at.clone(),
            fields.len(),
            MAX_SELECTABLE_FIELDS,
        ));
    }
    let schema = &version["schema"]["openAPIV3Schema"];
    let mut seen = Vec::new();
    for (i, field) in fields.iter().enumerate() {
        let field_path = format!("{at}[{i}].jsonPath");
        let Some(json_path) = field["jsonPath"].as_str().filter(|p| !p.is_empty()) else {
            errors.push(FieldError::required(field_path, ""));
            continue;
        };
        let label = match label_of(json_path) {
            Ok(label) => label,
            Err(why) => {
                errors.push(FieldError::invalid(field_path, json_path, why));
                continue;
            }
        };
        if seen.contains(&label) {
            errors.push(FieldError::duplicate(field_path, json_path));
            continue;
        }
        seen.push(label);
        if schema.is_object() {
            match schema_type(schema, label) {
                Some("string" | "integer" | "boolean") => {}
                Some(other) => errors.push(FieldError::invalid(
                    field_path,
                    json_path,
                    format!(
                        "selectable field type must be string, integer or boolean, not {other}"
                    ),
                )),
                None => errors.push(FieldError::invalid(
                    field_path,
                    json_path,
                    "is not a field of the version's schema",
                )),
            }
        }
    }
}

/// The field selector rules of a served version: the metadata fields plus its selectable
/// fields (built once per CRD spec, like the rest of its catalog entry).
pub fn field_set(version: &Value) -> &'static FieldSet {
    let labels: Vec<&'static str> = version["selectableFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|field| label_of(field["jsonPath"].as_str()?).ok())
        .map(|label| &*Box::leak(label.to_string().into_boxed_str()))
        .collect();
    if labels.is_empty() {
        return &METADATA_ONLY;
    }
    let accepted: Vec<&'static str> = ["metadata.name", "metadata.namespace"]
        .into_iter()
        .chain(labels.iter().copied())
        .collect();
    Box::leak(Box::new(FieldSet {
        accepted: Box::leak(accepted.into_boxed_slice()),
        refusal: Refusal::Plain,
        paths: Box::leak(labels.into_boxed_slice()),
        extract: |_, _| {},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn version(fields: Value) -> Value {
        json!({
            "name": "v1",
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {
                    "color": {"type": "string"},
                    "size": {"type": "integer"},
                    "on": {"type": "boolean"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                }},
            }}},
            "selectableFields": fields,
        })
    }

    fn problems(fields: Value) -> Vec<String> {
        let mut errors = Errs::new();
        validate(&version(fields), "spec.versions[0]", &mut errors);
        errors.iter().map(FieldError::message).collect()
    }

    #[test]
    fn scalar_fields_of_the_schema_are_selectable() {
        let fields = json!([{"jsonPath": ".spec.color"}, {"jsonPath": ".spec.size"}, {"jsonPath": ".spec.on"}]);
        assert!(problems(fields.clone()).is_empty());
        let set = field_set(&version(fields));
        assert_eq!(
            set.accepted,
            [
                "metadata.name",
                "metadata.namespace",
                "spec.color",
                "spec.size",
                "spec.on"
            ]
        );
        assert_eq!(set.paths, ["spec.color", "spec.size", "spec.on"]);
        // None declared: the metadata fields only, as for any custom resource.
        assert!(std::ptr::eq(
            field_set(&json!({"name": "v1"})),
            &METADATA_ONLY
        ));
    }

    #[test]
    fn bad_paths_are_refused_naming_the_entry() {
        let found = problems(json!([
            {"jsonPath": "spec.color"},
            {"jsonPath": ".spec.tags[0]"},
            {"jsonPath": ".metadata.name"},
            {"jsonPath": ".spec.tags"},
            {"jsonPath": ".spec.missing"},
            {},
            {"jsonPath": ".spec.color"},
            {"jsonPath": ".spec.color"},
        ]));
        let expect = [
            "spec.versions[0].selectableFields[0].jsonPath: Invalid value: \"spec.color\": must be a simple JSON path starting with '.'",
            "spec.versions[0].selectableFields[1].jsonPath: Invalid value: \".spec.tags[0]\": must be a simple JSON path of field names, without array indices or filters",
            "spec.versions[0].selectableFields[2].jsonPath: Invalid value: \".metadata.name\": must not point to metadata fields",
            "spec.versions[0].selectableFields[3].jsonPath: Invalid value: \".spec.tags\": selectable field type must be string, integer or boolean, not array",
            "spec.versions[0].selectableFields[4].jsonPath: Invalid value: \".spec.missing\": is not a field of the version's schema",
            "spec.versions[0].selectableFields[5].jsonPath: Required value",
            "spec.versions[0].selectableFields[7].jsonPath: Duplicate value: \".spec.color\"",
        ];
        assert_eq!(found, expect);
        let many: Vec<Value> = (0..9).map(|_| json!({"jsonPath": ".spec.color"})).collect();
        assert!(problems(Value::Array(many))[0].starts_with(
            "spec.versions[0].selectableFields: Too many: 9: must have at most 8 items"
        ));
    }
}
