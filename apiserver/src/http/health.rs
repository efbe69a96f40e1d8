//! `/version` and the health endpoints `/healthz`, `/livez`, `/readyz` (with `?verbose`,
//! `?exclude=` and per-check paths), answered like upstream: `ok`, or one `[+]`/`[-]` line per
//! check. Storage is checked with a bounded status call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use rudder_storage::Storage;
use serde_json::json;

use super::AppState;
use crate::request::Query;

/// The Kubernetes version Rudder serves.
pub const KUBERNETES_VERSION: &str = "v1.33.0";

/// The state health checks read.
pub struct Health {
    storage: Arc<dyn Storage>,
    bootstrapped: AtomicBool,
}

impl Health {
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        Self {
            storage,
            bootstrapped: AtomicBool::new(false),
        }
    }

    pub fn mark_bootstrapped(&self) {
        self.bootstrapped.store(true, Ordering::SeqCst);
    }

    async fn storage_ok(&self) -> Result<(), String> {
        match tokio::time::timeout(Duration::from_secs(2), self.storage.status()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err("timed out".into()),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Healthz,
    Livez,
    Readyz,
}

impl Endpoint {
    fn name(self) -> &'static str {
        match self {
            Endpoint::Healthz => "healthz",
            Endpoint::Livez => "livez",
            Endpoint::Readyz => "readyz",
        }
    }

    fn checks(self) -> &'static [&'static str] {
        match self {
            Endpoint::Livez => &["ping", "log", "etcd", "poststarthook/rudder-bootstrap"],
            Endpoint::Healthz => &["ping", "log", "etcd", "poststarthook/rudder-bootstrap"],
            Endpoint::Readyz => &[
                "ping",
                "log",
                "etcd",
                "etcd-readiness",
                "informer-sync",
                "poststarthook/rudder-bootstrap",
                "shutdown",
            ],
        }
    }
}

async fn run_check(health: &Health, check: &str) -> Result<(), String> {
    match check {
        "etcd" | "etcd-readiness" => health.storage_ok().await,
        "poststarthook/rudder-bootstrap" => {
            if health.bootstrapped.load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err("not finished".into())
            }
        }
        _ => Ok(()),
    }
}

async fn report(health: &Health, endpoint: Endpoint, query: &Query) -> Response {
    let verbose = query.get("verbose").is_some();
    let excluded: Vec<&str> = query.all("exclude").iter().map(String::as_str).collect();
    let mut lines = Vec::new();
    let mut failed = false;
    for check in endpoint.checks() {
        if excluded.contains(check) {
            lines.push(format!("[+]{check} excluded: ok"));
            continue;
        }
        match run_check(health, check).await {
            Ok(()) => lines.push(format!("[+]{check} ok")),
            Err(why) => {
                tracing::warn!(check, %why, "health check failed");
                failed = true;
                lines.push(format!("[-]{check} failed: reason withheld"));
            }
        }
    }
    let name = endpoint.name();
    if failed {
        lines.push(format!("{name} check failed"));
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            text(lines.join("\n") + "\n"),
        )
            .into_response();
    }
    if verbose {
        lines.push(format!("{name} check passed"));
        return text(lines.join("\n") + "\n").into_response();
    }
    text("ok".to_string()).into_response()
}

fn text(body: String) -> impl IntoResponse {
    (
        [
            (http::header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (
                http::header::HeaderName::from_static("x-content-type-options"),
                "nosniff",
            ),
        ],
        body,
    )
}

async fn report_one(health: &Health, endpoint: Endpoint, check: &str) -> Response {
    if !endpoint.checks().contains(&check) {
        return crate::error::ApiError::path_not_found().into_response();
    }
    match run_check(health, check).await {
        Ok(()) => text("ok".to_string()).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            text(format!("internal server error: {check} failed\n")),
        )
            .into_response(),
    }
}

pub async fn healthz(State(state): State<AppState>, RawQuery(query): RawQuery) -> Response {
    report(
        &state.health,
        Endpoint::Healthz,
        &Query::parse(query.as_deref()),
    )
    .await
}

pub async fn livez(State(state): State<AppState>, RawQuery(query): RawQuery) -> Response {
    report(
        &state.health,
        Endpoint::Livez,
        &Query::parse(query.as_deref()),
    )
    .await
}

pub async fn readyz(State(state): State<AppState>, RawQuery(query): RawQuery) -> Response {
    report(
        &state.health,
        Endpoint::Readyz,
        &Query::parse(query.as_deref()),
    )
    .await
}

pub async fn healthz_one(State(state): State<AppState>, Path(check): Path<String>) -> Response {
    report_one(&state.health, Endpoint::Healthz, &check).await
}

pub async fn livez_one(State(state): State<AppState>, Path(check): Path<String>) -> Response {
    report_one(&state.health, Endpoint::Livez, &check).await
}

pub async fn readyz_one(State(state): State<AppState>, Path(check): Path<String>) -> Response {
    report_one(&state.health, Endpoint::Readyz, &check).await
}

/// `/version`.
pub async fn version() -> Response {
    let minor = KUBERNETES_VERSION
        .trim_start_matches('v')
        .split('.')
        .nth(1)
        .unwrap_or("33");
    axum::Json(json!({
        "major": "1",
        "minor": minor,
        "gitVersion": format!("{KUBERNETES_VERSION}+rudder.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "rust",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, if std::env::consts::ARCH == "x86_64" { "amd64" } else { std::env::consts::ARCH }),
        "emulationMajor": "1",
        "emulationMinor": minor,
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
    }))
    .into_response()
}
