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
//!     pods/{log,exec,attach,portforward}, nodes/proxy → kubelet_proxy (to the kubelet)
//! ```

mod audit;
mod discovery;
mod health;
mod inflight;
pub mod kubelet_proxy;
pub mod metrics;
mod oidc;
mod openapi;
mod resource_metrics;
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
use futures::FutureExt;
use tracing::Instrument;

use crate::authn::service_account::ServiceAccountTokens;
use crate::authn::{impersonation, Authenticator, UserInfo};
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
    /// Issues ServiceAccount tokens (TokenRequest) and publishes their key (OIDC discovery).
    pub service_accounts: Arc<ServiceAccountTokens>,
    /// The audit policy and log, when auditing is on.
    pub auditor: Option<Arc<crate::audit::Auditor>>,
    /// Connects to kubelets (pods/log, exec, attach, portforward, nodes/proxy); without one
    /// those answer 503.
    pub kubelet_client: Option<Arc<kubelet_proxy::KubeletClient>>,
    /// Proxies the APIServices served elsewhere; without one only local APIs are served.
    pub aggregator: Option<Arc<crate::aggregator::Aggregator>>,
}

impl AppState {
    pub fn new(
        registry: Registry,
        authenticator: Authenticator,
        authorizer: Arc<dyn Authorizer>,
        advertise: String,
        limits: &crate::limits::Limits,
        metrics: Arc<Metrics>,
        service_accounts: Arc<ServiceAccountTokens>,
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
            service_accounts,
            auditor: None,
            kubelet_client: None,
            aggregator: None,
        }
    }

    /// Proxies the kubelets' subresources with `client`.
    pub fn with_kubelet_client(mut self, client: kubelet_proxy::KubeletClient) -> Self {
        self.kubelet_client = Some(Arc::new(client));
        self
    }

    /// Proxies aggregated APIs with `aggregator`.
    pub fn with_aggregator(mut self, aggregator: Arc<crate::aggregator::Aggregator>) -> Self {
        self.aggregator = Some(aggregator);
        self
    }

    /// Audits requests to `auditor`'s log.
    pub fn with_auditor(mut self, auditor: Option<Arc<crate::audit::Auditor>>) -> Self {
        self.auditor = auditor;
        self
    }

    /// Adds upstream's `kms-providers` health check of the KMS v2 providers in force in
    /// `current` (call before [`AppState::mark_bootstrapped`]).
    pub fn with_kms_health(
        mut self,
        current: Option<Arc<crate::values::encryption::Current>>,
    ) -> Self {
        if let Some(current) = current {
            self.health =
                Arc::new(health::Health::new(self.registry.storage().clone()).with_kms(current));
        }
        self
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
        .route(
            "/.well-known/openid-configuration",
            axum::routing::get(oidc::configuration),
        )
        .route("/openid/v1/jwks", axum::routing::get(oidc::jwks))
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
            authorize_path,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            audit::audit,
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

/// The authenticated caller, as a request extension (the impersonated user when the request
/// impersonates).
#[derive(Clone, Debug)]
pub struct Caller(pub UserInfo);

/// Who sent a request that impersonates another user, as a request extension.
#[derive(Clone, Debug)]
pub struct Requester(pub UserInfo);

/// The request's audit id (also its `Audit-Id` response header), as a request extension.
#[derive(Clone, Debug)]
pub struct AuditId(pub String);

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
    let chain = certificates.as_deref().map(Vec::as_slice);
    let user = match state
        .authenticator
        .authenticate_proxied(chain, request.headers())
    {
        Some(user) => Ok(Some(user)),
        None => {
            state
                .authenticator
                .authenticate(chain, authorization.as_deref())
                .instrument(tracing::debug_span!("authentication"))
                .await
        }
    };
    let requester = match user {
        Ok(Some(user)) => user,
        Ok(None) if state.authenticator.allows_anonymous() => UserInfo::anonymous(),
        Ok(None) => return audit::unauthenticated(&state, &request),
        Err(error) => {
            tracing::debug!(%error, "authentication failed");
            return audit::unauthenticated(&state, &request);
        }
    };
    let user = match impersonation::resolve(
        requester.clone(),
        request.headers(),
        state.authorizer.as_ref(),
    ) {
        Ok(user) => user,
        Err(error) => return error.into_response(),
    };
    let span = tracing::Span::current();
    span.record("user", user.name.as_str());
    if user.name != requester.name {
        span.record("impersonated_by", requester.name.as_str());
        request.extensions_mut().insert(Requester(requester));
    }
    request.extensions_mut().insert(Caller(user));
    next.run(request).await
}

