//! What the cost estimate knows of a value: its size range and, for containers and objects,
//! their insides — from a CRD schema node (with upstream's worst cases where the schema sets no
//! bound) or from a literal — and the saturating arithmetic the estimate is done in.

use std::collections::BTreeMap;

use serde_json::Value;

use super::MAX_REQUEST_SIZE_BYTES;

/// What an expression's value is known to be: its size range (characters, items or entries;
/// `u64::MAX` when unbounded) and, for containers and objects, what is inside.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Shape {
    pub(super) min: u64,
    pub(super) max: u64,
    pub(super) kind: Kind,
}

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Kind {
    Scalar,
    Str,
    List(Box<Shape>),
    Map(Box<Shape>),
    Object(BTreeMap<String, Shape>),
    /// The element of an empty list literal: takes the shape of whatever joins it.
    Nothing,
    Unknown,
}

impl Shape {
    pub(super) fn new(min: u64, max: u64, kind: Kind) -> Self {
        Self { min, max, kind }
    }

    pub(super) fn unknown() -> Self {
        Self::new(0, u64::MAX, Kind::Unknown)
    }

    pub(super) fn scalar() -> Self {
        Self::new(1, 1, Kind::Scalar)
    }

    /// The shape of an element when iterating (list items, map keys).
    pub(super) fn element(&self) -> Shape {
        match &self.kind {
            Kind::List(item) => (**item).clone(),
            // Map keys are strings of no declared length (upstream's key type has none).
            Kind::Map(_) => Shape::new(0, 0, Kind::Str),
            _ => Shape::unknown(),
        }
    }

    /// Either of two shapes.
    pub(super) fn union(&self, other: &Shape) -> Shape {
        match (&self.kind, &other.kind) {
            (Kind::Nothing, _) => return other.clone(),
            (_, Kind::Nothing) => return self.clone(),
            _ => {}
        }
        let kind = if self.kind == other.kind {
            self.kind.clone()
        } else {
            match (&self.kind, &other.kind) {
                (Kind::Str, Kind::Str) => Kind::Str,
                (Kind::Scalar, Kind::Scalar) => Kind::Scalar,
                _ => Kind::Unknown,
            }
        };
        Shape::new(self.min.min(other.min), self.max.max(other.max), kind)
    }

    pub(super) fn is_str(&self) -> bool {
        matches!(self.kind, Kind::Str)
    }
}

pub(super) fn add(a: u64, b: u64) -> u64 {
    a.saturating_add(b)
}

pub(super) fn mul(a: u64, b: u64) -> u64 {
    a.saturating_mul(b)
}

/// `ceil(x * factor)`, saturating.
pub(super) fn factor(x: u64, factor: f64) -> u64 {
    let scaled = (x as f64 * factor).ceil();
    if scaled >= u64::MAX as f64 {
        u64::MAX
    } else {
        scaled as u64
    }
}

