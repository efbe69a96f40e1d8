//! The watch cache's tests: lists and watches served from it on a real SQLite store.

use super::super::store::tests::write;
use super::super::{Input, Registry};
use crate::catalog;
use crate::request::{ListOptions, VersionMatch};
use serde_json::json;

async fn cached_registry() -> (
    Registry,
    std::sync::Arc<dyn rudder_storage::Storage>,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let url = format!("sqlite://{}", dir.path().join("state.db").display());
    let storage = rudder_storage::open(&url).await.expect("sqlite opens");
    let cidr = super::super::Cidr::parse("10.96.0.0/12").expect("cidr");
    let allocators = super::super::Allocators::new(storage.clone(), cidr, 30000..=32767);
    let registry = Registry::new(
        storage.clone(),
        std::sync::Arc::new(rudder_admission::Chain::new()),
        allocators,
    )
    .with_watch_cache();
    (registry, storage, dir)
}

async fn create(registry: &Registry, name: &str) {
    let configmaps = catalog::find("", "v1", "configmaps").expect("served");
    let input = Input {
        object: json!({"metadata": {"name": name, "namespace": "default"}, "data": {"n": name}}),
        duplicate_fields: Vec::new(),
    };
    registry
        .create(configmaps, Some("default"), input, &write())
        .await
        .expect("created");
}

fn names(items: &[super::Listed]) -> Vec<String> {
    items
        .iter()
        .map(|item| item["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test]
async fn a_list_without_resource_version_sees_every_write_before_it() {
    let (registry, storage, _dir) = cached_registry().await;
    let configmaps = catalog::find("", "v1", "configmaps").expect("served");
    let everything = ListOptions::everything();
    assert!(registry
        .list(configmaps, None, &everything)
        .await
        .expect("lists")
        .items
        .is_empty());
    for (round, name) in ["a", "b", "c"].iter().enumerate() {
        create(&registry, name).await;
        let listed = registry
            .list(configmaps, None, &everything)
            .await
            .expect("lists");
        assert_eq!(listed.items.len(), round + 1, "{:?}", names(&listed.items));
    }
    // A write that bypasses the registry (another server on the store) is seen too.
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "d", "namespace": "default", "uid": "u"}});
    storage
        .create(
            b"/registry/configmaps/default/d",
            &serde_json::to_vec(&object).expect("json"),
            0,
        )
        .await
        .expect("raw create");
    let listed = registry
        .list(configmaps, Some("default"), &everything)
        .await
        .expect("lists");
    assert_eq!(names(&listed.items), ["a", "b", "c", "d"]);
    let status = storage.status().await.expect("status");
    assert_eq!(listed.resource_version, status.revision);
    // Deletes leave the cache at once as well.
    storage
        .delete(b"/registry/configmaps/default/a", None)
        .await
        .expect("raw delete");
    let listed = registry
        .list(configmaps, None, &everything)
        .await
        .expect("lists");
    assert_eq!(names(&listed.items), ["b", "c", "d"]);
}

#[tokio::test]
async fn paged_lists_continue_from_their_snapshot() {
    let (registry, _storage, _dir) = cached_registry().await;
    let configmaps = catalog::find("", "v1", "configmaps").expect("served");
    for name in ["a", "b", "c", "d", "e"] {
        create(&registry, name).await;
    }
    let mut options = ListOptions::everything();
    options.limit = Some(2);
    let first = registry
        .list(configmaps, None, &options)
        .await
        .expect("lists");
    assert_eq!(names(&first.items), ["a", "b"]);
    assert_eq!(first.remaining_item_count, Some(3));
    // Writes after the first page do not show in its continuation.
    create(&registry, "bb").await;
    let mut seen = names(&first.items);
    let mut token = first.continue_token;
    while let Some(next) = token {
        options.continue_token = Some(next);
        let page = registry
            .list(configmaps, None, &options)
            .await
            .expect("lists");
        assert_eq!(page.resource_version, first.resource_version);
        seen.extend(names(&page.items));
        token = page.continue_token;
    }
    assert_eq!(seen, ["a", "b", "c", "d", "e"]);
    options.continue_token = None;
    options.limit = None;
    let now = registry
        .list(configmaps, None, &options)
        .await
        .expect("lists");
    assert_eq!(now.items.len(), 6);
}

