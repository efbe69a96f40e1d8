//! JSON request bodies decoded in one linear pass while noticing keys that appear twice in
//! one object. The path of the value being decoded is kept as a stack of segments and only
//! rendered as text (`metadata.name`, `spec.list[3]`) for a duplicate, so a long key above a
//! long list costs its length once, not once per item.

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::paths::{FieldPath, Recorded};

/// Decodes `body` as one JSON value, recording duplicate keys (at most
/// [`Recorded::MAX_ITEMS`] of them) with their paths.
pub(super) fn decode_tracking_duplicates(
    body: &[u8],
) -> Result<(Value, Vec<String>), serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let mut tracker = Tracker {
        path: FieldPath::default(),
        duplicates: Recorded::default(),
    };
    let value = TrackedValue {
        tracker: &mut tracker,
    }
    .deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok((value, tracker.duplicates.into_items()))
}

struct Tracker {
    path: FieldPath,
    duplicates: Recorded,
}

struct TrackedValue<'a> {
    tracker: &'a mut Tracker,
}

impl<'de> DeserializeSeed<'de> for TrackedValue<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TrackedValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            self.tracker.path.push_index(items.len());
            let item = seq.next_element_seed(TrackedValue {
                tracker: &mut *self.tracker,
            });
            self.tracker.path.pop();
            match item? {
                Some(item) => items.push(item),
                None => break,
            }
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.tracker.path.push_key(key);
            let value = map.next_value_seed(TrackedValue {
                tracker: &mut *self.tracker,
            });
            let duplicate = value.is_ok() && {
                let key = self.tracker.path.last_key().unwrap_or_default();
                object.contains_key(key)
            };
            if duplicate {
                let path = &self.tracker.path;
                self.tracker.duplicates.record_with(|| path.render());
            }
            let key = self.tracker.path.pop_key();
            object.insert(key, value?);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_found_in_nested_objects_and_lists() {
        let body = br#"{"spec":{"list":[{"a":1},{"a":1,"a":2}]},"x":1,"x":2}"#;
        let (value, duplicates) = decode_tracking_duplicates(body).expect("decodes");
        assert_eq!(duplicates, vec!["spec.list[1].a", "x"]);
        assert_eq!(value["spec"]["list"][1]["a"], 2);
    }

    #[test]
    fn a_long_key_above_a_long_list_decodes_in_linear_time() {
        // Quadratic path building made this minutes of CPU: 1.5 MB key, 750k items.
        let key = "k".repeat(1_500_000);
        let mut body = format!("{{\"{key}\":[");
        body.push_str(&vec!["0"; 750_000].join(","));
        body.push_str("]}");
        let started = std::time::Instant::now();
        let (value, duplicates) = decode_tracking_duplicates(body.as_bytes()).expect("decodes");
        assert!(duplicates.is_empty());
        assert_eq!(value[&key].as_array().map(Vec::len), Some(750_000));
        // Generous for a debug build on a loaded machine; the quadratic form took minutes.
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
    }

    #[test]
    fn many_duplicates_are_recorded_up_to_the_cap() {
        let mut body = String::from("{");
        for _ in 0..10_000 {
            body.push_str("\"a\":1,");
        }
        body.push_str("\"a\":1}");
        let (_, duplicates) = decode_tracking_duplicates(body.as_bytes()).expect("decodes");
        assert_eq!(duplicates.len(), Recorded::MAX_ITEMS);
    }
}
