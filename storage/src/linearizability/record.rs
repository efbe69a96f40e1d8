//! Recording histories: concurrent clients doing random operations on a few keys, each call
//! timed on one clock, and a watch over the keys.
//!
//! Every value written is unique (`<seed>.<client>.<n>`, the seed random per workload), so a
//! value read names the write it came from. Clients compare-and-swap against the mod revision
//! they last saw, so transactions both succeed and fail. A request that errors or outlives the workload's timeout is recorded
//! without an answer.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{History, Input, Nanos, Observed, Operation, Output, WatchLog};
use crate::interface::{Storage, WatchStream};
use crate::types::*;

/// What to run.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Keys are `<prefix>k0`, `<prefix>k1`, …; the prefix should hold nothing else.
    pub prefix: Vec<u8>,
    pub clients: usize,
    /// Operations per client.
    pub operations: usize,
    pub keys: usize,
    pub seed: u64,
    /// How long one request may take before it is recorded without an answer.
    pub request_timeout: Duration,
    /// What a client does after a request without an answer.
    pub after_failure: AfterFailure,
    /// Stop each client after this long, even if it has operations left.
    pub duration: Option<Duration>,
    /// Once set, each client stops before its next request (the caller ends the run).
    pub stop: Option<Arc<AtomicBool>>,
}

/// What a client does after a request without an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterFailure {
    /// Goes on at once.
    Continue,
    /// Stops (the server is gone), rather than fill the history with failures.
    Stop,
    /// Waits this long, then goes on (the server is coming back).
    Pause(Duration),
}

impl Workload {
    /// `clients` × `operations` on 4 keys under `prefix`, with a random seed.
    pub fn new(prefix: impl Into<Vec<u8>>, clients: usize, operations: usize) -> Self {
        Workload {
            prefix: prefix.into(),
            clients,
            operations,
            keys: 4,
            seed: rand::random(),
            request_timeout: Duration::from_secs(10),
            after_failure: AfterFailure::Continue,
            duration: None,
            stop: None,
        }
    }

    pub fn key(&self, index: usize) -> Vec<u8> {
        let mut key = self.prefix.clone();
        key.extend_from_slice(format!("k{index}").as_bytes());
        key
    }

    pub fn all_keys(&self) -> Vec<Vec<u8>> {
        (0..self.keys).map(|index| self.key(index)).collect()
    }
}

/// The clock and the requests: every operation's times count from one origin, so histories
/// recorded in parts (before and after a restart) can be checked together.
#[derive(Clone, Copy, Debug)]
pub struct Recorder {
    origin: Instant,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    pub fn new() -> Self {
        Recorder {
            origin: Instant::now(),
        }
    }