#[tokio::test]
async fn resource_versions_are_honoured_from_the_cache_or_the_store() {
    let (registry, _storage, _dir) = cached_registry().await;
    let configmaps = catalog::find("", "v1", "configmaps").expect("served");
    create(&registry, "a").await;
    let at_one = registry
        .list(configmaps, None, &ListOptions::everything())
        .await
        .expect("lists")
        .resource_version;
    create(&registry, "b").await;
    // resourceVersion=0 takes what the cache holds, which may lag a write by a moment;
    // after a consistent read it holds both.
    let consistent = registry
        .list(configmaps, None, &ListOptions::everything())
        .await
        .expect("lists");
    assert_eq!(consistent.items.len(), 2);
    let mut options = ListOptions::everything();
    options.resource_version = Some("0".into());
    let any = registry
        .list(configmaps, None, &options)
        .await
        .expect("lists");
    assert_eq!(any.items.len(), 2, "the cache already holds both");
    options.resource_version = Some(at_one.to_string());
    options.version_match = VersionMatch::Exact;
    let exact = registry
        .list(configmaps, None, &options)
        .await
        .expect("lists");
    assert_eq!(names(&exact.items), ["a"], "Exact is the store's");
    assert_eq!(exact.resource_version, at_one);
    options.version_match = VersionMatch::NotOlderThan;
    let newer = registry
        .list(configmaps, None, &options)
        .await
        .expect("lists");
    assert_eq!(newer.items.len(), 2);
    assert!(newer.resource_version > at_one);
    options.resource_version = Some((newer.resource_version + 1000).to_string());
    let error = registry
        .list(configmaps, None, &options)
        .await
        .expect_err("too new");
    assert_eq!(error.code, 504);
}

#[tokio::test]
async fn a_get_at_a_resource_version_is_read_from_the_cache() {
    let (registry, storage, _dir) = cached_registry().await;
    let configmaps = catalog::find("", "v1", "configmaps").expect("served");
    create(&registry, "a").await;
    let listed = registry
        .list(configmaps, None, &ListOptions::everything())
        .await
        .expect("lists");
    let got = registry
        .get_at(configmaps, Some("default"), "a", Some("0"))
        .await
        .expect("found");
    assert_eq!(got["data"]["n"], "a");
    let at = listed.resource_version.to_string();
    let got = registry
        .get_at(configmaps, Some("default"), "a", Some(&at))
        .await
        .expect("found");
    assert_eq!(got["metadata"]["resourceVersion"], at.as_str());
    let missing = registry
        .get_at(configmaps, Some("default"), "nope", Some("0"))
        .await
        .expect_err("not there");
    assert_eq!(missing.code, 404);
    // A change written behind the registry's back reaches the cache through its watch: a
    // GET not older than that write sees it, from the cache.
    let key = b"/registry/configmaps/default/a".to_vec();
    let stored = storage.get(&key, 0).await.expect("reads").expect("stored");
    let mut changed: serde_json::Value = registry
        .get(configmaps, Some("default"), "a")
        .await
        .expect("found");
    changed["data"]["n"] = json!("changed");
    changed["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("resourceVersion");
    let value = serde_json::to_vec(&changed).expect("JSON");
    let revision = match storage
        .update(&key, &value, stored.mod_revision, 0)
        .await
        .expect("written")
    {
        rudder_storage::UpdateOutcome::Updated { revision } => revision,
        other => panic!("not updated: {other:?}"),
    };
    let got = registry
        .get_at(
            configmaps,
            Some("default"),
            "a",
            Some(&revision.to_string()),
        )
        .await
        .expect("found");
    assert_eq!(got["data"]["n"], "changed");
    assert_eq!(got["metadata"]["resourceVersion"], revision.to_string());
}

async fn next_event(
    events: &mut crate::registry::WatchEvents,
) -> (crate::registry::WatchEventKind, String, String) {
    use futures::StreamExt;
    let event = tokio::time::timeout(std::time::Duration::from_secs(5), events.next())
        .await
        .expect("an event in time")
        .expect("the watch goes on");
    let value = event.object.value();
    (
        event.kind,
        value["metadata"]["name"].as_str().unwrap_or("").to_string(),
        value["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string(),
    )
}

fn far_deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + std::time::Duration::from_secs(60)
}

#[tokio::test]
async fn watchers_share_the_caches_events_and_one_storage_watch() {
    use crate::registry::WatchEventKind::*;
    let dir = tempfile::tempdir().expect("temporary directory");
    let url = format!("sqlite://{}", dir.path().join("state.db").display());
    let metrics = std::sync::Arc::new(rudder_storage::instrumented::StorageMetrics::default());
    let storage = rudder_storage::instrumented::Instrumented::wrap(
        rudder_storage::open(&url).await.expect("sqlite opens"),
        metrics.clone(),
    );
    let cidr = super::super::Cidr::parse("10.96.0.0/12").expect("cidr");
    let allocators = super::super::Allocators::new(storage.clone(), cidr, 30000..=32767);
    let registry = Registry::new(
        storage.clone(),
        std::sync::Arc::new(rudder_admission::Chain::new()),
        allocators,
    )
    .with_watch_cache();
    let configmaps = catalog::find("", "v1", "configmaps").expect("served");
    create(&registry, "a").await;
    let mut watchers = Vec::new();
    for _ in 0..3 {
        let events = registry
            .watch(configmaps, None, &ListOptions::everything(), far_deadline())
            .await
            .expect("watches");
        watchers.push(events);
    }
    for events in watchers.iter_mut() {
        let (kind, name, _) = next_event(events).await;
        assert_eq!((kind, name.as_str()), (Added, "a"), "the replay");
    }
    create(&registry, "b").await;
    storage
        .delete(b"/registry/configmaps/default/a", None)
        .await
        .expect("raw delete");
    let status = storage.status().await.expect("status");
    for events in watchers.iter_mut() {
        let (kind, name, _) = next_event(events).await;
        assert_eq!((kind, name.as_str()), (Added, "b"));
        let (kind, name, version) = next_event(events).await;
        assert_eq!((kind, name.as_str()), (Deleted, "a"));
        assert_eq!(
            version,
            status.revision.to_string(),
            "a deletion shows its revision"
        );
    }
    let mut text = String::new();
    let mut exposition = prometheus_client::registry::Registry::default();
    metrics.register(&mut exposition);
    prometheus_client::encoding::text::encode(&mut text, &exposition).expect("encodes");
    let watches = text
        .lines()
        .find(|line| {
            line.starts_with("etcd_request_duration_seconds_count")
                && line.contains("operation=\"watch\"")
        })
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|count| count.parse::<u64>().ok());
    assert_eq!(
        watches,
        Some(1),
        "three watchers, one storage watch (the cache's):\n{text}"
    );
}

