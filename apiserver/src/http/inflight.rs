//! Request-level limits, as upstream's filters apply them: a request that is not long-running
//! (everything but watches) must finish within `--request-timeout` (else 504 Timeout), and
//! may start only while fewer than `--max-requests-inflight` reads or
//! `--max-mutating-requests-inflight` writes are running (else 429 with `Retry-After`).
//! Members of `system:masters` are never turned away, as upstream.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use super::{AppState, Caller};
use crate::error::ApiError;
use crate::limits::Limits;
use crate::request::{self, ApiPath, Query, Verb};

/// The in-flight budgets and the timeout of one server.
pub struct RequestLimits {
    reads: Option<Arc<Semaphore>>,
    writes: Option<Arc<Semaphore>>,
    timeout: Duration,
}

impl RequestLimits {
    pub fn new(limits: &Limits) -> Self {
        let budget = |size: usize| (size > 0).then(|| Arc::new(Semaphore::new(size)));
        Self {
            reads: budget(limits.max_requests_inflight),
            writes: budget(limits.max_mutating_requests_inflight),
            timeout: limits.request_timeout,
        }
    }
}

/// Watches, and the kubelet's streams (logs, exec, attach, port-forward, node proxy), run for
/// as long as the client wants: upstream's long-running requests, exempt from both limits and
/// the timeout.
fn is_long_running(request: &Request, custom: &crate::crd::Served) -> bool {
    let query = Query::parse(request.uri().query());
    let path = request.uri().path();
    (path.starts_with("/api/") || path.starts_with("/apis/"))
        && matches!(
            request::parse_path(request.method(), path, &query, custom),
            Ok(ApiPath::Resource(info))
                if info.verb == Verb::Watch || super::kubelet_proxy::is_long_running(&info)
        )
}

/// A watch or a connect-like request to an APIService served elsewhere.
fn is_long_running_aggregated(state: &AppState, request: &Request) -> bool {
    let path = request.uri().path();
    let Some(aggregator) = state.aggregator.as_deref() else {
        return false;
    };
    if aggregator.route(path).is_none() {
        return false;
    }
    let anonymous = crate::authn::UserInfo::anonymous();
    let attributes = crate::aggregator::request_info::attributes(
        &anonymous,
        request.method(),
        path,
        request.uri().query().unwrap_or(""),
    );
    crate::aggregator::request_info::is_long_running(&attributes)
}

fn is_mutating(method: &http::Method) -> bool {
    matches!(
        *method,
        http::Method::POST | http::Method::PUT | http::Method::PATCH | http::Method::DELETE
    )
}

/// The 429 upstream answers when the in-flight budget is spent.
fn too_many_requests() -> Response {
    ApiError::too_many_requests("Too many requests, please try again later.").into_response()
}

/// The 504 upstream answers when a request outlives `--request-timeout`.
fn timed_out() -> Response {
    ApiError::timeout(
        "Timeout: request did not complete within requested timeout - context deadline exceeded",
    )
    .into_response()
}

/// The middleware (after authentication, which names the caller).
pub async fn limit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if is_long_running(&request, &state.registry.custom().served())
        || is_long_running_aggregated(&state, &request)
    {
        return next.run(request).await;
    }
    let limits = &state.request_limits;
    let privileged = request
        .extensions()
        .get::<Caller>()
        .is_some_and(|caller| caller.0.groups.iter().any(|g| g == "system:masters"));
    let budget = if is_mutating(request.method()) {
        &limits.writes
    } else {
        &limits.reads
    };
    let _permit = match budget {
        Some(budget) => match budget.clone().try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) if privileged => None,
            Err(_) => return too_many_requests(),
        },
        None => None,
    };
    match tokio::time::timeout(limits.timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => timed_out(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(uri: &str) -> Request {
        http::Request::builder()
            .uri(uri)
            .body(axum::body::Body::empty())
            .unwrap_or_default()
    }

    #[test]
    fn watches_are_long_running_and_lists_are_not() {
        assert!(is_long_running(
            &get("/api/v1/namespaces/d/pods?watch=true"),
            &Default::default()
        ));
        assert!(is_long_running(
            &get("/api/v1/watch/pods"),
            &Default::default()
        ));
        assert!(!is_long_running(&get("/api/v1/pods"), &Default::default()));
        assert!(!is_long_running(&get("/healthz"), &Default::default()));
        assert!(is_long_running(
            &get("/api/v1/namespaces/d/pods/p/log?follow=true"),
            &Default::default()
        ));
        assert!(is_long_running(
            &get("/api/v1/namespaces/d/pods/p/exec"),
            &Default::default()
        ));
        assert!(is_long_running(
            &get("/api/v1/nodes/n/proxy/metrics"),
            &Default::default()
        ));
        assert!(!is_long_running(
            &get("/api/v1/namespaces/d/pods/p/status"),
            &Default::default()
        ));
    }
}
