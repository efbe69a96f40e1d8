//! The table of CertificateSigningRequests, with upstream's columns: name, age, signer,
//! requestor, requested duration and the request's condition (`Pending`, `Approved,Issued` …).

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use super::format::{age, age_col, col, human_duration, name_col};
use super::{Column, Printer};
use crate::json::{array_at, name, opt_int_at, str_at};

/// The table of CertificateSigningRequests.
pub struct CsrTable;

impl Printer for CsrTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            age_col(),
            col(
                "SignerName",
                "string",
                "The signer the request is addressed to.",
            ),
            col("Requestor", "string", "The user who created the request."),
            col(
                "RequestedDuration",
                "string",
                "The lifetime the request asks the signer for.",
            ),
            col(
                "Condition",
                "string",
                "Whether the request is pending, approved or denied, failed or issued.",
            ),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let or_none = |text: &str| {
            if text.is_empty() {
                "<none>".to_string()
            } else {
                text.to_string()
            }
        };
        let duration = opt_int_at(obj, &["spec", "expirationSeconds"])
            .map(|seconds| human_duration(SignedDuration::from_secs(seconds)))
            .unwrap_or_else(|| "<none>".to_string());
        vec![
            Value::from(name(obj)),
            age(obj, now),
            Value::from(or_none(str_at(obj, &["spec", "signerName"]))),
            Value::from(str_at(obj, &["spec", "username"])),
            Value::from(duration),
            Value::from(condition(obj)),
        ]
    }
}

/// Denied wins over Approved, and either over Pending; then Failed and Issued, if so.
fn condition(obj: &Value) -> String {
    let has = |kind: &str| {
        array_at(obj, &["status", "conditions"])
            .iter()
            .any(|c| c.get("type").and_then(Value::as_str) == Some(kind))
    };
    let mut text = if has("Denied") {
        "Denied".to_string()
    } else if has("Approved") {
        "Approved".to_string()
    } else {
        "Pending".to_string()
    };
    if has("Failed") {
        text.push_str(",Failed");
    }
    if !str_at(obj, &["status", "certificate"]).is_empty() {
        text.push_str(",Issued");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_show_signer_requestor_duration_and_condition() {
        let now: Timestamp = "2024-05-01T12:00:00Z".parse().expect("time");
        let obj = json!({"metadata": {"name": "csr-1", "creationTimestamp": "2024-05-01T11:59:00Z"},
            "spec": {"signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                     "username": "system:bootstrap:abcdef", "expirationSeconds": 86400},
            "status": {"conditions": [{"type": "Approved", "status": "True"}], "certificate": "Zm9v"}});
        assert_eq!(
            CsrTable.cells(&obj, now),
            [
                json!("csr-1"),
                json!("60s"),
                json!("kubernetes.io/kube-apiserver-client-kubelet"),
                json!("system:bootstrap:abcdef"),
                json!("24h"),
                json!("Approved,Issued")
            ]
        );
        let pending = json!({"metadata": {"name": "p"}, "spec": {}});
        let cells = CsrTable.cells(&pending, now);
        assert_eq!(cells[2], "<none>");
        assert_eq!(cells[4], "<none>");
        assert_eq!(cells[5], "Pending");
        let denied = json!({"status": {"conditions": [{"type": "Denied"}, {"type": "Failed"}]}});
        assert_eq!(condition(&denied), "Denied,Failed");
    }
}
