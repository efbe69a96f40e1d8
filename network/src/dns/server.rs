//! The sockets: one UDP socket and one TCP listener on the same address, served until
//! shutdown, every query answered from the current [`Records`] of the watch channel.
//!
//! No client can hold up the others: names of the zone are answered inline from memory by the
//! UDP loop, which never waits on anything else; forwarded queries run in tasks of their own,
//! at most `max_forwards` at once (beyond it they get SERVFAIL at once); each TCP connection
//! is a task of its own, at most `max_tcp_connections` of them (further ones are closed at
//! once), which must deliver each query — and take each reply — within `tcp_idle_timeout`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hickory_proto::op::ResponseCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{watch, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::forward::Forwarder;
use super::wire::{self, Action, Request, Transport, MAX_MESSAGE};
use super::{Config, Records};

/// How many times a port 0 listen address is tried for a port free for both UDP and TCP.
const BIND_ATTEMPTS: usize = 16;

/// A bound DNS server, ready to [`run`](Server::run).
#[derive(Debug)]
pub struct Server {
    config: Config,
    udp: UdpSocket,
    tcp: TcpListener,
    local_addr: SocketAddr,
}

/// What every task of a running server shares.
struct Shared {
    ttl: u32,
    forwarding: bool,
    forwarder: Forwarder,
    forwards: Arc<Semaphore>,
    tcp_idle_timeout: Duration,
    records: watch::Receiver<Arc<Records>>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

impl Server {
    /// Binds UDP on `config.listen`, then TCP on the same address and port (with port 0, the
    /// port UDP got).
    pub async fn bind(config: Config) -> anyhow::Result<Server> {
        let attempts = if config.listen.port() == 0 {
            BIND_ATTEMPTS
        } else {
            1
        };
        let mut failure = None;
        for _ in 0..attempts {
            let udp = UdpSocket::bind(config.listen)
                .await
                .with_context(|| format!("binding DNS on UDP {}", config.listen))?;
            let local_addr = udp.local_addr().context("the DNS UDP socket's address")?;
            match TcpListener::bind(local_addr).await {
                Ok(tcp) => {
                    return Ok(Server {
                        config,
                        udp,
                        tcp,
                        local_addr,
                    })
                }
                Err(error) => failure = Some((local_addr, error)),
            }
        }
        match failure {
            Some((addr, error)) => Err(error).context(format!("binding DNS on TCP {addr}")),
            None => anyhow::bail!("binding DNS on {}", config.listen),
        }
    }

    /// The address both sockets are bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown`, answering from the latest value of `records`.
    pub async fn run(
        self,
        records: watch::Receiver<Arc<Records>>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let config = self.config;
        let zone = records.borrow().zone().to_ascii();
        let configured = format!("{}.", config.cluster_domain.trim_end_matches('.'));
        if !zone.eq_ignore_ascii_case(&configured) {
            tracing::warn!(%zone, %configured, "the DNS records are for another zone");
        }
        tracing::info!(addr = %self.local_addr, %zone, upstreams = ?config.upstreams, "cluster DNS serving");
        let shared = Arc::new(Shared {
            ttl: config.ttl,
            forwarding: !config.upstreams.is_empty(),
            forwarder: Forwarder::new(config.upstreams.clone(), config.forward_timeout),
            forwards: Arc::new(Semaphore::new(config.max_forwards.max(1))),
            tcp_idle_timeout: config.tcp_idle_timeout,
            records,
            shutdown,
            tasks: TaskTracker::new(),
        });
        let connections = Arc::new(Semaphore::new(config.max_tcp_connections.max(1)));
        tokio::join!(
            serve_udp(Arc::new(self.udp), shared.clone()),
            serve_tcp(self.tcp, connections, shared.clone()),
        );
        shared.tasks.close();
        shared.tasks.wait().await;
        Ok(())
    }
}

impl Shared {
    fn records(&self) -> Arc<Records> {
        self.records.borrow().clone()
    }

