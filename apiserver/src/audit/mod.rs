//! Auditing, as upstream's apiserver does it: each request is judged by the audit policy
//! (policy.rs) and, at a level above `None`, written as `audit.k8s.io/v1` `Event`s — one per
//! stage (`RequestReceived`, `ResponseStarted` for watches, `ResponseComplete`, `Panic` when a
//! handler panics) unless the policy omits it — to a rotated JSON-lines log (sink.rs). `Metadata` records who did what to
//! which object and how it ended; `Request` adds the request body, `RequestResponse` the
//! response's. The HTTP side (http/audit.rs) gathers what an event needs.

pub mod policy;
pub mod sink;

use std::path::PathBuf;

use serde_json::{json, Map, Value};

pub use policy::{Decision, Level, Policy, ResourceRef, Stage, Subject};
pub use sink::{Rotation, Sink};

use crate::authn::UserInfo;

/// How to audit (`--audit-policy-file`, `--audit-log-path`, `--audit-log-max*`).
#[derive(Clone, Debug)]
pub struct AuditConfig {
    /// `None`: every request at `Metadata`.
    pub policy_file: Option<PathBuf>,
    /// The log; `-` for stdout.
    pub log_path: PathBuf,
    pub rotation: Rotation,
}

/// The policy and the log.
pub struct Auditor {
    pub policy: Policy,
    sink: Sink,
}

impl Auditor {
    /// Reads the policy and opens the log.
    pub fn open(config: &AuditConfig) -> Result<Self, String> {
        let policy = match &config.policy_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|error| format!("--audit-policy-file {}: {error}", path.display()))?;
                Policy::parse(&text)
                    .map_err(|error| format!("--audit-policy-file {}: {error}", path.display()))?
            }
            None => Policy::metadata_for_all(),
        };
        let sink = Sink::open(&config.log_path, config.rotation)
            .map_err(|error| format!("--audit-log-path {}: {error}", config.log_path.display()))?;
        Ok(Self { policy, sink })
    }

    /// Writes `event` at `stage` unless the decision omits that stage.
    pub fn emit(&self, decision: &Decision, event: &Event, stage: Stage) {
        if decision.omit_stages.contains(&stage) {
            return;
        }
        let mut value = event.to_json(decision.level, stage);
        if decision.omit_managed_fields {
            for key in ["requestObject", "responseObject"] {
                if let Some(metadata) = value[key]["metadata"].as_object_mut() {
                    metadata.remove("managedFields");
                }
            }
        }
        match serde_json::to_vec(&value) {
            Ok(line) => self.sink.write(&line),
            Err(error) => tracing::warn!(%error, "an audit event did not serialize"),
        }
    }
}

/// Now as an audit timestamp (RFC 3339, microseconds).
pub fn timestamp() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// What one request's events say.
#[derive(Clone, Debug, Default)]
pub struct Event {
    pub audit_id: String,
    pub request_uri: String,
    pub verb: String,
    /// Who sent the request.
    pub user: UserInfo,
    /// Whom it acted as, when it impersonated.
    pub impersonated: Option<UserInfo>,
    pub source_ips: Vec<String>,
    pub user_agent: String,
    /// `{resource, namespace, name, apiGroup, apiVersion, subresource}` of a resource request.
    pub object_ref: Option<Value>,
    pub request_received: String,
    /// Filled once the response is known.
    pub response_status: Option<Value>,
    pub request_object: Option<Value>,
    pub response_object: Option<Value>,
    /// What admission recorded (`pod-security.kubernetes.io/audit-violations`, …), shared
    /// with the request while it runs; written from `ResponseStarted` on.
    pub annotations: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, String>>>,
}

fn user_json(user: &UserInfo) -> Value {
    // Nobody was authenticated (a failed authentication): an empty user, as upstream's.
    if user.name.is_empty() {
        return json!({});
    }
    let mut out = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        out["uid"] = json!(user.uid);
    }
    if !user.extra.is_empty() {
        out["extra"] = json!(user.extra);
    }
    out
}

impl Event {
    fn to_json(&self, level: Level, stage: Stage) -> Value {
        let mut out = Map::new();
        out.insert("kind".into(), json!("Event"));
        out.insert("apiVersion".into(), json!("audit.k8s.io/v1"));
        out.insert("level".into(), json!(level.as_str()));
        out.insert("auditID".into(), json!(self.audit_id));
        out.insert("stage".into(), json!(stage.as_str()));
        out.insert("requestURI".into(), json!(self.request_uri));
        out.insert("verb".into(), json!(self.verb));
        out.insert("user".into(), user_json(&self.user));
        if let Some(impersonated) = &self.impersonated {
            out.insert("impersonatedUser".into(), user_json(impersonated));
        }
        out.insert("sourceIPs".into(), json!(self.source_ips));
        if !self.user_agent.is_empty() {
            out.insert("userAgent".into(), json!(self.user_agent));
        }
        if let Some(object_ref) = &self.object_ref {
            out.insert("objectRef".into(), object_ref.clone());
        }
        if stage != Stage::RequestReceived {
            if let Some(status) = &self.response_status {
                out.insert("responseStatus".into(), status.clone());
            }
        }
        if level >= Level::Request {
            if let Some(object) = &self.request_object {
                out.insert("requestObject".into(), object.clone());
            }
        }
        if level >= Level::RequestResponse && stage == Stage::ResponseComplete {
            if let Some(object) = &self.response_object {
                out.insert("responseObject".into(), object.clone());
            }
        }
        if stage != Stage::RequestReceived {
            let annotations = self
                .annotations
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if !annotations.is_empty() {
                out.insert("annotations".into(), json!(*annotations));
            }
        }
        out.insert(
            "requestReceivedTimestamp".into(),
            json!(self.request_received),
        );
        out.insert("stageTimestamp".into(), json!(timestamp()));
        Value::Object(out)
    }
}
