//! The connection to one KMS v2 plugin: a thread of its own running a small tokio runtime
//! with the gRPC client (over the plugin's unix socket, connected on first use and again
//! after a failure) and the `Status` poll.
//!
//! Values are sealed and opened synchronously, from the registry's async tasks, the watch
//! cache and the tools. Sealing never needs the plugin (the seed is cached); opening a value
//! whose DEK source is not cached asks the plugin to `Decrypt` it and waits for the answer
//! (at most the configured timeout), inside `tokio::task::block_in_place` when called from a
//! multi-threaded runtime. Because the gRPC client runs on this thread's runtime, not the
//! caller's, the wait cannot starve the call it waits for. The thread ends when the
//! provider that owns it is dropped (a reloaded configuration replaced it).
//!
//! ```text
//!  open() ──Decrypt──▶ request channel ──▶ kms thread: gRPC over unix socket ──▶ plugin
//!    ▲                                            │
//!    └──────── reply (std channel, bounded wait) ◀┘     + Status every 1 min (10 s failing)
//!  health() ──────────▶ request channel ──▶ the last check if recent, else Status now
//! ```
//!
//! Every call to the plugin is timed into `apiserver_envelope_encryption_kms_operations_latency_seconds`.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};

use super::api::key_management_service_client::KeyManagementServiceClient;
use super::api::{DecryptRequest, EncryptRequest, EncryptResponse, StatusRequest, StatusResponse};
use super::metrics::{grpc_code_name, KmsMetrics};
use super::Shared;

/// How often a provider asks its plugin's `Status`, and how long a health check reuses the
/// last answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusIntervals {
    /// Between polls while the plugin is healthy (upstream's
    /// `kmsv2PluginHealthzPositiveInterval`, 1 min).
    pub healthy_poll: Duration,
    /// Between polls while it is not (`kmsv2PluginHealthzNegativeInterval`, 10 s).
    pub failing_poll: Duration,
    /// How long a health check answers with a healthy last check
    /// (`kmsPluginHealthzPositiveTTL`, 20 s).
    pub healthy_ttl: Duration,
    /// How long a health check answers with a failed last check (`…NegativeTTL`, 3 s).
    pub failing_ttl: Duration,
}

impl Default for StatusIntervals {
    /// Upstream's intervals.
    fn default() -> Self {
        Self {
            healthy_poll: Duration::from_secs(60),
            failing_poll: Duration::from_secs(10),
            healthy_ttl: Duration::from_secs(20),
            failing_ttl: Duration::from_secs(3),
        }
    }
}

impl StatusIntervals {
    /// Upstream's intervals, none longer than `limit` (tests that cannot wait a minute).
    pub fn at_most(limit: Duration) -> Self {
        let upstream = Self::default();
        Self {
            healthy_poll: upstream.healthy_poll.min(limit),
            failing_poll: upstream.failing_poll.min(limit),
            healthy_ttl: upstream.healthy_ttl.min(limit),
            failing_ttl: upstream.failing_ttl.min(limit),
        }
    }

    fn poll_after(&self, result: &Result<(), String>) -> Duration {
        if result.is_ok() {
            self.healthy_poll
        } else {
            self.failing_poll
        }
    }

    fn ttl_of(&self, result: &Result<(), String>) -> Duration {
        if result.is_ok() {
            self.healthy_ttl
        } else {
            self.failing_ttl
        }
    }
}

/// The async side: one plugin's gRPC client with the configured timeout on every call.
#[derive(Clone)]
pub(super) struct Plugin {
    client: KeyManagementServiceClient<Channel>,
    endpoint: String,
    timeout: Duration,
    /// The provider's name, as the latency metric labels it.
    provider: String,
    metrics: Arc<KmsMetrics>,
}

