//! rudder-apiserver: the Kubernetes REST API over the storage interface.
//!
//! Not built yet. It will hold the HTTPS server and filter chain (authentication, audit,
//! authorization), the generic registry store with one `Strategy` per resource, the body codecs
//! (JSON, YAML, protobuf, Table), discovery, OpenAPI and the patch engines. It depends on
//! `rudder-storage` and `rudder-admission`, never on a storage driver directly.
