//! CRD conversion by webhook (`spec.conversion.strategy: Webhook`): objects of a version other
//! than the storage version are converted by POSTing a ConversionReview
//! (`apiextensions.k8s.io/v1`, or `v1beta1` when that is all the CRD's
//! `conversionReviewVersions` name) to the CRD's webhook — its URL, or a ready endpoint of its
//! Service, verified against its `caBundle` — as upstream's webhook converter does:
//!
//! ```text
//! read  (get, list page, watch event): stored objects (storage version) → one review → served version
//! write (create, update, delete marks): the object (served version) → one review → storage version
//! ```
//!
//! The answer is checked as upstream checks it: `result.status` Success, as many objects as
//! were sent, each of the desired apiVersion and of the same kind, and only its labels and
//! annotations taken from the webhook's metadata (name, namespace, uid and the rest stay as
//! they were). A failure is an InternalError naming the CRD's group, version and kind. The
//! watch cache does not hold such versions (their lists and watches come from the store).

use std::time::Duration;

use serde_json::{json, Value};

use crate::error::ApiError;
use crate::registry::Registry;
use crate::webhooks::call;

/// How long a conversion webhook has to answer (upstream's default for them).
const TIMEOUT: Duration = Duration::from_secs(30);

/// A CRD's conversion webhook.
#[derive(Debug)]
pub struct WebhookConverter {
    group: String,
    kind: String,
    client_config: Value,
    /// The ConversionReview version sent: `v1` when the CRD accepts it, else `v1beta1`.
    review_version: &'static str,
}

impl WebhookConverter {
    /// The converter of `spec` (a CRD's), when its conversion strategy is Webhook.
    pub fn of(spec: &Value) -> Option<Self> {
        let conversion = &spec["conversion"];
        if conversion["strategy"] != "Webhook" {
            return None;
        }
        let webhook = &conversion["webhook"];
        let accepts_v1 = webhook["conversionReviewVersions"]
            .as_array()
            .is_none_or(|versions| versions.iter().any(|v| v == "v1"));
        Some(Self {
            group: spec["group"].as_str().unwrap_or("").to_string(),
            kind: spec["names"]["kind"].as_str().unwrap_or("").to_string(),
            client_config: webhook["clientConfig"].clone(),
            review_version: if accepts_v1 { "v1" } else { "v1beta1" },
        })
    }

    /// `objects` converted to `desired` (`group/version`); those already of it are left as
    /// they are, and nothing is sent when none needs converting. (Boxed: reading the
    /// webhook's Service goes through the registry, which converts with this.)
    pub fn convert<'a>(
        &'a self,
        reader: &'a Registry,
        objects: Vec<Value>,
        desired: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Vec<Value>, ApiError>> {
        Box::pin(self.convert_now(reader, objects, desired))
    }

    async fn convert_now(
        &self,
        reader: &Registry,
        objects: Vec<Value>,
        desired: &str,
    ) -> Result<Vec<Value>, ApiError> {
        let pending: Vec<usize> = (0..objects.len())
            .filter(|&i| objects[i]["apiVersion"] != desired)
            .collect();
        if pending.is_empty() {
            return Ok(objects);
        }
        let sent: Vec<Value> = pending.iter().map(|&i| objects[i].clone()).collect();
        let converted = self
            .call(reader, &sent, desired)
            .await
            .map_err(|why| self.failure(desired, &why))?;
        let mut objects = objects;
        for (&i, converted) in pending.iter().zip(converted) {
            objects[i] = converted;
        }
        Ok(objects)
    }

    fn failure(&self, desired: &str, why: &str) -> ApiError {
        let version = desired.rsplit('/').next().unwrap_or(desired);
        ApiError::internal(format!(
            "conversion webhook for {}/{version}, Kind={} failed: {why}",
            self.group, self.kind
        ))
    }

    async fn call(
        &self,
        reader: &Registry,
        sent: &[Value],
        desired: &str,
    ) -> Result<Vec<Value>, String> {
        let target = call::target_of(reader, &self.client_config).await?;
        let uid = uuid::Uuid::new_v4().to_string();
        let review = json!({
            "apiVersion": format!("apiextensions.k8s.io/{}", self.review_version),
            "kind": "ConversionReview",
            "request": {"uid": uid, "desiredAPIVersion": desired, "objects": sent},
        });
        let ca_bundle = self.client_config["caBundle"].as_str();
        let answer = call::post(&target, ca_bundle, &review, TIMEOUT).await?;
        checked(&answer["response"], &uid, sent, desired)
    }
}

