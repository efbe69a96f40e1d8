//! The CRD controller every apiserver runs: it lists and watches CustomResourceDefinitions
//! in the store and
//! - decides which CRDs' names are accepted (a CRD whose plural, singular, kind, list kind
//!   or a short name another CRD of its group already holds is refused, the older winning),
//!   serves exactly those in this server's [`CustomResources`], and only then
//! - records that in the CRD's status (`acceptedNames`, `NamesAccepted`, `Established`) —
//!   so a client that waits for Established finds the resource served here;
//! - for a CRD being deleted, deletes its custom objects and then removes the
//!   `customresourcecleanup` finalizer, which lets the delete finish.
//!
//! Several apiservers on one store each do this; their status writes agree (the decision
//! depends only on the CRDs), and a lost race on a write is retried on the next event.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::kind::{set_condition, CLEANUP_FINALIZER, CUSTOM_RESOURCE_DEFINITIONS};
use super::CustomResources;
use crate::registry::{system_write, DeleteOptions, Registry, WatchEventKind};
use crate::request::ListOptions;

/// Runs until `shutdown`; `synced` hears once the CRDs in the store are served (a server
/// starts answering only then, as upstream's `crd-informer-synced` readiness check waits).
pub async fn run(
    registry: Registry,
    custom: Arc<CustomResources>,
    shutdown: CancellationToken,
    synced: tokio::sync::oneshot::Sender<()>,
) {
    let mut synced = Some(synced);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = follow(&registry, &custom, &mut synced) => {}
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// One list and the watch after it, until the watch ends or fails.
async fn follow(
    registry: &Registry,
    custom: &CustomResources,
    synced: &mut Option<tokio::sync::oneshot::Sender<()>>,
) {
    let info = &CUSTOM_RESOURCE_DEFINITIONS;
    let listed = match registry.list(info, None, &ListOptions::everything()).await {
        Ok(listed) => listed,
        Err(error) => {
            tracing::warn!(error = %error.message, "listing CustomResourceDefinitions");
            return;
        }
    };
    let revision = listed.resource_version;
    let mut crds = listed.by_name();
    reconcile(registry, custom, &crds).await;
    if let Some(synced) = synced.take() {
        let _ = synced.send(());
    }
    let Some(mut events) = registry
        .watch_kind_from(info, revision, "CustomResourceDefinitions")
        .await
    else {
        return;
    };
    // A deletion held up by objects with finalizers of their own is tried again.
    let mut retry = tokio::time::interval(Duration::from_secs(5));
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            _ = retry.tick() => {
                if crds.values().any(|crd| !crd["metadata"]["deletionTimestamp"].is_null()) {
                    reconcile(registry, custom, &crds).await;
                }
                continue;
            }
        };
        let Some(event) = event else {
            return;
        };
        let kind = event.kind;
        let object = event.into_value();
        let name = crate::json::name(&object).to_string();
        match kind {
            WatchEventKind::Added | WatchEventKind::Modified => {
                crds.insert(name, object);
            }
            WatchEventKind::Deleted => {
                crds.remove(&name);
            }
            WatchEventKind::Bookmark => continue,
            WatchEventKind::Error => return,
        }
        reconcile(registry, custom, &crds).await;
    }
}

/// Serves what the CRDs allow, then writes what changed in their status and finishes the
/// deletions that are due.
async fn reconcile(registry: &Registry, custom: &CustomResources, crds: &BTreeMap<String, Value>) {
    let decisions = decide(crds);
    let serving: Vec<Value> = decisions
        .iter()
        .filter(|(crd, names)| names.is_ok() && crd["metadata"]["deletionTimestamp"].is_null())
        .map(|(crd, _)| (*crd).clone())
        .collect();
    for (name, why) in custom.replace(&serving) {
        tracing::warn!(crd = %name, %why, "a CustomResourceDefinition cannot be served");
    }
    for (crd, names) in &decisions {
        let deleting = !crd["metadata"]["deletionTimestamp"].is_null();
        if deleting {
            if crate::registry::object::finalizers(crd)
                .iter()
                .any(|f| f == CLEANUP_FINALIZER)
            {
                clean_up(registry, custom, crd).await;
            }
            continue;
        }
        let wanted = with_status(crd, names);
        if wanted["status"] != crd["status"] {
            write_status(registry, crd, wanted).await;
        }
    }
}

/// A CRD's names' fate: `Ok` when accepted, `Err((reason, message))` when another CRD of
/// its group (created earlier) holds one of them.
type Names = Result<(), (String, String)>;

