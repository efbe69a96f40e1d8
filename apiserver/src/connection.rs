//! What one client connection may hold, as the accept loop enforces it: a slot among
//! `max_connections` (at the cap the listener stops accepting, so new clients wait in the
//! backlog instead of being reset), a first request within `first_request_timeout` of the TLS
//! handshake (hyper's protocol sniffing would otherwise wait forever), and closing once no
//! request has been in flight for `idle_timeout`. A request counts as in flight until its
//! response body has been sent or dropped, so a long watch keeps its connection open.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use bytes::Bytes;
use http_body::Frame;

/// What a connection is doing, shared by its requests and the task that serves it.
#[derive(Debug)]
pub(crate) struct Activity {
    in_flight: AtomicUsize,
    served: AtomicUsize,
    last_change: Mutex<Instant>,
}

/// The connection's state as its task sees it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Idleness {
    /// A request is in flight.
    Busy,
    /// No request yet since the handshake, for this long.
    NeverUsed(std::time::Duration),
    /// Requests were served; none is in flight, for this long.
    Idle(std::time::Duration),
}

impl Activity {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            in_flight: AtomicUsize::new(0),
            served: AtomicUsize::new(0),
            last_change: Mutex::new(Instant::now()),
        })
    }

    fn touch(&self) {
        let mut last = match self.last_change.lock() {
            Ok(last) => last,
            Err(poisoned) => poisoned.into_inner(),
        };
        *last = Instant::now();
    }

    /// A request started; it ends when the returned guard is dropped.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.served.fetch_add(1, Ordering::SeqCst);
        self.touch();
        InFlight(self.clone())
    }

    pub fn idleness(&self) -> Idleness {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return Idleness::Busy;
        }
        let since = match self.last_change.lock() {
            Ok(last) => last.elapsed(),
            Err(poisoned) => poisoned.into_inner().elapsed(),
        };
        if self.served.load(Ordering::SeqCst) == 0 {
            Idleness::NeverUsed(since)
        } else {
            Idleness::Idle(since)
        }
    }
}

/// One request in flight on a connection.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.touch();
    }
}

/// A response body that keeps its request in flight until it is finished or dropped.
pub(crate) struct TrackedBody {
    inner: Body,
    _in_flight: InFlight,
}

impl TrackedBody {
    pub fn wrap(inner: Body, in_flight: InFlight) -> Body {
        Body::new(TrackedBody {
            inner,
            _in_flight: in_flight,
        })
    }
}

impl http_body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_is_busy_until_its_response_bodies_are_gone() {
        let activity = Activity::new();
        assert!(matches!(activity.idleness(), Idleness::NeverUsed(_)));
        let body = TrackedBody::wrap(Body::from("x"), activity.begin());
        assert_eq!(activity.idleness(), Idleness::Busy);
        drop(body);
        assert!(matches!(activity.idleness(), Idleness::Idle(_)));
    }
}
