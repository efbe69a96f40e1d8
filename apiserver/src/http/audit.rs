//! The audit filter: after authentication, judges each request by the audit policy and writes
//! its events (see `crate::audit`). The policy sees the authenticated user; when the request
//! impersonates, the event records both (`user` and `impersonatedUser`). Bodies are read only at
//! the levels that log them; a watch's `ResponseComplete` is written when its stream ends. A
//! handler's panic is written at the `Panic` stage; a request whose credentials fail is written
//! by the authentication filter (`unauthenticated`), with no user.

use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::{FutureExt, StreamExt};
use serde_json::{json, Value};

use super::{AppState, AuditId, Caller, Requester};
use crate::audit::{self, Auditor, Decision, Event, Level, ResourceRef, Stage, Subject};
use crate::authn::UserInfo;
use crate::codec;
use crate::error::ApiError;
use crate::request::{self, ApiPath, Query, Verb};

/// Writes the watch's `ResponseComplete` when its response stream is dropped.
struct CompleteOnDrop {
    auditor: Arc<Auditor>,
    decision: Decision,
    event: Event,
}

impl Drop for CompleteOnDrop {
    fn drop(&mut self) {
        self.auditor
            .emit(&self.decision, &self.event, Stage::ResponseComplete);
    }
}

/// A body as the JSON the log records, whatever its wire format (JSON, YAML, protobuf); a
/// response body too large for the request limit is left out.
fn as_json(headers: &http::HeaderMap, bytes: &[u8]) -> Option<Value> {
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok());
    let format = codec::body_format(content_type).ok()?;
    codec::decode(format, bytes)
        .ok()
        .map(|decoded| decoded.value)
}

/// A request's event as the policy judges it, before the handler runs.
struct Started {
    decision: Decision,
    event: Event,
    /// A watch or a kubelet stream: audited as it ends, its body never read.
    is_watch: bool,
}

/// Judges `request` by `user` (acting as `impersonated`, if it impersonates) and starts its
/// event; `None` when the policy does not audit it.
fn start(
    state: &AppState,
    auditor: &Auditor,
    request: &Request,
    user: UserInfo,
    impersonated: Option<UserInfo>,
) -> Option<Started> {
    let extensions = request.extensions();
    let audit_id = extensions
        .get::<AuditId>()
        .map(|id| id.0.clone())
        .unwrap_or_default();
    let source_ips: Vec<String> = extensions
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map(|info| vec![info.0.ip().to_string()])
        .unwrap_or_default();
    let method = request.method();
    let uri = request.uri();
    let query = Query::parse(uri.query());
    let parsed = request::parse_path(
        method,
        uri.path(),
        &query,
        &state.registry.custom().served(),
    );
    let info = match &parsed {
        Ok(ApiPath::Resource(info)) => Some(info),
        _ => None,
    };
    let verb = info.map_or_else(
        || method.as_str().to_ascii_lowercase(),
        |info| info.verb.as_str().to_string(),
    );
    let decision = auditor.policy.decide(&Subject {
        user: &user.name,
        groups: &user.groups,
        verb: &verb,
        resource: info.map(resource_ref),
        path: uri.path(),
    });
    if decision.level == Level::None {
        return None;
    }
    let is_watch = info.is_some_and(|info| {
        info.verb == Verb::Watch || super::kubelet_proxy::is_long_running(info)
    });
    let event = Event {
        audit_id,
        request_uri: uri
            .path_and_query()
            .map(|pq| pq.as_str().to_string())
            .unwrap_or_default(),
        verb,
        user,
        impersonated,
        source_ips,
        user_agent: request
            .headers()
            .get(http::header::USER_AGENT)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("")
            .to_string(),
        object_ref: info.map(object_ref),
        request_received: audit::timestamp(),
        ..Event::default()
    };
    Some(Started {
        decision,
        event,
        is_watch,
    })
}

