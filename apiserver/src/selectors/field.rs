//! Field selectors: upstream's `k=v` / `k==v` / `k!=v` terms, comma = AND, backslash escapes.

use std::collections::BTreeMap;
use std::fmt;

use super::SelectorError;

/// One `field=value` or `field!=value` term.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Term {
    field: String,
    value: String,
    negated: bool,
}

/// A parsed field selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector {
    terms: Vec<Term>,
}

impl FieldSelector {
    /// Parses a `fieldSelector` string as upstream's `fields.ParseSelector` does.
    /// Field names are taken as written; [`super::check_supported`] decides if a kind has them.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut parts = split_terms(s);
        parts.sort_unstable();
        let mut terms = Vec::new();
        for part in parts.into_iter().filter(|p| !p.is_empty()) {
            let Some((field, op, raw)) = split_term(part) else {
                return Err(SelectorError::InvalidFieldSelector(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let value = unescape(raw).map_err(SelectorError::InvalidFieldSelector)?;
            terms.push(Term {
                field: field.to_string(),
                value,
                negated: op == "!=",
            });
        }
        Ok(Self { terms })
    }

    /// True when the selector places no restriction.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The value required for `field` by an `=`/`==` term, if any.
    pub fn exact(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.field == field && !t.negated)
            .map(|t| t.value.as_str())
    }

    /// Every field named, in the selector's (sorted) term order, without repeats.
    pub fn fields(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for t in &self.terms {
            if !out.contains(&t.field.as_str()) {
                out.push(&t.field);
            }
        }
        out
    }

    /// Whether a field set satisfies every term; a field not in the set reads as `""`.
    pub fn matches(&self, fields: &BTreeMap<String, String>) -> bool {
        self.terms.iter().all(|t| {
            let got = fields.get(&t.field).map(String::as_str).unwrap_or("");
            (got == t.value) != t.negated
        })
    }
}

impl fmt::Display for FieldSelector {
    /// Upstream's canonical form, values re-escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = if t.negated { "!=" } else { "=" };
            write!(f, "{}{op}{}", t.field, escape(&t.value))?;
        }
        Ok(())
    }
}

/// Escapes `\`, `,` and `=` so a literal value can sit in a field selector.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Splits on commas that are not escaped; escapes stay in the terms.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// Splits a term at the first operator (`!=`, then `==`, then `=` at each position).
fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for op in ["!=", "==", "="] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], op, value));
            }
        }
    }
    None
}

/// Resolves `\\`, `\,` and `\=`; rejects other escapes and bare `,`/`=` as upstream does.
fn unescape(s: &str) -> Result<String, String> {
    if !s.contains(['\\', ',', '=']) {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(format!(
                    "invalid field selector: invalid escape sequence: \\{c}"
                ));
            }
            out.push(c);
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' || c == '=' {
            // Go prints the rune with %v, i.e. as its number.
            return Err(format!(
                "invalid field selector: unescaped character in value: {}",
                c as u32
            ));
        } else {
            out.push(c);
        }
    }
    if in_slash {
        return Err("invalid field selector: invalid escape sequence: \\".to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn valid_selectors_parse_to_their_canonical_form() {
        let cases = [
            ("", ""),
            (",", ""),
            ("a=b", "a=b"),
            ("a==b", "a=b"),
            ("a!=b", "a!=b"),
            ("a=", "a="),
            ("a!=", "a!="),
            ("c=d,a=b", "a=b,c=d"),
            ("metadata.name=x,", "metadata.name=x"),
            ("a=b\\,c", "a=b\\,c"),
            ("a=\\=\\\\", "a=\\=\\\\"),
            ("a=!b", "a=!b"),
            ("a= b ", "a= b "),
            ("=b", "=b"),
            ("spec.nodeName=node-1", "spec.nodeName=node-1"),
            ("a=ünï", "a=ünï"),
        ];
        for (input, want) in cases {
            let sel = FieldSelector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(sel.to_string(), want, "input {input:?}");
        }
    }

    #[test]
    fn malformed_selectors_fail_with_upstream_messages() {
        let cases = [
            ("a", "invalid selector: 'a'; can't understand 'a'"),
            ("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"),
            (
                "a in (b)",
                "invalid selector: 'a in (b)'; can't understand 'a in (b)'",
            ),
            (
                "a=b=c",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                "a===b",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                "a=b\\x",
                "invalid field selector: invalid escape sequence: \\x",
            ),
            (
                "a=b\\",
                "invalid field selector: invalid escape sequence: \\",
            ),
            (
                "a=b\\é",
                "invalid field selector: invalid escape sequence: \\é",
            ),
        ];
        for (input, want) in cases {
            match FieldSelector::parse(input) {
                Ok(sel) => panic!("{input:?} should fail, parsed as {sel}"),
                Err(e) => {
                    assert!(matches!(e, SelectorError::InvalidFieldSelector(_)));
                    assert_eq!(e.to_string(), want, "input {input:?}");
                }
            }
        }
    }

    #[test]
    fn escaped_values_are_unescaped() {
        let cases = [
            ("a=b\\,c", "b,c"),
            ("a=x\\=y", "x=y"),
            ("a=back\\\\slash", "back\\slash"),
            ("a==\\,", ","),
        ];
        for (input, want) in cases {
            let sel = FieldSelector::parse(input).expect("parses");
            assert_eq!(sel.exact("a"), Some(want), "input {input:?}");
        }
    }

    #[test]
    fn terms_match_field_sets_with_missing_fields_reading_empty() {
        let fields = set(&[
            ("metadata.name", "web"),
            ("status.phase", "Running"),
            ("x", ""),
        ]);
        let cases = [
            ("", true),
            ("metadata.name=web", true),
            ("metadata.name==web", true),
            ("metadata.name=db", false),
            ("metadata.name!=db", true),
            ("metadata.name!=web", false),
            ("status.phase=Running,metadata.name=web", true),
            ("status.phase!=Running,metadata.name=web", false),
            ("status.phase!=Succeeded,status.phase!=Failed", true),
            ("x=", true),
            ("missing=", true),
            ("missing!=", false),
            ("missing=a", false),
            ("missing!=a", true),
        ];
        for (input, want) in cases {
            let sel = FieldSelector::parse(input).expect("parses");
            assert_eq!(sel.matches(&fields), want, "selector {input:?}");
        }
    }

    #[test]
    fn exact_values_and_field_names_are_reported() {
        let sel = FieldSelector::parse(
            "metadata.namespace=ns,metadata.name!=a,metadata.name=b,spec.nodeName==n1",
        )
        .expect("parses");
        assert!(!sel.is_empty());
        assert_eq!(sel.exact("metadata.name"), Some("b"));
        assert_eq!(sel.exact("metadata.namespace"), Some("ns"));
        assert_eq!(sel.exact("spec.nodeName"), Some("n1"));
        assert_eq!(sel.exact("status.phase"), None);
        assert_eq!(
            sel.fields(),
            vec!["metadata.name", "metadata.namespace", "spec.nodeName"]
        );

        let only_negated = FieldSelector::parse("metadata.name!=a").expect("parses");
        assert_eq!(only_negated.exact("metadata.name"), None);
        assert!(FieldSelector::parse("").expect("parses").is_empty());
        assert_eq!(
            FieldSelector::parse(",,").expect("parses"),
            FieldSelector::default()
        );
    }
}
