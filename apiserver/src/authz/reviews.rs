//! The review kinds, answered by the authorizer chain rather than stored: access reviews for
//! oneself (`SelfSubjectAccessReview`), for anyone (`SubjectAccessReview`) or for anyone in one
//! namespace (`LocalSubjectAccessReview`), the rules one holds (`SelfSubjectRulesReview`, what
//! `kubectl auth can-i --list` prints) and who one is (`SelfSubjectReview`, `kubectl auth
//! whoami`). Each answer is the request with its `status` filled in, as upstream returns it.

use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::{json, Value};

use super::{Attributes, Authorizer, Decision};
use crate::authn::{Authenticator, UserInfo};
use crate::error::{ApiError, Cause};

fn text(value: &Value) -> String {
    value.as_str().unwrap_or("").to_string()
}

/// The request a review's spec asks about, for `user`.
fn attributes_of(spec: &Value, user: &UserInfo) -> Attributes {
    let mut attributes = Attributes {
        user: user.name.clone(),
        groups: user.groups.clone(),
        ..Attributes::default()
    };
    if let Some(resource) = spec.get("resourceAttributes").filter(|v| v.is_object()) {
        attributes.resource_request = true;
        attributes.verb = text(&resource["verb"]);
        attributes.group = text(&resource["group"]);
        attributes.version = text(&resource["version"]);
        attributes.resource = text(&resource["resource"]);
        attributes.subresource = text(&resource["subresource"]);
        attributes.namespace = text(&resource["namespace"]);
        attributes.name = text(&resource["name"]);
    } else {
        let non_resource = &spec["nonResourceAttributes"];
        attributes.verb = text(&non_resource["verb"]);
        attributes.path = text(&non_resource["path"]);
    }
    attributes
}

fn access_status(authorizer: &dyn Authorizer, attributes: &Attributes) -> Value {
    match authorizer.authorize(attributes) {
        Decision::Allow { reason } => json!({"allowed": true, "reason": reason}),
        Decision::Deny { reason } => json!({"allowed": false, "denied": true, "reason": reason}),
        Decision::NoOpinion => json!({"allowed": false}),
    }
}

/// `review` with its kind, apiVersion, metadata and `status` as upstream answers.
fn answered(review: &Value, api_version: &str, kind: &str, status: Value) -> Value {
    let mut answer = review.clone();
    answer["apiVersion"] = json!(api_version);
    answer["kind"] = json!(kind);
    if !answer["metadata"].is_object() {
        answer["metadata"] = json!({});
    }
    answer["metadata"]["creationTimestamp"] = Value::Null;
    answer["status"] = status;
    answer
}

fn invalid(kind: &str, field: &str, message: &str) -> ApiError {
    ApiError::invalid(
        kind,
        "authorization.k8s.io",
        "",
        vec![Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {message}"),
            field: field.into(),
        }],
    )
}

/// Exactly one of resourceAttributes and nonResourceAttributes.
fn check_one_kind_of_attributes(kind: &str, spec: &Value) -> Result<(), ApiError> {
    let resource = spec.get("resourceAttributes").is_some_and(Value::is_object);
    let non_resource = spec
        .get("nonResourceAttributes")
        .is_some_and(Value::is_object);
    if resource == non_resource {
        return Err(invalid(
            kind,
            "spec.resourceAttributes",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ));
    }
    Ok(())
}

/// Answers a SelfSubjectAccessReview for the caller.
pub fn review_self(
    authorizer: &dyn Authorizer,
    user: &str,
    groups: &[String],
    review: &Value,
) -> Value {
    let caller = UserInfo {
        name: user.to_string(),
        groups: groups.to_vec(),
        ..UserInfo::default()
    };
    let status = access_status(authorizer, &attributes_of(&review["spec"], &caller));
    answered(
        review,
        "authorization.k8s.io/v1",
        "SelfSubjectAccessReview",
        status,
    )
}

