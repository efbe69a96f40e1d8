//! The six storage workloads, each run against one `Arc<dyn Storage>` for one round, returning
//! how many operations it timed, how long they took together and each one's latency:
//! creates of new keys; read-modify-write updates (a `get`, then `update` with the
//! mod_revision it read); point gets; paged lists of a 10k-key prefix; watch delivery latency
//! with many watchers; the compaction of a long history; and the revoke of a lease holding
//! many keys while other clients write (how long a revoke stalls them). [`setup`] writes,
//! untimed, the keys the update, get and list workloads read.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use futures::StreamExt;
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use rudder_storage::{
    prefix_end, CreateOutcome, Error as StorageError, KeyRange, RangeRequest, Revision, Storage,
    UpdateOutcome, WatchRequest, WatchStream,
};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// One kind of storage traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    Create,
    Update,
    Get,
    List,
    Watch,
    Compact,
    Revoke,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Create => "create",
            Workload::Update => "update",
            Workload::Get => "get",
            Workload::List => "list",
            Workload::Watch => "watch",
            Workload::Compact => "compact",
            Workload::Revoke => "revoke",
        }
    }

    /// What one counted operation is.
    pub fn unit(self) -> &'static str {
        match self {
            Workload::Create => "creates",
            Workload::Update => "updates",
            Workload::Get => "gets",
            Workload::List => "lists",
            Workload::Watch => "deliveries",
            Workload::Compact => "revisions",
            Workload::Revoke => "keys revoked",
        }
    }
}

/// The sizes of the workloads (per subject and round unless said otherwise).
#[derive(Clone, Debug, Serialize)]
pub struct Params {
    /// Concurrent clients for create, update and get (the untimed writes use at least 16).
    pub writers: usize,
    pub value_size: usize,
    /// Keys created per round; also the key set that updates and gets work on.
    pub keys: usize,
    pub updates: usize,
    pub gets: usize,
    /// Keys under the listed prefix (written once, untimed).
    pub list_keys: usize,
    pub page_size: usize,
    /// Full paged lists per round, one after the other.
    pub lists: usize,
    pub watchers: usize,
    /// Puts per round, each waited for until every watcher has seen it.
    pub events: usize,
    /// Updates written (untimed) before the timed compaction.
    pub history: usize,
    pub history_keys: usize,
    /// Keys attached (untimed) to the lease the revoke workload revokes.
    pub revoke_keys: usize,
}

impl Params {
    /// How many progress steps one round of `workload` makes.
    pub fn steps(&self, workload: Workload) -> u64 {
        let steps = match workload {
            Workload::Create => self.keys,
            Workload::Update => self.updates,
            Workload::Get => self.gets,
            Workload::List => self.lists,
            Workload::Watch => self.events * self.watchers,
            Workload::Compact => self.history + 1,
            Workload::Revoke => self.revoke_keys.div_ceil(REVOKE_CHUNK) + 1,
        };
        steps as u64
    }

    /// How many progress steps [`setup`] makes for these workloads.
    pub fn setup_steps(&self, workloads: &[Workload]) -> u64 {
        let mut steps = 0;
        if workloads.contains(&Workload::Update) || workloads.contains(&Workload::Get) {
            steps += self.keys;
        }
        if workloads.contains(&Workload::List) {
            steps += self.list_keys;
        }
        steps as u64
    }
}

/// What one round of a workload measured.
pub struct Sample {
    pub ops: u64,
    pub elapsed: Duration,
    /// Latency of each operation, in microseconds.
    pub latencies: Histogram<u64>,
}

const KV: &str = "/bench/kv/";
const LIST: &str = "/bench/list/";
const HISTORY: &str = "/bench/history/";
const LEASED: &str = "/bench/leased/";
const BESIDE: &str = "/bench/beside/";
/// Leased keys written per transaction in the revoke workload's setup.
const REVOKE_CHUNK: usize = 100;

