//! The `authorizer` CEL variable of ValidatingAdmissionPolicies and webhooks'
//! `matchConditions`: upstream's Kubernetes authorization library, asking this server's own
//! authorizer chain (RBAC, Node, …) about the requesting user —
//!
//! ```text
//! authorizer.group('apps').resource('deployments').namespace('prod').name('web').check('delete').allowed()
//! authorizer.path('/metrics').check('get').allowed()
//! authorizer.serviceAccount('ns', 'sa').group('').resource('secrets').check('list').reason()
//! authorizer.requestResource.check('admin').allowed()   // the request's own resource
//! ```
//!
//! `check(verb)` returns a decision with `allowed()`, `reason()`, `errored()` and `error()`;
//! `subresource(s)`, `fieldSelector(s)` and `labelSelector(s)` narrow a resource check (the
//! selectors are accepted and, as by RBAC upstream, not used to decide). The `cel` crate
//! selects fields only on maps, so `authorizer` is a map holding `requestResource`; every
//! other step is an opaque value the functions below recognise.

use std::sync::Arc;

use kube_cel::cel::extractors::This;
use kube_cel::cel::objects::{Key, Map, Opaque};
use kube_cel::cel::{Context, ExecutionError, ResolveResult, Value as Cel};

use crate::authz::{self, Authorizer, Decision};

/// Who asks, and the chain that answers.
#[derive(Clone)]
pub struct Caller {
    pub authorizer: Arc<dyn Authorizer>,
    pub user: String,
    pub groups: Vec<String>,
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("user", &self.user)
            .field("groups", &self.groups)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Caller {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.authorizer, &other.authorizer)
            && self.user == other.user
            && self.groups == other.groups
    }
}

impl Eq for Caller {}

/// The resource a check is about.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Target {
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

/// One step of the library: what `authorizer.group(…)…` has built so far, or the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Group(Caller, String),
    Resource(Caller, Target),
    Path(Caller, String),
    Decision {
        allowed: bool,
        reason: String,
        error: String,
    },
}

impl Opaque for Step {
    fn runtime_type_name(&self) -> &str {
        match self {
            Step::Group(..) => "kubernetes.authorization.GroupCheck",
            Step::Resource(..) => "kubernetes.authorization.ResourceCheck",
            Step::Path(..) => "kubernetes.authorization.PathCheck",
            Step::Decision { .. } => "kubernetes.authorization.Decision",
        }
    }
}

fn opaque(step: Step) -> Cel {
    Cel::Opaque(Arc::new(step))
}

const REQUEST_RESOURCE: &str = "requestResource";

/// The `authorizer` variable for `caller`, whose request is about `request`.
pub fn variable(caller: Caller, request: Target) -> Cel {
    let mut map = std::collections::HashMap::new();
    map.insert(
        Key::String(Arc::new(REQUEST_RESOURCE.to_string())),
        opaque(Step::Resource(caller, request)),
    );
    Cel::Map(Map { map: Arc::new(map) })
}

/// The caller behind an `authorizer` map (kept in its `requestResource`).
fn caller_of(value: &Cel) -> Option<(Caller, Target)> {
    let Cel::Map(map) = value else {
        return None;
    };
    let entry = map
        .map
        .get(&Key::String(Arc::new(REQUEST_RESOURCE.to_string())))?;
    match step_of(entry)? {
        Step::Resource(caller, target) => Some((caller.clone(), target.clone())),
        _ => None,
    }
}

fn step_of(value: &Cel) -> Option<&Step> {
    match value {
        Cel::Opaque(opaque) => opaque.downcast_ref::<Step>(),
        _ => None,
    }
}

fn wrong_target(function: &str) -> ExecutionError {
    ExecutionError::function_error(function, "no such overload for this receiver")
}

fn group(This(this): This<Cel>, name: Arc<String>) -> ResolveResult {
    let (caller, _) = caller_of(&this).ok_or_else(|| wrong_target("group"))?;
    Ok(opaque(Step::Group(caller, name.to_string())))
}

fn path(This(this): This<Cel>, path: Arc<String>) -> ResolveResult {
    let (caller, _) = caller_of(&this).ok_or_else(|| wrong_target("path"))?;
    Ok(opaque(Step::Path(caller, path.to_string())))
}