impl Plugin {
    /// A client of the plugin listening on `socket`; it connects on the first call. Must be
    /// called inside a tokio runtime.
    fn new(socket: PathBuf, timeout: Duration, shared: &Shared) -> Self {
        let endpoint = format!("unix://{}", socket.display());
        let connector = tower::service_fn(move |_: http::Uri| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(socket).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        });
        // The URI only names the authority ("localhost", as upstream); the connector dials.
        let channel = Endpoint::from_static("http://localhost")
            .connect_timeout(timeout)
            .connect_with_connector_lazy(connector);
        Self {
            client: KeyManagementServiceClient::new(channel),
            endpoint,
            timeout,
            provider: shared.name.clone(),
            metrics: shared.metrics.clone(),
        }
    }

    pub(super) async fn status(&self) -> Result<StatusResponse, String> {
        let mut client = self.client.clone();
        self.call("Status", client.status(StatusRequest {})).await
    }

    pub(super) async fn encrypt(&self, request: EncryptRequest) -> Result<EncryptResponse, String> {
        let mut client = self.client.clone();
        self.call("Encrypt", client.encrypt(request)).await
    }

    async fn decrypt(&self, request: DecryptRequest) -> Result<Vec<u8>, String> {
        let mut client = self.client.clone();
        self.call("Decrypt", client.decrypt(request))
            .await
            .map(|response| response.plaintext)
    }

    async fn call<T>(
        &self,
        method: &str,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, String> {
        let started = Instant::now();
        let result = tokio::time::timeout(self.timeout, call).await;
        // A call cut by the timeout is what gRPC reports for a context's deadline.
        let code = match &result {
            Ok(Ok(_)) => "OK",
            Ok(Err(status)) => grpc_code_name(status.code()),
            Err(_) => "DeadlineExceeded",
        };
        self.metrics.operation(
            &self.provider,
            &format!("/v2.KeyManagementService/{method}"),
            code,
            started.elapsed(),
        );
        match result {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(format!(
                "the KMS v2 plugin at {} failed {method}: {:?}: {}",
                self.endpoint,
                status.code(),
                status.message()
            )),
            Err(_) => Err(format!(
                "the KMS v2 plugin at {} did not answer {method} within {:?}",
                self.endpoint, self.timeout
            )),
        }
    }
}

/// What the synchronous side asks of the plugin thread.
enum Request {
    Decrypt {
        request: DecryptRequest,
        reply: std::sync::mpsc::SyncSender<Result<Vec<u8>, String>>,
    },
    /// Ask `Status` now (and rotate the seed if its key ID changed).
    Refresh {
        reply: std::sync::mpsc::SyncSender<Result<(), String>>,
    },
    /// The health check: the last check's outcome while it is recent, else a new check.
    Health {
        reply: tokio::sync::oneshot::Sender<Result<(), String>>,
    },
}

/// The synchronous side: how the provider reaches its plugin thread.
pub(super) struct Handle {
    requests: mpsc::UnboundedSender<Request>,
    endpoint: String,
    timeout: Duration,
}

