//! rudder-apiserver: the Kubernetes REST API over the storage interface.
//!
//! A request goes: TLS accept (`tls`, client certificate captured) → authentication
//! (`authn`: x509, token file, ServiceAccount and bootstrap tokens, impersonation) → audit
//! (`audit`) → authorization (`authz`: system:masters, Node, RBAC) → decoding (`codec`: JSON, YAML,
//! protobuf via `protobuf`) → the registry (`registry`: one generic store; each kind's rules in
//! its file under `kinds`, which draw on `defaults`, `validation` and `tables`; admission from
//! `rudder-admission`) → stored values (`values`: protobuf or JSON, then encryption at rest) →
//! encoding (objects, Tables from `tables`, watch streams) → a response, with every failure
//! a `Status` body mapped once in `error`. What is served is one table, `catalog`.
//!
//! It depends on `rudder-storage` (the trait, never a driver) and `rudder-admission`. Start at
//! `server::start`, then `http::resources`, then `registry::store`. docs/apiserver.md has the
//! flows.

pub mod admission_config;
pub mod aggregator;
pub mod audit;
pub mod authn;
pub mod authz;
pub mod background;
pub mod catalog;
pub mod codec;
mod connection;
pub mod crd;
pub mod data_dir;
pub mod defaults;
pub mod error;
pub mod http;
pub mod json;
pub mod kinds;
pub mod limits;
pub mod openapi;
pub mod patch;
pub mod pki;
pub mod protobuf;
pub mod quota;
pub mod registry;
pub mod request;
pub mod selectors;
pub mod server;
pub mod service_endpoint;
pub mod tables;
pub mod tls;
mod tracing_context;
pub mod validation;
pub mod values;
pub mod webhooks;

pub use limits::Limits;
pub use server::{Config, Running};
