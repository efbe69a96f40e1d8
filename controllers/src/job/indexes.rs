//! Indexed Jobs' bookkeeping: the index a pod runs (its `job-completion-index` annotation),
//! sets of indexes written as upstream's compressed ranges (`0-2,4,6-7`, as in
//! `completedIndexes` and `failedIndexes`), and `backoffLimitPerIndex` — each pod carries in
//! its `job-index-failure-count` annotation how often its index failed before it, an index
//! whose failures pass the limit (or whose pod matched a `FailIndex` rule) is failed for good,
//! and the last failed pod of an index keeps its tracking finalizer until its replacement
//! exists, so the count survives the pod's deletion.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::failure_policy::{judge, Verdict};

/// The index of an Indexed Job's pod.
pub const INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// How many counted failures the pod's index had before the pod was created.
pub const FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";

/// A pod's completion index, if it has a valid one.
pub fn index_of(pod: &Pod) -> Option<i32> {
    pod.annotations()
        .get(INDEX)
        .and_then(|index| index.parse().ok())
        .filter(|index: &i32| *index >= 0)
}

/// A pod's index within `0..completions`.
pub fn valid_index(pod: &Pod, completions: i32) -> Option<i32> {
    index_of(pod).filter(|index| *index < completions)
}

/// The failures of the pod's index before it (its annotation; 0 without one).
pub fn failure_count(pod: &Pod) -> i32 {
    pod.annotations()
        .get(FAILURE_COUNT)
        .and_then(|count| count.parse().ok())
        .unwrap_or(0)
}

/// `0-2,4,6-7` from a set of indexes.
pub fn compress(indexes: &BTreeSet<i32>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut run: Option<(i32, i32)> = None;
    let show = |(start, end): (i32, i32)| {
        if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        }
    };
    for &index in indexes {
        run = match run {
            Some((start, end)) if index == end + 1 => Some((start, index)),
            Some(done) => {
                parts.push(show(done));
                Some((index, index))
            }
            None => Some((index, index)),
        };
    }
    if let Some(done) = run {
        parts.push(show(done));
    }
    parts.join(",")
}

/// The indexes below `completions` that `ranges` (`0-2,4`) names; what cannot be read is
/// left out (upstream logs and skips it too).
pub fn parse(ranges: &str, completions: i32) -> BTreeSet<i32> {
    let mut indexes = BTreeSet::new();
    for part in ranges.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (first, last) = match part.split_once('-') {
            Some((first, last)) => (first.parse::<i32>(), last.parse::<i32>()),
            None => (part.parse::<i32>(), part.parse::<i32>()),
        };
        let (Ok(first), Ok(last)) = (first, last) else {
            continue;
        };
        if first < 0 || last < first {
            continue;
        }
        indexes.extend(first..=last.min(completions.saturating_sub(1)));
    }
    indexes
}

/// Whether `pod`'s failure fails its index: a `FailIndex` rule matched, or the failure counts
/// and its index had already failed `backoffLimitPerIndex` times.
pub fn fails_index(job: &Job, pod: &Pod, limit: i32) -> bool {
    let policy = job
        .spec
        .as_ref()
        .and_then(|s| s.pod_failure_policy.as_ref());
    match judge(policy, pod) {
        Verdict::FailIndex => true,
        verdict => verdict.counts() && failure_count(pod) >= limit,
    }
}

/// The failure count a new pod for each index starts with: that of the index's latest failed
/// pod, plus one if its failure counted.
pub fn next_failure_counts(job: &Job, failed: &[Arc<Pod>]) -> BTreeMap<i32, i32> {
    let policy = job
        .spec
        .as_ref()
        .and_then(|s| s.pod_failure_policy.as_ref());
    let mut counts = BTreeMap::new();
    for pod in failed {
        let Some(index) = index_of(pod) else {
            continue;
        };
        let next = failure_count(pod) + i32::from(judge(policy, pod).counts());
        let entry = counts.entry(index).or_insert(next);
        *entry = (*entry).max(next);
    }
    counts
}

/// The failed pods that keep their finalizer a while: per index that is neither succeeded nor
/// failed and has no pod running, its failed pod with the highest failure count (the one the
/// replacement's count is taken from).
pub fn held_back(
    tracked_failed: &[Arc<Pod>],
    running: &BTreeSet<i32>,
    succeeded: &BTreeSet<i32>,
    failed: &BTreeSet<i32>,
) -> BTreeSet<String> {
    let mut latest: BTreeMap<i32, &Arc<Pod>> = BTreeMap::new();
    for pod in tracked_failed {
        let Some(index) = index_of(pod) else {
            continue;
        };
        if running.contains(&index) || succeeded.contains(&index) || failed.contains(&index) {
            continue;
        }
        let entry = latest.entry(index).or_insert(pod);
        if failure_count(pod) > failure_count(entry) {
            *entry = pod;
        }
    }
    latest.values().filter_map(|pod| pod.uid()).collect()
}