/// Writes, untimed, the key set of `update` and `get` and the prefix `list` pages over.
pub async fn setup(
    store: &Arc<dyn Storage>,
    params: &Params,
    workloads: &[Workload],
    progress: &ProgressBar,
) -> Result<()> {
    let value = Arc::new(vec![b's'; params.value_size]);
    let mut prefixes = Vec::new();
    if workloads.contains(&Workload::Update) || workloads.contains(&Workload::Get) {
        prefixes.push((KV, params.keys));
    }
    if workloads.contains(&Workload::List) {
        prefixes.push((LIST, params.list_keys));
    }
    for (prefix, count) in prefixes {
        let value = value.clone();
        // Untimed, so never slower than 16 clients (a scaling run's 1-writer point included).
        spread(
            store,
            params.writers.max(16),
            count,
            progress,
            move |store, i| {
                let value = value.clone();
                async move {
                    store.put(key(prefix, i).as_bytes(), &value, 0).await?;
                    Ok(())
                }
            },
        )
        .await
        .with_context(|| format!("writing the keys under {prefix}"))?;
    }
    Ok(())
}

/// Runs one round of `workload`.
pub async fn run(
    workload: Workload,
    store: &Arc<dyn Storage>,
    params: &Params,
    round: usize,
    progress: &ProgressBar,
) -> Result<Sample> {
    match workload {
        Workload::Create => create(store, params, round, progress).await,
        Workload::Update => update(store, params, progress).await,
        Workload::Get => get(store, params, progress).await,
        Workload::List => list(store, params, progress).await,
        Workload::Watch => watch(store, params, round, progress).await,
        Workload::Compact => compact(store, params, progress).await,
        Workload::Revoke => revoke(store, params, round, progress).await,
    }
    .with_context(|| format!("the {} workload", workload.name()))
}

/// `keys` creates of new keys by `writers` clients.
async fn create(
    store: &Arc<dyn Storage>,
    params: &Params,
    round: usize,
    progress: &ProgressBar,
) -> Result<Sample> {
    let value = Arc::new(vec![b'c'; params.value_size]);
    let prefix = Arc::new(format!("/bench/create/r{round}/"));
    timed(params.keys, async {
        spread(
            store,
            params.writers,
            params.keys,
            progress,
            move |store, i| {
                let (value, key) = (value.clone(), key(&prefix, i));
                async move {
                    match store.create(key.as_bytes(), &value, 0).await? {
                        CreateOutcome::Created { .. } => Ok(()),
                        CreateOutcome::AlreadyExists { .. } => bail!("key {key} already existed"),
                    }
                }
            },
        )
        .await
    })
    .await
}

/// `updates` read-modify-writes: a get, then an update guarded by the mod_revision it read
/// (retried with the current state on a conflict, as the apiserver does).
async fn update(
    store: &Arc<dyn Storage>,
    params: &Params,
    progress: &ProgressBar,
) -> Result<Sample> {
    let value = Arc::new(vec![b'u'; params.value_size]);
    let keys = params.keys;
    timed(params.updates, async {
        spread(
            store,
            params.writers,
            params.updates,
            progress,
            move |store, i| {
                let (value, key) = (value.clone(), key(KV, i % keys));
                async move {
                    let mut current = store.get(key.as_bytes(), 0).await?;
                    for _ in 0..100 {
                        let expected = current
                            .as_ref()
                            .map(|kv| kv.mod_revision)
                            .ok_or_else(|| anyhow!("key {key} is missing"))?;
                        match store.update(key.as_bytes(), &value, expected, 0).await? {
                            UpdateOutcome::Updated { .. } => return Ok(()),
                            UpdateOutcome::Conflict { current: now } => current = now,
                        }
                    }
                    bail!("key {key}: 100 conflicts in a row")
                }
            },
        )
        .await
    })
    .await
}

/// `gets` point reads of keys scattered over the key set.
async fn get(store: &Arc<dyn Storage>, params: &Params, progress: &ProgressBar) -> Result<Sample> {
    let keys = params.keys;
    timed(params.gets, async {
        spread(
            store,
            params.writers,
            params.gets,
            progress,
            move |store, i| {
                let key = key(KV, scatter(i, keys));
                async move {
                    match store.get(key.as_bytes(), 0).await? {
                        Some(_) => Ok(()),
                        None => bail!("key {key} is missing"),
                    }
                }
            },
        )
        .await
    })
    .await
}