impl Handle {
    /// Starts the plugin thread for `shared`'s provider and waits (up to twice the timeout:
    /// `Status`, then `Encrypt` of the first seed) for its first `Status` check. That check
    /// failing is not fatal, as upstream: the thread asks again every 10 s, and until it
    /// succeeds, values cannot be sealed or opened.
    pub(super) fn start(
        socket: PathBuf,
        timeout: Duration,
        intervals: StatusIntervals,
        shared: Arc<Shared>,
    ) -> Result<Self, String> {
        let endpoint = format!("unix://{}", socket.display());
        let (requests, receiver) = mpsc::unbounded_channel();
        let (primed, first_check) = std::sync::mpsc::sync_channel(1);
        let name = shared.name.clone();
        std::thread::Builder::new()
            .name(format!("kms-{name}"))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = primed.send(Err(format!("cannot start its runtime: {error}")));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let plugin = Plugin::new(socket, timeout, &shared);
                    serve(plugin, intervals, shared, receiver, primed).await;
                });
            })
            .map_err(|error| format!("cannot start the KMS plugin thread: {error}"))?;
        let handle = Self {
            requests,
            endpoint,
            timeout,
        };
        match wait(&first_check, 2 * timeout + Duration::from_secs(1)) {
            Some(Ok(())) => {}
            Some(Err(error)) => {
                tracing::error!(kms = %name, %error, "the KMS v2 plugin failed its first health check; values cannot be sealed or opened until it passes (checked every 10 s)");
            }
            None => {
                tracing::error!(kms = %name, "the KMS v2 plugin's first health check did not finish in time");
            }
        }
        Ok(handle)
    }

    /// Decrypts a DEK source with the plugin, waiting at most the timeout.
    pub(super) fn decrypt(&self, request: DecryptRequest) -> Result<Vec<u8>, String> {
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        self.requests
            .send(Request::Decrypt { request, reply })
            .map_err(|_| self.gone())?;
        wait(&answer, self.timeout + Duration::from_secs(1))
            .unwrap_or_else(|| Err(self.late("Decrypt")))
    }

    /// Asks `Status` now, rotating the seed if the key ID changed (tests, and tools that
    /// want the plugin's current key).
    pub(super) fn refresh(&self) -> Result<(), String> {
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        self.requests
            .send(Request::Refresh { reply })
            .map_err(|_| self.gone())?;
        wait(&answer, 2 * self.timeout + Duration::from_secs(1))
            .unwrap_or_else(|| Err(self.late("Status")))
    }

    /// The health check's answer, waiting at most for one `Status` check (and the `Encrypt`
    /// of a new seed).
    pub(super) async fn health(&self) -> Result<(), String> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.requests
            .send(Request::Health { reply })
            .map_err(|_| self.gone())?;
        match tokio::time::timeout(2 * self.timeout + Duration::from_secs(1), answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.gone()),
            Err(_) => Err(self.late("Status")),
        }
    }

    fn gone(&self) -> String {
        format!(
            "the connection to the KMS v2 plugin at {} has stopped",
            self.endpoint
        )
    }

    fn late(&self, method: &str) -> String {
        format!(
            "the KMS v2 plugin at {} did not answer {method} within {:?}",
            self.endpoint, self.timeout
        )
    }
}

/// Waits for an answer from the plugin thread without stalling a multi-threaded runtime's
/// other tasks (its worker is handed over while this thread blocks).
fn wait<T>(answer: &std::sync::mpsc::Receiver<T>, limit: Duration) -> Option<T> {
    let receive = || answer.recv_timeout(limit).ok();
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(receive)
        }
        _ => receive(),
    }
}

/// The plugin thread: the first check, then requests and the `Status` poll until every
/// [`Handle`] is gone.
async fn serve(
    plugin: Plugin,
    intervals: StatusIntervals,
    shared: Arc<Shared>,
    mut requests: mpsc::UnboundedReceiver<Request>,
    primed: std::sync::mpsc::SyncSender<Result<(), String>>,
) {
    let first = shared.refresh(&plugin).await;
    let mut next = tokio::time::Instant::now() + intervals.poll_after(&first);
    let _ = primed.send(first);
    loop {
        tokio::select! {
            request = requests.recv() => match request {
                None => return,
                Some(Request::Decrypt { request, reply }) => {
                    let plugin = plugin.clone();
                    tokio::spawn(async move {
                        let _ = reply.send(plugin.decrypt(request).await);
                    });
                }
                Some(Request::Refresh { reply }) => {
                    let result = shared.refresh(&plugin).await;
                    next = tokio::time::Instant::now() + intervals.poll_after(&result);
                    let _ = reply.send(result);
                }
                Some(Request::Health { reply }) => {
                    let recent = shared
                        .last_check()
                        .filter(|last| last.at.elapsed() < intervals.ttl_of(&last.result));
                    let result = match recent {
                        Some(last) => last.result,
                        None => {
                            let result = shared.refresh(&plugin).await;
                            next = tokio::time::Instant::now() + intervals.poll_after(&result);
                            result
                        }
                    };
                    let _ = reply.send(result);
                }
            },
            () = tokio::time::sleep_until(next) => {
                let result = shared.refresh(&plugin).await;
                let after = intervals.poll_after(&result);
                if let Err(error) = &result {
                    tracing::warn!(kms = %shared.name, %error, retry_in = ?after, "the KMS v2 plugin failed its health check");
                }
                next = tokio::time::Instant::now() + after;
            }
        }
    }
}
