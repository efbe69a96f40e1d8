//! Taint-based eviction, as upstream's taint-eviction-controller decides it: a pod on a node
//! with `NoExecute` taints is deleted at once if one of them is not tolerated; if all are, it
//! is deleted when the shortest `tolerationSeconds` among the tolerations that apply has run
//! out (counted from when the taints were added), and never if none of them sets a limit.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Pod, Taint, Toleration};

/// What becomes of a pod on a tainted node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Stay,
    DeleteNow,
    DeleteAt(Timestamp),
}

/// The node's `NoExecute` taints.
pub fn no_execute(taints: &[Taint]) -> Vec<&Taint> {
    taints.iter().filter(|t| t.effect == "NoExecute").collect()
}

/// The verdict on `pod` under the `NoExecute` `taints`; `first_seen` stands for the time a
/// taint was added when it does not say.
pub fn verdict(pod: &Pod, taints: &[&Taint], first_seen: Timestamp) -> Verdict {
    if taints.is_empty() {
        return Verdict::Stay;
    }
    let tolerations: &[Toleration] = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.tolerations.as_deref())
        .unwrap_or_default();
    let mut shortest: Option<i64> = None;
    for taint in taints {
        let applying: Vec<&Toleration> = tolerations
            .iter()
            .filter(|t| rudder_facts::nodes::tolerates(t, taint))
            .collect();
        if applying.is_empty() {
            return Verdict::DeleteNow;
        }
        for toleration in applying {
            if let Some(seconds) = toleration.toleration_seconds {
                shortest = Some(shortest.map_or(seconds, |s| s.min(seconds)));
            }
        }
    }
    let Some(seconds) = shortest else {
        return Verdict::Stay;
    };
    let since = taints
        .iter()
        .map(|t| t.time_added.as_ref().map_or(first_seen, |time| time.0))
        .min()
        .unwrap_or(first_seen);
    let wait = SignedDuration::from_secs(seconds.max(0));
    match since.checked_add(wait) {
        Ok(at) => Verdict::DeleteAt(at),
        Err(_) => Verdict::Stay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn pod(tolerations: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"},
            "spec": {"containers": [], "tolerations": tolerations}}))
        .expect("a pod")
    }

    fn unreachable(added: Timestamp) -> Taint {
        Taint {
            key: "node.kubernetes.io/unreachable".into(),
            effect: "NoExecute".into(),
            value: None,
            time_added: Some(Time(added)),
        }
    }

    #[test]
    fn tolerations_decide_when_a_pod_goes() {
        let added = Timestamp::from_second(1_700_000_000).expect("time");
        let taint = unreachable(added);
        let taints = [&taint];
        let seen = added + SignedDuration::from_secs(3);
        assert_eq!(verdict(&pod(json!([])), &taints, seen), Verdict::DeleteNow);
        let other = json!([{"key": "other", "operator": "Exists", "effect": "NoExecute"}]);
        assert_eq!(verdict(&pod(other), &taints, seen), Verdict::DeleteNow);
        let five = json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
            "effect": "NoExecute", "tolerationSeconds": 5},
            {"operator": "Exists", "tolerationSeconds": 300}]);
        assert_eq!(
            verdict(&pod(five), &taints, seen),
            Verdict::DeleteAt(added + SignedDuration::from_secs(5))
        );
        let forever = json!([{"operator": "Exists"}]);
        assert_eq!(verdict(&pod(forever), &taints, seen), Verdict::Stay);
        assert_eq!(verdict(&pod(json!([])), &[], seen), Verdict::Stay);
        let negative = json!([{"operator": "Exists", "tolerationSeconds": -3}]);
        assert_eq!(
            verdict(&pod(negative), &taints, seen),
            Verdict::DeleteAt(added)
        );
    }
}
