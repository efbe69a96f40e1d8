//! Service networking in the node agent, both driven by Services and EndpointSlices watched
//! through the API like any other client:
//!
//! - [`proxy`]: kube-proxy's role — ClusterIP, NodePort, traffic policies and session affinity
//!   programmed into one nftables table of Rudder's own, updated by diffed transactions;
//! - [`dns`]: cluster DNS — upstream's DNS spec for Services and pods, served from memory,
//!   everything else forwarded to the node's resolvers.
//!
//! [`watch`] runs the one pair of reflectors both share.

pub mod dns;
pub mod node;
pub mod proxy;
mod watch;

pub use watch::{watch, Watched};
