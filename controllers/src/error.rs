//! The controller-manager's errors.

/// `Result` with the controller-manager's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a controller or the manager can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the API server failed.
    #[error("API request failed: {0}")]
    Api(#[from] kube::Error),

    /// An object is not what the controller can work with (a bad selector, a missing field).
    #[error("{0}")]
    Invalid(String),

    /// A shared informer could not hand out a subscription (kube-runtime's contract broke).
    #[error("the {kind} informer cannot be subscribed to")]
    NotShared { kind: &'static str },

    /// `--controllers` names a controller that does not exist.
    #[error("unknown controller {0:?} in --controllers (known: {1})")]
    UnknownController(String, String),
}

impl Error {
    /// Whether the API answered 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Api(kube::Error::Api(status)) if status.code == 404)
    }

    /// Whether the API answered 409 (a conflict or an existing object).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Api(kube::Error::Api(status)) if status.code == 409)
    }
}
