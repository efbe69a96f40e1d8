//! Storage errors as etcd's gRPC statuses: the same codes and messages etcd sends, so etcd
//! clients recognise them (etcd-client and client-go match on the message text).

use rudder_storage::Error;
use tonic::Status;

pub const COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";
pub const FUTURE_REVISION: &str = "etcdserver: mvcc: required revision is a future revision";
pub const LEASE_NOT_FOUND: &str = "etcdserver: requested lease not found";
pub const LEASE_EXISTS: &str = "etcdserver: lease already exists";
pub const KEY_NOT_FOUND: &str = "etcdserver: key not found";
pub const EMPTY_KEY: &str = "etcdserver: key is not provided";
pub const TOO_LARGE: &str = "etcdserver: request is too large";
pub const TOO_MANY_OPS: &str = "etcdserver: too many operations in txn request";
pub const VALUE_PROVIDED: &str = "etcdserver: value is provided";
pub const LEASE_PROVIDED: &str = "etcdserver: lease is provided";

/// Maps a storage error to the status etcd would send for it.
pub fn from_storage(error: Error) -> Status {
    match error {
        Error::Compacted { .. } => Status::out_of_range(COMPACTED),
        Error::FutureRevision { .. } => Status::out_of_range(FUTURE_REVISION),
        Error::LeaseNotFound(_) => Status::not_found(LEASE_NOT_FOUND),
        Error::LeaseAlreadyExists(_) => Status::failed_precondition(LEASE_EXISTS),
        Error::KeyNotFound => Status::invalid_argument(KEY_NOT_FOUND),
        Error::TooLarge(_) => Status::invalid_argument(TOO_LARGE),
        Error::InvalidArgument(message) => {
            Status::invalid_argument(format!("etcdserver: {message}"))
        }
        Error::Unavailable { message, .. } => Status::unavailable(format!("etcdserver: {message}")),
        Error::Closed => Status::unavailable("etcdserver: server stopped"),
        Error::WatcherTooSlow(message) => {
            Status::resource_exhausted(format!("etcdserver: {message}"))
        }
        other => {
            tracing::warn!(error = %other, "storage failure behind the etcd gateway");
            Status::internal(format!("etcdserver: {other}"))
        }
    }
}

/// An RPC the gateway does not offer, said plainly.
pub fn unsupported(what: &str) -> Status {
    Status::unimplemented(format!(
        "etcdserver: {what} is not supported by Rudder's etcd gateway"
    ))
}
