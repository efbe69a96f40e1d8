//! The HTTP side: routes, the filter chain (authentication, a tracing span and metrics per
//! request, authorization), and the handlers for discovery, health, version, metrics and
//! resources.
//!
//! ```text
//! request → span + metrics → authenticate (401; Impersonate-* 403)
//!         → in-flight budget (429) + request timeout (504), watches exempt → route
//!   /version /healthz /livez /readyz /metrics        (health may be read anonymously)
//!   /api, /apis, /api/v1, /apis/<g>/<v>              discovery (legacy or aggregated)
//!   /api/v1/…/<resource>[/<name>[/<subresource>]]    authorize (403) → resources
//! ```

mod discovery;
mod health;
mod inflight;
pub mod metrics;
mod openapi;
mod resources;
mod respond;
mod warnings;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use tracing::Instrument;

use crate::authn::{Authenticator, UserInfo};
use crate::authz::Authorizer;
use crate::error::ApiError;
use crate::registry::Registry;
use crate::tls::PeerCertificates;

pub use metrics::Metrics;

/// Everything a handler needs.
#[derive(Clone)]
pub struct AppState {
    pub registry: Registry,
    pub authenticator: Arc<Authenticator>,
    pub authorizer: Arc<dyn Authorizer>,
    pub metrics: Arc<Metrics>,
    pub health: Arc<health::Health>,
    /// `host:port` clients reach this server at (for `/api`'s serverAddressByClientCIDRs).
    pub advertise: String,
    /// The in-flight budgets and the request timeout.
    pub request_limits: Arc<inflight::RequestLimits>,
}

impl AppState {
    pub fn new(
        registry: Registry,
        authenticator: Authenticator,
        authorizer: Arc<dyn Authorizer>,
        advertise: String,
        limits: &crate::limits::Limits,
        metrics: Arc<Metrics>,
    ) -> Self {
        let health = Arc::new(health::Health::new(registry.storage().clone()));
        Self {
            registry,
            authenticator: Arc::new(authenticator),
            authorizer,
            metrics,
            health,
            advertise,
            request_limits: Arc::new(inflight::RequestLimits::new(limits)),
        }
    }

    /// Marks the bootstrap post-start hook done (readyz waits for it).
    pub fn mark_bootstrapped(&self) {
        self.health.mark_bootstrapped();
    }
}

/// The whole router.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/version", axum::routing::get(health::version))
        .route("/metrics", axum::routing::get(metrics::handler))
        .route("/healthz", axum::routing::get(health::healthz))
        .route("/healthz/{check}", axum::routing::get(health::healthz_one))
        .route("/livez", axum::routing::get(health::livez))
        .route("/livez/{check}", axum::routing::get(health::livez_one))
        .route("/readyz", axum::routing::get(health::readyz))
        .route("/readyz/{check}", axum::routing::get(health::readyz_one))
        .route("/openapi/v2", axum::routing::get(openapi::v2))
        .route("/openapi/v3", axum::routing::get(openapi::v3_index))
        .route(
            "/openapi/v3/{*path}",
            axum::routing::get(openapi::v3_document),
        )
        .route("/api", axum::routing::any(resources::handle))
        .route("/api/{*rest}", axum::routing::any(resources::handle))
        .route("/apis", axum::routing::any(resources::handle))
        .route("/apis/{*rest}", axum::routing::any(resources::handle))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            inflight::limit,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state)
}

async fn not_found() -> Response {
    ApiError::path_not_found().into_response()
}

/// The authenticated caller, as a request extension.
#[derive(Clone, Debug)]
pub struct Caller(pub UserInfo);

/// Paths anyone may read (upstream's system:public-info-viewer).
fn is_public(path: &str) -> bool {
    matches!(path, "/healthz" | "/livez" | "/readyz" | "/version")
        || path.starts_with("/healthz/")
        || path.starts_with("/livez/")
        || path.starts_with("/readyz/")
}

async fn authenticate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let certificates = request
        .extensions()
        .get::<PeerCertificates>()
        .map(|certificates| certificates.0.clone());
    let authorization = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .map(str::to_string);
    let user = state.authenticator.authenticate(
        certificates.as_deref().map(Vec::as_slice),
        authorization.as_deref(),
    );
    match user {
        Ok(Some(user)) => {
            tracing::Span::current().record("user", user.name.as_str());
            if let Some(header) = impersonation_header(request.headers()) {
                return ApiError::forbidden(format!(
                    "impersonation is not supported by this server: the request carries the \"{header}\" header; it is refused rather than run as {:?}",
                    user.name
                ))
                .into_response();
            }
            request.extensions_mut().insert(Caller(user));
            next.run(request).await
        }
        Ok(None) if is_public(request.uri().path()) => {
            request.extensions_mut().insert(Caller(UserInfo {
                name: "system:anonymous".into(),
                uid: String::new(),
                groups: vec!["system:unauthenticated".into()],
            }));
            next.run(request).await
        }
        Ok(None) => ApiError::unauthorized().into_response(),
        Err(error) => {
            tracing::debug!(%error, "authentication failed");
            ApiError::unauthorized().into_response()
        }
    }
}

/// The first `Impersonate-*` header of a request (`kubectl --as` sends them).
fn impersonation_header(headers: &http::HeaderMap) -> Option<String> {
    headers
        .keys()
        .map(http::HeaderName::as_str)
        .find(|name| name.starts_with("impersonate-"))
        .map(str::to_string)
}

/// The verb label of a request that named no resource: its method when it is one of
/// HTTP's, else `other` (a client may send any token as a method).
fn method_label(method: &http::Method) -> &'static str {
    match *method {
        http::Method::GET => "GET",
        http::Method::HEAD => "HEAD",
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        http::Method::PATCH => "PATCH",
        http::Method::DELETE => "DELETE",
        http::Method::OPTIONS => "OPTIONS",
        http::Method::CONNECT => "CONNECT",
        _ => "other",
    }
}

/// What a handler reports about the request, for the span and the metrics.
#[derive(Clone, Debug, Default)]
pub struct RequestLabels {
    pub verb: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub scope: String,
    pub dry_run: bool,
}

async fn observe(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    // Labels come from the route that matched (a fixed set) or a fixed `other`, never from
    // the raw path: every distinct path of a 404 or 401 would otherwise be a new series.
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|matched| matched.as_str().to_string());
    let remote = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.to_string())
        .unwrap_or_default();
    let span = tracing::info_span!(
        "request",
        %method,
        path = %path,
        remote = %remote,
        user = tracing::field::Empty,
        resource = tracing::field::Empty,
        namespace = tracing::field::Empty,
        status = tracing::field::Empty,
        latency_ms = tracing::field::Empty,
    );
    let response: Response<Body> = next.run(request).instrument(span.clone()).await;
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    span.record("status", status);
    span.record("latency_ms", elapsed.as_secs_f64() * 1000.0);
    let labels = response
        .extensions()
        .get::<RequestLabels>()
        .cloned()
        .unwrap_or_else(|| RequestLabels {
            verb: method_label(&method).to_string(),
            subresource: route.unwrap_or_else(|| "other".to_string()),
            ..RequestLabels::default()
        });
    state.metrics.observe(&labels, status, elapsed);
    span.in_scope(|| tracing::debug!(status, elapsed_ms = elapsed.as_millis() as u64, "served"));
    response
}
