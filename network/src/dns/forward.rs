//! Forwarding names that are not ours to the upstream resolvers, tried in order, each given
//! the configured timeout. A UDP query goes out over UDP from a fresh socket (a random source
//! port) with a fresh random id, and only a reply from that upstream carrying that id and the
//! same question is taken; a truncated UDP reply is asked again over TCP of the same upstream.
//! A TCP query goes out over TCP. The caller relays the reply with the client's id (see
//! [`Request::relay`](super::wire::Request::relay)); no usable reply from any upstream is
//! SERVFAIL.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use anyhow::Context;
use hickory_proto::op::{Header, MessageType, Query};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use super::wire::{Request, Transport, MAX_MESSAGE};

/// The upstreams and the time each gets.
#[derive(Debug, Clone)]
pub(super) struct Forwarder {
    upstreams: Vec<SocketAddr>,
    timeout: Duration,
}

impl Forwarder {
    pub(super) fn new(upstreams: Vec<SocketAddr>, timeout: Duration) -> Self {
        Self { upstreams, timeout }
    }

    /// The first upstream's reply to `request` (with the id the upstream was asked with, to
    /// be replaced by the caller), or `None` when none answered.
    pub(super) async fn forward(&self, request: &Request) -> Option<Vec<u8>> {
        let question = request.query()?;
        for upstream in &self.upstreams {
            let id: u16 = rand::random();
            let mut query = request.bytes.clone();
            let query_id = query.get_mut(..2)?;
            query_id.copy_from_slice(&id.to_be_bytes());
            let exchanged = match request.transport {
                Transport::Udp => self.udp(*upstream, &query, id, question).await,
                Transport::Tcp => self.tcp(*upstream, &query, id, question).await,
            };
            match exchanged {
                Ok(reply) => return Some(reply),
                Err(error) => {
                    tracing::debug!(%upstream, name = %question.name(), "forwarding: {error:#}");
                }
            }
        }
        None
    }

    async fn udp(
        &self,
        upstream: SocketAddr,
        query: &[u8],
        id: u16,
        question: &Query,
    ) -> anyhow::Result<Vec<u8>> {
        let local: SocketAddr = match upstream.ip() {
            IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let socket = UdpSocket::bind(local).await.context("binding")?;
        socket.connect(upstream).await.context("connecting")?;
        socket.send(query).await.context("sending")?;
        let mut buffer = vec![0u8; MAX_MESSAGE];
        let reply = tokio::time::timeout(self.timeout, async {
            loop {
                let len = socket.recv(&mut buffer).await.context("receiving")?;
                let reply = &buffer[..len];
                match matches(reply, id, question) {
                    Some(truncated) => return anyhow::Ok((reply.to_vec(), truncated)),
                    None => continue,
                }
            }
        })
        .await
        .context("timed out")??;
        match reply {
            (reply, false) => Ok(reply),
            (reply, true) => match self.tcp(upstream, query, id, question).await {
                Ok(full) => Ok(full),
                Err(error) => {
                    // The client can still retry over TCP itself.
                    tracing::debug!(%upstream, "retrying a truncated reply over TCP: {error:#}");
                    Ok(reply)
                }
            },
        }
    }

    async fn tcp(
        &self,
        upstream: SocketAddr,
        query: &[u8],
        id: u16,
        question: &Query,
    ) -> anyhow::Result<Vec<u8>> {
        let len = u16::try_from(query.len()).context("query too long")?;
        tokio::time::timeout(self.timeout, async {
            let mut stream = TcpStream::connect(upstream).await.context("connecting")?;
            let mut framed = Vec::with_capacity(query.len() + 2);
            framed.extend_from_slice(&len.to_be_bytes());
            framed.extend_from_slice(query);
            stream.write_all(&framed).await.context("sending")?;
            loop {
                let mut len = [0u8; 2];
                stream.read_exact(&mut len).await.context("receiving")?;
                let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
                stream.read_exact(&mut reply).await.context("receiving")?;
                if matches(&reply, id, question).is_some() {
                    return Ok(reply);
                }
            }
        })
        .await
        .context("timed out")?
    }
}

/// Whether `reply` answers the query sent with `id` for `question`: `Some(truncated)`. A reply
/// without a question is taken only as an error.
fn matches(reply: &[u8], id: u16, question: &Query) -> Option<bool> {
    let mut decoder = BinDecoder::new(reply);
    let header = Header::read(&mut decoder).ok()?;
    if header.id() != id || header.message_type() != MessageType::Response {
        return None;
    }
    if header.query_count() == 0 {
        let error = header.response_code() != hickory_proto::op::ResponseCode::NoError;
        return error.then_some(header.truncated());
    }
    let echoed = Query::read(&mut decoder).ok()?;
    let same = echoed.name() == question.name()
        && echoed.query_type() == question.query_type()
        && echoed.query_class() == question.query_class();
    same.then_some(header.truncated())
}

/// The `nameserver` addresses of a resolv.conf, on port 53.
pub fn resolv_conf_upstreams(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next()? == "nameserver").then_some(())?;
            // A scoped IPv6 address (fe80::1%eth0) cannot be parsed into an address alone.
            let ip: IpAddr = words.next()?.parse().ok()?;
            Some(SocketAddr::new(ip, 53))
        })
        .collect()
}
