//! The aggregation controller every apiserver runs (upstream's APIService registration,
//! availability and discovery-aggregation controllers in one loop): it lists and watches
//! APIServices and, on every change and every [`RECHECK`],
//! - keeps the Local APIServices registered ([`super::local`]);
//! - checks each remote one: its Service exists, has the port, has a ready endpoint, and the
//!   extension apiserver answers `GET /apis/<group>/<version>` within [`CHECK_TIMEOUT`] as
//!   `system:kube-aggregator` (upstream's identity for it), keeping the resources it lists;
//! - hands the server the new routes, then writes each APIService's `Available` condition
//!   where it changed, with upstream's reasons (`Local`, `Passed`, `ServiceNotFound`,
//!   `ServicePortError`, `MissingEndpoints`, `FailedDiscoveryCheck`).
//!
//! Several apiservers on one store each do this and agree, as for CRDs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use futures::StreamExt;
use http_body_util::{BodyExt, Limited};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::{Aggregator, Remote, Routes};
use crate::authn::UserInfo;
use crate::kinds::apiregistration::API_SERVICES;
use crate::registry::{Registry, WatchEventKind};
use crate::request::ListOptions;

/// How often every APIService is checked again, changes or not.
pub const RECHECK: Duration = Duration::from_secs(10);
/// How long an extension apiserver has to answer its discovery check (upstream's 5 s).
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an extension's OpenAPI document is served before it is fetched again.
const OPENAPI_REFRESH: Duration = Duration::from_secs(60);
/// The largest discovery document read from an extension apiserver.
const MAX_DISCOVERY_BYTES: usize = 3 * 1024 * 1024;

/// An `Available` condition: status, reason, message.
type Availability = (&'static str, &'static str, String);

/// Runs until `shutdown`; `synced` hears once the first round is done (the Local
/// APIServices registered and every APIService's condition written), which a server waits
/// for before it answers.
pub async fn run(
    registry: Registry,
    aggregator: Arc<Aggregator>,
    shutdown: CancellationToken,
    synced: tokio::sync::oneshot::Sender<()>,
) {
    let mut synced = Some(synced);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = follow(&registry, &aggregator, &mut synced) => {}
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// The APIServices in the store by name, and the revision they were read at.
async fn listed(registry: &Registry) -> Option<(BTreeMap<String, Value>, i64)> {
    let listed = match registry
        .list(&API_SERVICES, None, &ListOptions::everything())
        .await
    {
        Ok(listed) => listed,
        Err(error) => {
            tracing::warn!(error = %error.message, "listing APIServices");
            return None;
        }
    };
    let revision = listed.resource_version;
    Some((listed.by_name(), revision))
}

/// One list and the watch after it, until the watch ends or fails.
async fn follow(
    registry: &Registry,
    aggregator: &Aggregator,
    synced: &mut Option<tokio::sync::oneshot::Sender<()>>,
) {
    let Some((mut services, mut revision)) = listed(registry).await else {
        return;
    };
    let registered = reconcile(registry, aggregator, &services).await;
    if let Some(synced) = synced.take() {
        // Local APIServices registered just now get their condition before the server
        // answers.
        if registered > 0 {
            if let Some((again, at)) = listed(registry).await {
                (services, revision) = (again, at);
                reconcile(registry, aggregator, &services).await;
            }
        }
        let _ = synced.send(());
    }
    let Some(mut events) = registry
        .watch_kind_from(&API_SERVICES, revision, "APIServices")
        .await
    else {
        return;
    };
    let mut recheck = tokio::time::interval(RECHECK);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            event = events.next() => {
                let Some(event) = event else {
                    return;
                };
                let kind = event.kind;
                let object = event.into_value();
                let name = crate::json::name(&object).to_string();
                match kind {
                    WatchEventKind::Added | WatchEventKind::Modified => {
                        services.insert(name, object);
                    }
                    WatchEventKind::Deleted => {
                        services.remove(&name);
                    }
                    WatchEventKind::Bookmark => continue,
                    WatchEventKind::Error => return,
                }
            }
            _ = recheck.tick() => {}
        }
        reconcile(registry, aggregator, &services).await;
    }
}