pub async fn audit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(auditor) = state.auditor.clone() else {
        return next.run(request).await;
    };
    let extensions = request.extensions();
    let acting = extensions
        .get::<Caller>()
        .map(|caller| caller.0.clone())
        .unwrap_or_else(UserInfo::anonymous);
    let requester = extensions.get::<Requester>().map(|r| r.0.clone());
    let user = requester.clone().unwrap_or_else(|| acting.clone());
    let impersonated = requester.map(|_| acting);
    let Some(Started {
        decision,
        mut event,
        is_watch,
    }) = start(&state, &auditor, &request, user, impersonated)
    else {
        return next.run(request).await;
    };
    let mut request = request;
    let writes = matches!(
        *request.method(),
        http::Method::POST | http::Method::PUT | http::Method::PATCH | http::Method::DELETE
    );
    if decision.level >= Level::Request && writes {
        let (parts, body) = request.into_parts();
        let Ok(bytes) = to_bytes(body, codec::MAX_BODY_BYTES + 1).await else {
            return ApiError::too_large("the request body could not be read").into_response();
        };
        event.request_object = as_json(&parts.headers, &bytes);
        request = Request::from_parts(parts, Body::from(bytes));
    }
    auditor.emit(&decision, &event, Stage::RequestReceived);
    let annotated = rudder_admission::audit_annotations::collecting(
        event.annotations.clone(),
        next.run(request),
    );
    let response = recording_panics(&auditor, &decision, &mut event, annotated).await;
    complete(auditor, decision, event, is_watch, response).await
}

/// Runs the rest of the chain; a panic there is written at the `Panic` stage (as a 500, as
/// upstream's audit filter does) and unwinds on to the recovery filter, which answers the 500.
async fn recording_panics(
    auditor: &Auditor,
    decision: &Decision,
    event: &mut Event,
    rest: impl std::future::Future<Output = Response>,
) -> Response {
    match std::panic::AssertUnwindSafe(rest).catch_unwind().await {
        Ok(response) => response,
        Err(panic) => {
            event.response_status = Some(json!({"metadata": {}, "status": "Failure",
                "reason": "InternalError", "code": 500,
                "message": format!("APIServer panic'd: {}", super::panic_message(panic.as_ref()))}));
            auditor.emit(decision, event, Stage::Panic);
            std::panic::resume_unwind(panic)
        }
    }
}

/// Answers a request whose credentials failed with a 401, and writes its `ResponseComplete`
/// event (the user empty, as upstream's failed-authentication audit: nobody was
/// authenticated) when the policy audits such a request.
pub fn unauthenticated(state: &AppState, request: &Request) -> Response {
    let response = ApiError::unauthorized().into_response();
    let Some(auditor) = &state.auditor else {
        return response;
    };
    if let Some(Started {
        decision,
        mut event,
        ..
    }) = start(state, auditor, request, UserInfo::default(), None)
    {
        event.response_status = Some(json!({"metadata": {}, "status": "Failure",
            "reason": "Unauthorized", "code": 401,
            "message": format!("Authentication failed, attempted: {}", attempted(request))}));
        auditor.emit(&decision, &event, Stage::ResponseComplete);
    }
    response
}

/// The credentials a request offered, as upstream's failed-authentication event names them.
fn attempted(request: &Request) -> String {
    let mut methods = Vec::new();
    if request
        .extensions()
        .get::<crate::tls::PeerCertificates>()
        .is_some_and(|certificates| !certificates.0.is_empty())
    {
        methods.push("certificate");
    }
    let authorization = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    if authorization.len() >= 7 && authorization[..7].eq_ignore_ascii_case("bearer ") {
        methods.push("bearer");
    } else if authorization.len() >= 6 && authorization[..6].eq_ignore_ascii_case("basic ") {
        methods.push("basic");
    }
    methods.join(", ")
}

/// The policy's view of a resource request.
fn resource_ref(info: &request::RequestInfo) -> ResourceRef<'_> {
    ResourceRef {
        group: info.resource.group,
        resource: info.resource.plural,
        subresource: info.subresource.map(|sub| sub.as_str()).unwrap_or(""),
        namespace: info.namespace.as_deref().unwrap_or(""),
        name: info.name.as_deref().unwrap_or(""),
    }
}

