//! Restart back-off, as upstream's CrashLoopBackOff: a container that exits is restarted at
//! once the first time, then after 10 s, 20 s, 40 s … up to 5 min, each wait counted from the
//! exit it follows; a container that ran 10 minutes before exiting starts over. The same
//! doubling paces image pulls that fail (ImagePullBackOff).

use std::collections::HashMap;
use std::time::Duration;

/// The first delay.
pub const INITIAL: Duration = Duration::from_secs(10);
/// The longest delay.
pub const MAX: Duration = Duration::from_secs(300);
/// A container that ran this long before exiting is restarted at once.
pub const RESET_AFTER: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// The exit (finish time, ns) the current delay is for.
    exit: i64,
    delay: Duration,
    next: Duration,
}

/// Back-off per key (a container name, or `image:<ref>`).
#[derive(Debug, Default)]
pub struct Backoff {
    entries: HashMap<String, Entry>,
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

impl Backoff {
    /// Whether the thing `key` names, which started at `started` and failed at `failed`
    /// (Unix ns), may be retried at `now`; `Err(delay)` says how long this back-off is.
    pub fn check(
        &mut self,
        key: &str,
        started: i64,
        failed: i64,
        now: i64,
    ) -> Result<(), Duration> {
        if started > 0 && failed.saturating_sub(started) >= nanos(RESET_AFTER) {
            self.entries.remove(key);
        }
        let entry = self.entries.entry(key.to_owned()).or_insert(Entry {
            exit: failed,
            delay: Duration::ZERO,
            next: INITIAL,
        });
        if entry.exit != failed {
            entry.exit = failed;
            entry.delay = entry.next;
            entry.next = (entry.next * 2).min(MAX);
        }
        if now >= failed.saturating_add(nanos(entry.delay)) {
            Ok(())
        } else {
            Err(entry.delay)
        }
    }

    pub fn forget(&mut self, key: &str) {
        self.entries.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn first_restart_is_immediate_then_delays_double_to_five_minutes() {
        let mut backoff = Backoff::default();
        assert_eq!(backoff.check("c", 1, 2 * S, 2 * S), Ok(()));
        let mut exit = 10 * S;
        for want in [10, 20, 40, 80, 160, 300, 300] {
            let delay = Duration::from_secs(want);
            assert_eq!(backoff.check("c", exit - S, exit, exit + S), Err(delay));
            // Asking again for the same exit keeps the same delay.
            assert_eq!(
                backoff.check("c", exit - S, exit, exit + nanos(delay) - 1),
                Err(delay)
            );
            assert_eq!(
                backoff.check("c", exit - S, exit, exit + nanos(delay)),
                Ok(())
            );
            exit += 1000 * S;
        }
    }

    #[test]
    fn a_long_run_resets_the_back_off() {
        let mut backoff = Backoff::default();
        assert_eq!(backoff.check("c", 0, S, S), Ok(()));
        assert!(backoff.check("c", S, 2 * S, 2 * S).is_err());
        let started = 3 * S;
        let failed = started + nanos(RESET_AFTER);
        assert_eq!(backoff.check("c", started, failed, failed), Ok(()));
        // Keys are independent.
        assert_eq!(backoff.check("other", 0, S, S), Ok(()));
    }
}
