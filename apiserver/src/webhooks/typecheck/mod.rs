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
//! `oldObject` (through `has()`, indexes and the variables of `all`/`exists`/`map`/`filter`)
//! and the types meeting at operators and string functions where both are primitives the
//! schema or a literal names (`object.spec.replicas > '3'`: `found no matching overload for
//! '_>_' applied to '(int, string)'`); schemas open to any field (`additionalProperties`,
//! `x-kubernetes-preserve-unknown-fields`) end the check, as they end upstream's.

use kube_cel::cel::common::ast::{Expr, IdedExpr, LiteralValue};
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
    /// A value of a known primitive type (a literal, what a function returns).
    Prim(&'static str),
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

    /// The CEL type of a primitive value here, in cel-go's names; `None` for containers,
    /// objects and what is not known (`dyn`).
    fn primitive(self) -> Option<&'static str> {
        let node = match self {
            Node::Prim(name) => return Some(name),
            Node::Open => return None,
            Node::At(node) => resolve_ref(node),
        };
        if node["x-kubernetes-int-or-string"] == true || node["format"] == "int-or-string" {
            return None;
        }
        match (node["type"].as_str()?, node["format"].as_str()) {
            ("integer", _) => Some("int"),
            ("number", _) => Some("double"),
            ("boolean", _) => Some("bool"),
            ("string", Some("byte")) => Some("bytes"),
            ("string", Some("date-time")) => Some("google.protobuf.Timestamp"),
            ("string", _) => Some("string"),
            _ => None,
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

/// A type error: the text it is reported at and cel-go's message.
struct Problem {
    /// `.field`, `.function` or an operator's symbol.
    at: String,
    message: String,
}

/// Walks an expression, collecting the undefined fields it selects and the operators and
/// string functions applied to types that have no such overload.
struct Checker<'a> {
    scope: Vec<(String, Node<'a>)>,
    problems: Vec<Problem>,
}

/// The symbol of a binary operator (`_>_` → `>`).
fn symbol(function: &str) -> Option<&str> {
    let inner = function.strip_prefix('_')?.strip_suffix('_')?;
    matches!(
        inner,
        "<" | "<=" | ">" | ">=" | "==" | "!=" | "+" | "-" | "*" | "/" | "%"
    )
    .then_some(inner)
}

fn numeric(type_name: &str) -> bool {
    matches!(type_name, "int" | "uint" | "double")
}

/// Whether CEL has `left <op> right` for these primitive types (numbers compare across
/// types, as Kubernetes' CEL environment allows; arithmetic does not mix them).
fn has_overload(op: &str, left: &str, right: &str) -> bool {
    const TIME: &str = "google.protobuf.Timestamp";
    const SPAN: &str = "google.protobuf.Duration";
    match op {
        "<" | "<=" | ">" | ">=" | "==" | "!=" => left == right || (numeric(left) && numeric(right)),
        "+" => {
            (left == right && left != "bool" && left != TIME)
                || (left == TIME && right == SPAN)
                || (left == SPAN && right == TIME)
        }
        "-" => {
            (left == right && (numeric(left) || left == TIME || left == SPAN))
                || (left == TIME && right == SPAN)
        }
        _ => left == right && numeric(left),
    }
}

/// The string functions called on a receiver, which must be a string.
const STRING_METHODS: &[&str] = &[
    "startsWith",
    "endsWith",
    "contains",
    "matches",
    "lowerAscii",
    "upperAscii",
    "trim",
    "split",
    "replace",
    "substring",
    "charAt",
    "find",
    "findAll",
];

impl<'a> Checker<'a> {
    fn walk(&mut self, expression: &IdedExpr) -> Node<'a> {
        match &expression.expr {
            Expr::Ident(name) => self
                .scope
                .iter()
                .rev()
                .find(|(n, _)| n == name)
                .map_or(Node::Open, |(_, node)| *node),
            Expr::Literal(literal) => Node::Prim(match literal {
                LiteralValue::Int(_) => "int",
                LiteralValue::UInt(_) => "uint",
                LiteralValue::Double(_) => "double",
                LiteralValue::String(_) => "string",
                LiteralValue::Boolean(_) => "bool",
                LiteralValue::Bytes(_) => "bytes",
                _ => return Node::Open,
            }),
            Expr::Select(select) => {
                let operand = self.walk(&select.operand);
                match operand.field(&select.field) {
                    // has(x.f) is a bool.
                    Ok(_) if select.test => Node::Prim("bool"),
                    Ok(node) => node,
                    Err(()) => {
                        self.problems.push(Problem {
                            at: format!(".{}", select.field),
                            message: format!("undefined field '{}'", select.field),
                        });
                        Node::Open
                    }
                }
            }
            Expr::Call(call) => self.call(call),
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

    fn call(&mut self, call: &kube_cel::cel::common::ast::CallExpr) -> Node<'a> {
        let name = call.func_name.as_str();
        let target = call.target.as_deref().map(|t| self.walk(t));
        let args: Vec<Node<'a>> = call.args.iter().map(|a| self.walk(a)).collect();
        let arg_types = || -> Vec<&'static str> {
            args.iter()
                .map(|a| a.primitive().unwrap_or("dyn"))
                .collect()
        };
        if let (Some(op), None, [left, right]) = (symbol(name), target, args.as_slice()) {
            let (Some(l), Some(r)) = (left.primitive(), right.primitive()) else {
                return if matches!(op, "<" | "<=" | ">" | ">=" | "==" | "!=") {
                    Node::Prim("bool")
                } else {
                    Node::Open
                };
            };
            if !has_overload(op, l, r) {
                self.problems.push(Problem {
                    at: op.to_string(),
                    message: format!(
                        "found no matching overload for '{name}' applied to '({l}, {r})'"
                    ),
                });
                return Node::Open;
            }
            return match op {
                "<" | "<=" | ">" | ">=" | "==" | "!=" => Node::Prim("bool"),
                _ => Node::Prim(l),
            };
        }
        if let Some(receiver) = target {
            if STRING_METHODS.contains(&name) {
                if let Some(kind) = receiver.primitive().filter(|kind| *kind != "string") {
                    self.problems.push(Problem {
                        at: format!(".{name}"),
                        message: format!(
                            "found no matching overload for '{name}' applied to '{kind}.({})'",
                            arg_types().join(", ")
                        ),
                    });
                    return Node::Open;
                }
            }
        }
        match name {
            "_[_]" if target.is_none() => args.first().map_or(Node::Open, |c| c.element()),
            "size" | "int" | "indexOf" | "lastIndexOf" => Node::Prim("int"),
            "string" | "lowerAscii" | "upperAscii" | "trim" | "replace" | "substring"
            | "charAt" | "join" | "format" => Node::Prim("string"),
            "double" => Node::Prim("double"),
            "startsWith" | "endsWith" | "contains" | "matches" | "_&&_" | "_||_" | "!_"
            | "exists" | "all" | "has" | "isSorted" | "isURL" | "isIP" | "isCIDR"
            | "isQuantity" | "isSemver" => Node::Prim("bool"),
            _ => Node::Open,
        }
    }
}

/// Where `needle` (`.field`, `.function`, an operator) first appears in `source` as a whole
/// token: its line and column (1-based, characters), as cel-go reports the expression.
fn position(source: &str, needle: &str) -> (usize, usize) {
    let operator = !needle.starts_with('.');
    let mut from = 0;
    while let Some(found) = source[from..].find(needle) {
        let at = from + found;
        let after = source[at + needle.len()..].chars().next();
        let before = source[..at].chars().next_back();
        let whole = if operator {
            // `>` is not the start of `>=`, nor `=` the end of `<=`.
            after.is_none_or(|c| c != '=') && before.is_none_or(|c| !"<>=!".contains(c))
        } else {
            after.is_none_or(|c| !c.is_alphanumeric() && c != '_')
        };
        if whole {
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
fn rendered(source: &str, problem: &Problem) -> String {
    let (line, column) = position(source, &problem.at);
    let text = source.lines().nth(line - 1).unwrap_or("");
    format!(
        "ERROR: <input>:{line}:{column}: {}\n | {text}\n | {}^",
        problem.message,
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
            problems: Vec::new(),
        };
        checker.walk(program.expression());
        if checker.problems.is_empty() {
            continue;
        }
        let errors: Vec<String> = checker
            .problems
            .iter()
            .map(|problem| rendered(source, problem))
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