#[tokio::test]
async fn a_watch_from_a_recent_revision_gets_the_changes_after_it() {
    use crate::registry::WatchEventKind::*;
    let (registry, _storage, _dir) = cached_registry().await;
    let configmaps = catalog::find("", "v1", "configmaps").expect("served");
    create(&registry, "a").await;
    let listed = registry
        .list(configmaps, None, &ListOptions::everything())
        .await
        .expect("lists");
    create(&registry, "b").await;
    create(&registry, "c").await;
    let mut options = ListOptions::everything();
    options.resource_version = Some(listed.resource_version.to_string());
    let mut events = registry
        .watch(configmaps, None, &options, far_deadline())
        .await
        .expect("watches");
    assert_eq!(next_event(&mut events).await.1, "b");
    assert_eq!(next_event(&mut events).await.1, "c");
    // A label selector: objects entering and leaving it are ADDED and DELETED.
    let mut options = ListOptions::everything();
    options.label_selector = "app=web".into();
    let mut selected = registry
        .watch(configmaps, Some("default"), &options, far_deadline())
        .await
        .expect("watches");
    let configmap = |labels: serde_json::Value| Input {
        object: json!({"metadata": {"name": "b", "namespace": "default", "labels": labels}}),
        duplicate_fields: Vec::new(),
    };
    for labels in [
        json!({"app": "web"}),
        json!({"app": "web", "x": "y"}),
        json!({}),
    ] {
        registry
            .update(
                configmaps,
                Some("default"),
                "b",
                None,
                configmap(labels),
                &write(),
            )
            .await
            .expect("updated");
    }
    assert_eq!(next_event(&mut selected).await.0, Added);
    assert_eq!(next_event(&mut selected).await.0, Modified);
    assert_eq!(next_event(&mut selected).await.0, Deleted);
}