fn service_account(
    This(this): This<Cel>,
    namespace: Arc<String>,
    name: Arc<String>,
) -> ResolveResult {
    let (caller, request) = caller_of(&this).ok_or_else(|| wrong_target("serviceAccount"))?;
    let account = Caller {
        user: format!("system:serviceaccount:{namespace}:{name}"),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{namespace}"),
            "system:authenticated".into(),
        ],
        authorizer: caller.authorizer,
    };
    Ok(variable(account, request))
}

fn resource(This(this): This<Cel>, name: Arc<String>) -> ResolveResult {
    match step_of(&this) {
        Some(Step::Group(caller, group)) => Ok(opaque(Step::Resource(
            caller.clone(),
            Target {
                group: group.clone(),
                resource: name.to_string(),
                ..Target::default()
            },
        ))),
        _ => Err(wrong_target("resource")),
    }
}

/// `subresource`, `namespace` and `name` each set one field of a resource check.
fn narrow(function: &'static str, this: &Cel, set: impl FnOnce(&mut Target)) -> ResolveResult {
    match step_of(this) {
        Some(Step::Resource(caller, target)) => {
            let mut target = target.clone();
            set(&mut target);
            Ok(opaque(Step::Resource(caller.clone(), target)))
        }
        _ => Err(wrong_target(function)),
    }
}

fn subresource(This(this): This<Cel>, value: Arc<String>) -> ResolveResult {
    narrow("subresource", &this, |t| t.subresource = value.to_string())
}

fn namespace(This(this): This<Cel>, value: Arc<String>) -> ResolveResult {
    narrow("namespace", &this, |t| t.namespace = value.to_string())
}

fn name(This(this): This<Cel>, value: Arc<String>) -> ResolveResult {
    narrow("name", &this, |t| t.name = value.to_string())
}

fn field_selector(This(this): This<Cel>, _selector: Arc<String>) -> ResolveResult {
    narrow("fieldSelector", &this, |_| {})
}

fn label_selector(This(this): This<Cel>, _selector: Arc<String>) -> ResolveResult {
    narrow("labelSelector", &this, |_| {})
}

fn check(This(this): This<Cel>, verb: Arc<String>) -> ResolveResult {
    let (caller, attributes) = match step_of(&this) {
        Some(Step::Resource(caller, target)) => (
            caller,
            authz::Attributes {
                verb: verb.to_string(),
                resource_request: true,
                group: target.group.clone(),
                version: "*".into(),
                resource: target.resource.clone(),
                subresource: target.subresource.clone(),
                namespace: target.namespace.clone(),
                name: target.name.clone(),
                ..authz::Attributes::default()
            },
        ),
        Some(Step::Path(caller, path)) => (
            caller,
            authz::Attributes {
                verb: verb.to_string(),
                path: path.clone(),
                ..authz::Attributes::default()
            },
        ),
        _ => return Err(wrong_target("check")),
    };
    let attributes = authz::Attributes {
        user: caller.user.clone(),
        groups: caller.groups.clone(),
        ..attributes
    };
    let (allowed, reason) = match caller.authorizer.authorize(&attributes) {
        Decision::Allow { reason } => (true, reason),
        Decision::Deny { reason } => (false, reason),
        Decision::NoOpinion => (false, String::new()),
    };
    Ok(opaque(Step::Decision {
        allowed,
        reason,
        error: String::new(),
    }))
}

fn decision(function: &'static str, this: &Cel) -> Result<(bool, String, String), ExecutionError> {
    match step_of(this) {
        Some(Step::Decision {
            allowed,
            reason,
            error,
        }) => Ok((*allowed, reason.clone(), error.clone())),
        _ => Err(wrong_target(function)),
    }
}

fn allowed(This(this): This<Cel>) -> ResolveResult {
    Ok(Cel::Bool(decision("allowed", &this)?.0))
}

fn reason(This(this): This<Cel>) -> ResolveResult {
    Ok(Cel::String(Arc::new(decision("reason", &this)?.1)))
}

fn errored(This(this): This<Cel>) -> ResolveResult {
    Ok(Cel::Bool(!decision("errored", &this)?.2.is_empty()))
}

fn error(This(this): This<Cel>) -> ResolveResult {
    Ok(Cel::String(Arc::new(decision("error", &this)?.2)))
}

