//! The resource handler: parses the path into a `RequestInfo`, authorizes it, and runs the
//! verb against the registry (get, list, watch, create, update, patch, delete,
//! deletecollection, and the scale/status/binding subresources).

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};
use serde_json::Value;

use super::discovery;
use super::respond::{self, IncludeObject};
use super::{AppState, Caller, RequestLabels};
use crate::authz::{self, Decision};
use crate::catalog::Subresource;
use crate::codec::{self, Output};
use crate::error::{ApiError, Result};
use crate::kinds::Reviewers;
use crate::patch;
use crate::patch::strategic::Ty;
use crate::registry::{self, DeleteOptions, Preconditions, Propagation, Target, Write};
use crate::request::{self, ApiPath, ListOptions, Query, RequestInfo, Verb, WriteOptions};

fn header(headers: &HeaderMap, name: http::header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// Entry point for everything under `/api` and `/apis`.
pub async fn handle(State(state): State<AppState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let caller = parts
        .extensions
        .get::<Caller>()
        .map(|caller| caller.0.clone())
        .unwrap_or_else(crate::authn::UserInfo::anonymous);
    let aggregator = state.aggregator.as_deref();
    if let Some(remote) = aggregator.and_then(|aggregator| aggregator.route(parts.uri.path())) {
        return crate::aggregator::proxy::serve(&state, &caller, remote, parts, body).await;
    }
    let routes = aggregator
        .map(crate::aggregator::Aggregator::routes)
        .unwrap_or_default();
    let query = Query::parse(parts.uri.query());
    let accept = header(&parts.headers, http::header::ACCEPT);
    let custom = state.registry.custom().served();
    let path = match request::parse_path(&parts.method, parts.uri.path(), &query, &custom) {
        Ok(path) => path,
        Err(error) => return error.into_response(),
    };
    if !matches!(path, ApiPath::Resource(_)) {
        // Discovery documents are non-resource paths to authorization, as upstream.
        let verb = parts.method.as_str().to_ascii_lowercase();
        if let Err(error) = super::authorize_non_resource(&state, &caller, &verb, parts.uri.path())
        {
            return error.into_response();
        }
    }
    match path {
        ApiPath::Root { legacy } => {
            discovery::root(legacy, accept, &state.advertise, &custom, &routes)
        }
        ApiPath::Group(group) => discovery::group(&group, &custom, &routes)
            .unwrap_or_else(|| ApiError::path_not_found().into_response()),
        ApiPath::GroupVersion { group, version } => {
            discovery::resource_list(&group, &version, &custom)
        }
        ApiPath::Resource(info) => {
            let mut labels = labels_of(&info, &query);
            let span = tracing::Span::current();
            span.record("resource", info.resource.plural);
            if let Some(namespace) = &info.namespace {
                span.record("namespace", namespace.as_str());
            }
            let served = if info
                .subresource
                .is_some_and(Subresource::proxies_to_kubelet)
            {
                // Upstream counts connect requests (and pods/log) as CONNECT.
                labels.verb = "CONNECT".to_string();
                super::kubelet_proxy::serve(&state, &caller, &info, &query, parts, body).await
            } else if info.resource.group == crate::kinds::metrics::GROUP {
                super::resource_metrics::serve(&state, &caller, &info, &query, &parts.headers).await
            } else {
                resource(&state, &caller, &info, &query, &parts.headers, body).await
            };
            let mut response = served.unwrap_or_else(IntoResponse::into_response);
            response.extensions_mut().insert(labels);
            response
        }
    }
}

fn labels_of(info: &RequestInfo, query: &Query) -> RequestLabels {
    let verb = match info.verb {
        Verb::Get => "GET",
        Verb::List => "LIST",
        Verb::Watch => "WATCH",
        Verb::Create => "POST",
        Verb::Update => "PUT",
        Verb::Patch => "PATCH",
        Verb::Delete => "DELETE",
        Verb::DeleteCollection => "DELETECOLLECTION",
    };
    let scope = if info.name.is_some() {
        "resource"
    } else if info.namespace.is_some() {
        "namespace"
    } else {
        "cluster"
    };
    RequestLabels {
        verb: verb.to_string(),
        group: info.resource.group.to_string(),
        version: info.resource.version.to_string(),
        resource: info.resource.plural.to_string(),
        subresource: info
            .subresource
            .map(|sub| sub.as_str().to_string())
            .unwrap_or_default(),
        scope: scope.to_string(),
        dry_run: query.all("dryRun").iter().any(|value| value == "All"),
    }
}

/// Whether the resource (or its subresource, with its own verbs) serves the verb. As upstream,
/// a collection of a namespaced resource is deleted only within one namespace.
pub(super) fn verb_served(info: &RequestInfo) -> bool {
    let verb = info.verb.as_str();
    let served = match info.subresource {
        Some(name) => info
            .resource
            .subresource(name)
            .is_some_and(|sub| sub.verbs.contains(&verb)),
        None => info.resource.allows(verb),
    };
    let cluster_wide_deletion =
        info.verb == Verb::DeleteCollection && info.resource.namespaced && info.namespace.is_none();
    served && !cluster_wide_deletion
}

/// The object a list or watch is about: the name in its path, or the one an exact
/// `metadata.name=` field selector picks (as upstream's RequestInfo derives it).
fn named_in_selector(query: &Query) -> Option<String> {
    let selector = query.get("fieldSelector")?;
    let parsed = crate::selectors::FieldSelector::parse(selector).ok()?;
    let name = parsed.exact("metadata.name")?;
    (!name.is_empty() && !name.contains('/') && name != "." && name != "..")
        .then(|| name.to_string())
}

/// A watch of one named object watches only that object: its name becomes a
/// `metadata.name` field selector, which may not name another object.
fn scope_watch_to_name(info: &RequestInfo, options: &mut ListOptions) -> Result<()> {
    let Some(name) = &info.name else {
        return Ok(());
    };
    if options.field_selector.trim().is_empty() {
        options.field_selector = format!("metadata.name={name}");
        return Ok(());
    }
    let parsed = crate::selectors::FieldSelector::parse(&options.field_selector)
        .map_err(|error| ApiError::bad_request(error.to_string()))?;
    if parsed.exact("metadata.name") != Some(name.as_str()) {
        return Err(ApiError::bad_request(
            "fieldSelector metadata.name doesn't match requested name",
        ));
    }
    Ok(())
}

pub(super) fn authorize(
    state: &AppState,
    caller: &crate::authn::UserInfo,
    info: &RequestInfo,
    query: &Query,
) -> Result<()> {
    let name = match (&info.name, info.verb) {
        (Some(name), _) => name.clone(),
        (None, Verb::List | Verb::Watch) => named_in_selector(query).unwrap_or_default(),
        (None, _) => String::new(),
    };
    let attributes = authz::Attributes {
        user: caller.name.clone(),
        groups: caller.groups.clone(),
        verb: info.verb.as_str().to_string(),
        resource_request: true,
        group: info.resource.group.to_string(),
        version: info.resource.version.to_string(),
        resource: info.resource.plural.to_string(),
        subresource: info
            .subresource
            .map(|sub| sub.as_str().to_string())
            .unwrap_or_default(),
        namespace: info.namespace.clone().unwrap_or_default(),
        name,
        path: String::new(),
    };
    let decision = tracing::debug_span!(
        "authorization",
        verb = %attributes.verb,
        resource = %attributes.resource,
        subresource = %attributes.subresource,
    )
    .in_scope(|| state.authorizer.authorize(&attributes));
    match decision {
        Decision::Allow { .. } => Ok(()),
        Decision::Deny { reason } => Err(ApiError::forbidden(denied(
            info,
            &authz::forbidden_message(&attributes, &reason),
        ))),
        Decision::NoOpinion => Err(ApiError::forbidden(denied(
            info,
            &authz::forbidden_message(&attributes, ""),
        ))),
    }
}

fn denied(info: &RequestInfo, message: &str) -> String {
    let what = crate::error::qualified(info.resource);
    match &info.name {
        Some(name) => format!("{what} \"{name}\" is forbidden: {message}"),
        None => format!("{what} is forbidden: {message}"),
    }
}

async fn read_body(body: Body) -> Result<bytes::Bytes> {
    to_bytes(body, codec::MAX_BODY_BYTES + 1)
        .await
        .map_err(|_| {
            ApiError::too_large(format!(
                "Request entity too large: limit is {}",
                codec::MAX_BODY_BYTES
            ))
        })
}

async fn decode_input(headers: &HeaderMap, bytes: bytes::Bytes) -> Result<registry::Input> {
    let format = codec::body_format(header(headers, http::header::CONTENT_TYPE))?;
    let decoded = off_the_reactor(bytes, move |bytes| codec::decode(format, bytes)).await?;
    Ok(registry::Input {
        object: decoded.value,
        duplicate_fields: decoded.duplicate_fields,
    })
}

/// Runs a decode of `bytes` inline when the body is small, and on a blocking thread when it is
/// large enough to hold an async worker for long.
async fn off_the_reactor<T: Send + 'static>(
    bytes: bytes::Bytes,
    decode: impl FnOnce(&[u8]) -> Result<T> + Send + 'static,
) -> Result<T> {
    if bytes.len() < crate::limits::BLOCKING_DECODE_BYTES {
        return decode(&bytes);
    }
    tokio::task::spawn_blocking(move || decode(&bytes))
        .await
        .map_err(|error| ApiError::internal(format!("decoding the request body: {error}")))?
}