/// Registers the Local APIServices, checks the remote ones, publishes the routes and writes
/// the conditions that changed; returns how many Local APIServices it registered.
async fn reconcile(
    registry: &Registry,
    aggregator: &Aggregator,
    services: &BTreeMap<String, Value>,
) -> usize {
    let registered = super::local::reconcile(registry, services, &registry.custom().served()).await;
    let checks = services.values().map(|object| async move {
        match Remote::of(object) {
            None => (
                object,
                None,
                (
                    "True",
                    "Local",
                    "Local APIServices are always available".to_string(),
                ),
            ),
            Some(mut remote) => {
                let availability = check(registry, aggregator, &mut remote).await;
                (object, Some(remote), availability)
            }
        }
    });
    let checked = futures::future::join_all(checks).await;
    let mut routes = Routes::default();
    for (_, remote, _) in &checked {
        if let Some(remote) = remote {
            routes.remote.insert(
                (remote.group.clone(), remote.version.clone()),
                Arc::new(remote.clone()),
            );
        }
    }
    aggregator.replace(routes);
    for (object, _, availability) in checked {
        if let Some(status) = changed_status(object, &availability) {
            write_status(registry, object, status).await;
        }
    }
    registered
}

/// Checks `remote`, recording in it whether it is available and what it serves.
async fn check(registry: &Registry, aggregator: &Aggregator, remote: &mut Remote) -> Availability {
    let service = remote.service.clone();
    let authority = match crate::service_endpoint::resolve(
        registry,
        &service.namespace,
        &service.name,
        service.port,
    )
    .await
    {
        Ok(authority) => authority,
        Err(why) => {
            let message = why.message(&service.namespace, &service.name, service.port);
            return ("False", why.reason(), message);
        }
    };
    let path = format!("/apis/{}/{}", remote.group, remote.version);
    let url = format!("https://{authority}{path}");
    match tokio::time::timeout(
        CHECK_TIMEOUT,
        discover(aggregator, remote, &authority, &path),
    )
    .await
    {
        Ok(Ok(resources)) => {
            remote.available = true;
            remote.resources = resources;
            remote.openapi_v3 = openapi_v3(aggregator, remote, &authority).await;
            ("True", "Passed", "all checks passed".to_string())
        }
        Ok(Err(error)) => (
            "False",
            "FailedDiscoveryCheck",
            format!("failing or missing response from {url}: {error}"),
        ),
        Err(_) => (
            "False",
            "FailedDiscoveryCheck",
            format!(
                "failing or missing response from {url}: Get \"{url}\": context deadline exceeded"
            ),
        ),
    }
}

/// The extension's OpenAPI v3 document of the group-version: the copy the last check kept
/// while it is younger than [`OPENAPI_REFRESH`], else fetched again (`None` when it serves
/// none).
async fn openapi_v3(
    aggregator: &Aggregator,
    remote: &Remote,
    authority: &str,
) -> Option<(crate::openapi::Document, tokio::time::Instant)> {
    let path = format!("/apis/{}/{}", remote.group, remote.version);
    let kept = aggregator
        .route(&path)
        .and_then(|before| before.openapi_v3.clone())
        .filter(|(_, fetched)| fetched.elapsed() < OPENAPI_REFRESH);
    if kept.is_some() {
        return kept;
    }
    let path = format!("/openapi/v3{path}");
    let body = tokio::time::timeout(CHECK_TIMEOUT, get(aggregator, remote, authority, &path))
        .await
        .ok()?
        .ok()?;
    serde_json::from_slice::<Value>(&body)
        .is_ok_and(|document| document.is_object())
        .then(|| {
            let document = crate::openapi::Document::from_bytes(body);
            (document, tokio::time::Instant::now())
        })
}