/// Adds the library's functions to a root context (none of their names is taken by the
/// standard or Kubernetes libraries).
pub fn register(context: &mut Context<'static>) {
    context.add_function("group", group);
    context.add_function("path", path);
    context.add_function("serviceAccount", service_account);
    context.add_function("resource", resource);
    context.add_function("subresource", subresource);
    context.add_function("namespace", namespace);
    context.add_function("name", name);
    context.add_function("fieldSelector", field_selector);
    context.add_function("labelSelector", label_selector);
    context.add_function("check", check);
    context.add_function("allowed", allowed);
    context.add_function("reason", reason);
    context.add_function("errored", errored);
    context.add_function("error", error);
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::webhooks::cel::{Expression, Scope};

    /// Allows alice to delete deployments in `prod` and service account `ci/deployer` to
    /// list secrets; `/metrics` to anyone; denies the rest with a reason.
    struct Fake;

    impl Authorizer for Fake {
        fn authorize(&self, a: &authz::Attributes) -> Decision {
            let allowed = match (a.user.as_str(), a.resource_request) {
                ("alice", true) => {
                    a.verb == "delete"
                        && a.group == "apps"
                        && a.resource == "deployments"
                        && a.subresource.is_empty()
                        && a.namespace == "prod"
                        && a.name == "web"
                }
                ("system:serviceaccount:ci:deployer", true) => {
                    a.verb == "list"
                        && a.resource == "secrets"
                        && a.groups.contains(&"system:serviceaccounts:ci".to_string())
                }
                (_, false) => a.path == "/metrics" && a.verb == "get",
                _ => false,
            };
            if allowed {
                Decision::Allow {
                    reason: "fake: allowed".into(),
                }
            } else {
                Decision::Deny {
                    reason: format!("fake: {} may not {} {}", a.user, a.verb, a.resource),
                }
            }
        }
    }

    fn scope(user: &str) -> Scope {
        let mut scope = Scope::new(&[("object", &Value::Null)]);
        let caller = Caller {
            authorizer: Arc::new(Fake),
            user: user.into(),
            groups: vec!["system:authenticated".into()],
        };
        let request = Target {
            group: "apps".into(),
            resource: "deployments".into(),
            namespace: "prod".into(),
            name: "web".into(),
            ..Target::default()
        };
        scope.bind_authorizer(caller, request);
        scope
    }

    fn holds(scope: &Scope, source: &str) -> bool {
        Expression::compile(source)
            .and_then(|e| e.holds(scope))
            .unwrap_or_else(|error| panic!("{source}: {error}"))
    }

    #[test]
    fn checks_ask_the_servers_authorizers_as_the_requesting_user() {
        let alice = scope("alice");
        assert!(holds(
            &alice,
            "authorizer.group('apps').resource('deployments').namespace('prod').name('web').check('delete').allowed()"
        ));
        assert!(!holds(
            &alice,
            "authorizer.group('apps').resource('deployments').namespace('dev').name('web').check('delete').allowed()"
        ));
        assert!(!holds(
            &alice,
            "authorizer.group('apps').resource('deployments').subresource('scale').namespace('prod').name('web').check('delete').allowed()"
        ));
        assert!(holds(
            &alice,
            "authorizer.requestResource.check('delete').allowed()"
        ));
        assert!(holds(
            &alice,
            "authorizer.requestResource.check('get').reason() == 'fake: alice may not get deployments'"
        ));
        assert!(holds(
            &alice,
            "!authorizer.requestResource.check('get').errored() && authorizer.requestResource.check('get').error() == ''"
        ));
        assert!(holds(
            &alice,
            "authorizer.path('/metrics').check('get').allowed()"
        ));
        assert!(!holds(
            &alice,
            "authorizer.path('/healthz').check('get').allowed()"
        ));
        assert!(holds(
            &alice,
            "authorizer.serviceAccount('ci', 'deployer').group('').resource('secrets').namespace('ci').check('list').allowed()"
        ));
        assert!(holds(
            &alice,
            "authorizer.group('apps').resource('deployments').namespace('prod').name('web').labelSelector('a=b').check('delete').allowed()"
        ));
        let bob = scope("bob");
        assert!(!holds(
            &bob,
            "authorizer.requestResource.check('delete').allowed()"
        ));
        // The library's functions refuse other receivers.
        let error = Expression::compile("'apps'.resource('deployments')")
            .and_then(|e| e.holds(&bob))
            .expect_err("a string is no GroupCheck");
        assert!(error.contains("resource"), "{error}");
    }
}
