//! The apiserver's limits in one place: what a request, a stored object and a connection may
//! cost, with upstream's defaults where upstream has one (`--max-requests-inflight 400`,
//! `--max-mutating-requests-inflight 200`, `--request-timeout 60s`, 3 MiB bodies, etcd's
//! 1.5 MiB request limit, 10,000 JSON patch operations), and the walkers that measure a JSON
//! value's depth and encoded size without recursion.

use std::time::Duration;

use serde_json::Value;

/// Upstream's request body limit (`maxRequestBodyBytes`, 3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// The largest write, key and value together: etcd's default request limit (1.5 MiB), which
/// upstream relies on, enforced for every driver (the SQL drivers guard the same sum).
pub const MAX_STORED_VALUE_BYTES: usize = 1024 * 1024 + 512 * 1024;

/// The longest storage key. PostgreSQL cannot index a key much past 2.7 KB; names are the only
/// unbounded part of a key.
pub const MAX_KEY_BYTES: usize = 2048;

/// How deeply an object may nest (objects and lists). Every reader — the JSON decoder of the
/// stored value, kube-rs and other serde clients with their 128-level default, a watch event
/// or a List that wraps the object in two more levels — must be able to read what is stored.
pub const MAX_OBJECT_DEPTH: usize = 100;

/// Upstream's cap on the operations of one JSON patch.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Upstream's cap on the bytes JSON patch `copy` operations may add (`JSONPatchMaxCopyBytes`).
pub const MAX_JSON_PATCH_COPY_BYTES: usize = 3 * 1024 * 1024;

/// Bodies at least this large are decoded on a blocking thread, off the async workers.
pub const BLOCKING_DECODE_BYTES: usize = 64 * 1024;

/// The limits a server runs with (`rudder server` flags).
#[derive(Clone, Debug)]
pub struct Limits {
    /// Non-mutating requests in flight at once, long-running ones (watches) aside; 0 = no cap.
    pub max_requests_inflight: usize,
    /// Mutating requests (create, update, patch, delete) in flight at once; 0 = no cap.
    pub max_mutating_requests_inflight: usize,
    /// How long a request that is not long-running may take (504 after that).
    pub request_timeout: Duration,
    /// Open client connections at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// How long a connection may stay silent after its TLS handshake before its first request.
    pub first_request_timeout: Duration,
    /// How long a connection with no request in flight stays open (upstream: 90 s).
    pub idle_timeout: Duration,
    /// HTTP/2 PING interval on connections, and how long a PING may go unanswered.
    pub keep_alive_interval: Duration,
    pub keep_alive_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            request_timeout: Duration::from_secs(60),
            max_connections: 10_000,
            first_request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
            keep_alive_interval: Duration::from_secs(30),
            keep_alive_timeout: Duration::from_secs(20),
        }
    }
}

/// How many levels of objects and lists `value` nests (a scalar is 0, `{}` is 1).
pub fn depth(value: &Value) -> usize {
    depth_within(value, usize::MAX).unwrap_or(usize::MAX)
}

/// [`depth`], giving up (None) after visiting `max_nodes` nodes.
pub fn depth_within(value: &Value, max_nodes: usize) -> Option<usize> {
    let mut deepest = 0;
    let mut visited = 0usize;
    let mut pending: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((value, above)) = pending.pop() {
        visited += 1;
        if visited > max_nodes {
            return None;
        }
        match value {
            Value::Array(items) => {
                deepest = deepest.max(above + 1);
                pending.extend(items.iter().map(|item| (item, above + 1)));
            }
            Value::Object(map) => {
                deepest = deepest.max(above + 1);
                pending.extend(map.values().map(|item| (item, above + 1)));
            }
            _ => {}
        }
    }
    Some(deepest)
}

/// The length of `value` encoded as compact JSON, without building the text.
pub fn encoded_len(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.0,
        Err(_) => usize::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn depth_counts_objects_and_lists() {
        assert_eq!(depth(&json!(1)), 0);
        assert_eq!(depth(&json!({})), 1);
        assert_eq!(depth(&json!({"a": [{"b": 1}], "c": 2})), 3);
        assert_eq!(depth_within(&json!([1, 2, 3, 4]), 2), None);
    }

    #[test]
    fn encoded_len_is_the_compact_json_length() {
        let value = json!({"a": [1, "xy", null]});
        assert_eq!(
            encoded_len(&value),
            serde_json::to_vec(&value).map(|v| v.len()).unwrap_or(0)
        );
    }
}
