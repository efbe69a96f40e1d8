//! What a request asks for: the resource path parsed into a `RequestInfo` (as upstream's
//! RequestInfoFactory does) and the query options of lists, watches, writes and deletes.

use std::collections::HashMap;

use crate::catalog::{self, ResourceInfo, Subresource};
use crate::crd::Served;
use crate::error::{ApiError, Result};

/// The verb a resource request maps to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

impl Verb {
    /// The verb's name as authorization, metrics and discovery use it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }
}

/// A request for a resource: `/api/v1/namespaces/ns/pods/name/status` and the like.
#[derive(Clone, Debug)]
pub struct RequestInfo {
    pub verb: Verb,
    pub resource: &'static ResourceInfo,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<Subresource>,
}

/// What a path under `/api` or `/apis` names.
#[derive(Debug)]
pub enum ApiPath {
    /// `/api` or `/apis`.
    Root {
        legacy: bool,
    },
    /// `/apis/<group>`.
    Group(String),
    /// `/api/v1` or `/apis/<group>/<version>`.
    GroupVersion {
        group: String,
        version: String,
    },
    Resource(RequestInfo),
}

/// Parses a path under `/api` or `/apis` for an HTTP method and query; `custom` is what the
/// server serves from CRDs.
pub fn parse_path(
    method: &http::Method,
    path: &str,
    query: &Query,
    custom: &Served,
) -> Result<ApiPath> {
    // As upstream (Go's decoded `URL.Path`), segments are split after percent-decoding, so
    // `ops%20admin` names the object `ops admin`.
    let decoded = percent_encoding::percent_decode_str(path)
        .decode_utf8()
        .map_err(|_| ApiError::bad_request("the request path is not UTF-8 once percent-decoded"))?;
    let parts: Vec<&str> = decoded.trim_matches('/').split('/').collect();
    let (group, version, mut rest) = match parts.as_slice() {
        ["api"] => return Ok(ApiPath::Root { legacy: true }),
        ["apis"] => return Ok(ApiPath::Root { legacy: false }),
        ["apis", group] => return Ok(ApiPath::Group((*group).to_string())),
        ["api", version, rest @ ..] => ("", *version, rest.to_vec()),
        ["apis", group, version, rest @ ..] => (*group, *version, rest.to_vec()),
        _ => return Err(ApiError::path_not_found()),
    };
    if !catalog::serves_group_version(group, version)
        && !custom.serves_group_version(group, version)
    {
        return Err(ApiError::path_not_found());
    }
    if rest.is_empty() {
        return Ok(ApiPath::GroupVersion {
            group: group.to_string(),
            version: version.to_string(),
        });
    }
    // The deprecated `/watch/` prefix.
    let mut watch_prefix = false;
    if rest.first() == Some(&"watch") {
        watch_prefix = true;
        rest.remove(0);
    }
    let mut namespace = None;
    if rest.len() >= 2 && rest[0] == "namespaces" {
        let is_namespace_itself =
            rest.len() == 2 || (rest.len() == 3 && matches!(rest[2], "status" | "finalize"));
        if !is_namespace_itself {
            namespace = Some(rest[1].to_string());
            rest.drain(..2);
        }
    }
    let (plural, name, subresource) = match rest.as_slice() {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(*name), None),
        [plural, name, sub] => (*plural, Some(*name), Some(*sub)),
        // A proxy subresource's path goes on: `nodes/<name>/proxy/<path on the kubelet>`.
        [plural, name, "proxy", ..] => (*plural, Some(*name), Some("proxy")),
        _ => return Err(ApiError::path_not_found()),
    };
    let resource = catalog::find(group, version, plural)
        .or_else(|| custom.find(group, version, plural))
        .ok_or_else(ApiError::path_not_found)?;
    if namespace.is_some() && !resource.namespaced {
        return Err(ApiError::path_not_found());
    }
    let subresource = match subresource {
        None => None,
        Some(segment) => {
            let sub = Subresource::parse(segment).ok_or_else(ApiError::path_not_found)?;
            resource
                .subresource(sub)
                .ok_or_else(ApiError::path_not_found)?;
            Some(sub)
        }
    };
    for part in [namespace.as_deref(), name].into_iter().flatten() {
        if part.is_empty() {
            return Err(ApiError::path_not_found());
        }
    }
    let watch = watch_prefix || query.flag("watch");
    let verb = match (method.as_str(), name.is_some()) {
        ("GET" | "HEAD", _) if watch => Verb::Watch,
        ("GET" | "HEAD", true) => Verb::Get,
        ("GET" | "HEAD", false) => Verb::List,
        ("POST", _) => Verb::Create,
        ("PUT", true) => Verb::Update,
        ("PATCH", true) => Verb::Patch,
        ("DELETE", true) => Verb::Delete,
        ("DELETE", false) => Verb::DeleteCollection,
        _ => {
            return Err(ApiError::method_not_allowed(format!(
                "the server does not allow this method on the requested resource ({method})"
            )))
        }
    };
    Ok(ApiPath::Resource(RequestInfo {
        verb,
        resource,
        namespace,
        name: name.map(str::to_string),
        subresource,
    }))
}

