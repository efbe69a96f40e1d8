//! Label selectors: upstream's lexer, grammar, validation, error text and matching rules.
//!
//! Grammar (comma = AND): `[!]KEY`, `KEY (=|==|!=) VALUE`, `KEY (in|notin) (V1,V2,…)`,
//! `KEY (>|<) INTEGER`. `!=` and `notin` also match objects without the label.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::{Map, Value};

use super::label_lexer::{Lexer, Tok};
use crate::validation::names::{is_label_value, is_qualified_name};
use crate::validation::{go_quote, FieldError};

/// A field error of type Invalid as upstream renders it: `<path>: Invalid value: "<bad>": <detail>`.
fn invalid(path: &str, bad: &str, detail: &str) -> String {
    FieldError::invalid(path, bad, detail).message()
}
use super::SelectorError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operator {
    In,
    NotIn,
    Equals,
    DoubleEquals,
    NotEquals,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

/// One comma-separated term of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Operator,
    values: Vec<String>,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses a `labelSelector` string as upstream's `labels.Parse` does; `""` selects everything.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut parser = Parser::new(s);
        let mut requirements = parser
            .parse()
            .map_err(SelectorError::InvalidLabelSelector)?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { requirements })
    }

    /// The selector a `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`)
    /// stands for, as upstream's `LabelSelectorAsSelector`: a missing or null selector and an
    /// empty one select everything; an unknown operator, a wrong value count or a malformed
    /// key or value is an error.
    pub fn from_object(selector: &Value) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        let refuse = SelectorError::InvalidLabelSelector;
        if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
            for (key, value) in labels {
                let value = label_text(value);
                requirements
                    .push(new_requirement(key, Operator::Equals, vec![value]).map_err(refuse)?);
            }
        }
        let expressions = selector.get("matchExpressions").and_then(Value::as_array);
        for expression in expressions.into_iter().flatten() {
            let key = expression.get("key").and_then(Value::as_str).unwrap_or("");
            let op = match expression.get("operator").and_then(Value::as_str) {
                Some("In") => Operator::In,
                Some("NotIn") => Operator::NotIn,
                Some("Exists") => Operator::Exists,
                Some("DoesNotExist") => Operator::DoesNotExist,
                other => {
                    return Err(refuse(format!(
                        "{} is not a valid label selector operator",
                        go_quote(other.unwrap_or(""))
                    )))
                }
            };
            let mut values: Vec<String> = expression
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(label_text)
                .collect();
            values.sort();
            values.dedup();
            requirements.push(new_requirement(key, op, values).map_err(refuse)?);
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { requirements })
    }

    /// The selector a plain label map stands for (a Service's or ReplicationController's
    /// `spec.selector`): every pair must match. Not validated: such maps are checked as labels
    /// when their object is written.
    pub fn from_set(set: &Value) -> Self {
        let mut requirements: Vec<Requirement> = set
            .as_object()
            .into_iter()
            .flatten()
            .map(|(key, value)| Requirement {
                key: key.clone(),
                op: Operator::Equals,
                values: vec![label_text(value)],
            })
            .collect();
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Self { requirements }
    }

    /// True when the selector places no restriction.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The single value a `=`, `==` or one-value `in` term requires for `key`, if any.
    pub fn exact(&self, key: &str) -> Option<&str> {
        let r = self.requirements.iter().find(|r| r.key == key)?;
        match (r.op, r.values.as_slice()) {
            (Operator::Equals | Operator::DoubleEquals | Operator::In, [v]) => Some(v),
            _ => None,
        }
    }

    /// Whether a label set (values are JSON strings) satisfies every term.
    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether `obj.metadata.labels` satisfies the selector (no labels when missing).
    pub fn matches_object(&self, obj: &Value) -> bool {
        let empty = Map::new();
        let labels = obj
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        self.matches(labels)
    }
}

impl fmt::Display for LabelSelector {
    /// Upstream's canonical form: terms sorted by key, joined by commas.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

fn label_text(v: &Value) -> String {
    crate::json::text(Some(v))
}

impl Requirement {
    fn matches(&self, labels: &Map<String, Value>) -> bool {
        let got = labels.get(&self.key).map(label_text);
        let has = |v: &str| self.values.iter().any(|x| x == v);
        match self.op {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                got.is_some_and(|v| has(&v))
            }
            Operator::NotIn | Operator::NotEquals => got.is_none_or(|v| !has(&v)),
            Operator::Exists => got.is_some(),
            Operator::DoesNotExist => got.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(have) = got.and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                let Some(want) = self.values.first().and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                if self.op == Operator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let vals = self.values.join(",");
        match self.op {
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
            Operator::Equals => write!(f, "{}={vals}", self.key),
            Operator::DoubleEquals => write!(f, "{}=={vals}", self.key),
            Operator::NotEquals => write!(f, "{}!={vals}", self.key),
            Operator::In => write!(f, "{} in ({vals})", self.key),
            Operator::NotIn => write!(f, "{} notin ({vals})", self.key),
            Operator::GreaterThan => write!(f, "{}>{vals}", self.key),
            Operator::LessThan => write!(f, "{}<{vals}", self.key),
        }
    }
}

/// Builds a requirement, collecting every validation problem as upstream's `NewRequirement`.
fn new_requirement(key: &str, op: Operator, values: Vec<String>) -> Result<Requirement, String> {
    let mut errs: Vec<String> = Vec::new();
    let key_errs = is_qualified_name(key);
    if !key_errs.is_empty() {
        errs.push(invalid("key", key, &key_errs.join("; ")));
    }
    let as_json = || serde_json::to_string(&values).unwrap_or_default();
    let count_error = |detail: &str| format!("values: Invalid value: {}: {detail}", as_json());
    match op {
        Operator::In | Operator::NotIn if values.is_empty() => errs.push(count_error(
            "for 'in', 'notin' operators, values set can't be empty",
        )),
        Operator::Equals | Operator::DoubleEquals | Operator::NotEquals if values.len() != 1 => {
            errs.push(count_error(
                "exact-match compatibility requires one single value",
            ))
        }
        Operator::Exists | Operator::DoesNotExist if !values.is_empty() => errs.push(count_error(
            "values set must be empty for exists and does not exist",
        )),
        Operator::GreaterThan | Operator::LessThan => {
            if values.len() != 1 {
                errs.push(count_error(
                    "for 'Gt', 'Lt' operators, exactly one value is required",
                ));
            }
            for (i, v) in values.iter().enumerate() {
                if v.parse::<i64>().is_err() {
                    errs.push(invalid(
                        &format!("values[{i}]"),
                        v,
                        "for 'Gt', 'Lt' operators, the value must be an integer",
                    ));
                }
            }
        }
        _ => {}
    }
    for (i, v) in values.iter().enumerate() {
        let value_errs = is_label_value(v);
        if !value_errs.is_empty() {
            errs.push(invalid(
                &format!("values[{i}][{key}]"),
                v,
                &value_errs.join("; "),
            ));
        }
    }
    if errs.is_empty() {
        return Ok(Requirement {
            key: key.to_string(),
            op,
            values,
        });
    }
    Err(aggregate(errs))
}

/// Upstream's aggregate error text: one message alone, several de-duplicated in brackets.
fn aggregate(errs: Vec<String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errs {
        if !seen.contains(&e) {
            seen.push(e);
        }
    }
    if seen.len() == 1 {
        return seen.concat();
    }
    format!("[{}]", seen.join(", "))
}

/// Whether `in`/`notin` are operators (after a key) or plain words (anywhere else).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Tok, String)>,
    position: usize,
}