/// `lists` full lists of the list prefix, one after the other, each in pages of `page_size`
/// read at the first page's revision (as the apiserver paginates); one op is one full list.
async fn list(store: &Arc<dyn Storage>, params: &Params, progress: &ProgressBar) -> Result<Sample> {
    let end = prefix_end(LIST.as_bytes());
    let mut latencies = histogram()?;
    let started = Instant::now();
    for _ in 0..params.lists {
        let begun = Instant::now();
        let (mut start, mut revision, mut seen) = (LIST.as_bytes().to_vec(), 0, 0);
        loop {
            let request = RangeRequest::new(KeyRange::between(start, end.clone()))
                .with_limit(i64::try_from(params.page_size)?)
                .at_revision(revision);
            let page = store.range(request).await.context("reading a page")?;
            if revision == 0 {
                revision = page.revision;
            }
            seen += page.kvs.len();
            match (page.more, page.kvs.last()) {
                (true, Some(last)) => {
                    start = last.key.clone();
                    start.push(0);
                }
                _ => break,
            }
        }
        if seen != params.list_keys {
            bail!("listing {LIST} found {seen} keys, not {}", params.list_keys);
        }
        record(&mut latencies, begun.elapsed())?;
        progress.inc(1);
    }
    Ok(Sample {
        ops: params.lists as u64,
        elapsed: started.elapsed(),
        latencies,
    })
}

/// `events` puts under a fresh prefix watched by `watchers` watchers; each put waits until
/// every watcher has seen it. Latency: from just before the put to each watcher's delivery.
async fn watch(
    store: &Arc<dyn Storage>,
    params: &Params,
    round: usize,
    progress: &ProgressBar,
) -> Result<Sample> {
    let prefix = format!("/bench/watch/r{round}/");
    let from = current_revision(store).await? + 1;
    let starts: Arc<Vec<OnceLock<Instant>>> =
        Arc::new((0..params.events).map(|_| OnceLock::new()).collect());
    let (sender, mut deliveries) = mpsc::unbounded_channel();
    // Dropping the set (on return or on error) stops the watchers.
    let mut watchers = JoinSet::new();
    for _ in 0..params.watchers {
        let request = WatchRequest::new(KeyRange::prefix(prefix.clone())).from_revision(from);
        let stream = store.watch(request).await.context("starting a watcher")?;
        let (sender, starts, prefix) = (sender.clone(), starts.clone(), prefix.clone());
        let events = params.events;
        watchers.spawn(async move {
            if let Err(error) = deliver(stream, &prefix, events, &starts, &sender).await {
                let _ = sender.send(Err(error));
            }
        });
    }
    drop(sender);
    let value = vec![b'w'; params.value_size];
    let mut latencies = histogram()?;
    let started = Instant::now();
    for (seq, start) in starts.iter().enumerate() {
        let _ = start.set(Instant::now());
        store.put(key(&prefix, seq).as_bytes(), &value, 0).await?;
        for _ in 0..params.watchers {
            let delivery = tokio::time::timeout(Duration::from_secs(10), deliveries.recv())
                .await
                .map_err(|_| anyhow!("a watcher did not see event {seq} within 10 s"))?
                .ok_or_else(|| anyhow!("the watchers ended before event {seq}"))?;
            let (seen, latency) = delivery?;
            if seen != seq {
                bail!("a watcher delivered event {seen} while {seq} was awaited");
            }
            record(&mut latencies, latency)?;
            progress.inc(1);
        }
    }
    Ok(Sample {
        ops: (params.events * params.watchers) as u64,
        elapsed: started.elapsed(),
        latencies,
    })
}

