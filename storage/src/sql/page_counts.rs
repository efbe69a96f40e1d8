//! What is left to count of a paged read, remembered between its pages. etcd answers every
//! page of a range with the count of the whole rest of the range, and clients (kube-apiserver's
//! `remainingItemCount`) rely on it; counting the rows again on every page costs a scan of the
//! rest of the range per page. But a page read at a fixed revision sees history that cannot
//! change (compaction makes the read fail rather than change), so the next page's count is this
//! page's minus the keys it returned, as long as the next page starts just after this page's
//! last key — which is how kube-apiserver, etcd clients and Rudder's own lists page. A bounded
//! table of those expectations saves the count query on every page after the first.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::types::Revision;

/// Expectations kept at most (oldest dropped first): one per paged read in progress.
const CAPACITY: usize = 1024;

/// A page that may be asked for next: its range `[start, end)` (`end` empty: unbounded) and
/// its revision.
type Next = (Vec<u8>, Vec<u8>, Revision);

#[derive(Default)]
pub(crate) struct PageCounts {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    counts: HashMap<Next, i64>,
    order: VecDeque<Next>,
}

impl PageCounts {
    /// The count of live keys in `[start, end)` at `revision`, if a previous page left it.
    pub fn take(&self, start: &[u8], end: &[u8], revision: Revision) -> Option<i64> {
        let mut inner = self.lock();
        inner
            .counts
            .remove(&(start.to_vec(), end.to_vec(), revision))
    }

    /// A page of `[start, end)` at `revision` counted `count` keys and ended at `last`: the
    /// next page, from just after `last`, has `count - returned` keys.
    pub fn remember(&self, last: &[u8], end: &[u8], revision: Revision, remaining: i64) {
        let mut start = last.to_vec();
        start.push(0);
        let next = (start, end.to_vec(), revision);
        let mut inner = self.lock();
        if inner.counts.insert(next.clone(), remaining).is_none() {
            inner.order.push_back(next);
        }
        while inner.order.len() > CAPACITY {
            if let Some(oldest) = inner.order.pop_front() {
                inner.counts.remove(&oldest);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_page_finds_what_is_left_once() {
        let counts = PageCounts::default();
        counts.remember(b"/a/0499", b"/a0", 7, 9500);
        assert_eq!(
            counts.take(b"/a/0499\0", b"/a0", 8),
            None,
            "another revision"
        );
        assert_eq!(counts.take(b"/a/0499\0", b"/b0", 7), None, "another end");
        assert_eq!(counts.take(b"/a/0499", b"/a0", 7), None, "another start");
        assert_eq!(counts.take(b"/a/0499\0", b"/a0", 7), Some(9500));
        assert_eq!(counts.take(b"/a/0499\0", b"/a0", 7), None, "taken once");
    }

    #[test]
    fn the_oldest_expectations_go_first() {
        let counts = PageCounts::default();
        for page in 0..CAPACITY as i64 + 10 {
            counts.remember(format!("/k/{page:06}").as_bytes(), b"", 1, page);
        }
        assert_eq!(counts.take(b"/k/000000\0", b"", 1), None);
        assert_eq!(counts.take(b"/k/000009\0", b"", 1), None);
        assert_eq!(counts.take(b"/k/000010\0", b"", 1), Some(10));
        let last = CAPACITY as i64 + 9;
        let key = format!("/k/{last:06}\0");
        assert_eq!(counts.take(key.as_bytes(), b"", 1), Some(last));
    }
}
