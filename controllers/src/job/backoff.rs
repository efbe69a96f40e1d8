//! How long failed pods hold back their replacements: upstream's exponential back-off, 10 s
//! doubling per failure up to 6 minutes, counted from the latest failure — over all the Job's
//! failed pods, or, with `backoffLimitPerIndex`, for each index from its own failures, so one
//! failing index does not hold the others back.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::indexes::index_of;

/// upstream's default backoff before re-creating failed pods, and its cap.
const BASE: Duration = Duration::from_secs(10);
const MAX: Duration = Duration::from_secs(360);

/// The back-off after `failures` failures (at least one).
fn delay(failures: usize) -> Duration {
    let exponent = u32::try_from(failures.saturating_sub(1))
        .unwrap_or(u32::MAX)
        .min(16);
    BASE.checked_mul(2u32.pow(exponent)).unwrap_or(MAX).min(MAX)
}

/// How long from `now` until `failures` failures, the latest of `failed`, allow a new pod.
fn remaining<'a>(
    failed: impl Iterator<Item = &'a Arc<Pod>>,
    failures: usize,
    now: Timestamp,
) -> Option<Duration> {
    let last = failed.filter_map(|pod| finished_at(pod)).max()?;
    let ready_at = last + SignedDuration::try_from(delay(failures)).ok()?;
    Some(Duration::try_from(ready_at.duration_since(now)).unwrap_or_default())
}

/// How long until the Job's failed pods may be replaced (nothing to wait for without any).
pub fn job_remaining(failed: &[Arc<Pod>], now: Timestamp) -> Option<Duration> {
    remaining(failed.iter(), failed.len(), now)
}

/// How long until `index`, failed `failures` times so far, may get a new pod.
pub fn index_remaining(
    failed: &[Arc<Pod>],
    index: i32,
    failures: i32,
    now: Timestamp,
) -> Option<Duration> {
    let failures = usize::try_from(failures).ok().filter(|f| *f > 0)?;
    let of_index = failed.iter().filter(|pod| index_of(pod) == Some(index));
    remaining(of_index, failures, now)
}

/// When a pod's containers finished (or, lacking that, when it was created).
fn finished_at(pod: &Pod) -> Option<Timestamp> {
    let finished = pod
        .status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|status| {
            status
                .state
                .as_ref()?
                .terminated
                .as_ref()?
                .finished_at
                .as_ref()
        })
        .map(|time| time.0)
        .max();
    finished.or_else(|| pod.metadata.creation_timestamp.as_ref().map(|time| time.0))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use serde_json::json;

    fn failed(index: i32, finished_secs_ago: i64, now: Timestamp) -> Arc<Pod> {
        let finished = now - SignedDuration::from_secs(finished_secs_ago);
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("p-{index}-{finished_secs_ago}"),
                "annotations": {"batch.kubernetes.io/job-completion-index": index.to_string()}},
            "status": {"phase": "Failed", "containerStatuses": [{"name": "main", "ready": false,
                "restartCount": 0, "image": "x", "imageID": "",
                "state": {"terminated": {"exitCode": 1}}}]},
        }))
        .unwrap();
        pod.status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
            .state
            .as_mut()
            .unwrap()
            .terminated
            .as_mut()
            .unwrap()
            .finished_at = Some(Time(finished));
        pod.metadata = ObjectMeta {
            creation_timestamp: Some(Time(finished - SignedDuration::from_secs(5))),
            ..pod.metadata
        };
        Arc::new(pod)
    }

    #[test]
    fn the_delay_doubles_from_ten_seconds_up_to_six_minutes() {
        assert_eq!(delay(1), Duration::from_secs(10));
        assert_eq!(delay(2), Duration::from_secs(20));
        assert_eq!(delay(4), Duration::from_secs(80));
        assert_eq!(delay(7), Duration::from_secs(360));
        assert_eq!(delay(100), Duration::from_secs(360));
    }

    #[test]
    fn the_job_waits_from_its_latest_failure_by_its_number_of_failures() {
        let now = Timestamp::now();
        assert_eq!(job_remaining(&[], now), None);
        // Two failures: 20 s from the later one, 5 s ago.
        let pods = [failed(0, 30, now), failed(1, 5, now)];
        assert_eq!(job_remaining(&pods, now), Some(Duration::from_secs(15)));
    }

    #[test]
    fn each_index_waits_for_its_own_failures_only() {
        let now = Timestamp::now();
        // Index 0 failed a second time 5 s ago (20 s back-off): 15 s to go. Index 1 failed
        // once 12 s ago (10 s back-off): ready, though index 0's failure is more recent.
        let pods = [failed(0, 40, now), failed(0, 5, now), failed(1, 12, now)];
        assert_eq!(
            index_remaining(&pods, 0, 2, now),
            Some(Duration::from_secs(15))
        );
        assert_eq!(index_remaining(&pods, 1, 1, now), Some(Duration::ZERO));
        // An index that never failed waits for nothing.
        assert_eq!(index_remaining(&pods, 2, 0, now), None);
    }
}