/// One watcher: reports `(sequence number, latency)` for each of `events` events.
async fn deliver(
    mut stream: WatchStream,
    prefix: &str,
    events: usize,
    starts: &[OnceLock<Instant>],
    sender: &mpsc::UnboundedSender<Result<(usize, Duration)>>,
) -> Result<()> {
    let mut seen = 0;
    while seen < events {
        let batch = stream
            .next()
            .await
            .ok_or_else(|| anyhow!("the watch ended after {seen} events"))??;
        let arrived = Instant::now();
        for event in batch.events {
            let seq = sequence(&event.kv.key, prefix)?;
            let start = starts
                .get(seq)
                .and_then(OnceLock::get)
                .ok_or_else(|| anyhow!("event {seq} arrived before it was written"))?;
            // The receiver is gone only when the round has already failed.
            let _ = sender.send(Ok((seq, arrived.saturating_duration_since(*start))));
            seen += 1;
        }
    }
    Ok(())
}

/// Compacts away what came before (untimed), writes a history of `history` updates over
/// `history_keys` keys (untimed), then times `compact` at the current revision. One op is one
/// revision compacted; the latency is that of the `compact` call.
async fn compact(
    store: &Arc<dyn Storage>,
    params: &Params,
    progress: &ProgressBar,
) -> Result<Sample> {
    let before = current_revision(store).await?;
    match store.compact(before).await {
        Ok(()) | Err(StorageError::Compacted { .. }) => {}
        Err(error) => return Err(error).context("compacting earlier history"),
    }
    let value = Arc::new(vec![b'h'; params.value_size]);
    let keys = params.history_keys;
    spread(
        store,
        params.writers,
        params.history,
        progress,
        move |store, i| {
            let (value, key) = (value.clone(), key(HISTORY, i % keys));
            async move {
                store.put(key.as_bytes(), &value, 0).await?;
                Ok(())
            }
        },
    )
    .await
    .context("writing the history")?;
    let target = current_revision(store).await?;
    let begun = Instant::now();
    store
        .compact(target)
        .await
        .with_context(|| format!("compacting at revision {target}"))?;
    let elapsed = begun.elapsed();
    progress.inc(1);
    let mut latencies = histogram()?;
    record(&mut latencies, elapsed)?;
    Ok(Sample {
        ops: u64::try_from(target - before)?,
        elapsed,
        latencies,
    })
}

/// Attaches `revoke_keys` keys to one lease (untimed, in transactions of [`REVOKE_CHUNK`]),
/// then revokes it while `writers` clients keep putting keys of their own. One op is one key
/// deleted, so the rate is the revoke's; the latencies are those of the puts that overlapped
/// the revoke, so their p99 is how long the revoke stalled other writers.
async fn revoke(
    store: &Arc<dyn Storage>,
    params: &Params,
    round: usize,
    progress: &ProgressBar,
) -> Result<Sample> {
    use rudder_storage::{PutRequest, TxnOp, TxnRequest};
    let lease = store
        .lease_grant(3600, 0)
        .await
        .context("granting the lease")?;
    let value = Arc::new(vec![b'e'; params.value_size.min(512)]);
    let total = params.revoke_keys;
    let chunks = total.div_ceil(REVOKE_CHUNK);
    spread(
        store,
        params.writers,
        chunks,
        progress,
        move |store, chunk| {
            let value = value.clone();
            async move {
                let first = chunk * REVOKE_CHUNK;
                let success = (first..(first + REVOKE_CHUNK).min(total))
                    .map(|i| {
                        TxnOp::Put(
                            PutRequest::new(key(&format!("{LEASED}r{round}/"), i), value.to_vec())
                                .with_lease(lease.id),
                        )
                    })
                    .collect();
                store
                    .txn(TxnRequest {
                        success,
                        ..TxnRequest::default()
                    })
                    .await?;
                Ok(())
            }
        },
    )
    .await
    .context("attaching keys to the lease")?;

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = JoinSet::new();
    for writer in 0..params.writers {
        let (store, stop) = (store.clone(), stop.clone());
        writers.spawn(async move {
            let mut puts = Vec::new();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let key = key(&format!("{BESIDE}{writer}/"), i % 64);
                let begun = Instant::now();
                store.put(key.as_bytes(), b"beside", 0).await?;
                puts.push((begun, Instant::now()));
                i += 1;
            }
            Ok::<_, anyhow::Error>(puts)
        });
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let begun = Instant::now();
    let revoked = store.lease_revoke(lease.id).await;
    let ended = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut latencies = histogram()?;
    while let Some(outcome) = writers.join_next().await {
        for (start, end) in outcome?? {
            if start < ended && end > begun {
                record(&mut latencies, end - start)?;
            }
        }
    }
    revoked.context("revoking the lease")?;
    progress.inc(1);
    Ok(Sample {
        ops: total as u64,
        elapsed: ended - begun,
        latencies,
    })
}

