//! A CustomResourceDefinition version's structural schema (`openAPIV3Schema`), compiled once
//! and applied to custom objects as upstream's apiextensions-apiserver applies it: **pruning**
//! of fields the schema does not declare, **defaulting** from `default`, and **validation** of
//! types, formats, enums, patterns, bounds, `required`, `x-kubernetes-int-or-string`,
//! `x-kubernetes-list-type` and the value-validation combinators (`allOf`, `anyOf`, `oneOf`,
//! `not`), with upstream's field paths and messages. CEL rules (`x-kubernetes-validations`)
//! are [`super::rules`]' part.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::validation::{go_quote, Errs, FieldError};

/// What a schema node says about the fields it does not list.
#[derive(Clone, Debug, Default)]
enum Additional {
    /// Nothing: unknown fields are pruned unless `x-kubernetes-preserve-unknown-fields`.
    #[default]
    Unset,
    /// `additionalProperties: false`/`true`.
    Allowed(bool),
    /// A map: every value follows this schema.
    Schema(Box<Schema>),
}

/// One compiled node of a structural schema.
#[derive(Clone, Debug, Default)]
pub struct Schema {
    type_: Option<String>,
    format: Option<String>,
    properties: BTreeMap<String, Schema>,
    additional: Additional,
    items: Option<Box<Schema>>,
    required: Vec<String>,
    enumeration: Vec<Value>,
    pattern: Option<(String, regex::Regex)>,
    minimum: Option<f64>,
    maximum: Option<f64>,
    exclusive_minimum: bool,
    exclusive_maximum: bool,
    multiple_of: Option<f64>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    min_items: Option<u64>,
    max_items: Option<u64>,
    min_properties: Option<u64>,
    max_properties: Option<u64>,
    unique_items: bool,
    nullable: bool,
    default: Option<Value>,
    preserve_unknown: bool,
    int_or_string: bool,
    embedded_resource: bool,
    list_type: Option<String>,
    list_map_keys: Vec<String>,
    map_type: Option<String>,
    all_of: Vec<Schema>,
    any_of: Vec<Schema>,
    one_of: Vec<Schema>,
    not: Option<Box<Schema>>,
}