/// A request's query parameters; a repeated key's first value is the one read, as Go's
/// `url.Values.Get` does.
#[derive(Clone, Debug, Default)]
pub struct Query {
    values: HashMap<String, Vec<String>>,
}

impl Query {
    pub fn parse(raw: Option<&str>) -> Self {
        let mut values: HashMap<String, Vec<String>> = HashMap::new();
        for (key, value) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            values
                .entry(key.into_owned())
                .or_default()
                .push(value.into_owned());
        }
        Self { values }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values
            .get(key)
            .and_then(|values| values.first())
            .map(String::as_str)
    }

    pub fn all(&self, key: &str) -> &[String] {
        self.values.get(key).map(Vec::as_slice).unwrap_or(&[])
    }

    /// A boolean parameter: present as `true`/`1`/empty counts as set.
    pub fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1" | "True" | "TRUE"))
    }

    fn bool_param(&self, key: &str) -> Result<bool> {
        match self.get(key) {
            None | Some("") => Ok(false),
            Some("true" | "1" | "True" | "TRUE" | "t" | "T") => Ok(true),
            Some("false" | "0" | "False" | "FALSE" | "f" | "F") => Ok(false),
            Some(other) => Err(ApiError::bad_request(format!(
                "invalid value for {key}: {other:?} is not a boolean"
            ))),
        }
    }

    fn int_param(&self, key: &str) -> Result<Option<i64>> {
        match self.get(key) {
            None | Some("") => Ok(None),
            Some(text) => text.parse::<i64>().map(Some).map_err(|_| {
                ApiError::bad_request(format!(
                    "invalid value for {key}: {text:?} is not an integer"
                ))
            }),
        }
    }
}

/// `resourceVersionMatch` on lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionMatch {
    Unset,
    NotOlderThan,
    Exact,
}

/// Options of a list or watch.
#[derive(Clone, Debug)]
pub struct ListOptions {
    pub label_selector: String,
    pub field_selector: String,
    pub limit: Option<i64>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub version_match: VersionMatch,
    pub allow_bookmarks: bool,
    pub timeout_seconds: Option<i64>,
    pub send_initial_events: bool,
}

impl ListOptions {
    /// Every object, latest state, one page.
    pub fn everything() -> Self {
        Self {
            label_selector: String::new(),
            field_selector: String::new(),
            limit: None,
            continue_token: None,
            resource_version: None,
            version_match: VersionMatch::Unset,
            allow_bookmarks: false,
            timeout_seconds: None,
            send_initial_events: false,
        }
    }