/// Runs `count` operations over `clients` concurrent tasks (task c does operations c,
/// c + clients, …) and returns their latencies. The first error stops them all.
async fn spread<F, Fut>(
    store: &Arc<dyn Storage>,
    clients: usize,
    count: usize,
    progress: &ProgressBar,
    op: F,
) -> Result<Histogram<u64>>
where
    F: Fn(Arc<dyn Storage>, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let op = Arc::new(op);
    let mut tasks = JoinSet::new();
    for client in 0..clients.min(count) {
        let (store, op, progress) = (store.clone(), op.clone(), progress.clone());
        tasks.spawn(async move {
            let mut latencies = histogram()?;
            for i in (client..count).step_by(clients) {
                let begun = Instant::now();
                op(store.clone(), i).await?;
                record(&mut latencies, begun.elapsed())?;
                progress.inc(1);
            }
            Ok::<_, anyhow::Error>(latencies)
        });
    }
    let mut all = histogram()?;
    while let Some(outcome) = tasks.join_next().await {
        all.add(outcome??)?;
    }
    Ok(all)
}

/// Times `work`, which does `ops` operations and returns their latencies.
async fn timed(ops: usize, work: impl Future<Output = Result<Histogram<u64>>>) -> Result<Sample> {
    let started = Instant::now();
    let latencies = work.await?;
    Ok(Sample {
        ops: ops as u64,
        elapsed: started.elapsed(),
        latencies,
    })
}

/// The store's current revision, read through a range of one key.
async fn current_revision(store: &Arc<dyn Storage>) -> Result<Revision> {
    let probe = RangeRequest::new(KeyRange::key(&b"/bench/revision-probe"[..])).count_only();
    Ok(store
        .range(probe)
        .await
        .context("reading the revision")?
        .revision)
}

fn key(prefix: &str, i: usize) -> String {
    format!("{prefix}{i:08}")
}

/// The sequence number in a key written by [`key`] under `prefix`.
fn sequence(key: &[u8], prefix: &str) -> Result<usize> {
    key.strip_prefix(prefix.as_bytes())
        .and_then(|tail| std::str::from_utf8(tail).ok())
        .and_then(|tail| tail.parse().ok())
        .ok_or_else(|| anyhow!("unexpected key {:?}", String::from_utf8_lossy(key)))
}

/// Spreads operation `i` over `0..keys` so consecutive gets hit keys far apart.
fn scatter(i: usize, keys: usize) -> usize {
    (i.wrapping_mul(2_654_435_761)) % keys.max(1)
}

fn histogram() -> Result<Histogram<u64>> {
    Ok(Histogram::new(3)?)
}

fn record(latencies: &mut Histogram<u64>, elapsed: Duration) -> Result<()> {
    Ok(latencies.record(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_reads_back_what_key_wrote() {
        assert_eq!(
            sequence(key("/w/r1/", 42).as_bytes(), "/w/r1/").unwrap(),
            42
        );
        assert!(sequence(b"/other/00000001", "/w/r1/").is_err());
    }

    #[test]
    fn scatter_stays_in_range() {
        assert!((0..10_000).all(|i| scatter(i, 2000) < 2000));
        assert_eq!(scatter(5, 0), 0);
    }
}
