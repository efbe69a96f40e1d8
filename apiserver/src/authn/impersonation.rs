//! Impersonation (`kubectl --as`, `--as-group`, `--as-uid`, `Impersonate-Extra-*`): a caller
//! allowed the `impersonate` verb on the users, groups, ServiceAccounts, uids and extras it
//! names acts as that user from here on. As upstream: each header is authorized on its own
//! resource (`users`, `groups`, `serviceaccounts` in core; `uids`, `userextras/<key>` in
//! `authentication.k8s.io`), a ServiceAccount impersonated without groups gets its
//! ServiceAccount groups, and every impersonated user gets `system:authenticated` (the
//! anonymous user `system:unauthenticated`).

use std::collections::BTreeMap;

use http::HeaderMap;

use super::{UserInfo, ANONYMOUS_USER, AUTHENTICATED_GROUP, UNAUTHENTICATED_GROUP};
use crate::authz::{self, Attributes, Authorizer, Decision};
use crate::error::ApiError;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA: &str = "impersonate-extra-";

/// The prefix of every ServiceAccount's user name.
pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// What the request's `Impersonate-*` headers ask for; `None` when it has none.
fn requested(headers: &HeaderMap) -> Result<Option<UserInfo>, ApiError> {
    let values = |name: &str| -> Result<Vec<String>, ApiError> {
        headers
            .get_all(name)
            .iter()
            .map(|value| {
                value.to_str().map(str::to_string).map_err(|_| {
                    ApiError::bad_request(format!("the {name} header is not valid text"))
                })
            })
            .collect()
    };
    let user = values(USER)?.into_iter().next();
    let groups = values(GROUP)?;
    let uid = values(UID)?.into_iter().next();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for name in headers.keys() {
        if let Some(key) = name.as_str().strip_prefix(EXTRA) {
            let key = percent_encoding::percent_decode_str(key)
                .decode_utf8_lossy()
                .into_owned();
            extra.entry(key).or_default().extend(values(name.as_str())?);
        }
    }
    let Some(name) = user else {
        if groups.is_empty() && uid.is_none() && extra.is_empty() {
            return Ok(None);
        }
        return Err(ApiError::bad_request(
            "requested impersonation of groups, a uid or extra fields without impersonating a user",
        ));
    };
    Ok(Some(UserInfo {
        name,
        uid: uid.unwrap_or_default(),
        groups,
        extra,
    }))
}

/// The user `requester` acts as: itself without `Impersonate-*` headers, else the one they
/// name once every part of it is allowed.
pub fn resolve(
    requester: UserInfo,
    headers: &HeaderMap,
    authorizer: &dyn Authorizer,
) -> Result<UserInfo, ApiError> {
    let Some(mut wanted) = requested(headers)? else {
        return Ok(requester);
    };
    let check = |group: &str, resource: &str, subresource: &str, namespace: &str, name: &str| {
        let attributes = Attributes {
            user: requester.name.clone(),
            groups: requester.groups.clone(),
            verb: "impersonate".into(),
            resource_request: true,
            group: group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: namespace.into(),
            name: name.into(),
            ..Attributes::default()
        };
        match authorizer.authorize(&attributes) {
            Decision::Allow { .. } => Ok(()),
            Decision::Deny { reason } => Err(refused(&attributes, &reason)),
            Decision::NoOpinion => Err(refused(&attributes, "")),
        }
    };
    let account = wanted
        .name
        .strip_prefix(SERVICE_ACCOUNT_PREFIX)
        .and_then(|rest| rest.split_once(':'))
        .map(|(namespace, name)| (namespace.to_string(), name.to_string()));
    match &account {
        Some((namespace, name)) => check("", "serviceaccounts", "", namespace, name)?,
        None => check("", "users", "", "", &wanted.name)?,
    }
    for group in &wanted.groups {
        check("", "groups", "", "", group)?;
    }
    if !wanted.uid.is_empty() {
        check("authentication.k8s.io", "uids", "", "", &wanted.uid)?;
    }
    for (key, values) in &wanted.extra {
        for value in values {
            check("authentication.k8s.io", "userextras", key, "", value)?;
        }
    }
    if let (Some((namespace, _)), true) = (&account, wanted.groups.is_empty()) {
        wanted.groups = vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{namespace}"),
        ];
    }
    let implied = if wanted.name == ANONYMOUS_USER {
        UNAUTHENTICATED_GROUP
    } else {
        AUTHENTICATED_GROUP
    };
    if !wanted.groups.iter().any(|group| group == implied) {
        wanted.groups.push(implied.into());
    }
    tracing::debug!(requester = %requester.name, user = %wanted.name, "impersonating");
    Ok(wanted)
}

