//! The one error type of the storage boundary. Drivers translate their own errors into it;
//! nothing from sqlx or etcd-client leaks through.

use crate::types::{LeaseId, Revision};

/// A boxed driver error kept as the source of a variant.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with the storage [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a storage call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The requested revision is below the compacted revision: its history is gone.
    #[error(
        "required revision {requested} has been compacted (compacted revision is {compacted})"
    )]
    Compacted {
        requested: Revision,
        compacted: Revision,
    },

    /// The requested revision is above the store's current revision.
    #[error("required revision {requested} is a future revision (current revision is {current})")]
    FutureRevision {
        requested: Revision,
        current: Revision,
    },

    /// The lease does not exist (never granted, revoked or expired).
    #[error("requested lease {0} not found")]
    LeaseNotFound(LeaseId),

    /// A lease with the requested id already exists.
    #[error("lease {0} already exists")]
    LeaseAlreadyExists(LeaseId),

    /// A put with `ignore_value` or `ignore_lease` named a key that does not exist.
    #[error("key not found")]
    KeyNotFound,

    /// The request is malformed (for example a transaction that writes one key twice).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A key or value is over the store's limit (as etcd's "request is too large").
    #[error("request is too large: {0}")]
    TooLarge(String),

    /// The watcher fell too far behind the event stream and was ended; re-list and re-watch.
    #[error("watcher fell too far behind ({0}); re-list and watch again")]
    WatcherTooSlow(String),

    /// The storage URL or an option in it is wrong.
    #[error("{0}")]
    Config(String),

    /// The backend could not be reached, or refused us (network, TLS, credentials).
    #[error("storage unavailable: {message}")]
    Unavailable {
        message: String,
        #[source]
        source: Option<BoxError>,
    },

    /// Any other failure inside the backend.
    #[error("storage backend error: {message}")]
    Backend {
        message: String,
        #[source]
        source: Option<BoxError>,
    },

    /// The store has been closed.
    #[error("storage is closed")]
    Closed,
}

impl Error {
    /// A backend failure with its cause.
    pub fn backend(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Backend {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// An unreachable or refusing backend with its cause.
    pub fn unavailable(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Unavailable {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// A copy for handing one failure to several waiters: the same variant and message, without
    /// the source (which cannot be cloned).
    pub fn clone_plain(&self) -> Self {
        match self {
            Self::Compacted {
                requested,
                compacted,
            } => Self::Compacted {
                requested: *requested,
                compacted: *compacted,
            },
            Self::FutureRevision { requested, current } => Self::FutureRevision {
                requested: *requested,
                current: *current,
            },
            Self::LeaseNotFound(id) => Self::LeaseNotFound(*id),
            Self::LeaseAlreadyExists(id) => Self::LeaseAlreadyExists(*id),
            Self::KeyNotFound => Self::KeyNotFound,
            Self::InvalidArgument(message) => Self::InvalidArgument(message.clone()),
            Self::TooLarge(message) => Self::TooLarge(message.clone()),
            Self::WatcherTooSlow(message) => Self::WatcherTooSlow(message.clone()),
            Self::Config(message) => Self::Config(message.clone()),
            Self::Unavailable { message, .. } => Self::Unavailable {
                message: message.clone(),
                source: None,
            },
            Self::Backend { message, .. } => Self::Backend {
                message: message.clone(),
                source: None,
            },
            Self::Closed => Self::Closed,
        }
    }
}
