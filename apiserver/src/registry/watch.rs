//! Watches: the storage hub's events for a resource, filtered per client. An object that
//! starts or stops matching the selectors arrives as ADDED or DELETED; `resourceVersion`
//! unset or `0` first replays the current state as ADDED events; a compacted start revision
//! ends the watch with a 410 Expired ERROR event; bookmarks come from the hub's progress.

use std::time::Duration;

use futures::StreamExt;
use rudder_storage::{EventKind, KeyRange, WatchRequest};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::list::{list_prefix, Filter};
use super::object;
use super::Registry;
use crate::catalog::ResourceInfo;
use crate::error::{ApiError, Result};
use crate::request::ListOptions;

/// How often a watch that allows bookmarks gets one.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(30);

/// A watch event's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchEventKind {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
}

impl WatchEventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WatchEventKind::Added => "ADDED",
            WatchEventKind::Modified => "MODIFIED",
            WatchEventKind::Deleted => "DELETED",
            WatchEventKind::Bookmark => "BOOKMARK",
            WatchEventKind::Error => "ERROR",
        }
    }
}

/// One event for one client.
#[derive(Clone, Debug)]
pub struct WatchEvent {
    pub kind: WatchEventKind,
    pub object: Value,
}

impl WatchEvent {
    fn error(error: &ApiError) -> Self {
        Self {
            kind: WatchEventKind::Error,
            object: error.status(),
        }
    }
}

fn bookmark(info: &ResourceInfo, revision: i64, initial_events_end: bool) -> WatchEvent {
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    WatchEvent {
        kind: WatchEventKind::Bookmark,
        object: json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": metadata}),
    }
}

impl Registry {
    /// Starts a watch; events arrive on the returned channel until the client goes away, the
    /// store fails, or the watch is closed for being too slow.
    pub async fn watch(
        &self,
        info: &'static ResourceInfo,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> Result<mpsc::Receiver<WatchEvent>> {
        let filter = Filter::new(info, options)?;
        let prefix = list_prefix(info, namespace, &filter);
        let (sender, receiver) = mpsc::channel(256);
        let replay = options
            .resource_version
            .as_deref()
            .is_none_or(|rv| rv == "0")
            || options.send_initial_events;
        let mut start_revision = match options.resource_version.as_deref() {
            None | Some("0") | Some("") => 0,
            Some(version) => version.parse::<i64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "resourceVersion: Invalid value: \"{version}\": must be a non-negative integer"
                ))
            })?,
        };
        let mut initial = Vec::new();
        if replay {
            let mut list_options = options.clone();
            list_options.limit = None;
            list_options.continue_token = None;
            list_options.resource_version = None;
            let listed = self.list(info, namespace, &list_options).await?;
            start_revision = listed.resource_version;
            initial = listed.items;
        }
        let request = WatchRequest::new(KeyRange::prefix(prefix))
            .from_revision(start_revision + 1)
            .with_prev_kv();
        let stream = self.storage.watch(request).await;
        let allow_bookmarks = options.allow_bookmarks;
        let initial_events_end = options.send_initial_events && allow_bookmarks;
        tokio::spawn(async move {
            let mut stream = match stream {
                Ok(stream) => stream,
                Err(rudder_storage::Error::Compacted { compacted, .. }) => {
                    let error = ApiError::expired(format!(
                        "too old resource version: {start_revision} ({compacted})"
                    ));
                    let _ = sender.send(WatchEvent::error(&error)).await;
                    return;
                }
                Err(error) => {
                    let _ = sender.send(WatchEvent::error(&ApiError::from(error))).await;
                    return;
                }
            };
            for object in initial {
                let event = WatchEvent {
                    kind: WatchEventKind::Added,
                    object,
                };
                if sender.send(event).await.is_err() {
                    return;
                }
            }
            if initial_events_end
                && sender
                    .send(bookmark(info, start_revision, true))
                    .await
                    .is_err()
            {
                return;
            }
            let mut last_revision = start_revision;
            let mut ticker = tokio::time::interval(BOOKMARK_INTERVAL);
            ticker.tick().await;
            loop {
                tokio::select! {
                    _ = sender.closed() => return,
                    _ = ticker.tick(), if allow_bookmarks => stream.request_progress(),
                    batch = stream.next() => {
                        let batch = match batch {
                            None => return,
                            Some(Ok(batch)) => batch,
                            Some(Err(error)) => {
                                let error = match error {
                                    rudder_storage::Error::WatcherTooSlow(_) => ApiError::expired(
                                        format!("too old resource version: {last_revision}: the watch fell behind"),
                                    ),
                                    other => ApiError::from(other),
                                };
                                let _ = sender.send(WatchEvent::error(&error)).await;
                                return;
                            }
                        };
                        if batch.events.is_empty() {
                            if allow_bookmarks && batch.revision > 0 {
                                last_revision = last_revision.max(batch.revision);
                                if sender.send(bookmark(info, last_revision, false)).await.is_err() {
                                    return;
                                }
                            }
                            continue;
                        }
                        for event in batch.events {
                            last_revision = last_revision.max(event.kv.mod_revision);
                            if let Some(out) = translate(&filter, event) {
                                if sender.send(out).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                }
            }
        });
        Ok(receiver)
    }
}

/// A storage event as this client sees it (None when neither state matches its selectors).
fn translate(filter: &Filter, event: rudder_storage::Event) -> Option<WatchEvent> {
    let revision = event.kv.mod_revision;
    let decode = |bytes: &[u8]| object::from_stored(bytes, revision).ok();
    let old = event.prev_kv.as_ref().and_then(|kv| decode(&kv.value));
    match event.kind {
        EventKind::Delete => {
            let old = old?;
            filter.matches(&old).then_some(WatchEvent {
                kind: WatchEventKind::Deleted,
                object: old,
            })
        }
        EventKind::Put => {
            let new = decode(&event.kv.value)?;
            let new_matches = filter.matches(&new);
            match old.map(|old| filter.matches(&old)) {
                None | Some(false) if new_matches => Some(WatchEvent {
                    kind: WatchEventKind::Added,
                    object: new,
                }),
                Some(true) if new_matches => Some(WatchEvent {
                    kind: WatchEventKind::Modified,
                    object: new,
                }),
                Some(true) => Some(WatchEvent {
                    kind: WatchEventKind::Deleted,
                    object: new,
                }),
                _ => None,
            }
        }
    }
}
