//! The etcd driver: a thin mapping of the storage interface onto etcd-client.
//!
//! Keys may live under a prefix (from the URL's path), so several stores can share one etcd;
//! the prefix is added on the way in and stripped on the way out. Watches are etcd watches: etcd
//! does its own fan-out, so this driver needs no hub ([`watch`] also explains how progress
//! requests are answered on etcd versions whose own answers cannot be trusted). When a member
//! goes away, requests that never reached it are sent again to another ([`retry`]) and watches
//! carry on from the revision after the last one delivered.

mod restore;
mod retry;
mod watch;

use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use async_trait::async_trait;
use etcd_client::proto::{PbKeyValue, PbTxnOpResponse};
use etcd_client::{
    Client, CompactionOptions, Compare as EtcdCompare, CompareOp as EtcdCompareOp, ConnectOptions,
    DeleteOptions, GetOptions, LeaseGrantOptions, LeaseTimeToLiveOptions, PutOptions, Txn,
    TxnOp as EtcdTxnOp,
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use watch::ProgressMode;

use crate::compaction::spawn_compactor;
use crate::config::{CompactionConfig, EtcdConfig};
use crate::error::{Error, Result};
use crate::interface::{Storage, WatchStream};
use crate::types::*;

/// The largest response accepted from etcd. tonic's default (4 MiB) is far below what one
/// unpaginated list returns (10k pods ≈ 10 MiB); kube-apiserver lifts the limit the same way.
const MAX_RESPONSE_BYTES: usize = i32::MAX as usize;

/// A store on an etcd cluster.
pub struct EtcdStore {
    client: Client,
    prefix: Vec<u8>,
    progress: ProgressMode,
    shutdown: CancellationToken,
    compactor: std::sync::Mutex<Option<JoinHandle<()>>>,
    /// The state of a copy being loaded ([`Storage::restore`]).
    restore: tokio::sync::Mutex<restore::Loader>,
}

impl EtcdStore {
    /// Connects to the endpoints and checks that etcd answers.
    pub async fn open(config: &EtcdConfig, compaction: &CompactionConfig) -> Result<Arc<Self>> {
        let options = ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_timeout(Duration::from_secs(30))
            .with_keep_alive(Duration::from_secs(30), Duration::from_secs(10));
        let endpoints = config.endpoints.join(",");
        let unreachable = |cause: String| {
            Error::Unavailable {
            message: format!(
                "cannot open etcd storage at {endpoints}: {cause}; check that etcd is running and that the URL lists its client endpoints (etcd://HOST:PORT[,HOST:PORT…])"
            ),
            source: None,
        }
        };
        let connect = async {
            let mut client = Client::connect(config.endpoints.clone(), Some(options)).await?;
            let status = client.status().await?;
            Ok::<(Client, String), etcd_client::Error>((client, status.version().to_string()))
        };
        let (client, version) = match tokio::time::timeout(config.connect_timeout, connect).await {
            Err(_) => {
                return Err(unreachable(format!(
                    "no answer within {:?}",
                    config.connect_timeout
                )))
            }
            Ok(Err(error)) => return Err(unreachable(error.to_string())),
            Ok(Ok(connected)) => connected,
        };
        // The fence key lives outside every prefixed store's keys (stores without a prefix
        // see it, and their watches filter it out).
        let mut fence_key = b"\0rudder/watch-progress-fence".to_vec();
        fence_key.extend_from_slice(&config.prefix);
        let progress = ProgressMode::for_version(&version, client.clone(), fence_key);
        if let ProgressMode::Fenced { .. } = progress {
            tracing::info!(
                %version,
                "etcd answers watch progress requests out of order (etcd-io/etcd#15220): \
                 progress is fenced with writes; etcd 3.4.31+ or 3.5.13+ avoids them"
            );
        }
        let store = Arc::new(Self {
            client,
            prefix: config.prefix.clone(),
            progress,
            shutdown: CancellationToken::new(),
            compactor: std::sync::Mutex::new(None),
            restore: tokio::sync::Mutex::new(restore::Loader::default()),
        });
        let compactor = spawn_compactor(
            Arc::downgrade(&store),
            compaction.clone(),
            store.shutdown.clone(),
        );
        *store
            .compactor
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(compactor);
        Ok(store)
    }

    fn key(&self, key: &[u8]) -> Vec<u8> {
        let mut full = self.prefix.clone();
        full.extend_from_slice(key);
        full
    }

    /// The etcd `(key, range_end)` of a range under the prefix.
    fn range(&self, range: &KeyRange) -> (Vec<u8>, Vec<u8>) {
        let start = self.key(&range.start);
        let end = if range.is_single_key() {
            Vec::new()
        } else if range.is_unbounded() {
            if self.prefix.is_empty() {
                vec![0]
            } else {
                prefix_end(&self.prefix)
            }
        } else {
            self.key(&range.end)
        };
        (start, end)
    }

    fn kv(&self, kv: &PbKeyValue) -> KeyValue {
        KeyValue {
            key: kv
                .key
                .strip_prefix(self.prefix.as_slice())
                .unwrap_or(&kv.key)
                .to_vec(),
            value: kv.value.clone(),
            create_revision: kv.create_revision,
            mod_revision: kv.mod_revision,
            version: kv.version,
            lease: kv.lease,
        }
    }

    fn get_options(&self, request: &RangeRequest) -> (Vec<u8>, GetOptions) {
        let (key, end) = self.range(&request.range);
        let mut options = GetOptions::new()
            .with_revision(request.revision)
            .with_limit(request.limit);
        if !end.is_empty() {
            options = options.with_range(end);
        }
        if request.keys_only {
            options = options.with_keys_only();
        }
        if request.count_only {
            options = options.with_count_only();
        }
        (key, options)
    }

    fn txn_request(&self, request: &TxnRequest) -> Txn {
        let compares: Vec<EtcdCompare> = request
            .compare
            .iter()
            .map(|compare| self.compare(compare))
            .collect();
        let success: Vec<EtcdTxnOp> = request.success.iter().map(|op| self.txn_op(op)).collect();
        let failure: Vec<EtcdTxnOp> = request.failure.iter().map(|op| self.txn_op(op)).collect();
        Txn::new().when(compares).and_then(success).or_else(failure)
    }

    fn compare(&self, compare: &Compare) -> EtcdCompare {
        let (key, end) = self.range(&compare.range);
        let op = match compare.op {
            CompareOp::Equal => EtcdCompareOp::Equal,
            CompareOp::NotEqual => EtcdCompareOp::NotEqual,
            CompareOp::Greater => EtcdCompareOp::Greater,
            CompareOp::Less => EtcdCompareOp::Less,
        };
        let etcd = match &compare.target {
            CompareTarget::Version(version) => EtcdCompare::version(key, op, *version),
            CompareTarget::CreateRevision(revision) => {
                EtcdCompare::create_revision(key, op, *revision)
            }
            CompareTarget::ModRevision(revision) => EtcdCompare::mod_revision(key, op, *revision),
            CompareTarget::Value(value) => EtcdCompare::value(key, op, value.clone()),
            CompareTarget::Lease(lease) => EtcdCompare::lease(key, op, *lease),
        };
        if end.is_empty() {
            etcd
        } else {
            etcd.with_range(end)
        }
    }

    fn txn_op(&self, op: &TxnOp) -> EtcdTxnOp {
        match op {
            TxnOp::Range(range) => {
                let (key, options) = self.get_options(range);
                EtcdTxnOp::get(key, Some(options))
            }
            TxnOp::Put(put) => {
                let mut options = PutOptions::new().with_lease(put.lease);
                if put.prev_kv {
                    options = options.with_prev_key();
                }
                if put.ignore_value {
                    options = options.with_ignore_value();
                }
                if put.ignore_lease {
                    options = options.with_ignore_lease();
                }
                EtcdTxnOp::put(self.key(&put.key), put.value.clone(), Some(options))
            }
            TxnOp::DeleteRange(delete) => {
                let (key, end) = self.range(&delete.range);
                let mut options = DeleteOptions::new();
                if !end.is_empty() {
                    options = options.with_range(end);
                }
                if delete.prev_kv {
                    options = options.with_prev_key();
                }
                EtcdTxnOp::delete(key, Some(options))
            }
            TxnOp::Txn(nested) => EtcdTxnOp::txn(self.txn_request(nested)),
        }
    }

    fn range_response(&self, response: &etcd_client::proto::PbRangeResponse) -> RangeResponse {
        RangeResponse {
            kvs: response.kvs.iter().map(|kv| self.kv(kv)).collect(),
            more: response.more,
            count: response.count,
            revision: response.header.as_ref().map_or(0, |h| h.revision),
        }
    }

    fn txn_response(&self, response: &etcd_client::proto::PbTxnResponse) -> TxnResponse {
        let responses = response
            .responses
            .iter()
            .filter_map(|op| op.response.as_ref())
            .map(|op| match op {
                PbTxnOpResponse::ResponseRange(range) => {
                    TxnOpResponse::Range(self.range_response(range))
                }
                PbTxnOpResponse::ResponsePut(put) => TxnOpResponse::Put(PutResponse {
                    prev_kv: put.prev_kv.as_ref().map(|kv| self.kv(kv)),
                }),
                PbTxnOpResponse::ResponseDeleteRange(delete) => {
                    TxnOpResponse::DeleteRange(DeleteRangeResponse {
                        deleted: delete.deleted,
                        prev_kvs: delete.prev_kvs.iter().map(|kv| self.kv(kv)).collect(),
                    })
                }
                PbTxnOpResponse::ResponseTxn(nested) => {
                    TxnOpResponse::Txn(self.txn_response(nested))
                }
            })
            .collect();
        TxnResponse {
            succeeded: response.succeeded,
            responses,
            revision: response.header.as_ref().map_or(0, |h| h.revision),
        }
    }

    /// Whether reading at `revision` fails as compacted.
    async fn is_compacted(&self, revision: Revision) -> Result<bool> {
        let options = GetOptions::new().with_revision(revision).with_count_only();
        match self
            .client
            .kv_client()
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
            .get(self.key(b"\0rudder-compaction-probe"), Some(options))
            .await
        {
            Ok(_) => Ok(false),
            Err(error) => match translate(error) {
                Error::Compacted { .. } => Ok(true),
                other => Err(other),
            },
        }
    }

    /// etcd 3.4 does not report its compacted revision; find it by bisection over reads.
    async fn compact_revision(&self, current: Revision) -> Result<Revision> {
        if !self.is_compacted(1).await? {
            return Ok(0);
        }
        // Invariant: `low` is compacted, `high` is not.
        let (mut low, mut high) = (1, current);
        while high - low > 1 {
            let middle = low + (high - low) / 2;
            if self.is_compacted(middle).await? {
                low = middle;
            } else {
                high = middle;
            }
        }
        Ok(high)
    }
}

/// A span per etcd RPC attempt, named as gRPC's instrumentation names them.
fn rpc_span(method: &'static str) -> tracing::Span {
    tracing::debug_span!("etcd.rpc", otel.name = method, rpc.system = "grpc")
}

#[async_trait]
impl Storage for EtcdStore {
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        let (key, options) = self.get_options(&request);
        let response = retry::with_retry(true, || {
            let mut kv = self
                .client
                .kv_client()
                .max_decoding_message_size(MAX_RESPONSE_BYTES);
            let (key, options) = (key.clone(), options.clone());
            async move { kv.get(key, Some(options)).await }
                .instrument(rpc_span("etcdserverpb.KV/Range"))
        })
        .await
        .map_err(translate)?;
        Ok(self.range_response(&response.0))
    }

    async fn txn(&self, request: TxnRequest) -> Result<TxnResponse> {
        let reads_only = request
            .success
            .iter()
            .chain(&request.failure)
            .all(|op| matches!(op, TxnOp::Range(_)));
        let txn = self.txn_request(&request);
        let response = retry::with_retry(reads_only, || {
            let mut kv = self
                .client
                .kv_client()
                .max_decoding_message_size(MAX_RESPONSE_BYTES);
            let txn = txn.clone();
            async move { kv.txn(txn).await }.instrument(rpc_span("etcdserverpb.KV/Txn"))
        })
        .await
        .map_err(translate)?;
        Ok(self.txn_response(&response.0))
    }

    async fn watch(&self, request: WatchRequest) -> Result<WatchStream> {
        let (key, range_end) = self.range(&request.range);
        let target = watch::Target {
            client: self.client.clone(),
            key,
            range_end,
            prev_kv: request.prev_kv,
            max_response_bytes: MAX_RESPONSE_BYTES,
        };
        watch::open(target, &request, self.prefix.clone(), self.progress.clone()).await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.client
            .kv_client()
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
            .compact(revision, Some(CompactionOptions::new()))
            .await
            .map_err(translate)?;
        Ok(())
    }

    async fn restore(&self, step: RestoreStep) -> Result<()> {
        self.restore_step(step).await
    }

    async fn lease_grant(&self, ttl: i64, id: LeaseId) -> Result<Lease> {
        let response = self
            .client
            .lease_client()
            .grant(ttl, Some(LeaseGrantOptions::new().with_id(id)))
            .await
            .map_err(translate)?;
        Ok(Lease {
            id: response.0.id,
            ttl: response.0.ttl,
        })
    }

    async fn lease_keep_alive(&self, id: LeaseId) -> Result<i64> {
        let (mut keeper, mut stream) = self
            .client
            .lease_client()
            .keep_alive(id)
            .await
            .map_err(translate)?;
        keeper.keep_alive().await.map_err(translate)?;
        match stream.message().await.map_err(translate)? {
            Some(response) if response.0.ttl > 0 => Ok(response.0.ttl),
            _ => Err(Error::LeaseNotFound(id)),
        }
    }

    async fn lease_revoke(&self, id: LeaseId) -> Result<()> {
        self.client
            .lease_client()
            .revoke(id)
            .await
            .map_err(translate)?;
        Ok(())
    }

    async fn lease_time_to_live(&self, id: LeaseId, keys: bool) -> Result<LeaseInfo> {
        let options = if keys {
            LeaseTimeToLiveOptions::new().with_keys()
        } else {
            LeaseTimeToLiveOptions::new()
        };
        let response = retry::with_retry(true, || {
            let mut leases = self.client.lease_client();
            let options = options.clone();
            async move { leases.time_to_live(id, Some(options)).await }
        })
        .await
        .map_err(translate)?;
        if response.0.ttl < 0 {
            return Err(Error::LeaseNotFound(id));
        }
        let keys = response
            .0
            .keys
            .iter()
            .filter_map(|key| key.strip_prefix(self.prefix.as_slice()).map(<[u8]>::to_vec))
            .collect();
        Ok(LeaseInfo {
            id,
            ttl: response.0.ttl,
            granted_ttl: response.0.granted_ttl,
            keys,
        })
    }

    async fn lease_list(&self) -> Result<Vec<LeaseId>> {
        let response = retry::with_retry(true, || {
            let mut leases = self.client.lease_client();
            async move { leases.leases().await }
        })
        .await
        .map_err(translate)?;
        let mut ids: Vec<LeaseId> = response.0.leases.iter().map(|lease| lease.id).collect();
        ids.sort_unstable();
        Ok(ids)
    }

    async fn status(&self) -> Result<Status> {
        let status = retry::with_retry(true, || {
            let mut maintenance = self.client.maintenance_client();
            async move { maintenance.status().await }
        })
        .await
        .map_err(translate)?;
        let revision = status.0.header.as_ref().map_or(0, |h| h.revision);
        Ok(Status {
            driver: "etcd".into(),
            revision,
            compact_revision: self.compact_revision(revision).await?,
            db_size_bytes: status.0.db_size,
            server_version: format!("etcd {}", status.0.version),
        })
    }

    async fn close(&self) {
        self.shutdown.cancel();
        let compactor = self
            .compactor
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(compactor) = compactor {
            let _ = compactor.await;
        }
    }
}

