//! The arithmetic of a rollout, as upstream's deployment controller does it, on plain numbers so
//! that it can be checked by itself: how far the new ReplicaSet may scale up (`maxSurge`), how
//! far old ones may scale down (`maxUnavailable`), unhealthy old pods first, oldest sets first.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// What the rollout needs to know of one ReplicaSet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetView {
    pub name: String,
    /// `spec.replicas`.
    pub replicas: i32,
    /// `status.availableReplicas`.
    pub available: i32,
}

/// An absolute number or a percentage of `total`, rounded up or down (upstream's
/// `GetScaledValueFromIntOrPercent`); a malformed percentage counts as 0.
pub fn resolve(
    value: Option<&IntOrString>,
    default_percent: i32,
    total: i32,
    round_up: bool,
) -> i32 {
    let percent = match value {
        Some(IntOrString::Int(number)) => return (*number).max(0),
        Some(IntOrString::String(text)) => text
            .strip_suffix('%')
            .and_then(|digits| digits.trim().parse::<i64>().ok())
            .unwrap_or(0),
        None => i64::from(default_percent),
    };
    let scaled = i64::from(total) * percent;
    let value = if round_up {
        (scaled + 99).div_euclid(100)
    } else {
        scaled.div_euclid(100)
    };
    i32::try_from(value.max(0)).unwrap_or(i32::MAX)
}

/// `(maxSurge, maxUnavailable)` for `replicas`; both zero would make no progress, so
/// unavailability is then 1 (as upstream).
pub fn surge_and_unavailable(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    replicas: i32,
) -> (i32, i32) {
    let surge = resolve(max_surge, 25, replicas, true);
    let unavailable = resolve(max_unavailable, 25, replicas, false);
    if surge == 0 && unavailable == 0 {
        return (0, 1);
    }
    (surge, unavailable.min(replicas))
}

/// The new ReplicaSet's replicas after scaling up as far as the surge allows.
pub fn new_set_replicas(replicas: i32, surge: i32, all: &[SetView], new: &SetView) -> i32 {
    let current: i32 = all.iter().map(|set| set.replicas).sum();
    let max_total = replicas + surge;
    if current >= max_total {
        return new.replicas;
    }
    let up = (max_total - current).min(replicas - new.replicas).max(0);
    new.replicas + up
}

/// How old ReplicaSets scale down in one step, as `(name, new replicas)` for those that change.
/// `old` must be oldest first.
pub fn scale_down_old(
    replicas: i32,
    unavailable: i32,
    all: &[SetView],
    old: &[SetView],
    new: Option<&SetView>,
) -> Vec<(String, i32)> {
    let old_pods: i32 = old.iter().map(|set| set.replicas).sum();
    if old_pods == 0 {
        return Vec::new();
    }
    let all_pods: i32 = all.iter().map(|set| set.replicas).sum();
    let min_available = replicas - unavailable;
    let new_unavailable = new.map_or(0, |set| (set.replicas - set.available).max(0));
    let max_scaled_down = all_pods - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return Vec::new();
    }
    let mut plan: Vec<(String, i32)> = Vec::new();
    let mut after: Vec<SetView> = old.to_vec();
    // Unhealthy pods first: they do not count toward availability anyway.
    let mut cleaned = 0;
    for set in after.iter_mut() {
        if cleaned >= max_scaled_down {
            break;
        }
        let unhealthy = (set.replicas - set.available).max(0);
        if set.replicas == 0 || unhealthy == 0 {
            continue;
        }
        let down = unhealthy.min(max_scaled_down - cleaned);
        set.replicas -= down;
        cleaned += down;
        plan.push((set.name.clone(), set.replicas));
    }
    // Then available pods, as long as enough stay available (the bound above only gates this
    // step, as upstream's).
    if max_scaled_down - cleaned <= 0 {
        return plan;
    }
    let available: i32 = all.iter().map(|set| set.available).sum();
    let allowed = available - min_available;
    let mut scaled = 0;
    for set in after.iter_mut() {
        if scaled >= allowed {
            break;
        }
        if set.replicas == 0 {
            continue;
        }
        let down = set.replicas.min(allowed - scaled);
        set.replicas -= down;
        scaled += down;
        match plan.iter_mut().find(|(name, _)| *name == set.name) {
            Some(entry) => entry.1 = set.replicas,
            None => plan.push((set.name.clone(), set.replicas)),
        }
    }
    plan
}

/// Proportional scaling: when the Deployment's size changes mid-rollout, the difference between
/// what is allowed (`replicas + surge`) and what exists is spread over the active ReplicaSets
/// in proportion to their size, the largest first (upstream's proportional scaling). Returns
/// every set's new replicas, in `active`'s order.
pub fn proportional(allowed: i32, active: &[SetView]) -> Vec<i32> {
    let current: i32 = active.iter().map(|set| set.replicas).sum();
    let mut sizes: Vec<i32> = active.iter().map(|set| set.replicas).collect();
    let to_add = allowed - current;
    if to_add == 0 || current == 0 {
        return sizes;
    }
    // Largest first (ties: first listed), so rounding leftovers go to the biggest sets.
    let mut order: Vec<usize> = (0..active.len()).collect();
    order.sort_by(|a, b| active[*b].replicas.cmp(&active[*a].replicas).then(a.cmp(b)));
    let mut added = 0;
    for &index in &order {
        let share = i64::from(active[index].replicas) * i64::from(to_add) / i64::from(current);
        let share = i32::try_from(share).unwrap_or(0);
        let share = if to_add > 0 {
            share.min(to_add - added)
        } else {
            share.max(to_add - added)
        };
        sizes[index] += share;
        added += share;
    }
    // What rounding left over goes to the largest set.
    if let Some(&largest) = order.first() {
        sizes[largest] += to_add - added;
    }
    for size in sizes.iter_mut() {
        *size = (*size).max(0);
    }
    sizes
}