impl Parser {
    fn new(s: &str) -> Self {
        let mut lexer = Lexer::new(s);
        let mut items = Vec::new();
        loop {
            let item = lexer.lex();
            let end = item.0 == Tok::End;
            items.push(item);
            if end {
                break;
            }
        }
        Self { items, position: 0 }
    }

    fn lookahead(&self, ctx: Context) -> (Tok, String) {
        let (tok, lit) = self
            .items
            .get(self.position)
            .cloned()
            .unwrap_or((Tok::End, String::new()));
        match tok {
            Tok::In | Tok::NotIn if ctx == Context::Values => (Tok::Ident, lit),
            _ => (tok, lit),
        }
    }

    fn consume(&mut self, ctx: Context) -> (Tok, String) {
        let item = self.lookahead(ctx);
        self.position += 1;
        item
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Tok::Ident | Tok::Bang => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Tok::End => return Ok(requirements),
                        Tok::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Tok::Ident && t2 != Tok::Bang {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Tok::End => return Ok(requirements),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ))
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, inferred) = self.parse_key_and_infer_operator()?;
        if let Some(op) = inferred {
            return new_requirement(&key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        new_requirement(&key, op, values.into_iter().collect())
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut op = None;
        let (mut tok, mut lit) = self.consume(Context::Values);
        if tok == Tok::Bang {
            op = Some(Operator::DoesNotExist);
            (tok, lit) = self.consume(Context::Values);
        }
        if tok != Tok::Ident {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        let key_errs = is_qualified_name(&lit);
        if !key_errs.is_empty() {
            return Err(invalid("<nil>", &lit, &key_errs.join("; ")));
        }
        let (next, _) = self.lookahead(Context::Values);
        if (next == Tok::End || next == Tok::Comma) && op.is_none() {
            op = Some(Operator::Exists);
        }
        Ok((lit, op))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Tok::In => Operator::In,
            Tok::Equals => Operator::Equals,
            Tok::DoubleEquals => Operator::DoubleEquals,
            Tok::Greater => Operator::GreaterThan,
            Tok::Less => Operator::LessThan,
            Tok::NotIn => Operator::NotIn,
            Tok::NotEquals => Operator::NotEquals,
            _ => {
                return Err(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                ))
            }
        })
    }

    fn parse_values(&mut self) -> Result<BTreeSet<String>, String> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Tok::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Tok::Ident | Tok::Comma => {
                let set = self.parse_identifiers_list()?;
                if self.consume(Context::Values).0 != Tok::ClosePar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(set)
            }
            Tok::ClosePar => {
                self.consume(Context::Values);
                Ok(BTreeSet::from([String::new()]))
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<BTreeSet<String>, String> {
        let mut set = BTreeSet::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Tok::Ident => {
                    set.insert(lit);
                    let (next, next_lit) = self.lookahead(Context::Values);
                    match next {
                        Tok::Comma => continue,
                        Tok::ClosePar => return Ok(set),
                        _ => return Err(format!("found '{next_lit}', expected: ',' or ')'")),
                    }
                }
                Tok::Comma => {
                    if set.is_empty() {
                        set.insert(String::new());
                    }
                    match self.lookahead(Context::Values).0 {
                        Tok::ClosePar => {
                            set.insert(String::new());
                            return Ok(set);
                        }
                        Tok::Comma => {
                            self.consume(Context::Values);
                            set.insert(String::new());
                        }
                        _ => {}
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<BTreeSet<String>, String> {
        let (next, _) = self.lookahead(Context::Values);
        if next == Tok::End || next == Tok::Comma {
            return Ok(BTreeSet::from([String::new()]));
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Tok::Ident {
            return Ok(BTreeSet::from([lit]));
        }
        Err(format!("found '{lit}', expected: identifier"))
    }
}

#[cfg(test)]
#[path = "label_tests.rs"]
mod tests;
