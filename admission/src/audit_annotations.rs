//! Audit annotations: what admission plugins add to a request's audit event, as upstream's
//! `AddAnnotation` (PodSecurity's `pod-security.kubernetes.io/enforce-policy` and
//! `audit-violations`, a ValidatingAdmissionPolicy's `Audit` failures and `auditAnnotations`).
//! The apiserver's audit filter runs the request inside [`collecting`]; a plugin calls
//! [`record`] from anywhere in that request's task, and outside one (no auditing, a test) the
//! call does nothing. A key is kept with its first value, as upstream keeps it.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

type Annotations = Arc<Mutex<BTreeMap<String, String>>>;

tokio::task_local! {
    static ANNOTATIONS: Annotations;
}

/// Adds `key: value` to the audit event of the request being handled, unless `key` is set.
pub fn record(key: impl Into<String>, value: impl Into<String>) {
    let _ = ANNOTATIONS.try_with(|annotations| {
        annotations
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry(key.into())
            .or_insert_with(|| value.into());
    });
}

/// Runs `request`, gathering the annotations recorded while it runs. `annotations` is shared
/// with the caller, so they can be read even if the request unwinds.
pub async fn collecting<F: Future>(
    annotations: Arc<Mutex<BTreeMap<String, String>>>,
    request: F,
) -> F::Output {
    ANNOTATIONS.scope(annotations, request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn recorded_inside_the_scope_only_and_first_value_kept() {
        record("outside", "dropped");
        let gathered = Annotations::default();
        collecting(gathered.clone(), async {
            record("a/b", "1");
            record("a/b", "2");
            tokio::task::yield_now().await;
            record("c/d", "3");
        })
        .await;
        let gathered = gathered.lock().unwrap().clone();
        assert_eq!(
            gathered.into_iter().collect::<Vec<_>>(),
            vec![
                ("a/b".to_string(), "1".to_string()),
                ("c/d".to_string(), "3".to_string())
            ]
        );
    }
}