/// The shape of a schema node as CEL sees it, and the fewest bytes its JSON can take (which
/// bounds how many of it fit in a request when nothing else does).
pub(super) fn shape_of(schema: &Value, is_root: bool) -> (Shape, u64) {
    let unbounded_string = MAX_REQUEST_SIZE_BYTES - 2;
    let max_length = schema["maxLength"].as_u64();
    if schema["x-kubernetes-int-or-string"] == true {
        let max = max_length.map_or(unbounded_string, |m| m.saturating_mul(4));
        return (Shape::new(0, max, Kind::Str), 1);
    }
    match schema["type"].as_str().unwrap_or("") {
        "array" => {
            let Some(items) = schema.get("items").filter(|i| i.is_object()) else {
                return (Shape::unknown(), 2);
            };
            let (item, item_min) = shape_of(items, false);
            let max = schema["maxItems"]
                .as_u64()
                .unwrap_or((MAX_REQUEST_SIZE_BYTES - 2) / (item_min + 1));
            (Shape::new(0, max, Kind::List(Box::new(item))), 2)
        }
        "object" => {
            if let Some(values) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                let (value, value_min) = shape_of(values, false);
                let max = schema["maxProperties"]
                    .as_u64()
                    .unwrap_or((MAX_REQUEST_SIZE_BYTES - 2) / (value_min + 6));
                return (Shape::new(0, max, Kind::Map(Box::new(value))), 2);
            }
            let has_properties = schema["properties"]
                .as_object()
                .is_some_and(|p| !p.is_empty());
            if !has_properties && schema["x-kubernetes-preserve-unknown-fields"] == true {
                return (Shape::unknown(), 2);
            }
            let required: Vec<&str> = schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let mut fields = BTreeMap::new();
            let mut min_size = 2u64;
            for (name, property) in schema["properties"].as_object().into_iter().flatten() {
                let (shape, min) = shape_of(property, false);
                if required.contains(&name.as_str()) && property.get("default").is_none() {
                    min_size = add(min_size, add(name.len() as u64, add(min, 4)));
                }
                fields.insert(name.clone(), shape);
            }
            if is_root {
                let string = Shape::new(0, unbounded_string, Kind::Str);
                fields.entry("kind".into()).or_insert(string.clone());
                fields.entry("apiVersion".into()).or_insert(string.clone());
                let mut meta = BTreeMap::new();
                meta.insert("name".to_string(), string.clone());
                meta.insert("generateName".to_string(), string);
                fields
                    .entry("metadata".into())
                    .or_insert(Shape::new(0, 0, Kind::Object(meta)));
            }
            (Shape::new(0, 0, Kind::Object(fields)), min_size)
        }
        "string" => {
            let (max, min) = match schema["format"].as_str() {
                Some("byte") => (max_length.unwrap_or(unbounded_string), 2),
                Some("duration") => (32, 3),
                Some("date") => (12, 12),
                Some("date-time") => (32, 21),
                _ => {
                    let enum_max = schema["enum"].as_array().map(|values| {
                        values
                            .iter()
                            .filter_map(Value::as_str)
                            .map(|v| v.len() as u64)
                            .max()
                            .unwrap_or(0)
                    });
                    let max = max_length
                        .map(|m| m.saturating_mul(4))
                        .or(enum_max)
                        .unwrap_or(unbounded_string);
                    (max, 2)
                }
            };
            (Shape::new(0, max, Kind::Str), min)
        }
        "boolean" => (Shape::new(0, 0, Kind::Scalar), 4),
        "integer" | "number" => (Shape::new(0, 0, Kind::Scalar), 1),
        _ => (Shape::unknown(), 1),
    }
}

/// The shape of an actual value of a schema node: its real sizes (characters, items,
/// entries), for costing a write before its rules run.
pub(super) fn shape_of_value(schema: &Value, value: &Value) -> Shape {
    match value {
        Value::String(text) => {
            let n = text.chars().count() as u64;
            Shape::new(n, n, Kind::Str)
        }
        Value::Array(items) => {
            let item_schema = &schema["items"];
            let item = items
                .iter()
                .map(|item| shape_of_value(item_schema, item))
                .reduce(|a, b| a.union(&b))
                .unwrap_or_else(|| Shape::new(0, 0, Kind::Nothing));
            let n = items.len() as u64;
            Shape::new(n, n, Kind::List(Box::new(item)))
        }
        Value::Object(map) => {
            if let Some(values) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                let value = map
                    .values()
                    .map(|v| shape_of_value(values, v))
                    .reduce(|a, b| a.union(&b))
                    .unwrap_or_else(|| Shape::new(0, 0, Kind::Nothing));
                let n = map.len() as u64;
                return Shape::new(n, n, Kind::Map(Box::new(value)));
            }
            // A field the object lacks costs nothing: reaching it ends the evaluation with
            // an error, and `has()` guards it.
            let mut fields: BTreeMap<String, Shape> = schema["properties"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(name, _)| (name.clone(), Shape::new(0, 0, Kind::Nothing)))
                .collect();
            for (name, v) in map {
                fields.insert(name.clone(), shape_of_value(&schema["properties"][name], v));
            }
            Shape::new(0, 0, Kind::Object(fields))
        }
        _ => Shape::new(0, 0, Kind::Scalar),
    }
}
