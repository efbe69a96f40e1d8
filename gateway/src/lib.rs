//! rudder-etcd-gateway: Rudder's storage interface served as the etcd v3 gRPC API — KV, Watch,
//! Lease, Maintenance (Status, Alarm) and Cluster (MemberList) — over any storage driver, so
//! `etcdctl` and etcd clients can use SQLite or PostgreSQL as if it were etcd (Rudder's answer to
//! kine, with the full KV/Watch/Lease surface instead of four fixed transaction shapes).
//!
//! It depends only on `rudder-storage`'s interface, never on a driver. Start at [`Gateway`];
//! each service lives in its own module, the type conversions in [`convert`], and the mapping
//! of storage errors to etcd's gRPC statuses in [`status`].

pub mod convert;
mod kv;
mod lease;
mod maintenance;
pub mod status;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::proto::{
    PbClusterServer, PbKvServer, PbLeaseServer, PbMaintenanceServer, PbWatchServer,
};
use rudder_storage::Storage;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// etcd refuses requests above 1.5 MiB (`--max-request-bytes`); so does the gateway.
pub const MAX_REQUEST_BYTES: usize = 1536 * 1024;
/// gRPC messages may exceed the request limit by 512 KiB (as in etcd) before they are refused
/// outright.
pub const MAX_GRPC_MESSAGE_BYTES: usize = MAX_REQUEST_BYTES + 512 * 1024;
/// The transport's own decoding limit, above the others so the checks above answer as etcd does.
const TRANSPORT_LIMIT_BYTES: usize = 16 * 1024 * 1024;
/// The etcd version the gateway reports: one whose watch progress requests kube-apiserver trusts.
pub const REPORTED_ETCD_VERSION: &str = "3.5.17";

/// What every service needs: the store and the identity the gateway reports.
#[derive(Clone)]
pub struct Gateway {
    pub(crate) store: Arc<dyn Storage>,
    pub(crate) identity: Arc<Identity>,
    tls: Option<Arc<Tls>>,
}

/// TLS for the gateway, as etcd's `--cert-file`, `--key-file` and `--trusted-ca-file`: with
/// a client CA, every client must present a certificate it issued (etcd's
/// `--client-cert-auth`).
#[derive(Clone, Debug)]
pub struct Tls {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    pub client_ca_pem: Option<Vec<u8>>,
}

/// The cluster and member this gateway presents itself as.
pub(crate) struct Identity {
    pub cluster_id: u64,
    pub member_id: u64,
    pub name: String,
    pub client_url: String,
    /// Interval of the periodic progress notifications a watch can ask for.
    pub progress_notify_interval: Duration,
}

/// A gateway serving in the background.
pub struct RunningGateway {
    /// The address it listens on (useful with port 0).
    pub local_addr: SocketAddr,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
}

impl RunningGateway {
    /// Stops serving and waits for the server to wind down.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        let _ = self.task.await;
    }
}

impl Gateway {
    /// A gateway over `store` that will present `client_url` as its member's client URL.
    pub fn new(store: Arc<dyn Storage>, client_url: String) -> Self {
        Self {
            tls: None,
            store,
            identity: Arc::new(Identity {
                cluster_id: 0x7275_6464_6572_0001,
                member_id: 0x7275_6464_6572_0002,
                name: "rudder".into(),
                client_url,
                progress_notify_interval: Duration::from_secs(600),
            }),
        }
    }

    /// Sets how often a watch that asked for `progress_notify` gets a progress notification
    /// (etcd's `--experimental-watch-progress-notify-interval`, 10 minutes by default).
    pub fn with_progress_notify_interval(mut self, interval: std::time::Duration) -> Self {
        let identity = Identity {
            cluster_id: self.identity.cluster_id,
            member_id: self.identity.member_id,
            name: self.identity.name.clone(),
            client_url: self.identity.client_url.clone(),
            progress_notify_interval: interval.max(std::time::Duration::from_millis(10)),
        };
        self.identity = Arc::new(identity);
        self
    }