#[test]
fn the_window_keeps_the_latest_events_and_says_from_where() {
    let mut state = super::State::default();
    let event = |revision: i64| super::CachedEvent {
        key: b"/k".to_vec(),
        revision,
        change: super::Change::Delete {
            old: std::sync::Arc::new(super::Object::plain(json!({}))),
        },
    };
    for revision in 1..=(super::WINDOW_EVENTS as i64 + 5) {
        state.publish(super::Batch {
            revision,
            events: vec![event(revision)],
        });
    }
    assert_eq!(state.window_events, super::WINDOW_EVENTS);
    assert_eq!(
        state.floor, 5,
        "changes after revision 5 are all in the window"
    );
    // Progress is broadcast, not kept.
    state.publish(super::Batch {
        revision: 100_000,
        events: Vec::new(),
    });
    assert_eq!(state.window.len(), super::WINDOW_EVENTS);
}

/// Writes a pod bound to `node` ("" for none) straight to the store, as another server or
/// the scheduler's binding would.
async fn put_pod(storage: &dyn rudder_storage::Storage, name: &str, node: &str) {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": name, "namespace": "default", "uid": name},
                     "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}});
    storage
        .put(
            format!("/registry/pods/default/{name}").as_bytes(),
            &serde_json::to_vec(&pod).expect("json"),
            0,
        )
        .await
        .expect("raw put");
}

#[tokio::test]
async fn a_nodes_list_and_watch_see_its_pods_only() {
    use crate::registry::WatchEventKind::*;
    let (registry, storage, _dir) = cached_registry().await;
    let pods = catalog::find("", "v1", "pods").expect("served");
    for (name, node) in [("a", "n1"), ("b", "n2"), ("c", "n1"), ("d", "")] {
        put_pod(storage.as_ref(), name, node).await;
    }
    let mut on_n1 = ListOptions::everything();
    on_n1.field_selector = "spec.nodeName=n1".into();
    let listed = registry.list(pods, None, &on_n1).await.expect("lists");
    assert_eq!(names(&listed.items), ["a", "c"]);
    let unscheduled = ListOptions {
        field_selector: "spec.nodeName=".into(),
        ..ListOptions::everything()
    };
    let listed_unscheduled = registry
        .list(pods, Some("default"), &unscheduled)
        .await
        .expect("lists");
    assert_eq!(names(&listed_unscheduled.items), ["d"]);
    // Pages of the index continue from the list's snapshot.
    let mut paged = on_n1.clone();
    paged.limit = Some(1);
    let first = registry.list(pods, None, &paged).await.expect("lists");
    assert_eq!(names(&first.items), ["a"]);
    let mut seen = names(&first.items);
    let mut token = first.continue_token;
    while let Some(next) = token {
        paged.continue_token = Some(next);
        let page = registry.list(pods, None, &paged).await.expect("lists");
        seen.extend(names(&page.items));
        token = page.continue_token;
    }
    assert_eq!(seen, ["a", "c"]);

    let mut watch = on_n1.clone();
    watch.resource_version = Some(listed.resource_version.to_string());
    let mut events = registry
        .watch(pods, None, &watch, far_deadline())
        .await
        .expect("watches");
    put_pod(storage.as_ref(), "b", "n2").await; // another node's pod changes
    put_pod(storage.as_ref(), "d", "n1").await; // the unscheduled pod is bound to n1
    put_pod(storage.as_ref(), "c", "n3").await; // a pod leaves n1
    storage
        .delete(b"/registry/pods/default/a", None)
        .await
        .expect("raw delete");
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (kind, name, _) = next_event(&mut events).await;
        seen.push((kind, name));
    }
    assert_eq!(
        seen,
        [
            (Added, "d".to_string()),
            (Deleted, "c".to_string()),
            (Deleted, "a".to_string())
        ]
    );
    let listed = registry.list(pods, None, &on_n1).await.expect("lists");
    assert_eq!(names(&listed.items), ["d"]);
}

/// Puts `object` in the cache under `key` as if the cache had not yet seen later writes.
fn make_stale(
    registry: &Registry,
    info: &'static catalog::ResourceInfo,
    key: &[u8],
    object: serde_json::Value,
) {
    let cache = registry.cache.as_ref().expect("a watch cache");
    let cacher = cache.cacher(info).expect("cached kind");
    let object = std::sync::Arc::new(super::Object::new(object, info.strategy.fields()));
    cacher.write(|state| {
        state.objects.insert(key.to_vec(), object);
    });
}