/// The converted objects of a ConversionReview `response`, checked against what was sent.
fn checked(
    response: &Value,
    uid: &str,
    sent: &[Value],
    desired: &str,
) -> Result<Vec<Value>, String> {
    if response["uid"] != uid {
        return Err(format!(
            "expected response uid {uid:?}, got {:?}",
            response["uid"].as_str().unwrap_or("")
        ));
    }
    if response["result"]["status"] != "Success" {
        let message = response["result"]["message"].as_str().unwrap_or("");
        return Err(if message.is_empty() {
            "conversion failed".to_string()
        } else {
            message.to_string()
        });
    }
    let converted = response["convertedObjects"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if converted.len() != sent.len() {
        return Err(format!(
            "returned {} objects, expected {}",
            converted.len(),
            sent.len()
        ));
    }
    converted
        .into_iter()
        .zip(sent)
        .enumerate()
        .map(|(i, (mut object, original))| {
            if object["apiVersion"] != desired {
                return Err(format!(
                    "invalid converted object at index {i}: invalid apiVersion {:?}, expected {desired:?}",
                    object["apiVersion"].as_str().unwrap_or("")
                ));
            }
            if object["kind"] != original["kind"] {
                return Err(format!(
                    "invalid converted object at index {i}: invalid kind {:?}, expected {:?}",
                    object["kind"].as_str().unwrap_or(""),
                    original["kind"].as_str().unwrap_or("")
                ));
            }
            // Only labels and annotations are the webhook's to change.
            let mut metadata = original["metadata"].clone();
            for field in ["labels", "annotations"] {
                match object["metadata"].get(field) {
                    Some(value) if !value.is_null() => metadata[field] = value.clone(),
                    _ => {
                        if let Some(map) = metadata.as_object_mut() {
                            map.remove(field);
                        }
                    }
                }
            }
            object["metadata"] = metadata;
            Ok(object)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widget(version: &str, size: i64) -> Value {
        json!({"apiVersion": format!("stable.example.com/{version}"), "kind": "Widget",
            "metadata": {"name": "w", "namespace": "d", "uid": "u-1", "resourceVersion": "7",
                "labels": {"a": "1"}},
            "spec": {"size": size}})
    }

    #[test]
    fn a_review_answer_is_checked_as_upstream_checks_it() {
        let sent = vec![widget("v1", 3)];
        let desired = "stable.example.com/v2";
        let mut good = widget("v2", 3);
        good["metadata"]["name"] = json!("renamed");
        good["metadata"]["labels"] = json!({"b": "2"});
        let response =
            json!({"uid": "x", "result": {"status": "Success"}, "convertedObjects": [good]});
        let converted = checked(&response, "x", &sent, desired).expect("converted");
        // The webhook's labels are kept; its name is not.
        assert_eq!(converted[0]["metadata"]["name"], "w");
        assert_eq!(converted[0]["metadata"]["labels"], json!({"b": "2"}));
        assert_eq!(converted[0]["metadata"]["resourceVersion"], "7");

        assert!(checked(&response, "other", &sent, desired)
            .expect_err("uid")
            .contains("uid"));
        let failed = json!({"uid": "x", "result": {"status": "Failure", "message": "no v2 here"}});
        assert_eq!(
            checked(&failed, "x", &sent, desired).expect_err("failure"),
            "no v2 here"
        );
        let short = json!({"uid": "x", "result": {"status": "Success"}, "convertedObjects": []});
        assert!(checked(&short, "x", &sent, desired)
            .expect_err("count")
            .contains("returned 0 objects, expected 1"));
        let wrong = json!({"uid": "x", "result": {"status": "Success"},
            "convertedObjects": [widget("v1", 3)]});
        assert!(checked(&wrong, "x", &sent, desired)
            .expect_err("version")
            .contains("invalid apiVersion"));
    }

    fn crd_errors(conversion: Value) -> Vec<String> {
        let info = &crate::crd::kind::CUSTOM_RESOURCE_DEFINITIONS;
        let mut crd = json!({"metadata": {"name": "widgets.stable.example.com"},
            "spec": {"group": "stable.example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "conversion": conversion,
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
        info.strategy.default(&mut crd);
        let mut errors = Vec::new();
        info.strategy.validate(&crd, None, &mut errors);
        errors
            .iter()
            .map(crate::validation::FieldError::message)
            .collect()
    }

    #[test]
    fn crds_take_a_webhook_exactly_when_they_convert_by_one() {
        let client = json!({"url": "https://convert.example.com/convert", "caBundle": "Y2E="});
        let webhook = json!({"strategy": "Webhook",
            "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": client}});
        assert_eq!(crd_errors(webhook), Vec::<String>::new());
        assert_eq!(
            crd_errors(json!({"strategy": "None"})),
            Vec::<String>::new()
        );
        let service = json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1beta1", "v1"],
            "clientConfig": {"service": {"namespace": "a", "name": "b"}}}});
        assert_eq!(crd_errors(service), Vec::<String>::new());

        let missing = crd_errors(json!({"strategy": "Webhook"}));
        assert!(
            missing[0].contains("spec.conversion.webhook: Required value"),
            "{missing:?}"
        );
        let stray = crd_errors(json!({"strategy": "None", "webhook": {"clientConfig": client}}));
        assert!(stray[0].contains("should not be set"), "{stray:?}");
        let bad = crd_errors(json!({"strategy": "Webhook", "webhook": {
            "conversionReviewVersions": ["v2"], "clientConfig": {"url": "http://x/convert"}}}));
        let bad = bad.join("\n");
        assert!(
            bad.contains("must include at least one of v1, v1beta1"),
            "{bad}"
        );
        assert!(
            bad.contains("'https' is the only allowed URL scheme"),
            "{bad}"
        );
    }

    #[test]
    fn only_webhook_strategies_convert_and_v1_is_preferred() {
        assert!(WebhookConverter::of(&json!({"conversion": {"strategy": "None"}})).is_none());
        let spec = json!({"group": "stable.example.com", "names": {"kind": "Widget"},
            "conversion": {"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1beta1"], "clientConfig": {"url": "https://x/convert"}}}});
        let converter = WebhookConverter::of(&spec).expect("webhook");
        assert_eq!(converter.review_version, "v1beta1");
        assert_eq!(
            converter.failure("stable.example.com/v2", "boom").message,
            "conversion webhook for stable.example.com/v2, Kind=Widget failed: boom"
        );
    }
}