/// Authorizes a request for a path that names no resource (`/metrics`, `/healthz`,
/// `/openapi/v2`, …) as upstream does: the lower-cased method is the verb. Resource requests
/// and discovery (`/api`, `/apis/…`) are authorized where their path is parsed.
async fn authorize_path(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let routed_to_resources = path == "/api"
        || path == "/apis"
        || path.starts_with("/api/")
        || path.starts_with("/apis/");
    if !routed_to_resources {
        let caller = request.extensions().get::<Caller>().map(|caller| &caller.0);
        let anonymous = UserInfo::anonymous();
        let caller = caller.unwrap_or(&anonymous);
        let verb = request.method().as_str().to_ascii_lowercase();
        if let Err(error) = authorize_non_resource(&state, caller, &verb, path) {
            return error.into_response();
        }
    }
    next.run(request).await
}

/// Whether `caller` may `verb` the non-resource `path`; upstream's 403 otherwise.
pub(crate) fn authorize_non_resource(
    state: &AppState,
    caller: &UserInfo,
    verb: &str,
    path: &str,
) -> Result<(), ApiError> {
    let attributes = crate::authz::Attributes {
        user: caller.name.clone(),
        groups: caller.groups.clone(),
        verb: verb.to_string(),
        path: path.to_string(),
        ..crate::authz::Attributes::default()
    };
    let reason = match state.authorizer.authorize(&attributes) {
        crate::authz::Decision::Allow { .. } => return Ok(()),
        crate::authz::Decision::Deny { reason } => reason,
        crate::authz::Decision::NoOpinion => String::new(),
    };
    Err(ApiError::forbidden(format!(
        "forbidden: {}",
        crate::authz::forbidden_message(&attributes, &reason)
    )))
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

/// What a caught panic carried, as text.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_string()
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

async fn observe(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    let audit_id = uuid::Uuid::new_v4().to_string();
    request.extensions_mut().insert(AuditId(audit_id.clone()));
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
    let user_agent = request
        .headers()
        .get(http::header::USER_AGENT)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    // The span's fields carry OpenTelemetry's HTTP names: with `--tracing-config-file` they
    // are the exported span's attributes (`otel.name` its name, as upstream's "KubernetesAPI").
    let span = tracing::info_span!(
        "request",
        otel.name = "KubernetesAPI",
        otel.kind = "server",
        http.method = %method,
        http.target = %path,
        http.user_agent = user_agent,
        net.peer = %remote,
        audit_id = %audit_id,
        user = tracing::field::Empty,
        impersonated_by = tracing::field::Empty,
        resource = tracing::field::Empty,
        namespace = tracing::field::Empty,
        http.status_code = tracing::field::Empty,
        latency_ms = tracing::field::Empty,
    );
    crate::tracing_context::continue_remote_trace(&span, request.headers());
    let served = std::panic::AssertUnwindSafe(next.run(request).instrument(span.clone()))
        .catch_unwind()
        .await;
    let mut response: Response<Body> = match served {
        Ok(response) => response,
        // As upstream's panic recovery: logged, and the client gets a 500.
        Err(panic) => {
            span.in_scope(
                || tracing::error!(panic = %panic_message(panic.as_ref()), "a handler panicked"),
            );
            ApiError::internal(
                "This request caused apiserver to panic. Look in the logs for details.",
            )
            .into_response()
        }
    };
    if let Ok(value) = http::HeaderValue::from_str(&audit_id) {
        response.headers_mut().insert("audit-id", value);
    }
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    span.record("http.status_code", status);
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