    /// Nanoseconds since the recorder was made.
    pub fn now(&self) -> Nanos {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Runs the workload's clients concurrently, client `i` on `stores[i % stores.len()]`
    /// (several stores: several servers on one backend), and returns every operation.
    pub async fn run(&self, stores: &[Arc<dyn Storage>], workload: &Workload) -> Vec<Operation> {
        let mut clients = tokio::task::JoinSet::new();
        for client in 0..workload.clients {
            let Some(store) = stores.get(client % stores.len().max(1)).cloned() else {
                break;
            };
            let (recorder, workload) = (*self, workload.clone());
            clients.spawn(async move { recorder.client(&*store, &workload, client).await });
        }
        let mut operations = Vec::new();
        while let Some(done) = clients.join_next().await {
            match done {
                Ok(ops) => operations.extend(ops),
                Err(error) => tracing::error!(%error, "a history client panicked"),
            }
        }
        operations.sort_by_key(|op| op.call);
        operations
    }

    async fn client(
        &self,
        store: &dyn Storage,
        workload: &Workload,
        client: usize,
    ) -> Vec<Operation> {
        let mut rng = StdRng::seed_from_u64(workload.seed.wrapping_add(client as u64));
        // The mod revision this client last saw for each key (0: absent).
        let mut seen: BTreeMap<Vec<u8>, Revision> = BTreeMap::new();
        let mut operations = Vec::with_capacity(workload.operations.min(100_000));
        let started = Instant::now();
        for n in 0..workload.operations {
            if workload
                .stop
                .as_ref()
                .is_some_and(|stop| stop.load(Ordering::Acquire))
            {
                break;
            }
            let key = workload.key(rng.random_range(0..workload.keys.max(1)));
            let value = format!("{:x}.{client}.{n}", workload.seed).into_bytes();
            let input = match rng.random_range(0..100) {
                0..25 => Input::Get { key },
                25..35 => Input::List {
                    keys: workload.all_keys(),
                },
                35..55 => Input::Put { key, value },
                55..85 => Input::Cas {
                    expected: seen.get(&key).copied().unwrap_or(0),
                    key,
                    value,
                },
                _ => Input::Delete { key },
            };
            let op = self
                .call(
                    store,
                    client,
                    input,
                    workload.request_timeout,
                    &workload.prefix,
                )
                .await;
            learn(&mut seen, &op);
            let failed = matches!(op.output, Output::Unknown { .. });
            operations.push(op);
            if failed {
                match workload.after_failure {
                    AfterFailure::Continue => {}
                    AfterFailure::Stop => break,
                    AfterFailure::Pause(pause) => tokio::time::sleep(pause).await,
                }
            }
            if workload
                .duration
                .is_some_and(|limit| started.elapsed() >= limit)
            {
                break;
            }
        }
        operations
    }

    /// Makes one request and times it.
    pub async fn call(
        &self,
        store: &dyn Storage,
        client: usize,
        input: Input,
        timeout: Duration,
        prefix: &[u8],
    ) -> Operation {
        let call = self.now();
        let output = match tokio::time::timeout(timeout, execute(store, &input, prefix)).await {
            Ok(Ok(output)) => output,
            Ok(Err(error)) => Output::Unknown {
                error: error.to_string(),
            },
            Err(_) => Output::Unknown {
                error: format!("no answer within {timeout:?}"),
            },
        };
        let returned = (!matches!(output, Output::Unknown { .. })).then(|| self.now());
        Operation {
            client,
            call,
            returned,
            input,
            output,
        }
    }
}

/// Remembers the mod revision an operation showed for its key.
fn learn(seen: &mut BTreeMap<Vec<u8>, Revision>, op: &Operation) {
    let key = match &op.input {
        Input::Get { key } | Input::Put { key, .. } | Input::Cas { key, .. } => key,
        Input::Delete { key } => key,
        Input::List { .. } => return,
    };
    let revision = match &op.output {
        Output::Get { kv, .. }
        | Output::Cas {
            current: kv,
            succeeded: false,
            ..
        } => kv.as_ref().map_or(0, |kv| kv.mod_revision),
        Output::Put { revision } | Output::Cas { revision, .. } => *revision,
        Output::Delete { deleted: true, .. } => 0,
        _ => return,
    };
    seen.insert(key.clone(), revision);
}

fn observed(kv: KeyValue) -> Observed {
    Observed {
        value: kv.value,
        mod_revision: kv.mod_revision,
        create_revision: kv.create_revision,
        version: kv.version,
    }
}

async fn execute(store: &dyn Storage, input: &Input, prefix: &[u8]) -> crate::Result<Output> {
    Ok(match input {
        Input::Get { key } => {
            let response = store
                .range(RangeRequest::new(KeyRange::key(key.clone())))
                .await?;
            Output::Get {
                kv: response.kvs.into_iter().next().map(observed),
                revision: response.revision,
            }
        }
        Input::List { .. } => {
            let response = store
                .range(RangeRequest::new(KeyRange::prefix(prefix.to_vec())))
                .await?;
            Output::List {
                kvs: response
                    .kvs
                    .into_iter()
                    .map(|kv| (kv.key.clone(), observed(kv)))
                    .collect(),
                revision: response.revision,
            }
        }
        Input::Put { key, value } => {
            let response = store
                .txn(TxnRequest {
                    success: vec![TxnOp::Put(PutRequest::new(key.clone(), value.clone()))],
                    ..TxnRequest::default()
                })
                .await?;
            Output::Put {
                revision: response.revision,
            }
        }
        Input::Cas {
            key,
            expected,
            value,
        } => {
            let response = store
                .txn(TxnRequest {
                    compare: vec![Compare::mod_revision(
                        key.clone(),
                        CompareOp::Equal,
                        *expected,
                    )],
                    success: vec![TxnOp::Put(PutRequest::new(key.clone(), value.clone()))],
                    failure: vec![TxnOp::Range(RangeRequest::new(KeyRange::key(key.clone())))],
                })
                .await?;
            let current = match response.responses.into_iter().next() {
                Some(TxnOpResponse::Range(range)) => range.kvs.into_iter().next().map(observed),
                _ => None,
            };
            Output::Cas {
                succeeded: response.succeeded,
                current,
                revision: response.revision,
            }
        }
        Input::Delete { key } => {
            let response = store
                .txn(TxnRequest {
                    success: vec![TxnOp::DeleteRange(DeleteRangeRequest {
                        range: KeyRange::key(key.clone()),
                        prev_kv: false,
                    })],
                    ..TxnRequest::default()
                })
                .await?;
            let deleted = match response.responses.first() {
                Some(TxnOpResponse::DeleteRange(delete)) => delete.deleted > 0,
                _ => false,
            };
            Output::Delete {
                deleted,
                revision: response.revision,
            }
        }
    })
}

/// Reads a watch until its batches reach `until` (asking for progress when it goes quiet),
/// the stream ends, or `wait` passes after `until` became known.
async fn collect(
    mut stream: WatchStream,
    start_revision: Revision,
    mut until: tokio::sync::watch::Receiver<Option<Revision>>,
    wait: Duration,
) -> WatchLog {
    let mut log = WatchLog {
        start_revision,
        ..WatchLog::default()
    };
    let mut reached = 0;
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        let target = *until.borrow();
        if let Some(target) = target {
            if reached >= target {
                return log;
            }
            let at = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + wait);
            if tokio::time::Instant::now() >= at {
                log.error = Some(format!(
                    "the watch had reached revision {reached} after {wait:?}, not {target}"
                ));
                return log;
            }
        }
        tokio::select! {
            batch = stream.next() => match batch {
                Some(Ok(batch)) => {
                    reached = reached.max(batch.revision);
                    if !batch.events.is_empty() {
                        log.batches.push(batch);
                    }
                }
                Some(Err(error)) => {
                    log.error = Some(error.to_string());
                    return log;
                }
                None => {
                    log.error = Some("the watch ended".into());
                    return log;
                }
            },
            changed = until.changed() => {
                if changed.is_err() && until.borrow().is_none() {
                    log.error = Some("nobody said how far to watch".into());
                    return log;
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(200)) => stream.request_progress(),
        }
    }
}