/// Upstream's default field manager: the user agent up to its first `/`.
fn default_manager(headers: &HeaderMap) -> Option<String> {
    let agent = header(headers, http::header::USER_AGENT)?;
    let prefix: String = agent
        .split('/')
        .next()
        .unwrap_or("")
        .chars()
        .take(128)
        .collect();
    Some(prefix).filter(|prefix| !prefix.is_empty())
}

pub(super) fn write_of(
    caller: &crate::authn::UserInfo,
    options: &WriteOptions,
    headers: &HeaderMap,
) -> Write {
    Write {
        caller: registry::Caller {
            user: caller.name.clone(),
            groups: caller.groups.clone(),
            uid: caller.uid.clone(),
            extra: caller.extra.clone(),
        },
        dry_run: options.dry_run,
        field_validation: options.field_validation,
        field_manager: options
            .field_manager
            .clone()
            .or_else(|| default_manager(headers)),
        managed_fields_set: false,
        admitted: false,
    }
}

async fn resource(
    state: &AppState,
    caller: &crate::authn::UserInfo,
    info: &RequestInfo,
    query: &Query,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response> {
    if !verb_served(info) {
        return Err(not_allowed());
    }
    authorize(state, caller, info, query)?;
    if info.resource.namespaced && info.namespace.is_none() && info.name.is_some() {
        return Err(ApiError::path_not_found());
    }
    let call = Call {
        state,
        caller,
        info,
        query,
        headers,
        output: codec::negotiate_for(
            header(headers, http::header::ACCEPT),
            crate::protobuf::knows(&info.resource.api_version(), info.resource.kind),
        )?,
        include: IncludeObject::parse(query.get("includeObject"))?,
    };
    match info.verb {
        Verb::Get => get(&call).await,
        Verb::List => list(&call).await,
        Verb::Watch => watch(&call).await,
        Verb::Create => create(&call, body).await,
        Verb::Update => update(&call, body).await,
        Verb::Patch => patch(&call, body).await,
        Verb::Delete => delete(&call, body).await,
        Verb::DeleteCollection => delete_collection(&call, body).await,
    }
}

pub(super) fn not_allowed() -> ApiError {
    ApiError::method_not_allowed("the server does not allow this method on the requested resource")
}

/// One authorized request, for the handler of its verb.
struct Call<'a> {
    state: &'a AppState,
    caller: &'a crate::authn::UserInfo,
    info: &'a RequestInfo,
    query: &'a Query,
    headers: &'a HeaderMap,
    /// The representation the client accepts.
    output: Output,
    include: IncludeObject,
}