/// Answers a SubjectAccessReview, or (with `namespace`) a LocalSubjectAccessReview made in
/// that namespace.
pub fn review_subject(
    authorizer: &dyn Authorizer,
    review: &Value,
    namespace: Option<&str>,
) -> Result<Value, ApiError> {
    let kind = if namespace.is_some() {
        "LocalSubjectAccessReview"
    } else {
        "SubjectAccessReview"
    };
    let spec = &review["spec"];
    check_one_kind_of_attributes(kind, spec)?;
    let user = text(&spec["user"]);
    let groups: Vec<String> = spec["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .map(text)
        .collect();
    if user.is_empty() && groups.is_empty() {
        return Err(invalid(
            kind,
            "spec.user",
            "\"\": at least one of user or group must be specified",
        ));
    }
    let mut review = review.clone();
    if let Some(namespace) = namespace {
        if spec
            .get("nonResourceAttributes")
            .is_some_and(Value::is_object)
        {
            return Err(invalid(
                kind,
                "spec.nonResourceAttributes",
                "disallowed on this kind of request",
            ));
        }
        let given = text(&review["metadata"]["namespace"]);
        if !given.is_empty() && given != namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let asked = text(&spec["resourceAttributes"]["namespace"]);
        if asked != namespace {
            return Err(invalid(
                kind,
                "spec.resourceAttributes.namespace",
                &format!("\"{asked}\": must match metadata.namespace"),
            ));
        }
        review["metadata"]["namespace"] = json!(namespace);
    }
    let subject = UserInfo {
        name: user,
        uid: text(&spec["uid"]),
        groups,
        ..UserInfo::default()
    };
    let status = access_status(authorizer, &attributes_of(spec, &subject));
    Ok(answered(&review, "authorization.k8s.io/v1", kind, status))
}

/// Answers a SelfSubjectRulesReview: the rules the caller holds in `spec.namespace`.
pub fn review_rules(
    authorizer: &dyn Authorizer,
    caller: &UserInfo,
    review: &Value,
) -> Result<Value, ApiError> {
    let namespace = text(&review["spec"]["namespace"]);
    let found = authorizer.rules_for(&caller.name, &caller.groups, &namespace);
    let incomplete = found.is_none();
    let (non_resource, resource): (Vec<PolicyRule>, Vec<PolicyRule>) =
        found.unwrap_or_default().into_iter().partition(|rule| {
            rule.non_resource_urls
                .as_ref()
                .is_some_and(|urls| !urls.is_empty())
        });
    let resource_rules: Vec<Value> = resource
        .iter()
        .map(|rule| {
            json!({
                "verbs": rule.verbs,
                "apiGroups": rule.api_groups.clone().unwrap_or_default(),
                "resources": rule.resources.clone().unwrap_or_default(),
                "resourceNames": rule.resource_names.clone().unwrap_or_default(),
            })
        })
        .collect();
    let non_resource_rules: Vec<Value> = non_resource
        .iter()
        .map(|rule| json!({"verbs": rule.verbs, "nonResourceURLs": rule.non_resource_urls}))
        .collect();
    let status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": incomplete,
    });
    Ok(answered(
        review,
        "authorization.k8s.io/v1",
        "SelfSubjectRulesReview",
        status,
    ))
}

/// Answers a TokenReview: whose `spec.token` is, for `spec.audiences` (default: the API's).
pub async fn review_token(authenticator: &Authenticator, review: &Value) -> Value {
    let token = text(&review["spec"]["token"]);
    let wanted: Vec<String> = review["spec"]["audiences"]
        .as_array()
        .into_iter()
        .flatten()
        .map(text)
        .collect();
    let accepted = authenticator.api_audiences();
    let audiences: Vec<String> = if wanted.is_empty() {
        accepted.clone()
    } else {
        wanted
            .into_iter()
            .filter(|aud| accepted.contains(aud))
            .collect()
    };
    let found = if audiences.is_empty() || token.is_empty() {
        None
    } else {
        authenticator
            .authenticate(None, Some(&format!("Bearer {token}")))
            .await
            .ok()
            .flatten()
    };
    let status = match found {
        Some(user) => {
            let mut info = json!({"username": user.name, "groups": user.groups});
            if !user.uid.is_empty() {
                info["uid"] = json!(user.uid);
            }
            if !user.extra.is_empty() {
                info["extra"] = json!(user.extra);
            }
            json!({"authenticated": true, "user": info, "audiences": audiences})
        }
        None => json!({"user": {}, "error": "invalid bearer token"}),
    };
    let mut answer = answered(review, "authentication.k8s.io/v1", "TokenReview", status);
    // The token is the client's secret: the answer does not echo it.
    answer["spec"]["token"] = json!("");
    answer
}

/// Answers a SelfSubjectReview: who the caller is, as authentication found it.
pub fn review_identity(caller: &UserInfo, review: &Value, api_version: &str) -> Value {
    let mut user = json!({"username": caller.name, "groups": caller.groups});
    if !caller.uid.is_empty() {
        user["uid"] = json!(caller.uid);
    }
    if !caller.extra.is_empty() {
        user["extra"] = json!(caller.extra);
    }
    answered(
        review,
        api_version,
        "SelfSubjectReview",
        json!({"userInfo": user}),
    )
}
