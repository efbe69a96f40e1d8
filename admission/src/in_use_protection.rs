//! StorageObjectInUseProtection: a new PersistentVolumeClaim gets the finalizer
//! `kubernetes.io/pvc-protection` and a new PersistentVolume `kubernetes.io/pv-protection`, so
//! deleting one that is still in use only marks it; the `pvc-protection` and `pv-protection`
//! controllers take the finalizer off once nothing uses it.

use async_trait::async_trait;
use serde_json::Value;

use rudder_facts::volumes::{
    PVC_PROTECTION_FINALIZER as PVC_FINALIZER, PV_PROTECTION_FINALIZER as PV_FINALIZER,
};

use crate::{Attributes, Denied, Mutating, Operation};

pub struct StorageObjectInUseProtection;

#[async_trait]
impl Mutating for StorageObjectInUseProtection {
    fn name(&self) -> &'static str {
        "StorageObjectInUseProtection"
    }

    async fn admit(
        &self,
        attributes: &Attributes,
        object: Option<&mut Value>,
        _old: Option<&Value>,
    ) -> Result<(), Denied> {
        if attributes.operation != Operation::Create
            || attributes.subresource.is_some()
            || !attributes.group.is_empty()
        {
            return Ok(());
        }
        let finalizer = match attributes.resource.as_str() {
            "persistentvolumeclaims" => PVC_FINALIZER,
            "persistentvolumes" => PV_FINALIZER,
            _ => return Ok(()),
        };
        let Some(metadata) = object
            .and_then(|object| object.get_mut("metadata"))
            .and_then(Value::as_object_mut)
        else {
            return Ok(());
        };
        match metadata.get_mut("finalizers") {
            Some(Value::Array(list)) => {
                if !list.iter().any(|f| f == finalizer) {
                    list.push(Value::from(finalizer));
                }
            }
            None | Some(Value::Null) => {
                metadata.insert("finalizers".into(), Value::from(vec![finalizer]));
            }
            // Not a list: validation refuses it.
            Some(_) => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::attributes;
    use serde_json::json;

    async fn admitted(operation: Operation, resource: &str, mut object: Value) -> Value {
        let mut attrs = attributes(operation);
        attrs.resource = resource.into();
        StorageObjectInUseProtection
            .admit(&attrs, Some(&mut object), None)
            .await
            .expect("admitted");
        object
    }

    #[tokio::test]
    async fn new_claims_and_volumes_are_protected_once() {
        let claim = admitted(
            Operation::Create,
            "persistentvolumeclaims",
            json!({"metadata": {"name": "c"}}),
        )
        .await;
        assert_eq!(claim["metadata"]["finalizers"], json!([PVC_FINALIZER]));
        let volume = admitted(
            Operation::Create,
            "persistentvolumes",
            json!({"metadata": {"name": "v", "finalizers": ["other/keep", PV_FINALIZER]}}),
        )
        .await;
        assert_eq!(
            volume["metadata"]["finalizers"],
            json!(["other/keep", PV_FINALIZER]),
            "a finalizer already there is not doubled"
        );
        let updated = admitted(
            Operation::Update,
            "persistentvolumeclaims",
            json!({"metadata": {"name": "c"}}),
        )
        .await;
        assert!(
            updated["metadata"].get("finalizers").is_none(),
            "only creates are touched: a controller may have released the claim"
        );
        let pod = admitted(
            Operation::Create,
            "pods",
            json!({"metadata": {"name": "p"}}),
        )
        .await;
        assert!(pod["metadata"].get("finalizers").is_none());
    }
}
