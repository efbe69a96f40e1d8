//! Sets of field paths and their FieldsV1 form (`metadata.managedFields[].fieldsV1`).
//!
//! A path is a list of [`Element`]s: a field of a map (`f:<name>`), an item of a map-list by
//! its key fields (`k:{"name":"x"}`), an item of a set-list by its value (`v:<json>`) or an
//! item of a list by position (`i:<n>`, only ever decoded). A set is a tree: at each node the
//! elements that are *members* (the path itself is in the set, written `.` when the node also
//! has children) and the children below each element.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Element {
    /// A field of a map or struct, by name.
    Field(String),
    /// An item of an associative list: its key fields as a compact JSON object, keys sorted.
    Key(String),
    /// An item of a set-list: the item as compact JSON.
    Value(String),
    /// An item of a list by index.
    Index(usize),
}

impl Element {
    pub fn field(name: &str) -> Self {
        Element::Field(name.to_string())
    }

    /// The FieldsV1 key of this element.
    fn encode(&self) -> String {
        match self {
            Element::Field(name) => format!("f:{name}"),
            Element::Key(json) => format!("k:{json}"),
            Element::Value(json) => format!("v:{json}"),
            Element::Index(index) => format!("i:{index}"),
        }
    }

    fn decode(text: &str) -> Result<Self, String> {
        let (prefix, rest) = text
            .split_once(':')
            .ok_or_else(|| format!("invalid path element {text:?}"))?;
        let json =
            |rest: &str| serde_json::from_str::<Value>(rest).map_err(|e| format!("{text:?}: {e}"));
        match prefix {
            "f" => Ok(Element::Field(rest.to_string())),
            "k" => match json(rest)? {
                // serde_json's maps are sorted, so this is the canonical form.
                key @ Value::Object(_) => Ok(Element::Key(key.to_string())),
                _ => Err(format!("{text:?}: a key must be a JSON object")),
            },
            "v" => Ok(Element::Value(json(rest)?.to_string())),
            "i" => rest
                .parse()
                .map(Element::Index)
                .map_err(|_| format!("{text:?}: invalid index")),
            _ => Err(format!("unknown path element prefix in {text:?}")),
        }
    }

    /// The element as upstream prints it in conflicts: `.name`, `[name="x"]`, `[="v"]`, `[0]`.
    fn display(&self) -> String {
        match self {
            Element::Field(name) => format!(".{name}"),
            Element::Key(json) => {
                let parts = match serde_json::from_str::<Value>(json) {
                    Ok(Value::Object(keys)) => keys
                        .iter()
                        .map(|(name, value)| format!("{name}={value}"))
                        .collect::<Vec<_>>(),
                    _ => vec![json.clone()],
                };
                format!("[{}]", parts.join(","))
            }
            Element::Value(json) => format!("[={json}]"),
            Element::Index(index) => format!("[{index}]"),
        }
    }
}

/// A path as upstream prints it, e.g. `.spec.template.spec.containers[name="nginx"].image`.
pub fn path_string(path: &[Element]) -> String {
    path.iter().map(Element::display).collect()
}

/// A set of field paths.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<Element>,
    /// Never holds an empty set.
    children: BTreeMap<Element, FieldSet>,
}

impl FieldSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// Adds `path`; the empty path (the root) is never a member.
    pub fn insert(&mut self, path: &[Element]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    pub fn has(&self, path: &[Element]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    pub fn has_member(&self, element: &Element) -> bool {
        self.members.contains(element)
    }

    /// The paths below `element`, relative to it.
    pub fn child(&self, element: &Element) -> Option<&FieldSet> {
        self.children.get(element)
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (element, child) in &other.children {
            let merged = match out.children.get(element) {
                Some(mine) => mine.union(child),
                None => child.clone(),
            };
            out.children.insert(element.clone(), merged);
        }
        out
    }

    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::new();
        out.members = self.members.intersection(&other.members).cloned().collect();
        for (element, child) in &self.children {
            if let Some(theirs) = other.children.get(element) {
                out.put_child(element, child.intersection(theirs));
            }
        }
        out
    }

    /// The paths of `self` that are not paths of `other` (a member of `other` does not remove
    /// the paths below it).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::new();
        out.members = self.members.difference(&other.members).cloned().collect();
        for (element, child) in &self.children {
            let rest = match other.children.get(element) {
                Some(theirs) => child.difference(theirs),
                None => child.clone(),
            };
            out.put_child(element, rest);
        }
        out
    }

    /// This set plus every named field on the way to its paths (upstream's
    /// `EnsureNamedFieldsAreMembers`, with every map field taken as a named field).
    pub fn with_named_fields(&self) -> FieldSet {
        let mut out = FieldSet::new();
        out.members = self.members.clone();
        for (element, child) in &self.children {
            if matches!(element, Element::Field(_)) {
                out.members.insert(element.clone());
            }
            out.put_child(element, child.with_named_fields());
        }
        out
    }

    /// Every member path: the members of a node before the paths below it.
    pub fn paths(&self) -> Vec<Vec<Element>> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<Element>, out: &mut Vec<Vec<Element>>) {
        for member in &self.members {
            let mut path = prefix.clone();
            path.push(member.clone());
            out.push(path);
        }
        for (element, child) in &self.children {
            prefix.push(element.clone());
            child.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    fn put_child(&mut self, element: &Element, child: FieldSet) {
        if !child.is_empty() {
            self.children.insert(element.clone(), child);
        }
    }

    /// The FieldsV1 JSON of this set.
    pub fn to_fields_v1(&self) -> Value {
        let mut out = Map::new();
        for member in &self.members {
            if !self.children.contains_key(member) {
                out.insert(member.encode(), Value::Object(Map::new()));
            }
        }
        for (element, child) in &self.children {
            let mut encoded = match child.to_fields_v1() {
                Value::Object(map) => map,
                _ => Map::new(),
            };
            if self.members.contains(element) {
                encoded.insert(".".to_string(), Value::Object(Map::new()));
            }
            out.insert(element.encode(), Value::Object(encoded));
        }
        Value::Object(out)
    }

    /// Parses FieldsV1 JSON.
    pub fn from_fields_v1(value: &Value) -> Result<FieldSet, String> {
        let Value::Object(map) = value else {
            return Err("FieldsV1 must be a JSON object".to_string());
        };
        let mut out = FieldSet::new();
        for (key, inner) in map {
            if key == "." {
                continue;
            }
            let element = Element::decode(key)?;
            let Value::Object(inner_map) = inner else {
                return Err(format!("the value of {key:?} must be a JSON object"));
            };
            if inner_map.is_empty() || inner_map.contains_key(".") {
                out.members.insert(element.clone());
            }
            out.put_child(&element, FieldSet::from_fields_v1(inner)?);
        }
        Ok(out)
    }
}
