//! CEL for admission: webhooks' `matchConditions` and ValidatingAdmissionPolicies, over the
//! `cel` crate with kube-cel's Kubernetes libraries. The variables are upstream's: `object`,
//! `oldObject` (null on create, and `object` null on delete), `request`, `params`,
//! `namespaceObject`, `variables`, and `authorizer` ([`super::cel_authorizer`]) when the
//! caller binds it.

use std::collections::HashMap;
use std::sync::Arc;

use kube_cel::cel::objects::{Key, Map};
use kube_cel::cel::{Context, Program, Value as Cel};
use kube_cel::KubeCelExt;
use serde_json::Value;

pub use super::cel_authorizer::{Caller, Target};

/// Whether `expression` compiles (the message is the parser's).
pub fn check(expression: &str) -> Result<(), String> {
    Program::compile(expression)
        .map(|_| ())
        .map_err(|error| format!("compilation failed: {error}"))
}

/// A compiled expression.
pub struct Expression {
    pub source: String,
    program: Program,
}

thread_local! {
    /// Compiled expressions by source, per thread (policies and conditions repeat on every
    /// request); emptied when it reaches [`MAX_CACHED`].
    static COMPILED: std::cell::RefCell<HashMap<String, std::rc::Rc<Expression>>> =
        std::cell::RefCell::new(HashMap::new());
}

/// The most compiled expressions a thread keeps.
const MAX_CACHED: usize = 4096;

impl Expression {
    /// The compiled `source`, from this thread's cache when it was compiled before.
    pub fn cached(source: &str) -> Result<std::rc::Rc<Self>, String> {
        if let Some(found) = COMPILED.with(|cache| cache.borrow().get(source).cloned()) {
            return Ok(found);
        }
        let compiled = std::rc::Rc::new(Self::compile(source)?);
        COMPILED.with(|cache| {
            let mut cache = cache.borrow_mut();
            if cache.len() >= MAX_CACHED {
                cache.clear();
            }
            cache.insert(source.to_string(), compiled.clone());
        });
        Ok(compiled)
    }

    pub fn compile(source: &str) -> Result<Self, String> {
        let program =
            Program::compile(source).map_err(|error| format!("compilation failed: {error}"))?;
        Ok(Self {
            source: source.to_string(),
            program,
        })
    }

    /// The expression's value in `scope`.
    pub fn evaluate(&self, scope: &Scope) -> Result<Cel, String> {
        self.program
            .execute(&scope.context)
            .map_err(|error| format!("expression '{}' resulted in error: {error}", self.source))
    }

    /// The expression as a condition: true, false, or an error (a non-boolean is one).
    pub fn holds(&self, scope: &Scope) -> Result<bool, String> {
        match self.evaluate(scope)? {
            Cel::Bool(value) => Ok(value),
            other => Err(format!(
                "expression '{}' resulted in a {} instead of a bool",
                self.source,
                type_name(&other)
            )),
        }
    }
}

/// The variables one request is judged with.
pub struct Scope {
    context: Context<'static>,
    variables: HashMap<Key, Cel>,
}

thread_local! {
    /// The Kubernetes CEL libraries, registered once per thread (registering them is most of
    /// what building a context costs); each request's variables live in a child scope. One
    /// per thread that evaluates admission CEL, kept for the thread's life.
    static LIBRARIES: &'static Context<'static> = Box::leak(Box::new({
        let mut libraries = Context::default().with_all();
        super::cel_authorizer::register(&mut libraries);
        libraries
    }));
}

impl Scope {
    pub fn new(bindings: &[(&str, &Value)]) -> Self {
        let libraries: &'static Context<'static> = LIBRARIES.with(|libraries| *libraries);
        let mut context = libraries.new_inner_scope();
        for (name, value) in bindings {
            context.add_variable_from_value(*name, to_cel(value));
        }
        Self {
            context,
            variables: HashMap::new(),
        }
    }

    /// Binds `authorizer`: checks by the request's user against this server's authorizers.
    pub fn bind_authorizer(&mut self, caller: Caller, request: Target) {
        self.context.add_variable_from_value(
            "authorizer",
            super::cel_authorizer::variable(caller, request),
        );
    }

    /// Binds `variables.<name>` (a policy's variables, each seeing those before it).
    pub fn bind_variable(&mut self, name: &str, value: Cel) {
        self.variables
            .insert(Key::String(Arc::new(name.to_string())), value);
        let map = Cel::Map(Map {
            map: Arc::new(self.variables.clone()),
        });
        self.context.add_variable_from_value("variables", map);
    }
}

/// A JSON value as CEL sees it: integers as `int` (unsigned only past `int`'s range).
pub fn to_cel(value: &Value) -> Cel {
    match value {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Cel::Int(i),
            (None, Some(u)) => Cel::UInt(u),
            _ => Cel::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => Cel::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => Cel::Map(Map {
            map: Arc::new(
                map.iter()
                    .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                    .collect(),
            ),
        }),
    }
}

/// A CEL value as a string (a messageExpression's or an audit annotation's result).
pub fn as_string(value: &Cel) -> Option<String> {
    match value {
        Cel::String(s) => Some(s.to_string()),
        _ => None,
    }
}

fn type_name(value: &Cel) -> &'static str {
    match value {
        Cel::Null => "null",
        Cel::Bool(_) => "bool",
        Cel::Int(_) => "int",
        Cel::UInt(_) => "uint",
        Cel::Float(_) => "double",
        Cel::String(_) => "string",
        Cel::List(_) => "list",
        Cel::Map(_) => "map",
        _ => "value",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conditions_see_the_object_request_params_and_variables() {
        let object = json!({"spec": {"replicas": 5}, "metadata": {"labels": {"tier": "web"}}});
        let params = json!({"data": {"max": "3"}});
        let request = json!({"operation": "CREATE", "userInfo": {"username": "alice"}});
        let mut scope = Scope::new(&[
            ("object", &object),
            ("oldObject", &Value::Null),
            ("params", &params),
            ("request", &request),
        ]);
        let over = Expression::compile("object.spec.replicas > int(params.data.max)").unwrap();
        assert_eq!(over.holds(&scope), Ok(true));
        let user = Expression::compile("request.userInfo.username == 'alice' && oldObject == null")
            .unwrap();
        assert_eq!(user.holds(&scope), Ok(true));
        let replicas = Expression::compile("object.spec.replicas * 2").unwrap();
        let value = replicas.evaluate(&scope).unwrap();
        scope.bind_variable("doubled", value);
        let doubled = Expression::compile("variables.doubled == 10").unwrap();
        assert_eq!(doubled.holds(&scope), Ok(true));
        let not_bool = Expression::compile("object.spec.replicas").unwrap();
        assert!(not_bool
            .holds(&scope)
            .unwrap_err()
            .contains("instead of a bool"));
        let missing = Expression::compile("object.spec.nothing > 1").unwrap();
        assert!(missing.holds(&scope).is_err());
        assert!(check("object.spec ==").is_err());
        let message = Expression::compile("'replicas ' + string(object.spec.replicas)").unwrap();
        assert_eq!(
            as_string(&message.evaluate(&scope).unwrap()).as_deref(),
            Some("replicas 5")
        );
    }
}
