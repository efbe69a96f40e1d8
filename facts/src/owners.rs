//! Owner references: which object controls another.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// The owner reference with `controller: true`, if the object has one (there is at most one).
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|owner| owner.controller == Some(true))
}

/// Whether the object is controlled by the object with `uid`.
pub fn is_controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    controller_of(meta).is_some_and(|owner| owner.uid == uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(uid: &str, controller: Option<bool>) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: format!("rs-{uid}"),
            uid: uid.into(),
            controller,
            block_owner_deletion: None,
        }
    }

    #[test]
    fn only_the_controller_reference_counts() {
        let meta = ObjectMeta {
            owner_references: Some(vec![owner("a", None), owner("b", Some(true))]),
            ..ObjectMeta::default()
        };
        assert_eq!(controller_of(&meta).map(|o| o.uid.as_str()), Some("b"));
        assert!(is_controlled_by(&meta, "b"));
        assert!(!is_controlled_by(&meta, "a"));
        assert!(controller_of(&ObjectMeta::default()).is_none());
    }
}