#[tokio::test]
async fn an_update_from_a_stale_cached_copy_is_judged_again_on_the_store() {
    let (registry, _storage, _dir) = cached_registry().await;
    let configmaps = catalog::find("", "v1", "configmaps").expect("served");
    create(&registry, "a").await;
    registry
        .list(configmaps, None, &ListOptions::everything())
        .await
        .expect("lists, so the cache is up");
    let first = registry
        .get(configmaps, Some("default"), "a")
        .await
        .expect("found");
    let set = |value: &'static str| {
        move |current: &serde_json::Value| {
            let mut next = current.clone();
            next["data"]["n"] = json!(value);
            Ok(next)
        }
    };
    let second = registry
        .update_with(configmaps, Some("default"), "a", None, &write(), set("2"))
        .await
        .expect("updated");
    let key = b"/registry/configmaps/default/a";

    // A write pinned to the store's revision succeeds although the cache shows an older one.
    make_stale(&registry, configmaps, key, first.clone());
    let pinned = second.object["metadata"]["resourceVersion"].clone();
    let third = registry
        .update_with(
            configmaps,
            Some("default"),
            "a",
            None,
            &write(),
            |current| {
                let mut next = current.clone();
                next["metadata"]["resourceVersion"] = pinned.clone();
                next["data"]["n"] = json!("3");
                Ok(next)
            },
        )
        .await
        .expect("the pinned write is judged on the store's object");
    assert_eq!(third.object["data"]["n"], "3");

    // A change that is no change to the stale copy is one to the store's object: written.
    make_stale(&registry, configmaps, key, first.clone());
    let back = registry
        .update_with(configmaps, Some("default"), "a", None, &write(), set("a"))
        .await
        .expect("updated");
    assert_ne!(
        back.object["metadata"]["resourceVersion"], third.object["metadata"]["resourceVersion"],
        "written, not taken for a no-op"
    );
    let stored = registry
        .get(configmaps, Some("default"), "a")
        .await
        .expect("found");
    assert_eq!(stored["data"]["n"], "a");

    // A refusal made on the stale copy is made again on the store's object.
    make_stale(&registry, configmaps, key, first);
    let mut seen = Vec::new();
    registry
        .update_with(
            configmaps,
            Some("default"),
            "a",
            None,
            &write(),
            |current| {
                let n = current["data"]["n"].as_str().unwrap_or("").to_string();
                seen.push(n.clone());
                if n != "a"
                    || current["metadata"]["resourceVersion"]
                        != back.object["metadata"]["resourceVersion"]
                {
                    return Err(crate::error::ApiError::bad_request("not the latest"));
                }
                let mut next = current.clone();
                next["data"]["n"] = json!("4");
                Ok(next)
            },
        )
        .await
        .expect("judged again on the store's object");
    assert_eq!(
        seen.len(),
        2,
        "the cache's copy, then the store's: {seen:?}"
    );
}

#[tokio::test]
async fn a_verdict_on_a_current_cached_copy_stands_without_a_second_attempt() {
    let (registry, _storage, _dir) = cached_registry().await;
    let configmaps = catalog::find("", "v1", "configmaps").expect("served");
    create(&registry, "a").await;
    let created = registry
        .get(configmaps, Some("default"), "a")
        .await
        .expect("found");
    let revision = created["metadata"]["resourceVersion"]
        .as_str()
        .expect("a resourceVersion")
        .to_string();
    registry
        .get_at(configmaps, Some("default"), "a", Some(&revision))
        .await
        .expect("the cache has caught up with the create");
    let mut attempts = 0;
    let refused = registry
        .update_with(configmaps, Some("default"), "a", None, &write(), |_| {
            attempts += 1;
            Err(crate::error::ApiError::bad_request("refused"))
        })
        .await
        .expect_err("refused");
    assert_eq!((refused.code, attempts), (400, 1), "judged once");
    let mut attempts = 0;
    let unchanged = registry
        .update_with(
            configmaps,
            Some("default"),
            "a",
            None,
            &write(),
            |current| {
                attempts += 1;
                Ok(current.clone())
            },
        )
        .await
        .expect("a no-op");
    assert_eq!(attempts, 1, "judged once");
    assert_eq!(
        unchanged.object["metadata"]["resourceVersion"],
        json!(revision),
        "nothing written"
    );
}