impl Call<'_> {
    fn target(&self) -> Target<'_> {
        Target {
            resource: self.info.resource,
            namespace: self.info.namespace.as_deref(),
            name: self.info.name.as_deref().unwrap_or(""),
            subresource: self.info.subresource,
        }
    }

    fn write(&self, options: &WriteOptions) -> Write {
        write_of(self.caller, options, self.headers)
    }

    /// The response carrying `object` as the client asked for it.
    fn object(&self, status: StatusCode, object: &Value, warnings: &[String]) -> Response {
        respond::object(
            self.info.resource,
            self.output,
            self.include,
            status,
            object,
            warnings,
        )
    }

    /// A scale answers as JSON whatever the client accepts (it has no Table or protobuf form
    /// here).
    fn scale(&self, scale: &Value) -> Response {
        respond::object(
            self.info.resource,
            Output::Object(codec::Format::Json),
            self.include,
            StatusCode::OK,
            scale,
            &[],
        )
    }

    /// The written object, 201 when the write created it.
    fn written(&self, written: &registry::Written) -> Response {
        let status = if written.created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        self.object(status, &written.object, &written.warnings)
    }
}

async fn get(call: &Call<'_>) -> Result<Response> {
    let target = call.target();
    let registry = &call.state.registry;
    let (resource, namespace, name) = (target.resource, target.namespace, target.name);
    if target.subresource == Some(Subresource::Scale) {
        let scale = registry.get_scale(resource, namespace, name).await?;
        return Ok(call.object(StatusCode::OK, &scale, &[]));
    }
    let object = match target.subresource {
        None => {
            let version = call.query.get("resourceVersion").filter(|v| !v.is_empty());
            registry.get_at(resource, namespace, name, version).await?
        }
        Some(_) => registry.get(resource, namespace, name).await?,
    };
    Ok(call.object(StatusCode::OK, &object, &[]))
}