    pub fn from_query(query: &Query) -> Result<Self> {
        let version_match = match query.get("resourceVersionMatch") {
            None | Some("") => VersionMatch::Unset,
            Some("NotOlderThan") => VersionMatch::NotOlderThan,
            Some("Exact") => VersionMatch::Exact,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "resourceVersionMatch: Unsupported value: \"{other}\": supported values: \"Exact\", \"NotOlderThan\""
                )))
            }
        };
        let resource_version = query
            .get("resourceVersion")
            .filter(|rv| !rv.is_empty())
            .map(str::to_string);
        if version_match != VersionMatch::Unset && resource_version.is_none() {
            return Err(ApiError::bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        let limit = query.int_param("limit")?.filter(|limit| *limit > 0);
        let continue_token = query
            .get("continue")
            .filter(|token| !token.is_empty())
            .map(str::to_string);
        if continue_token.is_some() && resource_version.as_deref().is_some_and(|rv| rv != "0") {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        Ok(Self {
            label_selector: query.get("labelSelector").unwrap_or("").to_string(),
            field_selector: query.get("fieldSelector").unwrap_or("").to_string(),
            limit,
            continue_token,
            resource_version,
            version_match,
            allow_bookmarks: query.bool_param("allowWatchBookmarks")?,
            timeout_seconds: query.int_param("timeoutSeconds")?,
            send_initial_events: query.bool_param("sendInitialEvents")?,
        })
    }
}

/// `fieldValidation` on writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

/// Options every write carries.
#[derive(Clone, Debug)]
pub struct WriteOptions {
    pub dry_run: bool,
    pub field_manager: Option<String>,
    pub field_validation: FieldValidation,
    pub force: bool,
}

impl WriteOptions {
    pub fn from_query(query: &Query) -> Result<Self> {
        let mut dry_run = false;
        for value in query.all("dryRun") {
            match value.as_str() {
                "All" => dry_run = true,
                "" => {}
                other => {
                    return Err(ApiError::bad_request(format!(
                        "dryRun: Unsupported value: \"{other}\": supported values: \"All\""
                    )))
                }
            }
        }
        let field_validation = match query.get("fieldValidation") {
            None | Some("") | Some("Warn") => FieldValidation::Warn,
            Some("Strict") => FieldValidation::Strict,
            Some("Ignore") => FieldValidation::Ignore,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "fieldValidation: Unsupported value: \"{other}\": supported values: \"Ignore\", \"Strict\", \"Warn\""
                )))
            }
        };
        let field_manager = query
            .get("fieldManager")
            .filter(|manager| !manager.is_empty())
            .map(str::to_string);
        if let Some(manager) = &field_manager {
            if manager.chars().count() > 128 {
                return Err(ApiError::bad_request(
                    "fieldManager: Too long: may not be more than 128 bytes",
                ));
            }
        }
        Ok(Self {
            dry_run,
            field_manager,
            field_validation,
            force: query.bool_param("force")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(method: &str, path: &str, query: &str) -> RequestInfo {
        let method = http::Method::from_bytes(method.as_bytes()).expect("method");
        match parse_path(
            &method,
            path,
            &Query::parse(Some(query)),
            &Served::default(),
        )
        .expect("parses")
        {
            ApiPath::Resource(info) => info,
            other => panic!("not a resource: {other:?}"),
        }
    }

    #[test]
    fn namespaced_paths_split_into_namespace_name_and_subresource() {
        let info = resource(
            "PUT",
            "/apis/apps/v1/namespaces/ns/deployments/web/scale",
            "",
        );
        assert_eq!(info.verb, Verb::Update);
        assert_eq!(info.resource.plural, "deployments");
        assert_eq!(info.namespace.as_deref(), Some("ns"));
        assert_eq!(info.name.as_deref(), Some("web"));
        assert_eq!(info.subresource, Some(Subresource::Scale));
    }

    #[test]
    fn a_namespace_and_its_status_are_the_namespaces_resource() {
        let info = resource("GET", "/api/v1/namespaces/kube-system", "");
        assert_eq!(info.resource.plural, "namespaces");
        assert_eq!(info.name.as_deref(), Some("kube-system"));
        assert_eq!(info.namespace, None);
        let info = resource("PUT", "/api/v1/namespaces/x/finalize", "");
        assert_eq!(info.subresource, Some(Subresource::Finalize));
    }

    #[test]
    fn watch_comes_from_the_query_or_the_legacy_prefix() {
        assert_eq!(
            resource("GET", "/api/v1/pods", "watch=true").verb,
            Verb::Watch
        );
        assert_eq!(
            resource("GET", "/api/v1/watch/namespaces/a/pods", "").verb,
            Verb::Watch
        );
        assert_eq!(
            resource("GET", "/api/v1/pods", "watch=false").verb,
            Verb::List
        );
        assert_eq!(
            resource("DELETE", "/api/v1/namespaces/a/pods", "").verb,
            Verb::DeleteCollection
        );
    }

    #[test]
    fn path_segments_are_percent_decoded() {
        let info = resource(
            "DELETE",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/ops%20admin",
            "",
        );
        assert_eq!(info.name.as_deref(), Some("ops admin"));
        let info = resource("GET", "/api/v1/namespaces/d%65fault/configmaps/a", "");
        assert_eq!(info.namespace.as_deref(), Some("default"));
        let error = parse_path(
            &http::Method::GET,
            "/api/v1/namespaces/%FF/configmaps",
            &Query::default(),
            &Served::default(),
        )
        .expect_err("not UTF-8");
        assert_eq!(error.code, 400);
    }

    #[test]
    fn unknown_groups_resources_and_subresources_are_not_found() {
        let get = http::Method::GET;
        let query = Query::default();
        for path in [
            "/apis/nope/v1/things",
            "/api/v2/pods",
            "/api/v1/widgets",
            "/api/v1/namespaces/a/pods/x/bogus",
            "/api/v1/namespaces/a/nodes/x",
            "/api/v1/namespaces/a/pods/x/y/z",
        ] {
            let error = parse_path(&get, path, &query, &Served::default()).expect_err(path);
            assert_eq!(error.code, 404, "{path}");
        }
    }

    #[test]
    fn connect_verbs_come_from_the_method_and_a_proxy_path_goes_on() {
        let exec = "/api/v1/namespaces/a/pods/p/exec";
        assert_eq!(resource("GET", exec, "command=ls").verb, Verb::Get);
        assert_eq!(resource("POST", exec, "command=ls").verb, Verb::Create);
        assert_eq!(
            resource("GET", "/api/v1/namespaces/a/pods/p/log", "").subresource,
            Some(Subresource::Log)
        );
        let proxy = resource("PUT", "/api/v1/nodes/n1/proxy/configz/x", "");
        assert_eq!(
            (proxy.verb, proxy.name.as_deref(), proxy.subresource),
            (Verb::Update, Some("n1"), Some(Subresource::Proxy))
        );
        // Only a proxy's path goes on.
        let error = parse_path(
            &http::Method::GET,
            "/api/v1/namespaces/a/pods/p/log/more",
            &Query::default(),
            &Served::default(),
        )
        .expect_err("log has no path");
        assert_eq!(error.code, 404);
    }

    #[test]
    fn bad_query_values_are_bad_requests() {
        let error = ListOptions::from_query(&Query::parse(Some("limit=abc"))).expect_err("limit");
        assert_eq!(error.code, 400);
        let error = WriteOptions::from_query(&Query::parse(Some("dryRun=Some"))).expect_err("dry");
        assert_eq!(error.code, 400);
        let error = ListOptions::from_query(&Query::parse(Some("resourceVersionMatch=Exact")))
            .expect_err("match without rv");
        assert_eq!(error.code, 400);
    }
}
