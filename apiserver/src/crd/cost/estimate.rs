//! The estimator: the most an expression can cost, worked out on its parsed form with the
//! shapes of the variables in scope, after cel-go's cost model and Kubernetes' library costs.

use kube_cel::cel::common::ast::{Expr, IdedExpr, LiteralValue};
use kube_cel::cel::Program;

use super::shape::{add, factor, mul, Kind, Shape};
use super::{AUTHORIZER_CHECK_COST, REGEX_LENGTH_FACTOR, STRING_TRAVERSAL_FACTOR};

/// Works out the worst-case cost of expressions over named variables.
struct Estimator {
    /// Variables in scope, innermost last.
    scope: Vec<(String, Shape)>,
}

impl Estimator {
    fn lookup(&self, name: &str) -> Shape {
        self.scope
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map_or_else(Shape::unknown, |(_, shape)| shape.clone())
    }

    /// The most `expression` can cost, and the shape of its value.
    fn cost(&mut self, expression: &IdedExpr) -> (u64, Shape) {
        match &expression.expr {
            Expr::Literal(literal) => (0, literal_shape(literal)),
            Expr::Ident(name) => (1, self.lookup(name)),
            Expr::Select(select) => {
                let (cost, operand) = self.cost(&select.operand);
                if select.test {
                    return (add(cost, 1), Shape::scalar());
                }
                let field = match &operand.kind {
                    // Under a value that is not there (an actual object's missing field).
                    Kind::Nothing => Shape::new(0, 0, Kind::Nothing),
                    Kind::Object(fields) => fields
                        .get(&select.field)
                        .cloned()
                        .unwrap_or_else(Shape::unknown),
                    // A field name is no schema path under a map: only a scalar's size
                    // is known (from its type), as upstream's estimator sees it.
                    Kind::Map(value) if value.kind == Kind::Scalar => Shape::scalar(),
                    Kind::Map(value) => Shape::new(0, u64::MAX, value.kind.clone()),
                    _ => Shape::unknown(),
                };
                let step = match operand.kind {
                    Kind::Object(_) | Kind::Map(_) | Kind::Unknown => 1,
                    _ => 0,
                };
                (add(cost, step), field)
            }
            Expr::List(list) => {
                let mut cost = 10;
                let mut item: Option<Shape> = None;
                for element in &list.elements {
                    let (c, shape) = self.cost(element);
                    cost = add(cost, c);
                    item = Some(item.map_or(shape.clone(), |i| i.union(&shape)));
                }
                let n = list.elements.len() as u64;
                let item = item.unwrap_or_else(|| Shape::new(0, 0, Kind::Nothing));
                (cost, Shape::new(n, n, Kind::List(Box::new(item))))
            }
            Expr::Map(map) => {
                let mut cost = 30;
                for entry in &map.entries {
                    if let kube_cel::cel::common::ast::EntryExpr::MapEntry(entry) = &entry.expr {
                        cost = add(cost, self.cost(&entry.key).0);
                        cost = add(cost, self.cost(&entry.value).0);
                    }
                }
                let n = map.entries.len() as u64;
                (
                    cost,
                    Shape::new(n, n, Kind::Map(Box::new(Shape::unknown()))),
                )
            }
            Expr::Struct(fields) => {
                let mut cost = 40;
                for entry in &fields.entries {
                    if let kube_cel::cel::common::ast::EntryExpr::StructField(field) = &entry.expr {
                        cost = add(cost, self.cost(&field.value).0);
                    }
                }
                (cost, Shape::unknown())
            }
            Expr::Comprehension(comprehension) => {
                let (range_cost, range) = self.cost(&comprehension.iter_range);
                let (init_cost, init) = self.cost(&comprehension.accu_init);
                let accumulator = match &init.kind {
                    // map() and filter() build a list at most as long as the range.
                    Kind::List(item) => Shape::new(0, range.max, Kind::List(item.clone())),
                    _ => init,
                };
                let depth = self.scope.len();
                self.scope
                    .push((comprehension.accu_var.clone(), accumulator.clone()));
                match &comprehension.iter_var2 {
                    Some(second) => {
                        let key = match &range.kind {
                            Kind::List(_) => Shape::scalar(),
                            _ => range.element(),
                        };
                        let value = match &range.kind {
                            Kind::List(item) | Kind::Map(item) => (**item).clone(),
                            _ => Shape::unknown(),
                        };
                        self.scope.push((comprehension.iter_var.clone(), key));
                        self.scope.push((second.clone(), value));
                    }
                    None => self
                        .scope
                        .push((comprehension.iter_var.clone(), range.element())),
                }
                let (condition, _) = self.cost(&comprehension.loop_cond);
                let (step, stepped) = self.cost(&comprehension.loop_step);
                self.scope.truncate(depth);
                // What the step appends gives the built list's items.
                let accumulator = match (&accumulator.kind, &stepped.kind) {
                    (Kind::List(_), Kind::List(item)) => {
                        Shape::new(0, range.max, Kind::List(item.clone()))
                    }
                    _ => accumulator,
                };
                self.scope
                    .push((comprehension.accu_var.clone(), accumulator.clone()));
                let (result_cost, result) = self.cost(&comprehension.result);
                self.scope.truncate(depth);
                let looped = mul(range.max, add(condition, step));
                let cost = add(add(range_cost, init_cost), add(result_cost, looped));
                let shape = if result.kind == Kind::Unknown {
                    accumulator
                } else {
                    result
                };
                (cost, shape)
            }
            Expr::Call(call) => self.call(call),
            _ => (0, Shape::unknown()),
        }
    }

