//! DefaultStorageClass and DefaultIngressClass: a new PersistentVolumeClaim without
//! `spec.storageClassName` gets the cluster's default StorageClass (annotated
//! `storageclass.kubernetes.io/is-default-class: "true"`), and a new Ingress without
//! `spec.ingressClassName` the default IngressClass
//! (`ingressclass.kubernetes.io/is-default-class: "true"`). With several defaults, the newest
//! wins (by creation time, then name), as upstream picks it; with none, nothing changes.

use async_trait::async_trait;
use serde_json::Value;

use crate::{Attributes, Denied, Mutating, ObjectReader, Operation};

/// Which default a plugin fills in.
struct Kind {
    plugin: &'static str,
    /// The object the plugin fills (group, plural) and the field it sets.
    target: (&'static str, &'static str),
    field: &'static str,
    /// The classes (group, plural) and the annotation that marks the default.
    classes: (&'static str, &'static str),
    annotation: &'static str,
}

const STORAGE: Kind = Kind {
    plugin: "DefaultStorageClass",
    target: ("", "persistentvolumeclaims"),
    field: "storageClassName",
    classes: ("storage.k8s.io", "storageclasses"),
    annotation: "storageclass.kubernetes.io/is-default-class",
};

const INGRESS: Kind = Kind {
    plugin: "DefaultIngressClass",
    target: ("networking.k8s.io", "ingresses"),
    field: "ingressClassName",
    classes: ("networking.k8s.io", "ingressclasses"),
    annotation: "ingressclass.kubernetes.io/is-default-class",
};

/// The plugin filling in one kind's default class; reads the classes through `reader`.
pub struct DefaultClass<R> {
    reader: R,
    kind: &'static Kind,
}

impl<R> DefaultClass<R> {
    /// DefaultStorageClass.
    pub fn storage(reader: R) -> Self {
        Self {
            reader,
            kind: &STORAGE,
        }
    }

    /// DefaultIngressClass.
    pub fn ingress(reader: R) -> Self {
        Self {
            reader,
            kind: &INGRESS,
        }
    }
}

/// The default among `classes`: the newest marked one.
pub fn default_of<'a>(classes: &'a [Value], annotation: &str) -> Option<&'a str> {
    classes
        .iter()
        .filter(|class| class["metadata"]["annotations"][annotation] == "true")
        .max_by(|a, b| {
            let key = |c: &'a Value| {
                (
                    c["metadata"]["creationTimestamp"].as_str().unwrap_or(""),
                    c["metadata"]["name"].as_str().unwrap_or(""),
                )
            };
            key(a).cmp(&key(b))
        })
        .and_then(|class| class["metadata"]["name"].as_str())
}

#[async_trait]
impl<R: ObjectReader> Mutating for DefaultClass<R> {
    fn name(&self) -> &'static str {
        self.kind.plugin
    }

    async fn admit(
        &self,
        attributes: &Attributes,
        object: Option<&mut Value>,
        _old: Option<&Value>,
    ) -> Result<(), Denied> {
        let kind = self.kind;
        let applies = attributes.operation == Operation::Create
            && attributes.subresource.is_none()
            && (attributes.group.as_str(), attributes.resource.as_str()) == kind.target;
        let Some(object) = object.filter(|_| applies) else {
            return Ok(());
        };
        if !object["spec"].is_object() || !object["spec"][kind.field].is_null() {
            return Ok(());
        }
        let (group, plural) = kind.classes;
        let classes = self.reader.list_cluster_objects(group, plural).await?;
        if let Some(name) = default_of(&classes, kind.annotation) {
            object["spec"][kind.field] = Value::from(name);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{attributes, Classes};
    use serde_json::json;

    fn class(name: &str, created: &str, default: bool) -> Value {
        json!({"metadata": {"name": name, "creationTimestamp": created,
            "annotations": {"storageclass.kubernetes.io/is-default-class": if default { "true" } else { "false" }}}})
    }

    #[tokio::test]
    async fn claims_without_a_class_get_the_newest_default() {
        let plugin = DefaultClass::storage(Classes(vec![
            class("slow", "2026-01-01T00:00:00Z", true),
            class("fast", "2026-02-01T00:00:00Z", true),
            class("other", "2026-03-01T00:00:00Z", false),
        ]));
        let mut create = attributes(Operation::Create);
        create.resource = "persistentvolumeclaims".into();
        let mut claim = json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}}});
        plugin
            .admit(&create, Some(&mut claim), None)
            .await
            .expect("admitted");
        assert_eq!(claim["spec"]["storageClassName"], "fast");
        // A class the claim names (even "") is kept.
        let mut named = json!({"spec": {"storageClassName": ""}});
        plugin
            .admit(&create, Some(&mut named), None)
            .await
            .expect("admitted");
        assert_eq!(named["spec"]["storageClassName"], "");
        let none =
            DefaultClass::storage(Classes(vec![class("other", "2026-03-01T00:00:00Z", false)]));
        let mut claim = json!({"spec": {}});
        none.admit(&create, Some(&mut claim), None)
            .await
            .expect("admitted");
        assert!(claim["spec"].get("storageClassName").is_none());
    }
}