/// Watches `prefix` from `start_revision` with `prev_kv` until revision `until`.
pub async fn watch_log(
    store: &dyn Storage,
    prefix: &[u8],
    start_revision: Revision,
    until: Revision,
    wait: Duration,
) -> crate::Result<WatchLog> {
    let stream = store
        .watch(
            WatchRequest::new(KeyRange::prefix(prefix.to_vec()))
                .from_revision(start_revision)
                .with_prev_kv(),
        )
        .await?;
    let (_keep, receiver) = tokio::sync::watch::channel(Some(until));
    Ok(collect(stream, start_revision, receiver, wait).await)
}

/// Records a workload on one or more stores (see [`Recorder::run`]) with a watch on the first
/// running beside it from before the first write; the watch is read until it reaches the
/// store's revision after the last operation.
pub async fn record(stores: &[Arc<dyn Storage>], workload: &Workload) -> crate::Result<History> {
    Recorder::new().record(stores, workload).await
}

impl Recorder {
    /// [`record`] on this recorder's clock, for a caller that times faults of its own.
    pub async fn record(
        &self,
        stores: &[Arc<dyn Storage>],
        workload: &Workload,
    ) -> crate::Result<History> {
        let Some(store) = stores.first() else {
            return Err(crate::Error::InvalidArgument(
                "a history needs a store to record".into(),
            ));
        };
        let start_revision = store.status().await?.revision + 1;
        let stream = store
            .watch(
                WatchRequest::new(KeyRange::prefix(workload.prefix.clone()))
                    .from_revision(start_revision)
                    .with_prev_kv(),
            )
            .await?;
        let (until, receiver) = tokio::sync::watch::channel(None);
        let watcher = tokio::spawn(collect(
            stream,
            start_revision,
            receiver,
            Duration::from_secs(10),
        ));
        let operations = self.run(stores, workload).await;
        let last = operations
            .iter()
            .filter_map(Operation::response_revision)
            .max()
            .unwrap_or(0);
        let revision = store.status().await.map_or(last, |status| status.revision);
        // The receiver may be gone already if the watch failed; its log says why.
        let _ = until.send(Some(revision.max(last)));
        let watch = watcher
            .await
            .map_err(|error| crate::Error::backend("the history's watch", error))?;
        Ok(History {
            operations,
            watch: Some(watch),
        })
    }
}
