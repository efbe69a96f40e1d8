//! Cluster DNS: the names of Kubernetes' DNS-based service discovery spec, answered from an
//! in-memory index of the watched Services and EndpointSlices, and everything else forwarded to
//! the node's resolvers.
//!
//! The pieces, each in a file of its own:
//!
//! - [`Records`] (records.rs) is the immutable index built from one snapshot of the stores, and
//!   [`Records::lookup`] (answer.rs) turns a question into an authoritative answer or a verdict
//!   that the name is not ours;
//! - [`follow`] (follow.rs) rebuilds the index as the watched objects change, coalescing bursts;
//! - [`Server`] (server.rs) serves UDP and TCP on one address, with the request handling of
//!   wire.rs (parsing, EDNS, truncation, error codes) and the forwarding of forward.rs;
//! - [`load`] is a UDP load generator for `rudder bench network`.
//!
//! The zone is `<cluster_domain>.`; names are matched case-insensitively and answered with the
//! name as asked. Pod names follow the `pods insecure` convention: any dashed address under any
//! namespace resolves to that address.

mod answer;
mod follow;
mod forward;
pub mod load;
mod records;
mod server;
mod wire;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::time::Duration;

pub use answer::{Answer, Lookup};
pub use follow::{follow, COALESCE};
pub use forward::resolv_conf_upstreams;
pub use records::Records;
pub use server::Server;

/// The cluster domain when none is configured.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";

/// How the DNS server listens, what it serves and where it forwards.
#[derive(Debug, Clone)]
pub struct Config {
    /// UDP and TCP are both served on this address (port 0: one free port for both).
    pub listen: SocketAddr,
    /// The cluster domain, e.g. `cluster.local`; the [`Records`] given to [`Server::run`] are
    /// expected to be built for the same domain.
    pub cluster_domain: String,
    /// Resolvers for names outside the zone, tried in order; none: such names are REFUSED.
    pub upstreams: Vec<SocketAddr>,
    /// The TTL of every answer from the zone (and the SOA minimum).
    pub ttl: u32,
    /// How long one upstream gets to answer before the next is tried.
    pub forward_timeout: Duration,
    /// Forwarded queries in flight at once; beyond it queries are answered SERVFAIL.
    pub max_forwards: usize,
    /// TCP connections served at once; further connections are closed at once.
    pub max_tcp_connections: usize,
    /// A TCP connection with no complete query for this long is closed.
    pub tcp_idle_timeout: Duration,
}

impl Config {
    /// The defaults: `cluster.local`, TTL 5 s, 2 s per upstream, 256 forwards in flight, 256
    /// TCP connections idle for at most 10 s.
    pub fn new(listen: SocketAddr, upstreams: Vec<SocketAddr>) -> Self {
        Self {
            listen,
            cluster_domain: DEFAULT_CLUSTER_DOMAIN.to_string(),
            upstreams,
            ttl: 5,
            forward_timeout: Duration::from_secs(2),
            max_forwards: 256,
            max_tcp_connections: 256,
            tcp_idle_timeout: Duration::from_secs(10),
        }
    }
}
