//! YAML request bodies (and server-side apply patches) decoded into JSON values with a bound
//! on what aliases expand to. The YAML library replays an anchored node at every alias, so
//! `a: &a [x, x, …]` and `b: [*a, *a, …]` in 100 KB would build billions of nodes; here every
//! node costs one unit and every scalar its length, and a document whose expansion costs more
//! than a body of its size could ever cost without aliases is refused, as upstream's YAML
//! decoder refuses "excessive aliasing".

use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// What upstream's YAML library says about an alias bomb.
pub(crate) const EXCESSIVE_ALIASING: &str = "document contains excessive aliasing";

/// The expansion a document of `len` bytes may have: alias-free YAML costs at most about its
/// own length (a node takes at least one byte, a scalar at least its text), so twice that plus
/// some slack leaves room for modest anchors.
fn budget_for(len: usize) -> usize {
    len.saturating_mul(2).saturating_add(64 * 1024)
}

/// Decodes a YAML document into a JSON value, refusing alias expansion past the budget.
pub(crate) fn decode_bounded(body: &[u8]) -> Result<Value, yaml_serde::Error> {
    let mut budget = budget_for(body.len());
    let deserializer = yaml_serde::Deserializer::from_slice(body);
    BoundedValue {
        budget: &mut budget,
    }
    .deserialize(deserializer)
}

struct BoundedValue<'a> {
    budget: &'a mut usize,
}

impl BoundedValue<'_> {
    fn spend<E: serde::de::Error>(&mut self, cost: usize) -> Result<(), E> {
        match self.budget.checked_sub(cost.saturating_add(1)) {
            Some(left) => {
                *self.budget = left;
                Ok(())
            }
            None => {
                *self.budget = 0;
                Err(E::custom(EXCESSIVE_ALIASING))
            }
        }
    }
}

impl<'de> DeserializeSeed<'de> for BoundedValue<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for BoundedValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E: serde::de::Error>(mut self, v: bool) -> Result<Value, E> {
        self.spend(0)?;
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: serde::de::Error>(mut self, v: i64) -> Result<Value, E> {
        self.spend(0)?;
        Ok(Value::from(v))
    }
    fn visit_u64<E: serde::de::Error>(mut self, v: u64) -> Result<Value, E> {
        self.spend(0)?;
        Ok(Value::from(v))
    }
    fn visit_f64<E: serde::de::Error>(mut self, v: f64) -> Result<Value, E> {
        self.spend(0)?;
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: serde::de::Error>(mut self, v: &str) -> Result<Value, E> {
        self.spend(v.len())?;
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E: serde::de::Error>(mut self, v: String) -> Result<Value, E> {
        self.spend(v.len())?;
        Ok(Value::String(v))
    }
    fn visit_unit<E: serde::de::Error>(mut self) -> Result<Value, E> {
        self.spend(0)?;
        Ok(Value::Null)
    }
    fn visit_none<E: serde::de::Error>(mut self) -> Result<Value, E> {
        self.spend(0)?;
        Ok(Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        self.spend(0)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(BoundedValue {
            budget: &mut *self.budget,
        })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        self.spend(0)?;
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key.len() >= *self.budget {
                return Err(A::Error::custom(EXCESSIVE_ALIASING));
            }
            *self.budget -= key.len();
            let value = map.next_value_seed(BoundedValue {
                budget: &mut *self.budget,
            })?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_documents_decode_as_json_values() {
        let value =
            decode_bounded(b"metadata:\n  name: a\ndata:\n  k: v\nlist: [1, 2.5, true, null]\n")
                .expect("decodes");
        assert_eq!(
            value,
            serde_json::json!({"metadata": {"name": "a"}, "data": {"k": "v"}, "list": [1, 2.5, true, null]})
        );
    }

    #[test]
    fn modest_anchors_still_work() {
        let value = decode_bounded(b"a: &x {k: v}\nb: *x\n").expect("decodes");
        assert_eq!(value["b"]["k"], "v");
    }

    #[test]
    fn an_alias_bomb_is_refused_before_it_expands() {
        let mut body = String::from("a: &a [");
        body.push_str(&vec!["xxxxxxxxxx"; 5_000].join(","));
        body.push_str("]\nb: [");
        body.push_str(&vec!["*a"; 5_000].join(","));
        body.push_str("]\n");
        let error = decode_bounded(body.as_bytes()).expect_err("refused");
        assert!(error.to_string().contains(EXCESSIVE_ALIASING), "{error}");
    }

    #[test]
    fn an_aliased_long_string_is_refused_too() {
        let body = format!(
            "a: &a \"{}\"\nb: [{}]\n",
            "x".repeat(100_000),
            vec!["*a"; 100].join(",")
        );
        let error = decode_bounded(body.as_bytes()).expect_err("refused");
        assert!(error.to_string().contains(EXCESSIVE_ALIASING), "{error}");
    }

    #[test]
    fn a_large_alias_free_document_fits_its_budget() {
        let mut body = String::from("items: [");
        body.push_str(&vec!["0"; 1_000_000].join(","));
        body.push_str("]\n");
        let value = decode_bounded(body.as_bytes()).expect("decodes");
        assert_eq!(value["items"].as_array().map(Vec::len), Some(1_000_000));
    }
}
