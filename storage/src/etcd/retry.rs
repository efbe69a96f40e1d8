//! Retrying requests on the other members when one is gone, as etcd's own client does.
//!
//! The client balances over every endpoint the URL lists; a request sent to a member that has
//! just died fails — with "tcp connect error" when it never left (the connection was refused),
//! or with the connection closed under it. The first kind is safe to send again whatever the
//! request; the second only for reads, since a write may have been applied before the
//! connection went. Either is retried, with a short doubling pause, while less than
//! [`RETRY_FOR`] has passed since the first attempt; then the error goes to the caller
//! (as `Unavailable`).

use std::future::Future;
use std::time::{Duration, Instant};

/// How long a request keeps being retried on other members.
pub(super) const RETRY_FOR: Duration = Duration::from_secs(3);

/// Whether the request can be sent again: `idempotent` for reads.
pub(super) fn retriable(error: &etcd_client::Error, idempotent: bool) -> bool {
    let text = describe(error);
    let never_sent = text.contains("tcp connect error")
        || text.contains("Connection refused")
        || matches!(error, etcd_client::Error::TransportError(_));
    let connection_lost = text.contains("connection closed")
        || text.contains("transport error")
        || text.contains("connection reset")
        || text.contains("broken pipe")
        || text.contains("operation was canceled");
    never_sent || (idempotent && connection_lost)
}

/// The error with its whole source chain, for matching the transport's wording.
pub(super) fn describe(error: &etcd_client::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Runs `call` until it succeeds, fails in a way not worth retrying, or [`RETRY_FOR`] passes.
pub(super) async fn with_retry<T, F, Fut>(
    idempotent: bool,
    mut call: F,
) -> std::result::Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    let started = Instant::now();
    let mut pause = Duration::from_millis(10);
    loop {
        match call().await {
            Err(error) if retriable(&error, idempotent) && started.elapsed() < RETRY_FOR => {
                tracing::debug!(%error, "an etcd member did not take the request; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            result => return result,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: tonic::Code, message: &str) -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(tonic::Status::new(code, message))
    }

    #[test]
    fn only_requests_that_never_left_are_retried_when_they_write() {
        let refused = status(tonic::Code::Unavailable, "tcp connect error");
        let closed = status(tonic::Code::Cancelled, "operation was canceled");
        let timed_out = status(tonic::Code::Unavailable, "etcdserver: request timed out");
        assert!(retriable(&refused, false));
        assert!(retriable(&refused, true));
        assert!(!retriable(&closed, false));
        assert!(retriable(&closed, true));
        // etcd's own answer: the proposal may still commit, and a read would only wait again.
        assert!(!retriable(&timed_out, false));
        assert!(!retriable(&timed_out, true));
    }
}