async fn list(call: &Call<'_>) -> Result<Response> {
    let options = ListOptions::from_query(call.query)?;
    let target = call.target();
    let result = call
        .state
        .registry
        .list(target.resource, target.namespace, &options)
        .await?;
    Ok(respond::list(
        target.resource,
        call.output,
        call.include,
        result,
    ))
}

async fn watch(call: &Call<'_>) -> Result<Response> {
    let mut options = ListOptions::from_query(call.query)?;
    scope_watch_to_name(call.info, &mut options)?;
    let target = call.target();
    super::watch::serve(
        &call.state.registry,
        target.resource,
        target.namespace,
        &options,
        call.output,
        call.include,
    )
    .await
}

async fn create(call: &Call<'_>, body: Body) -> Result<Response> {
    let write = call.write(&WriteOptions::from_query(call.query)?);
    let input = decode_input(call.headers, read_body(body).await?).await?;
    let target = call.target();
    let resource = target.resource;
    let reviewers = Reviewers {
        authorizer: call.state.authorizer.as_ref(),
        authenticator: call.state.authenticator.as_ref(),
    };
    if let Some(answer) =
        resource
            .strategy
            .review(&reviewers, call.caller, target.namespace, &input.object)
    {
        return Ok(call.object(StatusCode::CREATED, &answer.await?, &[]));
    }
    let registry = &call.state.registry;
    match (target.subresource, call.info.name.as_deref()) {
        (Some(Subresource::Binding), Some(name)) => {
            let warnings = registry
                .bind_pod(resource, target.namespace, name, &input.object, &write)
                .await?;
            Ok(created_status(&warnings))
        }
        (Some(Subresource::Eviction), Some(name)) => {
            let body = &input.object;
            let asked = registry::eviction::Eviction {
                options: options_of(&Query::default(), &body["deleteOptions"])?,
                dry_run: asks_dry_run(&body["deleteOptions"]),
            };
            let warnings = registry
                .evict_pod(resource, target.namespace, name, body, asked, &write)
                .await?;
            Ok(created_status(&warnings))
        }
        (Some(Subresource::Token), Some(name)) => {
            let mut request = input.object;
            crate::authn::service_account::default_token_request(&mut request);
            let (_, warnings) = registry
                .admit_subresource_create(
                    resource,
                    Subresource::Token,
                    target.namespace,
                    name,
                    &mut request,
                    &write,
                    |_| Ok(()),
                )
                .await?;
            let namespace = target.namespace.unwrap_or("");
            let answer = call
                .state
                .service_accounts
                .issue(namespace, name, &request)
                .await?;
            Ok(respond::encoded(
                StatusCode::CREATED,
                codec::Format::Json,
                &answer,
                &warnings,
            ))
        }
        (None, None) => {
            if resource.namespaced && target.namespace.is_none() {
                return Err(ApiError::path_not_found());
            }
            let written = registry
                .create(resource, target.namespace, input, &write)
                .await?;
            Ok(call.object(StatusCode::CREATED, &written.object, &written.warnings))
        }
        _ => Err(not_allowed()),
    }
}

/// The `Status` of a POST that made nothing to return (a binding, an eviction).
fn created_status(warnings: &[String]) -> Response {
    let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
    respond::encoded(StatusCode::CREATED, codec::Format::Json, &status, warnings)
}

async fn update(call: &Call<'_>, body: Body) -> Result<Response> {
    let write = call.write(&WriteOptions::from_query(call.query)?);
    let input = decode_input(call.headers, read_body(body).await?).await?;
    let Target {
        resource,
        namespace,
        name,
        subresource,
    } = call.target();
    let registry = &call.state.registry;
    if subresource == Some(Subresource::Scale) {
        let scale = input.object;
        let answer = registry
            .update_scale(resource, namespace, name, &write, |_| Ok(scale.clone()))
            .await?;
        return Ok(call.scale(&answer));
    }
    let written = registry
        .update(resource, namespace, name, subresource, input, &write)
        .await?;
    Ok(call.written(&written))
}

