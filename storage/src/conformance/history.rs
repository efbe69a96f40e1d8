//! The randomized concurrent history check: several clients issue random creates, CAS updates,
//! CAS deletes and blind puts; afterwards the acknowledged writes, replayed in revision order
//! on a sequential model, must explain every read and every watch event exactly.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::support::*;
use crate::testing::Harness;
use crate::types::*;

/// An acknowledged write.
#[derive(Clone, Debug)]
enum Write {
    Put { key: Vec<u8>, value: Vec<u8> },
    Delete { key: Vec<u8> },
}

/// The sequential model: the state after each revision.
#[derive(Default)]
struct Model {
    live: BTreeMap<Vec<u8>, KeyValue>,
}

impl Model {
    /// Applies a write at `revision` and returns the event it must produce.
    fn apply(&mut self, revision: Revision, write: &Write) -> Event {
        match write {
            Write::Put { key, value } => {
                let prev = self.live.get(key).cloned();
                let kv = KeyValue {
                    key: key.clone(),
                    value: value.clone(),
                    create_revision: prev.as_ref().map_or(revision, |p| p.create_revision),
                    mod_revision: revision,
                    version: prev.as_ref().map_or(1, |p| p.version + 1),
                    lease: 0,
                };
                self.live.insert(key.clone(), kv.clone());
                Event {
                    kind: EventKind::Put,
                    kv,
                    prev_kv: prev,
                }
            }
            Write::Delete { key } => {
                let prev = self.live.remove(key);
                assert!(
                    prev.is_some(),
                    "an acknowledged delete at {revision} removed a key the model does not have"
                );
                Event {
                    kind: EventKind::Delete,
                    kv: KeyValue {
                        key: key.clone(),
                        mod_revision: revision,
                        ..KeyValue::default()
                    },
                    prev_kv: prev,
                }
            }
        }
    }
}

pub async fn randomized_concurrent_history_matches_a_sequential_model(harness: &dyn Harness) {
    let store = harness.open().await;
    let base = revision(&*store).await;
    let mut watch = store
        .watch(
            WatchRequest::new(KeyRange::prefix("/m/"))
                .from_revision(base + 1)
                .with_prev_kv(),
        )
        .await
        .unwrap();
    let clients = 8;
    let operations = 60;
    let mut tasks = Vec::new();
    for client in 0..clients {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(0x5eed + client);
            let mut acknowledged: Vec<(Revision, Write)> = Vec::new();
            for i in 0..operations {
                let key = format!("/m/{}", rng.random_range(0..12)).into_bytes();
                let value = format!("c{client}-{i}").into_bytes();
                match rng.random_range(0..4) {
                    0 => {
                        if let CreateOutcome::Created { revision } =
                            store.create(&key, &value, 0).await.unwrap()
                        {
                            acknowledged.push((revision, Write::Put { key, value }));
                        }
                    }
                    1 => {
                        let Some(current) = store.get(&key, 0).await.unwrap() else {
                            continue;
                        };
                        match store
                            .update(&key, &value, current.mod_revision, 0)
                            .await
                            .unwrap()
                        {
                            UpdateOutcome::Updated { revision } => {
                                acknowledged.push((revision, Write::Put { key, value }))
                            }
                            UpdateOutcome::Conflict { current: now } => {
                                if let Some(now) = now {
                                    assert_ne!(
                                        now.mod_revision, current.mod_revision,
                                        "a conflict must show a newer kv"
                                    );
                                }
                            }
                        }
                    }
                    2 => {
                        let Some(current) = store.get(&key, 0).await.unwrap() else {
                            continue;
                        };
                        match store
                            .delete(&key, Some(current.mod_revision))
                            .await
                            .unwrap()
                        {
                            DeleteOutcome::Deleted { revision, deleted } => {
                                assert_eq!(deleted.mod_revision, current.mod_revision);
                                acknowledged.push((revision, Write::Delete { key }));
                            }
                            DeleteOutcome::Conflict { current: now } => {
                                assert_ne!(now.mod_revision, current.mod_revision)
                            }
                            DeleteOutcome::NotFound => {}
                        }
                    }
                    _ => {
                        let revision = store.put(&key, &value, 0).await.unwrap();
                        acknowledged.push((revision, Write::Put { key, value }));
                    }
                }
            }
            acknowledged
        }));
    }
    let mut log: Vec<(Revision, Write)> = Vec::new();
    for task in tasks {
        log.extend(task.await.unwrap());
    }
    log.sort_by_key(|(revision, _)| *revision);
    let last = revision(&*store).await;
    let revisions: Vec<Revision> = log.iter().map(|(revision, _)| *revision).collect();
    let expected: Vec<Revision> = (base + 1..=last).collect();
    assert_eq!(
        revisions, expected,
        "acknowledged writes are exactly the revisions committed: no loss, no phantom"
    );

    // Replay on the model, checking every historical state against the store.
    let mut model = Model::default();
    let mut expected_events = Vec::new();
    for (revision, write) in &log {
        expected_events.push(model.apply(*revision, write));
        let response = store
            .range(RangeRequest::new(KeyRange::prefix("/m/")).at_revision(*revision))
            .await
            .unwrap();
        let expected: Vec<KeyValue> = model.live.values().cloned().collect();
        assert_eq!(response.kvs, expected, "state at revision {revision}");
    }
    let events = collect(&mut watch, expected_events.len(), WAIT).await;
    assert_eq!(events.len(), expected_events.len());
    for (index, (got, want)) in events.iter().zip(&expected_events).enumerate() {
        assert_eq!(got, want, "watch event {index}");
    }
    assert_quiet(&mut watch, std::time::Duration::from_millis(200)).await;
    store.close().await;
}
