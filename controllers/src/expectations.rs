//! Expectations: what a controller has just created or deleted and its informer has not shown
//! yet, so that a reconcile triggered before the informer catches up does not create (or
//! delete) the same pods again. Keyed by the owner (`namespace/name`), tracked by the uids the
//! API returned; they lapse after five minutes, as upstream's, in case a change is never seen.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// upstream's `ExpectationsTimeout`.
const LAPSE: Duration = Duration::from_secs(300);

#[derive(Default)]
struct Pending {
    created: HashSet<String>,
    deleted: HashSet<String>,
    since: Option<Instant>,
}

/// The expectations of one controller.
#[derive(Default)]
pub struct Expectations {
    owners: Mutex<HashMap<String, Pending>>,
}

impl Expectations {
    fn owners(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.owners
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `owner` created an object with `uid`.
    pub fn created(&self, owner: &str, uid: String) {
        let mut owners = self.owners();
        let pending = owners.entry(owner.to_string()).or_default();
        pending.created.insert(uid);
        pending.since.get_or_insert_with(Instant::now);
    }

    /// `owner` deleted the object with `uid`.
    pub fn deleted(&self, owner: &str, uid: String) {
        let mut owners = self.owners();
        let pending = owners.entry(owner.to_string()).or_default();
        pending.deleted.insert(uid);
        pending.since.get_or_insert_with(Instant::now);
    }

    /// The informer showed an object with `uid` that `owner` controls: a create it expected is
    /// seen (even if the object is gone again by the next reconcile).
    pub fn seen(&self, owner: &str, uid: &str) {
        if let Some(pending) = self.owners().get_mut(owner) {
            pending.created.remove(uid);
        }
    }

    /// Whether the informer shows everything `owner` did: `exists(uid)` says whether it holds
    /// an object with that uid, `live(uid)` whether one not being deleted. What it shows is
    /// forgotten.
    pub fn satisfied(
        &self,
        owner: &str,
        exists: impl Fn(&str) -> bool,
        live: impl Fn(&str) -> bool,
    ) -> bool {
        let mut owners = self.owners();
        let Some(pending) = owners.get_mut(owner) else {
            return true;
        };
        pending.created.retain(|uid| !exists(uid));
        pending.deleted.retain(|uid| live(uid));
        let lapsed = pending.since.is_some_and(|since| since.elapsed() >= LAPSE);
        if lapsed || (pending.created.is_empty() && pending.deleted.is_empty()) {
            owners.remove(owner);
            return true;
        }
        false
    }

    /// Forgets `owner` (it was deleted).
    pub fn forget(&self, owner: &str) {
        self.owners().remove(owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn unseen_creates_and_deletes_hold_until_seen_or_lapsed() {
        let expectations = Expectations::default();
        let none = |_: &str| false;
        assert!(expectations.satisfied("ns/rs", none, none));
        expectations.created("ns/rs", "a".into());
        expectations.deleted("ns/rs", "b".into());
        let only_b = |uid: &str| uid == "b";
        assert!(
            !expectations.satisfied("ns/rs", only_b, only_b),
            "a unseen, b alive"
        );
        expectations.seen("ns/rs", "a");
        assert!(
            !expectations.satisfied("ns/rs", only_b, only_b),
            "b still alive"
        );
        assert!(
            expectations.satisfied("ns/rs", only_b, none),
            "b is being deleted"
        );
        expectations.created("ns/rs", "c".into());
        tokio::time::advance(LAPSE).await;
        assert!(expectations.satisfied("ns/rs", none, none), "lapsed");
    }
}
