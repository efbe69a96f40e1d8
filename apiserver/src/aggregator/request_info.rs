//! The authorization attributes of a request to an API this server does not know the kinds
//! of, read from its path and method alone as upstream's `RequestInfoFactory` reads them:
//! `/apis/<g>/<v>[/namespaces/<ns>]/<resource>[/<name>[/<subresource>]]`, with the verb from
//! the method (GET of a collection is `list`, or `watch` with `?watch=true` or the old
//! `/watch/` prefix; DELETE of a collection is `deletecollection`). `/apis/<g>/<v>` itself is
//! a non-resource request.

use crate::authn::UserInfo;
use crate::authz::Attributes;

/// Namespace subresources: `/namespaces/<ns>/status` names the namespace, not a resource in it.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// The attributes of `method path?query` by `caller`.
pub fn attributes(caller: &UserInfo, method: &http::Method, path: &str, query: &str) -> Attributes {
    let mut attributes = Attributes {
        user: caller.name.clone(),
        groups: caller.groups.clone(),
        verb: method.as_str().to_ascii_lowercase(),
        path: path.to_string(),
        ..Attributes::default()
    };
    let Some((group, version)) = super::group_version_of(path) else {
        return attributes;
    };
    let prefix_len = "/apis/".len() + group.len() + 1 + version.len();
    let rest = path[prefix_len..].trim_matches('/');
    let mut parts: Vec<&str> = rest.split('/').filter(|part| !part.is_empty()).collect();
    if parts.is_empty() {
        return attributes;
    }
    attributes.resource_request = true;
    attributes.path = String::new();
    attributes.group = group.to_string();
    attributes.version = version.to_string();
    let mut watch_prefix = false;
    if parts[0] == "watch" {
        watch_prefix = true;
        parts.remove(0);
    }
    if parts.first() == Some(&"namespaces") && parts.len() > 1 {
        attributes.namespace = parts[1].to_string();
        if parts.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&parts[2]) {
            parts.drain(..2);
        }
    }
    attributes.resource = parts.first().map(|s| s.to_string()).unwrap_or_default();
    attributes.name = parts.get(1).map(|s| s.to_string()).unwrap_or_default();
    attributes.subresource = parts.get(2).map(|s| s.to_string()).unwrap_or_default();
    let watch_param = query.split('&').any(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        key == "watch" && (value == "true" || value == "1")
    });
    let named = !attributes.name.is_empty();
    attributes.verb = match (method, named) {
        _ if watch_prefix => "watch",
        (&http::Method::GET | &http::Method::HEAD, false) if watch_param => "watch",
        (&http::Method::GET | &http::Method::HEAD, false) => "list",
        (&http::Method::GET | &http::Method::HEAD, true) => "get",
        (&http::Method::POST, _) => "create",
        (&http::Method::PUT, _) => "update",
        (&http::Method::PATCH, _) => "patch",
        (&http::Method::DELETE, false) => "deletecollection",
        (&http::Method::DELETE, true) => "delete",
        _ => return attributes_with_verb(attributes, method),
    }
    .to_string();
    attributes
}

fn attributes_with_verb(mut attributes: Attributes, method: &http::Method) -> Attributes {
    attributes.verb = method.as_str().to_ascii_lowercase();
    attributes
}

/// Whether the request runs as long as the client wants (upstream's long-running check for
/// aggregated requests): watches, and the connect-like subresources.
pub fn is_long_running(attributes: &Attributes) -> bool {
    attributes.verb == "watch"
        || ["exec", "attach", "portforward", "proxy", "log"]
            .contains(&attributes.subresource.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn of(method: Method, path: &str, query: &str) -> Attributes {
        attributes(&UserInfo::anonymous(), &method, path, query)
    }

    #[test]
    fn paths_and_methods_read_as_upstreams_request_info() {
        let base = "/apis/wardle.example.com/v1alpha1";
        let list = of(Method::GET, &format!("{base}/namespaces/a/flunders"), "");
        assert!(list.resource_request);
        assert_eq!(
            (
                list.verb.as_str(),
                list.namespace.as_str(),
                list.resource.as_str()
            ),
            ("list", "a", "flunders")
        );
        let watch = of(Method::GET, &format!("{base}/flunders"), "watch=true&x=1");
        assert_eq!(watch.verb, "watch");
        assert!(is_long_running(&watch));
        let old_watch = of(
            Method::GET,
            &format!("{base}/watch/namespaces/a/flunders/f"),
            "",
        );
        assert_eq!(
            (old_watch.verb.as_str(), old_watch.name.as_str()),
            ("watch", "f")
        );
        let status = of(
            Method::PUT,
            &format!("{base}/namespaces/a/flunders/f/status"),
            "",
        );
        assert_eq!(
            (
                status.verb.as_str(),
                status.name.as_str(),
                status.subresource.as_str()
            ),
            ("update", "f", "status")
        );
        let namespace = of(Method::GET, &format!("{base}/namespaces/a"), "");
        assert_eq!(
            (namespace.resource.as_str(), namespace.name.as_str()),
            ("namespaces", "a")
        );
        let all = of(Method::DELETE, &format!("{base}/namespaces/a/flunders"), "");
        assert_eq!(all.verb, "deletecollection");
        assert!(!is_long_running(&all));
        let discovery = of(Method::GET, base, "");
        assert!(!discovery.resource_request);
        assert_eq!(
            (discovery.verb.as_str(), discovery.path.as_str()),
            ("get", base)
        );
    }
}
