//! Which pods a StatefulSet's rolling update replaces next — the arithmetic only.
//!
//! Pods at ordinals from `partition` up that are not of the update revision are replaced from
//! the highest ordinal down, at most `maxUnavailable` (default 1) unhealthy pods at a time
//! across the whole set: while as many pods as that are not running and available, nothing
//! more is deleted. With the default of 1 this is upstream's classic one pod at a time once all
//! are ready; a larger `maxUnavailable` is upstream's `MaxUnavailableStatefulSet` behaviour.
//! (Under OrderedReady the caller goes no further while any pod is unavailable, as upstream:
//! replaced pods come back in order.)

use k8s_openapi::api::apps::v1::RollingUpdateStatefulSetStrategy;
use k8s_openapi::api::core::v1::Pod;

/// `maxUnavailable` over `replicas`: percentages rounded down, at least 1.
pub(crate) fn max_unavailable(
    rolling: Option<&RollingUpdateStatefulSetStrategy>,
    replicas: i32,
) -> usize {
    let resolved = match rolling.and_then(|r| r.max_unavailable.as_ref()) {
        None => 1,
        Some(value) => crate::deployment::resolve_percent(value, replicas, false),
    };
    usize::try_from(resolved.max(1)).unwrap_or(1)
}

/// One pod of the set as the rolling update sees it.
pub(crate) struct Member<'a> {
    pub ordinal: i32,
    pub pod: &'a Pod,
    /// Running and available (ready for `minReadySeconds`) and not being deleted.
    pub healthy: bool,
    /// Of the update revision.
    pub updated: bool,
}

/// The ordinals to delete now, highest first, given the set's members (any order) and how
/// many of its ordinals have no pod at all (they count as unavailable).
pub(crate) fn next_to_replace(
    members: &[Member<'_>],
    missing: usize,
    partition: i32,
    max_unavailable: usize,
) -> Vec<i32> {
    let unhealthy = members.iter().filter(|m| !m.healthy).count() + missing;
    let room = max_unavailable.saturating_sub(unhealthy);
    let mut candidates: Vec<&Member<'_>> = members
        .iter()
        .filter(|m| m.ordinal >= partition && !m.updated)
        .filter(|m| m.pod.metadata.deletion_timestamp.is_none())
        .collect();
    candidates.sort_by_key(|m| std::cmp::Reverse(m.ordinal));
    candidates
        .into_iter()
        .take(room)
        .map(|m| m.ordinal)
        .collect()
}
