//! Type checking of ValidatingAdmissionPolicies, as upstream's status controller does it: the
//! kinds a policy's `matchConstraints` name exactly (no wildcards) give `object` and
//! `oldObject` their schemas (a built-in kind's upstream definition, a CRD's
//! `openAPIV3Schema`), and every expression of the policy (validations and their
//! messageExpressions, auditAnnotations, matchConditions, variables) is checked against each.
//! A field the schema does not have is a warning in upstream's words, written to the policy's
//! `status.typeChecking.expressionWarnings`:
//!
//! ```text
//! apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replicass'
//!  | object.spec.replicass > 1
//!  | ...........^
//! ```
//!
//! Without a full CEL type checker, what is checked is every field path from `object` and
//! `oldObject` (through `has()`, indexes and the variables of `all`/`exists`/`map`/`filter`);
//! schemas open to any field (`additionalProperties`, `x-kubernetes-preserve-unknown-fields`)
//! end the check, as they end upstream's.

use kube_cel::cel::common::ast::{Expr, IdedExpr};
use kube_cel::cel::Program;
use serde_json::Value;

use crate::catalog::ResourceInfo;
use crate::crd::Served;
use crate::openapi::{kind_schema, resolve_ref};

/// A kind a policy matches and its schema.
struct Typed {
    group: String,
    version: String,
    kind: String,
    schema: &'static Value,
}

/// The kinds `matchConstraints.resourceRules` name without wildcards, with their schemas.
fn matched_kinds(policy: &Value, served: &Served) -> Vec<Typed> {
    let mut kinds: Vec<Typed> = Vec::new();
    let rules = policy["spec"]["matchConstraints"]["resourceRules"].as_array();
    for rule in rules.into_iter().flatten() {
        let strings = |field: &str| -> Vec<String> {
            rule[field]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        };
        let (groups, versions, resources) = (
            strings("apiGroups"),
            strings("apiVersions"),
            strings("resources"),
        );
        let wild = |list: &[String]| list.iter().any(|item| item.contains('*'));
        if wild(&groups) || wild(&versions) || wild(&resources) {
            continue;
        }
        for group in &groups {
            for version in &versions {
                for resource in resources.iter().filter(|r| !r.contains('/')) {
                    let Some(typed) = schema_of(group, version, resource, served) else {
                        continue;
                    };
                    let seen = kinds.iter().any(|k| {
                        (&k.group, &k.version, &k.kind)
                            == (&typed.group, &typed.version, &typed.kind)
                    });
                    if !seen {
                        kinds.push(typed);
                    }
                }
            }
        }
    }
    kinds
}

fn schema_of(group: &str, version: &str, plural: &str, served: &Served) -> Option<Typed> {
    if let Some(info) = crate::catalog::find(group, version, plural) {
        let schema = kind_schema(group, version, info.kind)?;
        return Some(typed(info, schema));
    }
    let info = served.find(group, version, plural)?;
    let schema = info.strategy.openapi_schema()?;
    Some(typed(info, schema))
}

fn typed(info: &ResourceInfo, schema: &'static Value) -> Typed {
    Typed {
        group: info.group.to_string(),
        version: info.version.to_string(),
        kind: info.kind.to_string(),
        schema,
    }
}

/// What a field path reached.
#[derive(Clone, Copy)]
enum Node<'a> {
    /// A schema node (unresolved `$ref`s are followed when looked into).
    At(&'a Value),
    /// Somewhere the schema says nothing about (open objects, unknown variables).
    Open,
}

impl<'a> Node<'a> {
    /// The field `name` under this node; `Err` when the schema is closed and has no such field.
    fn field(self, name: &str) -> Result<Node<'a>, ()> {
        let Node::At(node) = self else {
            return Ok(Node::Open);
        };
        let node = resolve_ref(node);
        if let Some(child) = node["properties"].get(name) {
            return Ok(Node::At(child));
        }
        if let Some(values) = node.get("additionalProperties").filter(|a| a.is_object()) {
            return Ok(Node::At(values));
        }
        let closed = node["properties"].is_object()
            && node["x-kubernetes-preserve-unknown-fields"] != true
            && node["additionalProperties"] != true;
        if closed {
            Err(())
        } else {
            Ok(Node::Open)
        }
    }

    /// An element of this node (a list's item, a map's value).
    fn element(self) -> Node<'a> {
        let Node::At(node) = self else {
            return Node::Open;
        };
        let node = resolve_ref(node);
        node.get("items")
            .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()))
            .map_or(Node::Open, Node::At)
    }
}

/// Walks an expression, collecting the undefined fields it selects.
struct Checker<'a> {
    scope: Vec<(String, Node<'a>)>,
    undefined: Vec<String>,
}

