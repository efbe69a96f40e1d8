//! The JSONPath of `additionalPrinterColumns` (and `/scale`'s paths): the subset of
//! kubectl's JSONPath that CRDs use — `.spec.replicas`, `.items[0]`, `.items[*].name`,
//! `['dotted.key']`, and filters `[?(@.type=="Ready")]` — parsed once when the CRD is served.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
enum Step {
    Field(String),
    Index(i64),
    All,
    /// `[?(@.a.b=="v")]` (or `!=`): items whose field equals (or not) a literal.
    Filter {
        path: Vec<String>,
        equal: bool,
        literal: Value,
    },
}

/// A parsed path.
#[derive(Clone, Debug, PartialEq)]
pub struct JsonPath {
    steps: Vec<Step>,
}

impl JsonPath {
    /// Parses `.a.b[0]` (surrounding `{}` allowed, as kubectl writes them).
    pub fn parse(source: &str) -> Result<Self, String> {
        let text = source.trim();
        let text = text
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .unwrap_or(text);
        let bad = || format!("{source}: not a JSONPath this server understands");
        let mut steps = Vec::new();
        let chars: Vec<char> = text.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '.' => {
                    let start = i + 1;
                    let mut end = start;
                    while end < chars.len() && chars[end] != '.' && chars[end] != '[' {
                        end += 1;
                    }
                    let name: String = chars[start..end].iter().collect();
                    if name.is_empty() {
                        return Err(bad());
                    }
                    steps.push(Step::Field(name));
                    i = end;
                }
                '[' => {
                    let close = find_close(&chars, i).ok_or_else(bad)?;
                    let inner: String = chars[i + 1..close].iter().collect();
                    steps.push(bracket(inner.trim()).ok_or_else(bad)?);
                    i = close + 1;
                }
                '$' if i == 0 => i += 1,
                _ => return Err(bad()),
            }
        }
        Ok(JsonPath { steps })
    }

    /// The path of plain fields (`.spec.replicas` → `["spec", "replicas"]`), for writes.
    pub fn fields(&self) -> Option<Vec<&str>> {
        self.steps
            .iter()
            .map(|step| match step {
                Step::Field(name) => Some(name.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Every value the path reaches in `root`.
    pub fn find<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        let mut current = vec![root];
        for step in &self.steps {
            let mut next = Vec::new();
            for value in current {
                match step {
                    Step::Field(name) => next.extend(value.get(name.as_str())),
                    Step::Index(index) => {
                        if let Some(items) = value.as_array() {
                            let at = if *index < 0 {
                                items.len() as i64 + index
                            } else {
                                *index
                            };
                            next.extend(usize::try_from(at).ok().and_then(|at| items.get(at)));
                        }
                    }
                    Step::All => match value {
                        Value::Array(items) => next.extend(items.iter()),
                        Value::Object(map) => next.extend(map.values()),
                        _ => {}
                    },
                    Step::Filter {
                        path,
                        equal,
                        literal,
                    } => {
                        if let Some(items) = value.as_array() {
                            next.extend(items.iter().filter(|item| {
                                let field = path.iter().try_fold(*item, |v, name| v.get(name));
                                (field == Some(literal)) == *equal
                            }));
                        }
                    }
                }
            }
            current = next;
        }
        current
    }
}

fn find_close(chars: &[char], open: usize) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut depth = 0;
    for (offset, c) in chars[open..].iter().enumerate() {
        match (quote, c) {
            (Some(q), c) if *c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(*c),
            (None, '[') | (None, '(') => depth += 1,
            (None, ']') | (None, ')') => {
                depth -= 1;
                if depth == 0 && *c == ']' {
                    return Some(open + offset);
                }
            }
            _ => {}
        }
    }
    None
}

fn bracket(inner: &str) -> Option<Step> {
    if inner == "*" {
        return Some(Step::All);
    }
    if let Ok(index) = inner.parse::<i64>() {
        return Some(Step::Index(index));
    }
    if let Some(name) = unquote(inner) {
        return Some(Step::Field(name));
    }
    let filter = inner.strip_prefix("?(")?.strip_suffix(')')?.trim();
    let (left, equal, right) = if let Some((l, r)) = filter.split_once("==") {
        (l, true, r)
    } else {
        let (l, r) = filter.split_once("!=")?;
        (l, false, r)
    };
    let path: Vec<String> = left
        .trim()
        .strip_prefix("@.")?
        .split('.')
        .map(str::to_string)
        .collect();
    let right = right.trim();
    let literal = match unquote(right) {
        Some(s) => Value::from(s),
        None => serde_json::from_str(right).ok()?,
    };
    Some(Step::Filter {
        path,
        equal,
        literal,
    })
}

fn unquote(text: &str) -> Option<String> {
    let quoted = (text.starts_with('\'') && text.ends_with('\''))
        || (text.starts_with('"') && text.ends_with('"'));
    (quoted && text.len() >= 2).then(|| text[1..text.len() - 1].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_reach_fields_items_keys_and_filtered_conditions() {
        let object = json!({
            "spec": {"replicas": 3, "ports": [{"port": 80}, {"port": 443}]},
            "metadata": {"annotations": {"example.com/tier": "gold"}},
            "status": {"conditions": [
                {"type": "Issuing", "status": "False"},
                {"type": "Ready", "status": "True", "message": "ok"}
            ]}
        });
        let find = |path: &str| -> Vec<Value> {
            JsonPath::parse(path)
                .expect("parses")
                .find(&object)
                .into_iter()
                .cloned()
                .collect()
        };
        assert_eq!(find(".spec.replicas"), vec![json!(3)]);
        assert_eq!(find("{.spec.ports[1].port}"), vec![json!(443)]);
        assert_eq!(find(".spec.ports[*].port"), vec![json!(80), json!(443)]);
        assert_eq!(find(".spec.ports[-1].port"), vec![json!(443)]);
        assert_eq!(
            find(".metadata.annotations['example.com/tier']"),
            vec![json!("gold")]
        );
        assert_eq!(
            find(".status.conditions[?(@.type==\"Ready\")].status"),
            vec![json!("True")]
        );
        assert_eq!(
            find(".status.conditions[?(@.type!='Ready')].type"),
            vec![json!("Issuing")]
        );
        assert!(find(".status.missing").is_empty());
        assert!(JsonPath::parse("spec").is_err());
        assert!(JsonPath::parse(".spec[").is_err());
        assert_eq!(
            JsonPath::parse(".spec.replicas").expect("parses").fields(),
            Some(vec!["spec", "replicas"])
        );
    }
}