    /// The upstreams' reply for the client, or SERVFAIL.
    async fn forward(&self, request: &Request) -> Option<Vec<u8>> {
        match self.forwarder.forward(request).await {
            Some(reply) => request.relay(reply),
            None => request.reply(ResponseCode::ServFail, None),
        }
    }
}

async fn serve_udp(socket: Arc<UdpSocket>, shared: Arc<Shared>) {
    let mut buffer = vec![0u8; MAX_MESSAGE];
    loop {
        let received = tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            received = socket.recv_from(&mut buffer) => received,
        };
        let (len, peer) = match received {
            Ok(received) => received,
            Err(error) => {
                tracing::debug!(%error, "DNS UDP receive");
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
        };
        let records = shared.records();
        let action = wire::process(
            &buffer[..len],
            &records,
            shared.ttl,
            shared.forwarding,
            Transport::Udp,
        );
        match action {
            Action::Reply(reply) => send(&socket, &reply, peer).await,
            Action::Drop => {}
            Action::Forward(request) => match shared.forwards.clone().try_acquire_owned() {
                Ok(permit) => {
                    let socket = socket.clone();
                    let task = shared.clone();
                    shared.tasks.spawn(async move {
                        let _permit = permit;
                        tokio::select! {
                            _ = task.shutdown.cancelled() => {}
                            reply = task.forward(&request) => if let Some(reply) = reply {
                                send(&socket, &reply, peer).await;
                            },
                        }
                    });
                }
                Err(_) => {
                    tracing::debug!(%peer, "too many DNS forwards in flight");
                    if let Some(reply) = request.reply(ResponseCode::ServFail, None) {
                        send(&socket, &reply, peer).await;
                    }
                }
            },
        }
    }
}

async fn send(socket: &UdpSocket, reply: &[u8], peer: SocketAddr) {
    if let Err(error) = socket.send_to(reply, peer).await {
        tracing::debug!(%peer, %error, "DNS UDP send");
    }
}

async fn serve_tcp(listener: TcpListener, connections: Arc<Semaphore>, shared: Arc<Shared>) {
    loop {
        let accepted = tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors, typically: give connections time to end.
                tracing::debug!(%error, "DNS TCP accept");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "too many DNS TCP connections");
            continue;
        };
        let task = shared.clone();
        shared.tasks.spawn(async move {
            let _permit = permit;
            tokio::select! {
                _ = task.shutdown.cancelled() => {}
                _ = connection(stream, &task) => {}
            }
        });
    }
}

/// One TCP connection: length-prefixed queries answered in turn until the client goes quiet.
async fn connection(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_nodelay(true);
    let idle = shared.tcp_idle_timeout;
    loop {
        let read = tokio::time::timeout(idle, async {
            let mut len = [0u8; 2];
            stream.read_exact(&mut len).await?;
            let mut message = vec![0u8; usize::from(u16::from_be_bytes(len))];
            stream.read_exact(&mut message).await?;
            std::io::Result::Ok(message)
        });
        let Ok(Ok(message)) = read.await else {
            return;
        };
        let records = shared.records();
        let action = wire::process(
            &message,
            &records,
            shared.ttl,
            shared.forwarding,
            Transport::Tcp,
        );
        drop(records);
        let reply = match action {
            Action::Reply(reply) => Some(reply),
            Action::Drop => return,
            Action::Forward(request) => match shared.forwards.clone().try_acquire_owned() {
                Ok(_permit) => shared.forward(&request).await,
                Err(_) => request.reply(ResponseCode::ServFail, None),
            },
        };
        let Some(reply) = reply else {
            return;
        };
        let Ok(len) = u16::try_from(reply.len()) else {
            return;
        };
        let mut framed = Vec::with_capacity(reply.len() + 2);
        framed.extend_from_slice(&len.to_be_bytes());
        framed.extend_from_slice(&reply);
        let written = tokio::time::timeout(idle, stream.write_all(&framed)).await;
        if !matches!(written, Ok(Ok(()))) {
            return;
        }
    }
}