/// The extension apiserver's APIResourceList for the group-version (its `resources`, or
/// `None` when the answer is not one); an error for no answer or a status outside 2xx.
async fn discover(
    aggregator: &Aggregator,
    remote: &Remote,
    authority: &str,
    path: &str,
) -> Result<Option<Vec<Value>>, String> {
    let body = get(aggregator, remote, authority, path).await?;
    let list: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    Ok(list["resources"].as_array().cloned())
}

/// `GET path` (JSON) from the extension apiserver as `system:kube-aggregator`: the body of a
/// 2xx answer (at most [`MAX_DISCOVERY_BYTES`]), else an error in upstream's words.
async fn get(
    aggregator: &Aggregator,
    remote: &Remote,
    authority: &str,
    path: &str,
) -> Result<bytes::Bytes, String> {
    let mut request = http::Request::get(path)
        .header(http::header::ACCEPT, "application/json")
        .body(Body::empty())
        .map_err(|error| error.to_string())?;
    let checker = UserInfo {
        name: "system:kube-aggregator".into(),
        groups: vec!["system:masters".into()],
        ..UserInfo::anonymous()
    };
    super::proxy::add_identity(request.headers_mut(), &checker);
    let answer = aggregator.client().send(remote, authority, request).await?;
    let status = answer.status();
    let url = format!("https://{authority}{path}");
    if !status.is_success() {
        return Err(format!("bad status from {url}: {}", status.as_u16()));
    }
    Limited::new(answer.into_body(), MAX_DISCOVERY_BYTES)
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .map_err(|error| format!("reading {url}: {error}"))
}

/// The status `object` should have for `availability`, when it differs from its own (a
/// condition keeps its transition time while its status holds).
fn changed_status(object: &Value, availability: &Availability) -> Option<Value> {
    let (status, reason, message) = availability;
    let current = object["status"]["conditions"]
        .as_array()
        .and_then(|conditions| conditions.iter().find(|c| c["type"] == "Available"));
    if let Some(current) = current {
        if current["status"] == *status
            && current["reason"] == *reason
            && current["message"] == message.as_str()
        {
            return None;
        }
    }
    let transition = match current {
        Some(current) if current["status"] == *status => current["lastTransitionTime"].clone(),
        _ => json!(crate::registry::object::now()),
    };
    let mut conditions: Vec<Value> = object["status"]["conditions"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter(|c| c["type"] != "Available")
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    conditions.push(
        json!({"type": "Available", "status": status, "reason": reason,
        "message": message, "lastTransitionTime": transition}),
    );
    Some(json!({"conditions": conditions}))
}

async fn write_status(registry: &Registry, object: &Value, status: Value) {
    crate::registry::write_own_status(registry, &API_SERVICES, crate::json::name(object), |_| {
        Some(status.clone())
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_is_written_only_when_it_changes_and_keeps_its_transition_time() {
        let passed = ("True", "Passed", "all checks passed".to_string());
        let fresh = json!({"metadata": {"name": "v1.x.io"}});
        let status = changed_status(&fresh, &passed).expect("a first condition");
        let condition = &status["conditions"][0];
        assert_eq!(condition["reason"], "Passed");
        let written = json!({"metadata": {"name": "v1.x.io"}, "status": status});
        assert_eq!(changed_status(&written, &passed), None);
        // Same status, another message: rewritten, transition time kept.
        let other = ("True", "Passed", "all checks passed again".to_string());
        let next = changed_status(&written, &other).expect("changed");
        assert_eq!(
            next["conditions"][0]["lastTransitionTime"],
            written["status"]["conditions"][0]["lastTransitionTime"]
        );
        let down = ("False", "MissingEndpoints", "no".to_string());
        let next = changed_status(&written, &down).expect("changed");
        assert_eq!(next["conditions"][0]["status"], "False");
    }
}