    /// Serves TLS (and, with a client CA, requires client certificates).
    pub fn with_tls(mut self, tls: Tls) -> Self {
        self.tls = Some(Arc::new(tls));
        self
    }

    /// Serves on `listener` until `shutdown` is cancelled.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: CancellationToken,
    ) -> Result<(), tonic::transport::Error> {
        let limit = TRANSPORT_LIMIT_BYTES;
        // Small request/response messages: never let Nagle's algorithm hold them back.
        let incoming = tokio_stream::StreamExt::map(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            |stream| {
                if let Ok(stream) = &stream {
                    let _ = stream.set_nodelay(true);
                }
                stream
            },
        );
        // One span per RPC, named by its gRPC method (`/etcdserverpb.KV/Range`); the store's
        // calls nest inside it.
        let mut builder = tonic::transport::Server::builder()
            .trace_fn(|request| tracing::debug_span!("etcd.rpc", method = %request.uri().path()));
        if let Some(tls) = &self.tls {
            let mut config = tonic::transport::ServerTlsConfig::new().identity(
                tonic::transport::Identity::from_pem(&tls.cert_pem, &tls.key_pem),
            );
            if let Some(ca) = &tls.client_ca_pem {
                config = config.client_ca_root(tonic::transport::Certificate::from_pem(ca));
            }
            builder = builder.tls_config(config)?;
        }
        builder
            .add_service(PbKvServer::new(self.clone()).max_decoding_message_size(limit))
            .add_service(PbWatchServer::new(self.clone()).max_decoding_message_size(limit))
            .add_service(PbLeaseServer::new(self.clone()).max_decoding_message_size(limit))
            .add_service(PbMaintenanceServer::new(self.clone()).max_decoding_message_size(limit))
            .add_service(PbClusterServer::new(self).max_decoding_message_size(limit))
            .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
            .await
    }

    /// Binds `address` (port 0 picks one) and serves in the background.
    pub async fn spawn(
        store: Arc<dyn Storage>,
        address: SocketAddr,
    ) -> std::io::Result<RunningGateway> {
        Self::spawn_with(store, address, |gateway| gateway).await
    }

    /// As [`Gateway::spawn`], with the gateway adjusted by `configure` first.
    pub async fn spawn_with(
        store: Arc<dyn Storage>,
        address: SocketAddr,
        configure: impl FnOnce(Gateway) -> Gateway,
    ) -> std::io::Result<RunningGateway> {
        let listener = TcpListener::bind(address).await?;
        let local_addr = listener.local_addr()?;
        let gateway = configure(Gateway::new(store, format!("http://{local_addr}")));
        let gateway = gateway.advertising_scheme();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(gateway.serve(listener, shutdown.clone()));
        Ok(RunningGateway {
            local_addr,
            shutdown,
            task,
        })
    }

    /// The member's client URL says `https://` when the gateway serves TLS.
    pub fn advertising_scheme(mut self) -> Self {
        if self.tls.is_some() && self.identity.client_url.starts_with("http://") {
            let identity = Identity {
                cluster_id: self.identity.cluster_id,
                member_id: self.identity.member_id,
                name: self.identity.name.clone(),
                client_url: self.identity.client_url.replacen("http://", "https://", 1),
                progress_notify_interval: self.identity.progress_notify_interval,
            };
            self.identity = Arc::new(identity);
        }
        self
    }

    /// A response header at `revision`.
    pub(crate) fn header(&self, revision: i64) -> Option<etcd_client::proto::PbResponseHeader> {
        Some(etcd_client::proto::PbResponseHeader {
            cluster_id: self.identity.cluster_id,
            member_id: self.identity.member_id,
            revision,
            raft_term: 2,
        })
    }

    /// The store's current revision, for responses that carry no other.
    pub(crate) async fn current_revision(&self) -> Result<i64, tonic::Status> {
        let probe =
            rudder_storage::RangeRequest::new(rudder_storage::KeyRange::key(vec![0])).count_only();
        Ok(self
            .store
            .range(probe)
            .await
            .map_err(status::from_storage)?
            .revision)
    }
}
