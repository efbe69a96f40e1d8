//! Authorization: the trait every authorizer implements, the chain `--authorization-mode`
//! builds (upstream's order: `system:masters` first, then each mode; the first to allow or
//! deny decides, silence everywhere is a denial), RBAC (rbac/) and `AlwaysAllow` (only when
//! asked for). SelfSubjectAccessReviews are answered by the same chain the request path uses.

pub mod certificates;
pub mod follow;
pub mod node;
pub mod rbac;
pub mod reviews;

pub use reviews::review_self;

use std::sync::Arc;

/// What a request wants to do, as an authorizer sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    pub user: String,
    pub groups: Vec<String>,
    pub verb: String,
    /// True for resource requests; false for paths like `/healthz`.
    pub resource_request: bool,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub path: String,
}

/// An authorizer's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow {
        reason: String,
    },
    Deny {
        reason: String,
    },
    /// No opinion; the next authorizer decides (the last one's silence is a denial).
    NoOpinion,
}

/// Decides whether a request may proceed.
pub trait Authorizer: Send + Sync {
    fn authorize(&self, attributes: &Attributes) -> Decision;

    /// The rules this authorizer grants `user` in `namespace` ("" for the cluster scope), for
    /// SelfSubjectRulesReview; `None` when it cannot list them (upstream's "incomplete").
    fn rules_for(
        &self,
        _user: &str,
        _groups: &[String],
        _namespace: &str,
    ) -> Option<Vec<k8s_openapi::api::rbac::v1::PolicyRule>> {
        None
    }
}

/// The authorizers `--authorization-mode` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Node,
    Rbac,
    AlwaysAllow,
}

impl Mode {
    /// Parses `--authorization-mode`'s comma-separated list (`Node`, `RBAC`, `AlwaysAllow`).
    pub fn parse_list(text: &str) -> Result<Vec<Mode>, String> {
        let mut modes = Vec::new();
        for name in text
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
        {
            let mode = match name {
                "Node" => Mode::Node,
                "RBAC" => Mode::Rbac,
                "AlwaysAllow" => Mode::AlwaysAllow,
                "Webhook" | "ABAC" | "AlwaysDeny" => {
                    return Err(format!("authorization mode {name:?} is not supported yet"))
                }
                other => {
                    return Err(format!(
                        "unknown authorization mode {other:?}: use Node, RBAC or AlwaysAllow"
                    ))
                }
            };
            if modes.contains(&mode) {
                return Err(format!("authorization mode {name:?} is given twice"));
            }
            modes.push(mode);
        }
        if modes.is_empty() {
            return Err("at least one authorization mode is needed".into());
        }
        Ok(modes)
    }
}

/// Authorizers asked in order: the first that allows or denies decides.
pub struct Chain {
    authorizers: Vec<Arc<dyn Authorizer>>,
}

impl Chain {
    pub fn new(authorizers: Vec<Arc<dyn Authorizer>>) -> Self {
        Self { authorizers }
    }
}

impl Authorizer for Chain {
    fn authorize(&self, attributes: &Attributes) -> Decision {
        for authorizer in &self.authorizers {
            match authorizer.authorize(attributes) {
                Decision::NoOpinion => continue,
                decided => return decided,
            }
        }
        Decision::NoOpinion
    }

    /// Every member's rules; `None` as soon as one member that may allow cannot list them.
    fn rules_for(
        &self,
        user: &str,
        groups: &[String],
        namespace: &str,
    ) -> Option<Vec<k8s_openapi::api::rbac::v1::PolicyRule>> {
        let mut rules = Vec::new();
        let mut complete = true;
        for authorizer in &self.authorizers {
            match authorizer.rules_for(user, groups, namespace) {
                Some(more) => rules.extend(more),
                None => complete = false,
            }
        }
        (complete || !rules.is_empty()).then_some(rules)
    }
}

/// The superuser group: members may do anything, whatever RBAC holds (as upstream's
/// privileged-group authorizer in front of every mode).
pub const SUPERUSER_GROUP: &str = "system:masters";

/// Allows members of `system:masters`.
pub struct Superusers;

impl Authorizer for Superusers {
    fn authorize(&self, attributes: &Attributes) -> Decision {
        if attributes
            .groups
            .iter()
            .any(|group| group == SUPERUSER_GROUP)
        {
            Decision::Allow {
                reason: String::new(),
            }
        } else {
            Decision::NoOpinion
        }
    }
}

/// Allows everything (only with `--authorization-mode=AlwaysAllow`).
pub struct AlwaysAllow;

impl Authorizer for AlwaysAllow {
    fn authorize(&self, _attributes: &Attributes) -> Decision {
        Decision::Allow {
            reason: String::new(),
        }
    }
}

/// Upstream's wording of a denial.
pub fn forbidden_message(attributes: &Attributes, reason: &str) -> String {
    let what = if attributes.resource_request {
        let resource = if attributes.subresource.is_empty() {
            attributes.resource.clone()
        } else {
            format!("{}/{}", attributes.resource, attributes.subresource)
        };
        let scope = if attributes.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{}\"", attributes.namespace)
        };
        format!(
            "User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
            attributes.user, attributes.verb, attributes.group
        )
    } else {
        format!(
            "User \"{}\" cannot {} path \"{}\"",
            attributes.user, attributes.verb, attributes.path
        )
    };
    if reason.is_empty() {
        what
    } else {
        format!("{what}: {reason}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct DenySecrets;
    impl Authorizer for DenySecrets {
        fn authorize(&self, attributes: &Attributes) -> Decision {
            if attributes.resource == "secrets" {
                Decision::Deny {
                    reason: "no secrets".into(),
                }
            } else {
                Decision::Allow {
                    reason: String::new(),
                }
            }
        }
    }

    #[test]
    fn reviews_are_answered_by_the_authorizer() {
        let review = json!({"spec": {"resourceAttributes": {"namespace": "default", "verb": "create", "resource": "pods"}}});
        assert_eq!(
            review_self(&AlwaysAllow, "admin", &[], &review)["status"]["allowed"],
            true
        );
        let review =
            json!({"spec": {"resourceAttributes": {"verb": "get", "resource": "secrets"}}});
        let answer = review_self(&DenySecrets, "bob", &[], &review);
        assert_eq!(answer["status"]["allowed"], false);
        assert_eq!(answer["status"]["reason"], "no secrets");
    }

    #[test]
    fn denials_read_like_upstream() {
        let attributes = Attributes {
            user: "bob".into(),
            verb: "list".into(),
            resource_request: true,
            resource: "pods".into(),
            namespace: "default".into(),
            ..Attributes::default()
        };
        assert_eq!(
            forbidden_message(&attributes, ""),
            "User \"bob\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
        );
    }
}