/// Each CRD with its names' fate.
fn decide(crds: &BTreeMap<String, Value>) -> Vec<(&Value, Names)> {
    let mut ordered: Vec<&Value> = crds.values().collect();
    ordered.sort_by_key(|crd| {
        (
            crd["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            crate::json::name(crd).to_string(),
        )
    });
    let mut taken: Vec<(String, String, &'static str)> = Vec::new();
    let mut decisions = Vec::new();
    for crd in ordered {
        let group = crd["spec"]["group"].as_str().unwrap_or("").to_string();
        let names = &crd["spec"]["names"];
        let mut claims: Vec<(String, &'static str)> = Vec::new();
        for (field, reason) in [
            ("plural", "PluralConflict"),
            ("singular", "SingularConflict"),
            ("kind", "KindConflict"),
            ("listKind", "ListKindConflict"),
        ] {
            if let Some(value) = names[field].as_str().filter(|v| !v.is_empty()) {
                claims.push((value.to_string(), reason));
            }
        }
        for short in names["shortNames"].as_array().into_iter().flatten() {
            if let Some(value) = short.as_str() {
                claims.push((value.to_string(), "ShortNamesConflict"));
            }
        }
        let conflict = claims.iter().find(|(value, _)| {
            taken
                .iter()
                .any(|(g, taken_value, _)| *g == group && taken_value == value)
        });
        let decision = match conflict {
            Some((value, reason)) => {
                Err((reason.to_string(), format!("\"{value}\" is already in use")))
            }
            None => {
                for (value, reason) in claims {
                    taken.push((group.clone(), value, reason));
                }
                Ok(())
            }
        };
        decisions.push((crd, decision));
    }
    decisions
}

/// The CRD with the status its names' fate calls for.
fn with_status(crd: &Value, names: &Names) -> Value {
    let mut wanted = crd.clone();
    match names {
        Ok(()) => {
            let mut accepted = crd["spec"]["names"].clone();
            if let Some(map) = accepted.as_object_mut() {
                map.retain(|key, _| {
                    matches!(
                        key.as_str(),
                        "plural" | "singular" | "kind" | "listKind" | "shortNames" | "categories"
                    )
                });
            }
            wanted["status"]["acceptedNames"] = accepted;
            set_condition(
                &mut wanted,
                "NamesAccepted",
                "True",
                "NoConflicts",
                "no conflicts found",
            );
            set_condition(
                &mut wanted,
                "Established",
                "True",
                "InitialNamesAccepted",
                "the initial names have been accepted",
            );
        }
        Err((reason, message)) => {
            set_condition(&mut wanted, "NamesAccepted", "False", reason, message);
            let established = crd["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            });
            if !established {
                set_condition(
                    &mut wanted,
                    "Established",
                    "False",
                    "NotAccepted",
                    "not all names are accepted",
                );
            }
        }
    }
    // A condition whose status did not change keeps its transition time.
    if let (Some(old), Some(new)) = (
        crd["status"]["conditions"].as_array(),
        wanted["status"]["conditions"].as_array_mut(),
    ) {
        for condition in new.iter_mut() {
            if let Some(before) = old.iter().find(|c| c["type"] == condition["type"]) {
                if before["status"] == condition["status"] {
                    condition["lastTransitionTime"] = before["lastTransitionTime"].clone();
                }
            }
        }
    }
    wanted
}

async fn write_status(registry: &Registry, crd: &Value, wanted: Value) {
    let status = wanted["status"].clone();
    crate::registry::write_own_status(
        registry,
        &CUSTOM_RESOURCE_DEFINITIONS,
        crate::json::name(crd),
        |_| Some(status.clone()),
    )
    .await;
}

/// Deletes every object of a CRD being deleted, then lets the CRD go.
async fn clean_up(registry: &Registry, custom: &CustomResources, crd: &Value) {
    let name = crate::json::name(crd).to_string();
    let Some(storage) = super::kind::storage_version(crd) else {
        return;
    };
    // The objects are read through the storage version's entry, served or not.
    let info = match custom.storage_entry(crd, &storage) {
        Ok(Some(info)) => info,
        Ok(None) => return,
        Err(why) => {
            tracing::warn!(crd = %name, %why, "cleaning up a CRD's objects");
            return;
        }
    };
    let write = system_write();
    if let Err(error) = registry
        .delete_collection(info, None, "", "", &DeleteOptions::default(), &write)
        .await
    {
        tracing::warn!(crd = %name, error = %error.message, "deleting a CRD's objects");
        return;
    }
    match registry.list(info, None, &ListOptions::everything()).await {
        Ok(left) if left.items.is_empty() => {}
        Ok(_) => return, // objects with finalizers of their own: the next event tries again
        Err(error) => {
            tracing::warn!(crd = %name, error = %error.message, "listing a CRD's objects");
            return;
        }
    }
    let result = registry
        .update_with(
            &CUSTOM_RESOURCE_DEFINITIONS,
            None,
            &name,
            None,
            &write,
            |current| {
                let mut next = current.clone();
                if let Some(list) = next["metadata"]["finalizers"].as_array_mut() {
                    list.retain(|f| f != CLEANUP_FINALIZER);
                }
                crate::registry::object::remove_meta(&mut next, "resourceVersion");
                Ok(next)
            },
        )
        .await;
    if let Err(error) = result {
        if !error.is_not_found() {
            tracing::warn!(crd = %name, error = %error.message, "removing a CRD's finalizer");
        }
    }
}