/// Upstream's answer: `users "alice" is forbidden: User "bob" cannot impersonate resource
/// "users" in API group "" at the cluster scope`.
fn refused(attributes: &Attributes, reason: &str) -> ApiError {
    let resource = if attributes.subresource.is_empty() {
        attributes.resource.clone()
    } else {
        format!("{}/{}", attributes.resource, attributes.subresource)
    };
    ApiError::forbidden(format!(
        "{resource} \"{}\" is forbidden: {}",
        attributes.name,
        authz::forbidden_message(attributes, reason)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allows `impersonate` of what `allowed` lists as (resource, name).
    struct Allowing(Vec<(&'static str, &'static str)>);

    impl Authorizer for Allowing {
        fn authorize(&self, attributes: &Attributes) -> Decision {
            let resource = if attributes.subresource.is_empty() {
                attributes.resource.clone()
            } else {
                format!("{}/{}", attributes.resource, attributes.subresource)
            };
            let allowed = attributes.verb == "impersonate"
                && self
                    .0
                    .iter()
                    .any(|(r, name)| *r == resource && *name == attributes.name);
            if allowed {
                Decision::Allow {
                    reason: String::new(),
                }
            } else {
                Decision::NoOpinion
            }
        }
    }

    fn bob() -> UserInfo {
        UserInfo {
            name: "bob".into(),
            groups: vec![AUTHENTICATED_GROUP.into()],
            ..UserInfo::default()
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn without_headers_the_caller_is_itself() {
        let user = resolve(bob(), &HeaderMap::new(), &Allowing(vec![])).unwrap();
        assert_eq!(user, bob());
    }

    #[test]
    fn each_part_needs_its_own_permission() {
        let asks = headers(&[("Impersonate-User", "alice"), ("Impersonate-Group", "dev")]);
        let error = resolve(bob(), &asks, &Allowing(vec![])).unwrap_err();
        assert_eq!(error.code, 403);
        assert_eq!(
            error.message,
            "users \"alice\" is forbidden: User \"bob\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        );
        let error = resolve(bob(), &asks, &Allowing(vec![("users", "alice")])).unwrap_err();
        assert!(
            error.message.starts_with("groups \"dev\" is forbidden"),
            "{}",
            error.message
        );
        let user = resolve(
            bob(),
            &asks,
            &Allowing(vec![("users", "alice"), ("groups", "dev")]),
        )
        .unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, vec!["dev", AUTHENTICATED_GROUP]);
    }

    #[test]
    fn a_service_account_gets_its_groups_and_extras_are_decoded() {
        let asks = headers(&[
            ("Impersonate-User", "system:serviceaccount:a:robot"),
            ("Impersonate-Extra-scopes%2Fread", "all"),
        ]);
        let allowed = Allowing(vec![
            ("serviceaccounts", "robot"),
            ("userextras/scopes/read", "all"),
        ]);
        let user = resolve(bob(), &asks, &allowed).unwrap();
        assert_eq!(
            user.groups,
            vec![
                "system:serviceaccounts",
                "system:serviceaccounts:a",
                AUTHENTICATED_GROUP
            ]
        );
        assert_eq!(user.extra["scopes/read"], vec!["all"]);
    }

    #[test]
    fn groups_without_a_user_are_a_bad_request() {
        let asks = headers(&[("Impersonate-Group", "dev")]);
        let error = resolve(bob(), &asks, &Allowing(vec![])).unwrap_err();
        assert_eq!(error.code, 400);
    }
}