async fn patch(call: &Call<'_>, body: Body) -> Result<Response> {
    let options = WriteOptions::from_query(call.query)?;
    let write = call.write(&options);
    let bytes = read_body(body).await?;
    codec::check_size(&bytes)?;
    let kind =
        patch::PatchKind::from_content_type(header(call.headers, http::header::CONTENT_TYPE))?;
    let target = call.target();
    if kind == patch::PatchKind::Strategic && !target.resource.strategy.accepts_strategic_merge() {
        // As upstream for custom resources: they have no Go struct tags to merge by.
        return Err(ApiError::new(
            crate::error::Reason::UnsupportedMediaType,
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ));
    }
    let document = off_the_reactor(bytes, move |bytes| patch::parse(kind, bytes)).await?;
    let registry = &call.state.registry;
    if target.subresource == Some(Subresource::Scale) {
        let answer = registry
            .update_scale(
                target.resource,
                target.namespace,
                target.name,
                &write,
                |current| patch::apply(kind, Ty::Object, current, &document),
            )
            .await?;
        return Ok(call.scale(&answer));
    }
    if kind == patch::PatchKind::Apply && options.field_manager.is_none() {
        return Err(ApiError::bad_request(
            "PATCH requests with Apply content type require fieldManager to be set",
        ));
    }
    let written = patch::patch(registry, target, kind, &document, &write, options.force).await?;
    Ok(call.written(&written))
}

/// The DeleteOptions of a delete, and the write it makes (dry run from the query or the body).
/// A delete's options and the write it makes.
struct DeleteRequest {
    options: DeleteOptions,
    write: Write,
}

async fn delete_request(call: &Call<'_>, body: Body) -> Result<DeleteRequest> {
    let bytes = read_body(body).await?;
    let DeleteBody { options, dry_run } = delete_options(call.query, call.headers, &bytes)?;
    let mut write_options = WriteOptions::from_query(call.query)?;
    write_options.dry_run |= dry_run;
    Ok(DeleteRequest {
        options,
        write: call.write(&write_options),
    })
}

async fn delete(call: &Call<'_>, body: Body) -> Result<Response> {
    let DeleteRequest { options, write } = delete_request(call, body).await?;
    let target = call.target();
    let resource = target.resource;
    let result = call
        .state
        .registry
        .delete(resource, target.namespace, target.name, &options, &write)
        .await?;
    if !result.finished || resource.strategy.delete_returns_object() {
        return Ok(call.object(StatusCode::OK, &result.object, &[]));
    }
    let status = respond::success_status(resource, &result.object);
    let format = match call.output {
        Output::Object(format) | Output::Metadata(format) => format,
        Output::Table(_) => codec::Format::Json,
    };
    Ok(respond::encoded(StatusCode::OK, format, &status, &[]))
}

async fn delete_collection(call: &Call<'_>, body: Body) -> Result<Response> {
    let DeleteRequest { options, write } = delete_request(call, body).await?;
    let list = ListOptions::from_query(call.query)?;
    let target = call.target();
    let deleted = call
        .state
        .registry
        .delete_collection(
            target.resource,
            target.namespace,
            &list.label_selector,
            &list.field_selector,
            &options,
            &write,
        )
        .await?;
    let result = registry::ListResult {
        items: deleted.into_iter().map(registry::Listed::new).collect(),
        resource_version: 0,
        continue_token: None,
        remaining_item_count: None,
    };
    Ok(respond::list(
        target.resource,
        call.output,
        call.include,
        result,
    ))
}

/// DeleteOptions from the body (JSON, YAML or protobuf) and the query; also says whether the
/// body asked for a dry run.
/// DeleteOptions as a request gives them, and whether its body asked for a dry run.
struct DeleteBody {
    options: DeleteOptions,
    dry_run: bool,
}

fn delete_options(query: &Query, headers: &HeaderMap, bytes: &[u8]) -> Result<DeleteBody> {
    let body: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        let format = codec::body_format(header(headers, http::header::CONTENT_TYPE))?;
        codec::decode(format, bytes)?.value
    };
    Ok(DeleteBody {
        options: options_of(query, &body)?,
        dry_run: asks_dry_run(&body),
    })
}