impl Schema {
    /// Compiles `openAPIV3Schema` (the JSON form of JSONSchemaProps). Errors name the field
    /// at fault, as the CRD's validation reports them.
    pub fn compile(value: &Value, path: &str) -> Result<Self, String> {
        let Some(object) = value.as_object() else {
            return Err(format!("{path}: must be an object"));
        };
        let mut schema = Schema {
            type_: str_of(object, "type"),
            format: str_of(object, "format"),
            required: object
                .get("required")
                .and_then(Value::as_array)
                .map(|names| {
                    names
                        .iter()
                        .filter_map(|n| n.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            enumeration: object
                .get("enum")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            minimum: object.get("minimum").and_then(Value::as_f64),
            maximum: object.get("maximum").and_then(Value::as_f64),
            exclusive_minimum: flag(object, "exclusiveMinimum"),
            exclusive_maximum: flag(object, "exclusiveMaximum"),
            multiple_of: object.get("multipleOf").and_then(Value::as_f64),
            min_length: object.get("minLength").and_then(Value::as_u64),
            max_length: object.get("maxLength").and_then(Value::as_u64),
            min_items: object.get("minItems").and_then(Value::as_u64),
            max_items: object.get("maxItems").and_then(Value::as_u64),
            min_properties: object.get("minProperties").and_then(Value::as_u64),
            max_properties: object.get("maxProperties").and_then(Value::as_u64),
            unique_items: flag(object, "uniqueItems"),
            nullable: flag(object, "nullable"),
            default: object.get("default").cloned(),
            preserve_unknown: flag(object, "x-kubernetes-preserve-unknown-fields"),
            int_or_string: flag(object, "x-kubernetes-int-or-string"),
            embedded_resource: flag(object, "x-kubernetes-embedded-resource"),
            list_type: str_of(object, "x-kubernetes-list-type"),
            map_type: str_of(object, "x-kubernetes-map-type"),
            list_map_keys: object
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|keys| {
                    keys.iter()
                        .filter_map(|k| k.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            ..Schema::default()
        };
        if let Some(pattern) = object.get("pattern").and_then(Value::as_str) {
            let compiled = regex::Regex::new(pattern)
                .map_err(|error| format!("{path}.pattern: Invalid value: {error}"))?;
            schema.pattern = Some((pattern.to_string(), compiled));
        }
        if let Some(properties) = object.get("properties").and_then(Value::as_object) {
            for (name, property) in properties {
                let child = Schema::compile(property, &format!("{path}.properties[{name}]"))?;
                schema.properties.insert(name.clone(), child);
            }
        }
        schema.additional = match object.get("additionalProperties") {
            None => Additional::Unset,
            Some(Value::Bool(allowed)) => Additional::Allowed(*allowed),
            Some(value) => Additional::Schema(Box::new(Schema::compile(
                value,
                &format!("{path}.additionalProperties"),
            )?)),
        };
        if let Some(items) = object.get("items") {
            schema.items = Some(Box::new(Schema::compile(items, &format!("{path}.items"))?));
        }
        for (field, target) in [
            ("allOf", &mut schema.all_of),
            ("anyOf", &mut schema.any_of),
            ("oneOf", &mut schema.one_of),
        ] {
            if let Some(list) = object.get(field).and_then(Value::as_array) {
                for (i, item) in list.iter().enumerate() {
                    target.push(Schema::compile(item, &format!("{path}.{field}[{i}]"))?);
                }
            }
        }
        if let Some(not) = object.get("not") {
            schema.not = Some(Box::new(Schema::compile(not, &format!("{path}.not"))?));
        }
        Ok(schema)
    }

    /// The schema of a property (for printer columns and selectable fields).
    pub fn property(&self, name: &str) -> Option<&Schema> {
        self.properties.get(name).or(match &self.additional {
            Additional::Schema(schema) => Some(schema),
            _ => None,
        })
    }

    /// The schema's `type` (empty when it declares none).
    pub fn type_name(&self) -> &str {
        self.type_.as_deref().unwrap_or("")
    }

    /// The schema's `format` (empty when it declares none).
    pub fn format_name(&self) -> &str {
        self.format.as_deref().unwrap_or("")
    }

    /// Removes what the schema does not declare from `value`, an object at the root of a
    /// custom resource (whose `apiVersion`, `kind` and `metadata` always stay).
    pub fn prune_root(&self, value: &mut Value) {
        self.prune(value, true);
    }

    fn prune(&self, value: &mut Value, keeps_type_meta: bool) {
        if self.int_or_string {
            return;
        }
        match value {
            Value::Object(map) => {
                let keep_meta = keeps_type_meta || self.embedded_resource;
                let keys: Vec<String> = map.keys().cloned().collect();
                for key in keys {
                    if keep_meta && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                        continue;
                    }
                    if let Some(child) = self.properties.get(&key) {
                        if let Some(field) = map.get_mut(&key) {
                            if field.is_null() && !child.nullable && child.default.is_some() {
                                // A null the schema does not allow gives way to the default.
                                map.remove(&key);
                            } else {
                                child.prune(field, false);
                            }
                        }
                        continue;
                    }
                    match &self.additional {
                        Additional::Schema(child) => {
                            if let Some(field) = map.get_mut(&key) {
                                child.prune(field, false);
                            }
                        }
                        Additional::Allowed(true) => {}
                        _ if self.preserve_unknown => {}
                        _ => {
                            map.remove(&key);
                        }
                    }
                }
            }
            Value::Array(items) => {
                if let Some(schema) = &self.items {
                    for item in items {
                        schema.prune(item, false);
                    }
                }
            }
            _ => {}
        }
    }

    /// Fills in `default`s of absent fields inside the objects present in `value`, deepest
    /// last (a defaulted object is defaulted inside too), as upstream defaults on write and
    /// on read from storage.
    pub fn apply_defaults(&self, value: &mut Value) {
        match value {
            Value::Object(map) => {
                for (name, child) in &self.properties {
                    if !map.contains_key(name) {
                        if let Some(default) = &child.default {
                            map.insert(name.clone(), default.clone());
                        }
                    }
                    if let Some(field) = map.get_mut(name) {
                        child.apply_defaults(field);
                    }
                }
                if let Additional::Schema(child) = &self.additional {
                    for (name, field) in map.iter_mut() {
                        if !self.properties.contains_key(name) {
                            child.apply_defaults(field);
                        }
                    }
                }
            }
            Value::Array(items) => {
                if let Some(schema) = &self.items {
                    for item in items {
                        schema.apply_defaults(item);
                    }
                }
            }
            _ => {}
        }
    }

    /// Checks the object at the root of a custom resource (its metadata is ObjectMeta's, and
    /// checked as every kind's is).
    pub fn validate_root(&self, value: &Value, errors: &mut Errs) {
        let Some(map) = value.as_object() else {
            errors.push(FieldError::invalid(
                "",
                kind_name(value),
                "must be an object",
            ));
            return;
        };
        for name in &self.required {
            if !map.contains_key(name) {
                errors.push(FieldError::required(name.as_str(), ""));
            }
        }
        for (name, field) in map {
            if matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(child) = self.property(name) {
                child.validate(field, name, errors);
            }
        }
    }

    /// Checks `value` at `path` against this node and its children.
    pub fn validate(&self, value: &Value, path: &str, errors: &mut Errs) {
        if value.is_null() {
            if !self.nullable && (self.type_.is_some() || self.int_or_string) {
                let want = self.type_.as_deref().unwrap_or("string");
                errors.push(type_error(path, value, want));
            }
            return;
        }
        if self.int_or_string {
            if !(value.is_string() || is_integer(value)) {
                errors.push(type_error(path, value, "integer or string"));
                return;
            }
        } else if let Some(want) = &self.type_ {
            if !has_type(value, want) {
                errors.push(type_error(path, value, want));
                return;
            }
        }
        self.validate_value(value, path, errors);
        match value {
            Value::Object(map) => self.validate_object(map, path, errors),
            Value::Array(items) => self.validate_array(items, path, errors),
            _ => {}
        }
    }

    fn validate_value(&self, value: &Value, path: &str, errors: &mut Errs) {
        if !self.enumeration.is_empty() && !self.enumeration.contains(value) {
            let supported: Vec<String> = self.enumeration.iter().map(render).collect();
            let refs: Vec<&str> = supported.iter().map(String::as_str).collect();
            let mut error = FieldError::not_supported(path, value.clone(), &[]);
            error.detail = format!("supported values: {}", refs.join(", "));
            errors.push(error);
        }
        if let Some(s) = value.as_str() {
            self.validate_string(s, path, errors);
        }
        if let Some(n) = value.as_f64() {
            self.validate_number(value, n, path, errors);
        }
        for schema in &self.all_of {
            schema.validate_value_only(value, path, errors);
        }
        if !self.any_of.is_empty() && !self.any_of.iter().any(|s| s.accepts(value, path)) {
            errors.push(FieldError::invalid(
                path,
                value.clone(),
                format!("{path} in body must match at least one schema in anyOf"),
            ));
        }
        if !self.one_of.is_empty() {
            let matching = self
                .one_of
                .iter()
                .filter(|s| s.accepts(value, path))
                .count();
            if matching != 1 {
                errors.push(FieldError::invalid(
                    path,
                    value.clone(),
                    format!("{path} in body must match exactly one schema in oneOf"),
                ));
            }
        }
        if let Some(not) = &self.not {
            if not.accepts(value, path) {
                errors.push(FieldError::invalid(
                    path,
                    value.clone(),
                    format!("{path} in body should not be valid against the schema in not"),
                ));
            }
        }
    }

    /// A value-validation branch (`allOf` and friends) validates without type checks of its
    /// own when it declares no type.
    fn validate_value_only(&self, value: &Value, path: &str, errors: &mut Errs) {
        self.validate(value, path, errors);
    }

    fn accepts(&self, value: &Value, path: &str) -> bool {
        let mut scratch = Vec::new();
        self.validate(value, path, &mut scratch);
        scratch.is_empty()
    }

    fn validate_string(&self, s: &str, path: &str, errors: &mut Errs) {
        let length = s.chars().count() as u64;
        if let Some(max) = self.max_length {
            if length > max {
                errors.push(FieldError::too_long(path, max as usize));
            }
        }
        if let Some(min) = self.min_length {
            if length < min {
                errors.push(FieldError::invalid(
                    path,
                    s,
                    format!("{path} in body should be at least {min} chars long"),
                ));
            }
        }
        if let Some((source, pattern)) = &self.pattern {
            if !pattern.is_match(s) {
                errors.push(FieldError::invalid(
                    path,
                    s,
                    format!("{path} in body should match '{source}'"),
                ));
            }
        }
        if let Some(format) = &self.format {
            if !format_accepts(format, s) {
                errors.push(FieldError::invalid(
                    path,
                    s,
                    format!("{path} in body must be of type {format}: {}", go_quote(s)),
                ));
            }
        }
    }

    fn validate_number(&self, value: &Value, n: f64, path: &str, errors: &mut Errs) {
        if let Some(min) = self.minimum {
            let (bad, word) = if self.exclusive_minimum {
                (n <= min, "greater than")
            } else {
                (n < min, "greater than or equal to")
            };
            if bad {
                errors.push(FieldError::invalid(
                    path,
                    value.clone(),
                    format!("{path} in body should be {word} {}", number(min)),
                ));
            }
        }
        if let Some(max) = self.maximum {
            let (bad, word) = if self.exclusive_maximum {
                (n >= max, "less than")
            } else {
                (n > max, "less than or equal to")
            };
            if bad {
                errors.push(FieldError::invalid(
                    path,
                    value.clone(),
                    format!("{path} in body should be {word} {}", number(max)),
                ));
            }
        }
        if let Some(factor) = self.multiple_of.filter(|f| *f > 0.0) {
            let ratio = n / factor;
            if (ratio - ratio.round()).abs() > 1e-9 {
                errors.push(FieldError::invalid(
                    path,
                    value.clone(),
                    format!("{path} in body should be a multiple of {}", number(factor)),
                ));
            }
        }
    }

    fn validate_object(&self, map: &Map<String, Value>, path: &str, errors: &mut Errs) {
        for name in &self.required {
            if !map.contains_key(name) {
                errors.push(FieldError::required(child(path, name), ""));
            }
        }
        if let Some(max) = self.max_properties {
            if map.len() as u64 > max {
                errors.push(FieldError::too_many(path, map.len(), max as usize));
            }
        }
        if let Some(min) = self.min_properties {
            if (map.len() as u64) < min {
                errors.push(FieldError::invalid(
                    path,
                    map.len(),
                    format!("{path} in body should have at least {min} properties"),
                ));
            }
        }
        for (name, field) in map {
            if self.embedded_resource && matches!(name.as_str(), "apiVersion" | "kind" | "metadata")
            {
                continue;
            }
            if let Some(schema) = self.property(name) {
                schema.validate(field, &child(path, name), errors);
            }
        }
        if self.embedded_resource {
            for name in ["apiVersion", "kind"] {
                let present = map
                    .get(name)
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty());
                if !present {
                    errors.push(FieldError::required(child(path, name), "must not be empty"));
                }
            }
        }
    }

    fn validate_array(&self, items: &[Value], path: &str, errors: &mut Errs) {
        if let Some(max) = self.max_items {
            if items.len() as u64 > max {
                errors.push(FieldError::too_many(path, items.len(), max as usize));
            }
        }
        if let Some(min) = self.min_items {
            if (items.len() as u64) < min {
                errors.push(FieldError::invalid(
                    path,
                    items.len(),
                    format!("{path} in body should have at least {min} items"),
                ));
            }
        }
        if let Some(schema) = &self.items {
            for (i, item) in items.iter().enumerate() {
                schema.validate(item, &format!("{path}[{i}]"), errors);
            }
        }
        match self.list_type.as_deref() {
            Some("set") => {
                for (i, item) in items.iter().enumerate() {
                    if items[..i].contains(item) {
                        errors.push(FieldError::duplicate(format!("{path}[{i}]"), item.clone()));
                    }
                }
            }
            Some("map") => {
                let key_of = |item: &Value| -> Vec<Value> {
                    self.list_map_keys
                        .iter()
                        .map(|k| item.get(k).cloned().unwrap_or(Value::Null))
                        .collect()
                };
                let keys: Vec<Vec<Value>> = items.iter().map(key_of).collect();
                for (i, key) in keys.iter().enumerate() {
                    if keys[..i].contains(key) {
                        let shown: Map<String, Value> = self
                            .list_map_keys
                            .iter()
                            .cloned()
                            .zip(key.iter().cloned())
                            .collect();
                        errors.push(FieldError::duplicate(
                            format!("{path}[{i}]"),
                            Value::Object(shown),
                        ));
                    }
                }
            }
            _ if self.unique_items => {
                for (i, item) in items.iter().enumerate() {
                    if items[..i].contains(item) {
                        errors.push(FieldError::duplicate(format!("{path}[{i}]"), item.clone()));
                    }
                }
            }
            _ => {}
        }
    }

    /// What makes a schema not structural, in upstream's words (the CRD's
    /// `NonStructuralSchema` condition and its validation): every node with properties,
    /// items or additionalProperties declares its type, and the value-validation branches
    /// declare no types or fields of their own.
    pub fn structural_problems(&self, path: &str, problems: &mut Vec<String>) {
        let has_children = !self.properties.is_empty()
            || self.items.is_some()
            || matches!(self.additional, Additional::Schema(_));
        if self.type_.is_none() && !self.int_or_string && !self.preserve_unknown && has_children {
            problems.push(format!(
                "{path}.type: Required value: must not be empty for specified object fields"
            ));
        }
        if self.type_.as_deref() == Some("array") && self.items.is_none() {
            problems.push(format!("{path}.items: Required value: must be specified"));
        }
        for (name, child) in &self.properties {
            child.structural_problems(&format!("{path}.properties[{name}]"), problems);
        }
        if let Additional::Schema(child) = &self.additional {
            child.structural_problems(&format!("{path}.additionalProperties"), problems);
        }
        if let Some(items) = &self.items {
            items.structural_problems(&format!("{path}.items"), problems);
        }
        for (field, list) in [
            ("allOf", &self.all_of),
            ("anyOf", &self.any_of),
            ("oneOf", &self.one_of),
        ] {
            for (i, branch) in list.iter().enumerate() {
                branch.junctor_problems(&format!("{path}.{field}[{i}]"), problems);
            }
        }
        if let Some(not) = &self.not {
            not.junctor_problems(&format!("{path}.not"), problems);
        }
    }

    fn junctor_problems(&self, path: &str, problems: &mut Vec<String>) {
        if self.type_.is_some() {
            problems.push(format!(
                "{path}.type: Forbidden: must be empty to be structural"
            ));
        }
        if self.default.is_some() {
            problems.push(format!(
                "{path}.default: Forbidden: must be undefined to be structural"
            ));
        }
    }

    /// The list's `x-kubernetes-list-type` (`atomic` when it declares none, as upstream).
    pub fn list_type(&self) -> Option<&str> {
        self.list_type.as_deref()
    }

    /// The keys of a `map` list.
    pub fn list_map_keys(&self) -> &[String] {
        &self.list_map_keys
    }

    /// Whether the object is `x-kubernetes-map-type: atomic` (replaced whole by apply).
    pub fn is_atomic_map(&self) -> bool {
        self.map_type.as_deref() == Some("atomic")
    }

    /// The node at `names` (field names from the root; list items are stepped through), as
    /// server-side apply walks an object.
    pub fn at_names(&self, names: &[&str]) -> Option<&Schema> {
        let mut node = self;
        for name in names {
            if let Some(items) = node.items.as_deref() {
                node = items;
            }
            node = node.property(name)?;
        }
        Some(node)
    }

    /// The items' schema of an array node.
    pub fn items(&self) -> Option<&Schema> {
        self.items.as_deref()
    }
}

fn str_of(object: &Map<String, Value>, name: &str) -> Option<String> {
    object
        .get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

fn flag(object: &Map<String, Value>, name: &str) -> bool {
    object.get(name).and_then(Value::as_bool).unwrap_or(false)
}

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn is_integer(value: &Value) -> bool {
    value.is_i64() || value.is_u64()
}

fn has_type(value: &Value, want: &str) -> bool {
    match want {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => is_integer(value),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        _ => true,
    }
}

/// The JSON type of a value as upstream's messages name it.
fn kind_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"`.
fn type_error(path: &str, value: &Value, want: &str) -> FieldError {
    let found = kind_name(value);
    FieldError::invalid(
        path,
        found,
        format!("{path} in body must be of type {want}: {}", go_quote(found)),
    )
}

fn render(value: &Value) -> String {
    match value {
        Value::String(s) => go_quote(s),
        other => other.to_string(),
    }
}

/// A bound as upstream prints it: integral bounds without a fraction.
fn number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}

/// The string formats upstream's CRD validation checks (unknown formats pass, as upstream).
fn format_accepts(format: &str, s: &str) -> bool {
    match format {
        "int32" => s.parse::<i32>().is_ok(),
        "int64" => s.parse::<i64>().is_ok(),
        "date-time" | "datetime" => s.parse::<jiff::Timestamp>().is_ok(),
        "date" => s.parse::<jiff::civil::Date>().is_ok(),
        "uuid" => uuid::Uuid::parse_str(s).is_ok() && s.len() == 36,
        "byte" => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(s).is_ok()
        }
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => s.split_once('/').is_some_and(|(ip, bits)| {
            ip.parse::<std::net::IpAddr>().is_ok() && bits.parse::<u8>().is_ok()
        }),
        "hostname" => crate::validation::names::is_dns1123_subdomain(s).is_empty(),
        _ => true,
    }
}
