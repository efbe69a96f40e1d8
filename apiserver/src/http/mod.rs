//! The HTTP side: routes, the filter chain (authentication, a tracing span and metrics per
//! request, authorization), and the handlers for discovery, health, version, metrics and
//! resources.
//!
//! ```text
//! request → span + metrics → authenticate (401) → route
//!   /version /healthz /livez /readyz /metrics        (health may be read anonymously)
//!   /api, /apis, /api/v1, /apis/<g>/<v>              discovery (legacy or aggregated)
//!   /api/v1/…/<resource>[/<name>[/<subresource>]]    authorize (403) → resources
//! ```

mod discovery;
mod health;
pub mod metrics;
mod openapi;
mod resources;
mod respond;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
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
}

impl AppState {
    pub fn new(
        registry: Registry,
        authenticator: Authenticator,
        authorizer: Arc<dyn Authorizer>,
        advertise: String,
    ) -> Self {
        let health = Arc::new(health::Health::new(registry.storage().clone()));
        Self {
            registry,
            authenticator: Arc::new(authenticator),
            authorizer,
            metrics: Arc::new(Metrics::new()),
            health,
            advertise,
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
            verb: method.to_string(),
            subresource: path.clone(),
            ..RequestLabels::default()
        });
    state.metrics.observe(&labels, status, elapsed);
    span.in_scope(|| tracing::debug!(status, elapsed_ms = elapsed.as_millis() as u64, "served"));
    response
}