/// The event's `objectRef`.
fn object_ref(info: &request::RequestInfo) -> Value {
    let resource = info.resource;
    let mut object_ref = json!({
        "resource": resource.plural,
        "apiGroup": resource.group,
        "apiVersion": resource.version,
    });
    if let Some(namespace) = &info.namespace {
        object_ref["namespace"] = json!(namespace);
    }
    if let Some(name) = &info.name {
        object_ref["name"] = json!(name);
    }
    if let Some(sub) = info.subresource {
        object_ref["subresource"] = json!(sub.as_str());
    }
    object_ref
}

/// Writes the response's events (a watch's ResponseComplete when its stream ends) and hands
/// the response on.
async fn complete(
    auditor: Arc<Auditor>,
    decision: Decision,
    mut event: Event,
    is_watch: bool,
    response: Response,
) -> Response {
    let code = response.status().as_u16();
    event.response_status = Some(json!({"metadata": {}, "code": code}));
    let streams = response.status().is_success()
        || response.status() == http::StatusCode::SWITCHING_PROTOCOLS;
    if is_watch && streams {
        auditor.emit(&decision, &event, Stage::ResponseStarted);
        let (parts, body) = response.into_parts();
        let guard = CompleteOnDrop {
            auditor,
            decision,
            event,
        };
        let stream = body.into_data_stream().map(move |chunk| {
            let _kept = &guard;
            chunk
        });
        return Response::from_parts(parts, Body::from_stream(stream));
    }
    let keep_body = decision.level >= Level::RequestResponse || code >= 400;
    if !keep_body {
        auditor.emit(&decision, &event, Stage::ResponseComplete);
        return response;
    }
    let (parts, body) = response.into_parts();
    let bytes = match to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(_) => {
            auditor.emit(&decision, &event, Stage::ResponseComplete);
            return ApiError::internal("the response could not be read").into_response();
        }
    };
    if let Some(object) = as_json(&parts.headers, &bytes) {
        if code >= 400 && object["kind"] == "Status" {
            let mut status = json!({"metadata": {}, "status": "Failure", "code": code});
            for key in ["message", "reason"] {
                if object[key].is_string() {
                    status[key] = object[key].clone();
                }
            }
            event.response_status = Some(status);
        }
        if decision.level >= Level::RequestResponse {
            event.response_object = Some(object);
        }
    }
    auditor.emit(&decision, &event, Stage::ResponseComplete);
    Response::from_parts(parts, Body::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{AuditConfig, Rotation};

    #[tokio::test]
    async fn a_handler_panic_is_written_at_the_panic_stage_and_unwinds_on() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        let auditor = Auditor::open(&AuditConfig {
            policy_file: None,
            log_path: log.clone(),
            rotation: Rotation::default(),
        })
        .unwrap();
        let user = UserInfo {
            name: "alice".into(),
            ..UserInfo::default()
        };
        let decision = auditor.policy.decide(&Subject {
            user: &user.name,
            groups: &user.groups,
            verb: "get",
            resource: None,
            path: "/api/v1/pods",
        });
        let mut event = Event {
            audit_id: "an-id".into(),
            verb: "get".into(),
            user,
            ..Event::default()
        };
        let rest = async { panic!("boom") };
        let outcome =
            std::panic::AssertUnwindSafe(recording_panics(&auditor, &decision, &mut event, rest))
                .catch_unwind()
                .await;
        assert!(outcome.is_err(), "the panic goes on to the recovery filter");
        let text = std::fs::read_to_string(&log).unwrap();
        let events: Vec<Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(events.len(), 1, "{text}");
        assert_eq!(events[0]["stage"], "Panic");
        assert_eq!(events[0]["auditID"], "an-id");
        assert_eq!(events[0]["user"]["username"], "alice");
        assert_eq!(events[0]["responseStatus"]["code"], 500);
        assert_eq!(events[0]["responseStatus"]["reason"], "InternalError");
        assert_eq!(
            events[0]["responseStatus"]["message"],
            "APIServer panic'd: boom"
        );
    }

    #[test]
    fn a_panic_message_is_its_text() {
        let caught = std::panic::catch_unwind(|| panic!("with {}", "words")).unwrap_err();
        assert_eq!(super::super::panic_message(caught.as_ref()), "with words");
        let caught = std::panic::catch_unwind(|| std::panic::panic_any(7_u8)).unwrap_err();
        assert_eq!(
            super::super::panic_message(caught.as_ref()),
            "a panic without a message"
        );
    }
}