/// Whether DeleteOptions (as JSON) ask for a dry run.
fn asks_dry_run(body: &Value) -> bool {
    body["dryRun"]
        .as_array()
        .is_some_and(|values| values.iter().any(|value| value == "All"))
}

/// DeleteOptions from their JSON form and the query (which wins).
fn options_of(query: &Query, body: &Value) -> Result<DeleteOptions> {
    let text = |value: &Value| value.as_str().map(str::to_string);
    let mut options = DeleteOptions {
        grace_period_seconds: body["gracePeriodSeconds"].as_i64(),
        preconditions: Preconditions {
            uid: text(&body["preconditions"]["uid"]),
            resource_version: text(&body["preconditions"]["resourceVersion"]),
        },
        propagation_policy: None,
    };
    if let Some(grace) = query.get("gracePeriodSeconds").filter(|g| !g.is_empty()) {
        options.grace_period_seconds = Some(grace.parse().map_err(|_| {
            ApiError::bad_request(format!("invalid value for gracePeriodSeconds: {grace:?}"))
        })?);
    }
    let mut policy = text(&body["propagationPolicy"]);
    if let Some(text) = query.get("propagationPolicy").filter(|p| !p.is_empty()) {
        policy = Some(text.to_string());
    }
    if body["orphanDependents"].as_bool() == Some(true) || query.flag("orphanDependents") {
        policy.get_or_insert_with(|| "Orphan".into());
    }
    if let Some(policy) = policy {
        let parsed = Propagation::parse(&policy).ok_or_else(|| {
            ApiError::invalid(
                "DeleteOptions",
                "",
                "",
                vec![crate::error::Cause {
                    reason: "FieldValueNotSupported".into(),
                    message: format!("Unsupported value: \"{policy}\": supported values: \"Foreground\", \"Background\", \"Orphan\""),
                    field: "propagationPolicy".into(),
                }],
            )
        })?;
        options.propagation_policy = Some(parsed);
    }
    if let Some(grace) = options.grace_period_seconds {
        if grace < 0 {
            options.grace_period_seconds = Some(0);
        }
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: &str, path: &str, query: &str) -> RequestInfo {
        let method = http::Method::from_bytes(method.as_bytes()).expect("method");
        match request::parse_path(
            &method,
            path,
            &Query::parse(Some(query)),
            &Default::default(),
        )
        .expect("parses")
        {
            ApiPath::Resource(info) => info,
            other => panic!("not a resource: {other:?}"),
        }
    }

    #[test]
    fn subresources_have_their_own_verb_tables() {
        let pods = "/api/v1/namespaces/d/pods/p";
        let deployments = "/apis/apps/v1/namespaces/d/deployments/w";
        for (method, path, served) in [
            ("GET", format!("{pods}/status"), true),
            ("PATCH", format!("{pods}/status"), true),
            ("DELETE", format!("{pods}/status"), false),
            ("POST", format!("{pods}/binding"), true),
            ("GET", format!("{pods}/binding"), false),
            ("PATCH", format!("{pods}/binding"), false),
            ("PUT", format!("{deployments}/scale"), true),
            ("DELETE", format!("{deployments}/scale"), false),
            ("PUT", "/api/v1/namespaces/n/finalize".to_string(), true),
            ("PATCH", "/api/v1/namespaces/n/finalize".to_string(), false),
            ("DELETE", "/api/v1/secrets".to_string(), false),
            ("DELETE", "/api/v1/namespaces/d/secrets".to_string(), true),
            ("DELETE", "/api/v1/namespaces".to_string(), false),
            ("DELETE", "/api/v1/nodes".to_string(), true),
        ] {
            assert_eq!(
                verb_served(&info(method, &path, "")),
                served,
                "{method} {path}"
            );
        }
    }

    #[test]
    fn a_name_selector_names_the_object_for_authorization() {
        let named = |query: &str| named_in_selector(&Query::parse(Some(query)));
        assert_eq!(
            named("fieldSelector=metadata.name%3Done").as_deref(),
            Some("one")
        );
        assert_eq!(
            named("fieldSelector=metadata.namespace%3Dd,metadata.name%3D%3Done").as_deref(),
            Some("one")
        );
        assert_eq!(named("fieldSelector=metadata.name!%3Done"), None);
        assert_eq!(named("labelSelector=a%3Db"), None);
    }
}