    fn call(&mut self, call: &kube_cel::cel::common::ast::CallExpr) -> (u64, Shape) {
        let name = call.func_name.as_str();
        let target = call.target.as_deref().map(|t| self.cost(t));
        let args: Vec<(u64, Shape)> = call.args.iter().map(|a| self.cost(a)).collect();
        let arg_cost = args.iter().fold(0, |sum, (c, _)| add(sum, *c));
        let target_cost = target.as_ref().map_or(0, |(c, _)| *c);
        let operands = add(arg_cost, target_cost);
        let arg = |i: usize| args.get(i).map(|(_, s)| s.clone());
        // A method's receiver, or (for a global call) its first argument.
        let subject = target
            .as_ref()
            .map(|(_, s)| s.clone())
            .or_else(|| arg(0))
            .unwrap_or_else(Shape::unknown);
        let rest = |i: usize| {
            if target.is_some() {
                arg(i)
            } else {
                arg(i + 1)
            }
        };
        let string_result = |max: u64| Shape::new(0, max, Kind::Str);
        let traverse = |shape: &Shape| factor(shape.max, STRING_TRAVERSAL_FACTOR);
        let (own, result) = match name {
            "_&&_" | "_||_" => (0, Shape::scalar()),
            "_?_:_" => {
                let (when, a, b) = (&args[0], &args[1], &args[2]);
                let cost = add(when.0, a.0.max(b.0));
                return (cost, a.1.union(&b.1));
            }
            "_==_" | "_!=_" => {
                let (a, b) = (
                    arg(0).unwrap_or_else(Shape::unknown),
                    arg(1).unwrap_or_else(Shape::unknown),
                );
                (
                    factor(a.max.min(b.max), STRING_TRAVERSAL_FACTOR),
                    Shape::scalar(),
                )
            }
            "_<_" | "_<=_" | "_>_" | "_>=_" => {
                let (a, b) = (
                    arg(0).unwrap_or_else(Shape::unknown),
                    arg(1).unwrap_or_else(Shape::unknown),
                );
                if a.is_str() || b.is_str() {
                    (
                        factor(a.max.min(b.max), STRING_TRAVERSAL_FACTOR),
                        Shape::scalar(),
                    )
                } else {
                    (1, Shape::scalar())
                }
            }
            "_+_" => {
                let (a, b) = (
                    arg(0).unwrap_or_else(Shape::unknown),
                    arg(1).unwrap_or_else(Shape::unknown),
                );
                let size = Shape::new(add(a.min, b.min), add(a.max, b.max), a.kind.clone());
                match (&a.kind, &b.kind) {
                    (Kind::List(x), Kind::List(y)) => (
                        1,
                        Shape::new(size.min, size.max, Kind::List(Box::new(x.union(y)))),
                    ),
                    (Kind::List(_), _) | (_, Kind::List(_)) => (1, size),
                    (Kind::Str, _) | (_, Kind::Str) => (
                        factor(size.max, STRING_TRAVERSAL_FACTOR),
                        Shape::new(size.min, size.max, Kind::Str),
                    ),
                    _ => (1, Shape::scalar()),
                }
            }
            "@in" => (arg(1).map_or(u64::MAX, |s| s.max), Shape::scalar()),
            "_[_]" => {
                let container = arg(0).unwrap_or_else(Shape::unknown);
                let value = match &container.kind {
                    Kind::List(item) | Kind::Map(item) => (**item).clone(),
                    _ => Shape::unknown(),
                };
                (1, value)
            }
            "dyn" => return (add(1, arg_cost), arg(0).unwrap_or_else(Shape::unknown)),
            "startsWith" | "endsWith" => {
                (rest(0).map_or(u64::MAX, |s| traverse(&s)), Shape::scalar())
            }
            "contains" => {
                let substring = rest(0).unwrap_or_else(Shape::unknown);
                (
                    mul(traverse(&subject), traverse(&substring)),
                    Shape::scalar(),
                )
            }
            "matches" | "find" | "findAll" => {
                let pattern = rest(0).unwrap_or_else(Shape::unknown);
                let string = factor(add(subject.max, 1), STRING_TRAVERSAL_FACTOR);
                let cost = mul(string, factor(pattern.max, REGEX_LENGTH_FACTOR));
                let result = match name {
                    "matches" => Shape::scalar(),
                    "find" => string_result(subject.max),
                    _ => Shape::new(
                        0,
                        subject.max,
                        Kind::List(Box::new(string_result(subject.max))),
                    ),
                };
                (cost, result)
            }
            "isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf" | "includes"
                if target.is_some() =>
            {
                match &subject.kind {
                    Kind::List(item) => {
                        let per = if item.is_str() {
                            add(1, traverse(item))
                        } else {
                            1
                        };
                        (mul(subject.max, per), Shape::unknown())
                    }
                    Kind::Str => (traverse(&subject), Shape::scalar()),
                    _ => (subject.max, Shape::unknown()),
                }
            }
            "url" | "jsonpatch.escapeKey" => {
                let text = arg(0).unwrap_or_else(Shape::unknown);
                (traverse(&text), string_result(text.max))
            }
            "lowerAscii" | "upperAscii" | "substring" | "trim" if target.is_some() => {
                (traverse(&subject), string_result(subject.max))
            }
            "replace" if target.is_some() => {
                let from = rest(0).unwrap_or_else(Shape::unknown);
                let with = rest(1).unwrap_or_else(Shape::unknown);
                let (count, retained) = if from.min == 0 {
                    (add(subject.max, 1), subject.max)
                } else if with.max <= from.min {
                    (0, subject.max)
                } else {
                    (subject.max.div_ceil(from.min), 0)
                };
                let size = add(mul(count, with.max), retained);
                (
                    factor(subject.max, 2.0 * STRING_TRAVERSAL_FACTOR),
                    string_result(size),
                )
            }
            "split" if target.is_some() => (
                factor(subject.max, 2.0 * STRING_TRAVERSAL_FACTOR),
                Shape::new(
                    0,
                    subject.max,
                    Kind::List(Box::new(string_result(subject.max))),
                ),
            ),
            "join" if target.is_some() => {
                let item = subject.element();
                let mut size = mul(subject.max, item.max);
                if let Some(separator) = rest(0) {
                    size = add(size, mul(separator.max, subject.max.saturating_sub(1)));
                }
                (factor(size, STRING_TRAVERSAL_FACTOR), string_result(size))
            }
            "cidr" | "isIP" | "isCIDR" | "ip" | "quantity" | "isQuantity" | "semver"
            | "isSemver" => {
                let text = arg(0).unwrap_or_else(|| subject.clone());
                (traverse(&text), Shape::unknown())
            }
            "check" => (AUTHORIZER_CHECK_COST, Shape::unknown()),
            "size" => (1, Shape::new(0, 0, Kind::Scalar)),
            "string" => (1, Shape::unknown()),
            _ => (1, Shape::unknown()),
        };
        (add(own, operands), result)
    }
}

fn literal_shape(literal: &LiteralValue) -> Shape {
    match literal {
        LiteralValue::String(text) => {
            let n = text.inner().chars().count() as u64;
            Shape::new(n, n, Kind::Str)
        }
        LiteralValue::Bytes(bytes) => {
            let n = bytes.inner().len() as u64;
            Shape::new(n, n, Kind::Str)
        }
        _ => Shape::scalar(),
    }
}

/// The estimated maximum cost of `source` with `self` (and `oldSelf`) of `shape`; `None` when
/// it does not parse (compilation reports that).
pub(super) fn estimate(source: &str, shape: &Shape) -> Option<u64> {
    let program = Program::compile(source).ok()?;
    Some(estimate_parsed(&program, shape))
}

/// [`estimate`] of an expression already parsed.
pub(super) fn estimate_parsed(program: &Program, shape: &Shape) -> u64 {
    let mut estimator = Estimator {
        scope: vec![
            ("self".into(), shape.clone()),
            ("oldSelf".into(), shape.clone()),
        ],
    };
    estimator.cost(program.expression()).0
}