/// Translates etcd-client errors by etcd's status messages.
fn translate(error: etcd_client::Error) -> Error {
    match &error {
        etcd_client::Error::GRpcStatus(status) => {
            let message = status.message();
            if message.contains("required revision has been compacted") {
                Error::Compacted {
                    requested: 0,
                    compacted: 0,
                }
            } else if message.contains("required revision is a future revision") {
                Error::FutureRevision {
                    requested: 0,
                    current: 0,
                }
            } else if message.contains("requested lease not found") {
                Error::LeaseNotFound(0)
            } else if message.contains("lease already exists") {
                Error::LeaseAlreadyExists(0)
            } else if message.contains("key not found") {
                Error::KeyNotFound
            } else if message.contains("request is too large") {
                Error::TooLarge(message.trim_start_matches("etcdserver: ").to_string())
            } else if status.code() == tonic::Code::InvalidArgument
                || message.contains("duplicate key")
            {
                Error::InvalidArgument(message.trim_start_matches("etcdserver: ").to_string())
            } else if status.code() == tonic::Code::Unavailable
                || status.code() == tonic::Code::DeadlineExceeded
                || retry::retriable(&error, true)
                // etcd's own deadline for a proposal (a leader election under way).
                || message.contains("context deadline exceeded")
            {
                Error::unavailable(format!("etcd is unavailable: {message}"), error)
            } else {
                Error::backend(format!("etcd: {message}"), error)
            }
        }
        etcd_client::Error::LeaseKeepAliveError(message) if message.contains("lease not found") => {
            Error::LeaseNotFound(0)
        }
        etcd_client::Error::TransportError(_)
        | etcd_client::Error::IoError(_)
        | etcd_client::Error::InvalidUri(_) => {
            Error::unavailable(format!("cannot reach etcd: {error}"), error)
        }
        _ => Error::backend(format!("etcd: {error}"), error),
    }
}
