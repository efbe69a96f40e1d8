//! An Indexed Job's `successPolicy`: the Job has succeeded as soon as one rule holds, before
//! every index has. A rule names `succeededIndexes` (ranges; all of them must have succeeded,
//! or — with `succeededCount` — at least that many of them) and/or `succeededCount` alone (that
//! many indexes, whichever). The controller then sets `SuccessCriteriaMet` (reason
//! `SuccessPolicy`), terminates the pods still running, and sets `Complete` once none is left.

use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::SuccessPolicy;

use super::indexes::parse;

/// upstream's reason for a Job finished by its success policy.
pub const REASON: &str = "SuccessPolicy";

/// The message of the first rule `succeeded` satisfies (`Matched rules at index N`), if any.
pub fn met(
    policy: Option<&SuccessPolicy>,
    completions: i32,
    succeeded: &BTreeSet<i32>,
) -> Option<String> {
    let policy = policy?;
    if succeeded.is_empty() {
        return None;
    }
    policy
        .rules
        .iter()
        .enumerate()
        .find_map(|(position, rule)| {
            let count = rule
                .succeeded_count
                .and_then(|count| usize::try_from(count).ok());
            let holds = match rule.succeeded_indexes.as_deref() {
                Some(ranges) => {
                    let wanted = parse(ranges, completions);
                    // A rule whose indexes cannot be read never holds.
                    !wanted.is_empty() && {
                        let done = wanted.intersection(succeeded).count();
                        done == wanted.len() || count.is_some_and(|count| done >= count)
                    }
                }
                None => count.is_some_and(|count| succeeded.len() >= count),
            };
            holds.then(|| format!("Matched rules at index {position}"))
        })
}