impl<'a> Checker<'a> {
    fn walk(&mut self, expression: &IdedExpr) -> Node<'a> {
        match &expression.expr {
            Expr::Ident(name) => self
                .scope
                .iter()
                .rev()
                .find(|(n, _)| n == name)
                .map_or(Node::Open, |(_, node)| *node),
            Expr::Select(select) => {
                let operand = self.walk(&select.operand);
                match operand.field(&select.field) {
                    Ok(node) => node,
                    Err(()) => {
                        self.undefined.push(select.field.clone());
                        Node::Open
                    }
                }
            }
            Expr::Call(call) => {
                let target = call.target.as_deref().map(|t| self.walk(t));
                let args: Vec<Node<'a>> = call.args.iter().map(|a| self.walk(a)).collect();
                match (call.func_name.as_str(), target, args.first()) {
                    ("_[_]", None, Some(container)) => container.element(),
                    _ => Node::Open,
                }
            }
            Expr::List(list) => {
                for element in &list.elements {
                    self.walk(element);
                }
                Node::Open
            }
            Expr::Map(map) => {
                for entry in &map.entries {
                    if let kube_cel::cel::common::ast::EntryExpr::MapEntry(entry) = &entry.expr {
                        self.walk(&entry.key);
                        self.walk(&entry.value);
                    }
                }
                Node::Open
            }
            Expr::Comprehension(comprehension) => {
                let range = self.walk(&comprehension.iter_range);
                self.walk(&comprehension.accu_init);
                let depth = self.scope.len();
                self.scope
                    .push((comprehension.accu_var.clone(), Node::Open));
                let item = match &comprehension.iter_var2 {
                    Some(second) => {
                        self.scope
                            .push((comprehension.iter_var.clone(), Node::Open));
                        (second.clone(), range.element())
                    }
                    // Over a list its items; over a map its keys (strings).
                    None => {
                        let is_list = matches!(range, Node::At(node) if resolve_ref(node).get("items").is_some());
                        let node = if is_list { range.element() } else { Node::Open };
                        (comprehension.iter_var.clone(), node)
                    }
                };
                self.scope.push(item);
                self.walk(&comprehension.loop_cond);
                self.walk(&comprehension.loop_step);
                self.scope.truncate(depth + 1);
                self.walk(&comprehension.result);
                self.scope.truncate(depth);
                Node::Open
            }
            _ => Node::Open,
        }
    }
}

/// Where `.field` first appears in `source`: its line and column (1-based, characters), as
/// cel-go reports a select.
fn position(source: &str, field: &str) -> (usize, usize) {
    let needle = format!(".{field}");
    let mut from = 0;
    while let Some(found) = source[from..].find(&needle) {
        let at = from + found;
        let after = source[at + needle.len()..].chars().next();
        if !after.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            let before = &source[..at];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
            return (line, column);
        }
        from = at + needle.len();
    }
    (1, 1)
}

/// cel-go's rendering of one error: the message, then the source line and a caret.
fn rendered(source: &str, field: &str) -> String {
    let (line, column) = position(source, field);
    let text = source.lines().nth(line - 1).unwrap_or("");
    format!(
        "ERROR: <input>:{line}:{column}: undefined field '{field}'\n | {text}\n | {}^",
        ".".repeat(column - 1)
    )
}

/// The warnings of one expression against every matched kind (empty when it type-checks).
fn check_expression(source: &str, kinds: &[Typed]) -> Option<String> {
    let program = Program::compile(source).ok()?;
    let mut lines = Vec::new();
    for typed in kinds {
        let mut checker = Checker {
            scope: vec![
                ("object".into(), Node::At(typed.schema)),
                ("oldObject".into(), Node::At(typed.schema)),
            ],
            undefined: Vec::new(),
        };
        checker.walk(program.expression());
        if checker.undefined.is_empty() {
            continue;
        }
        let errors: Vec<String> = checker
            .undefined
            .iter()
            .map(|field| rendered(source, field))
            .collect();
        let gv = format!("{}/{}", typed.group, typed.version);
        lines.push(format!("{gv}, Kind={}: {}", typed.kind, errors.join("\n")));
    }
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// The policy's `status.typeChecking.expressionWarnings`: `fieldRef` and `warning` for every
/// expression that refers to a field its matched kinds do not have.
pub fn expression_warnings(policy: &Value, served: &Served) -> Vec<Value> {
    let kinds = matched_kinds(policy, served);
    if kinds.is_empty() {
        return Vec::new();
    }
    let spec = &policy["spec"];
    let mut warnings = Vec::new();
    let fields: &[(&str, &[&str])] = &[
        ("validations", &["expression", "messageExpression"]),
        ("auditAnnotations", &["valueExpression"]),
        ("matchConditions", &["expression"]),
        ("variables", &["expression"]),
    ];
    for (list, keys) in fields {
        for (index, item) in spec[*list].as_array().into_iter().flatten().enumerate() {
            for key in *keys {
                let Some(source) = item[*key].as_str() else {
                    continue;
                };
                if let Some(warning) = check_expression(source, &kinds) {
                    warnings.push(serde_json::json!({
                        "fieldRef": format!("spec.{list}[{index}].{key}"),
                        "warning": warning,
                    }));
                }
            }
        }
    }
    warnings
}

#[cfg(test)]
mod tests;
