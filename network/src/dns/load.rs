//! A UDP load generator for a DNS server, behind `rudder bench network`: `concurrency`
//! workers, each with its own socket, send A queries for the given names in turn for
//! `duration`, each waiting for its reply (closed loop) up to [`QUERY_TIMEOUT`]. The
//! [`Report`] counts replies by code and gives the latency percentiles of the answered ones.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use hickory_proto::op::{Header, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};
use tokio::net::UdpSocket;

/// How long a worker waits for one reply before counting a timeout.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(1);

/// What a load run measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Queries sent.
    pub sent: u64,
    /// Replies with NOERROR.
    pub noerror: u64,
    /// Replies with NXDOMAIN.
    pub nxdomain: u64,
    /// Replies with any other code (SERVFAIL, REFUSED, …).
    pub other: u64,
    /// Queries without a usable reply: timeouts, socket errors, malformed replies.
    pub errors: u64,
    /// Replies with TC set (counted in their code too).
    pub truncated: u64,
    /// From the first query to the last reply.
    pub elapsed: Duration,
    /// Latency percentiles of the replies.
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Report {
    /// Replies received, of any code.
    pub fn answered(&self) -> u64 {
        self.noerror + self.nxdomain + self.other
    }

    /// Replies per second.
    pub fn qps(&self) -> f64 {
        let seconds = self.elapsed.as_secs_f64();
        if seconds > 0.0 {
            self.answered() as f64 / seconds
        } else {
            0.0
        }
    }
}

/// What one worker saw; latencies in microseconds.
#[derive(Default)]
struct Tally {
    report: Report,
    latencies: Vec<u32>,
}

/// Loads `server` with A queries for `names` (unparsable ones are skipped) from
/// `concurrency` workers for `duration`.
pub async fn run(
    server: SocketAddr,
    names: Vec<String>,
    concurrency: usize,
    duration: Duration,
) -> Report {
    let queries: Vec<Query> = names
        .iter()
        .filter_map(|name| {
            let mut name = Name::from_ascii(name.trim()).ok()?;
            name.set_fqdn(true);
            Some(Query::query(name, RecordType::A))
        })
        .collect();
    if queries.is_empty() {
        return Report::default();
    }
    let started = Instant::now();
    let deadline = started + duration;
    let workers: Vec<_> = (0..concurrency.max(1))
        .map(|worker| {
            let queries = queries.clone();
            tokio::spawn(async move { work(server, queries, worker, deadline).await })
        })
        .collect();
    let mut total = Tally::default();
    for worker in workers {
        let tally = match worker.await {
            Ok(tally) => tally,
            Err(_) => Tally {
                report: Report {
                    errors: 1,
                    ..Report::default()
                },
                latencies: Vec::new(),
            },
        };
        let (into, from) = (&mut total.report, tally.report);
        into.sent += from.sent;
        into.noerror += from.noerror;
        into.nxdomain += from.nxdomain;
        into.other += from.other;
        into.errors += from.errors;
        into.truncated += from.truncated;
        total.latencies.extend(tally.latencies);
    }
    let mut report = total.report;
    report.elapsed = started.elapsed();
    let mut latencies = total.latencies;
    latencies.sort_unstable();
    let percentile = |p: usize| {
        let index = (latencies.len() * p / 100).min(latencies.len().saturating_sub(1));
        latencies.get(index).map_or(Duration::ZERO, |micros| {
            Duration::from_micros(u64::from(*micros))
        })
    };
    report.p50 = percentile(50);
    report.p99 = percentile(99);
    report.max = latencies.last().map_or(Duration::ZERO, |micros| {
        Duration::from_micros(u64::from(*micros))
    });
    report
}

async fn work(server: SocketAddr, queries: Vec<Query>, worker: usize, deadline: Instant) -> Tally {
    let mut tally = Tally::default();
    let local: SocketAddr = match server.ip() {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = match UdpSocket::bind(local).await {
        Ok(socket) => socket,
        Err(_) => {
            tally.report.errors += 1;
            return tally;
        }
    };
    if socket.connect(server).await.is_err() {
        tally.report.errors += 1;
        return tally;
    }
    let mut buffer = vec![0u8; usize::from(u16::MAX)];
    let mut next = worker;
    while Instant::now() < deadline {
        let query = &queries[next % queries.len()];
        next = next.wrapping_add(1);
        let id: u16 = rand::random();
        let mut message = Message::new();
        message
            .set_id(id)
            .set_message_type(MessageType::Query)
            .set_op_code(OpCode::Query)
            .set_recursion_desired(true)
            .add_query(query.clone());
        let Ok(bytes) = message.to_vec() else {
            tally.report.errors += 1;
            continue;
        };
        let sent = Instant::now();
        tally.report.sent += 1;
        if socket.send(&bytes).await.is_err() {
            tally.report.errors += 1;
            // A refused port (ICMP) shows on the next call: don't spin on it.
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        let reply = tokio::time::timeout(QUERY_TIMEOUT, async {
            loop {
                let len = socket.recv(&mut buffer).await?;
                // A late reply to an earlier, timed-out query is skipped.
                let header = Header::read(&mut BinDecoder::new(&buffer[..len]));
                if let Ok(header) = header {
                    if header.id() == id && header.message_type() == MessageType::Response {
                        return std::io::Result::Ok(header);
                    }
                }
            }
        })
        .await;
        match reply {
            Ok(Ok(reply)) => {
                let micros = u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX);
                tally.latencies.push(micros);
                if reply.truncated() {
                    tally.report.truncated += 1;
                }
                match reply.response_code() {
                    ResponseCode::NoError => tally.report.noerror += 1,
                    ResponseCode::NXDomain => tally.report.nxdomain += 1,
                    _ => tally.report.other += 1,
                }
            }
            Ok(Err(_)) => {
                tally.report.errors += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err(_) => tally.report.errors += 1,
        }
    }
    tally
}
