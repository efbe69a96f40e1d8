//! List items by identity in constant time: the set unions, merges by key and reorderings of
//! strategic merge patch look items up by their merge key (or, for primitive lists, by the
//! value itself), which done by scanning made a merge of two 100k-item lists quadratic.
//! `serde_json::Value` has no hash, so an identity is its canonical text (object keys sorted).

use std::collections::HashMap;

use serde_json::Value;

/// The canonical text of a value: equal values (`serde_json` equality) give equal texts.
pub(super) fn identity(value: &Value) -> String {
    let mut text = String::new();
    write_canonical(value, &mut text);
    text
}

fn write_canonical(value: &Value, text: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            text.push('{');
            for key in keys {
                text.push_str(&Value::String(key.clone()).to_string());
                text.push(':');
                if let Some(item) = map.get(key) {
                    write_canonical(item, text);
                }
                text.push(',');
            }
            text.push('}');
        }
        Value::Array(items) => {
            text.push('[');
            for item in items {
                write_canonical(item, text);
                text.push(',');
            }
            text.push(']');
        }
        scalar => text.push_str(&scalar.to_string()),
    }
}

/// The first position of each identity in a list of identities.
#[derive(Debug, Default)]
pub(super) struct Positions {
    first: HashMap<String, usize>,
}

impl Positions {
    pub fn of(ids: &[Value]) -> Self {
        let mut positions = Self::default();
        for (at, id) in ids.iter().enumerate() {
            positions.first.entry(identity(id)).or_insert(at);
        }
        positions
    }

    pub fn get(&self, id: &Value) -> Option<usize> {
        self.first.get(&identity(id)).copied()
    }

    /// Records `id` at `at` unless it already has a position; true when it was new.
    pub fn insert(&mut self, id: &Value, at: usize) -> bool {
        let mut fresh = false;
        self.first.entry(identity(id)).or_insert_with(|| {
            fresh = true;
            at
        });
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_values_have_equal_identities_whatever_their_key_order() {
        let left: Value =
            serde_json::from_str(r#"{"b": 1, "a": [1, {"y": 2, "x": 1}]}"#).expect("json");
        let right = json!({"a": [1, {"x": 1, "y": 2}], "b": 1});
        assert_eq!(identity(&left), identity(&right));
        assert_ne!(identity(&json!("1")), identity(&json!(1)));
    }

    #[test]
    fn positions_are_first_occurrences() {
        let ids = vec![json!("a"), json!("b"), json!("a")];
        let mut positions = Positions::of(&ids);
        assert_eq!(positions.get(&json!("a")), Some(0));
        assert_eq!(positions.get(&json!("c")), None);
        assert!(positions.insert(&json!("c"), 3));
        assert!(!positions.insert(&json!("a"), 4));
    }
}
