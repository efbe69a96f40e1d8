//! `/version` and the health endpoints `/healthz`, `/livez`, `/readyz` (with `?verbose`,
//! `?exclude=` and per-check paths), answered like upstream: `ok`, or one `[+]`/`[-]` line per
//! check. Storage is checked with a bounded status call; with KMS v2 encryption (or an
//! automatically reloaded encryption configuration) upstream's `kms-providers` check asks
//! every KMS plugin's `Status` (its last answer while recent), after `etcd` (`etcd-readiness`
//! on `/readyz`).

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
use crate::values::encryption::Current;

/// The Kubernetes version Rudder serves.
pub const KUBERNETES_VERSION: &str = "v1.33.0";

/// The name of upstream's check of every KMS v2 plugin.
const KMS_PROVIDERS: &str = "kms-providers";

/// The state health checks read.
pub struct Health {
    storage: Arc<dyn Storage>,
    bootstrapped: AtomicBool,
    /// The encryption configuration whose KMS providers `kms-providers` checks; `None`: no
    /// such check.
    kms: Option<Arc<Current>>,
}

impl Health {
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        Self {
            storage,
            bootstrapped: AtomicBool::new(false),
            kms: None,
        }
    }

    /// The same checks and `kms-providers`, asking the KMS providers of the configuration in
    /// force in `current`.
    pub fn with_kms(mut self, current: Arc<Current>) -> Self {
        self.kms = Some(current);
        self
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

    /// The checks of this endpoint on a server with `health`'s checks, in upstream's order.
    fn checks(self, health: &Health) -> Vec<&'static str> {
        let mut checks = self.base_checks().to_vec();
        if health.kms.is_some() {
            let after = if self == Endpoint::Readyz {
                "etcd-readiness"
            } else {
                "etcd"
            };
            let at = checks
                .iter()
                .position(|check| *check == after)
                .map_or(checks.len(), |index| index + 1);
            checks.insert(at, KMS_PROVIDERS);
        }
        checks
    }

    fn base_checks(self) -> &'static [&'static str] {
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
        KMS_PROVIDERS => match &health.kms {
            Some(current) => current.get().check_kms_providers().await,
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

async fn report(health: &Health, endpoint: Endpoint, query: &Query) -> Response {
    let verbose = query.get("verbose").is_some();
    let excluded: Vec<&str> = query.all("exclude").iter().map(String::as_str).collect();
    let mut lines = Vec::new();
    let mut failed = false;
    for check in &endpoint.checks(health) {
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
    if !endpoint.checks(health).contains(&check) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::encryption::Encryption;

    async fn health(dir: &tempfile::TempDir) -> Health {
        let url = format!("sqlite://{}", dir.path().join("state.db").display());
        let storage = rudder_storage::open(&url).await.expect("sqlite opens");
        let health = Health::new(storage);
        health.mark_bootstrapped();
        health
    }

    async fn body(response: Response) -> (StatusCode, String) {
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("a body");
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn the_kms_check_follows_etcd_only_where_there_is_kms_encryption() {
        let dir = tempfile::tempdir().expect("tempdir");
        let plain = health(&dir).await;
        assert!(!Endpoint::Healthz.checks(&plain).contains(&KMS_PROVIDERS));
        let (status, _) = body(report_one(&plain, Endpoint::Healthz, KMS_PROVIDERS).await).await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        let kms = health(&dir).await.with_kms(Arc::new(Current::none()));
        assert_eq!(
            Endpoint::Healthz.checks(&kms),
            [
                "ping",
                "log",
                "etcd",
                "kms-providers",
                "poststarthook/rudder-bootstrap"
            ]
        );
        assert_eq!(
            Endpoint::Readyz.checks(&kms)[3..6],
            ["etcd-readiness", "kms-providers", "informer-sync"]
        );
        assert!(Endpoint::Livez.checks(&kms).contains(&KMS_PROVIDERS));
        // No KMS provider in force (a reloadable configuration without one): healthy.
        let (status, text) =
            body(report(&kms, Endpoint::Readyz, &Query::parse(Some("verbose"))).await).await;
        assert_eq!(status, StatusCode::OK);
        assert!(text.contains("[+]kms-providers ok\n"), "{text}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_kms_plugin_that_does_not_answer_fails_the_check_with_the_reason_withheld() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = format!(
            "apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - kms: {{apiVersion: v2, name: gone, endpoint: 'unix://{}', timeout: 1s}}
",
            dir.path().join("no-plugin.sock").display()
        );
        let encryption = Encryption::parse(&config).expect("valid");
        let health = health(&dir)
            .await
            .with_kms(Arc::new(Current::new(encryption)));
        let (status, text) =
            body(report(&health, Endpoint::Healthz, &Query::parse(Some("verbose"))).await).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            text.contains("[+]etcd ok\n[-]kms-providers failed: reason withheld\n"),
            "{text}"
        );
        assert!(text.ends_with("healthz check failed\n"), "{text}");
        assert!(!text.contains("no-plugin.sock"), "{text}");
        let (status, text) = body(report_one(&health, Endpoint::Livez, KMS_PROVIDERS).await).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(text, "internal server error: kms-providers failed\n");
        // Excluded, it passes.
        let (status, _) = body(
            report(
                &health,
                Endpoint::Readyz,
                &Query::parse(Some("exclude=kms-providers")),
            )
            .await,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
    }
}
