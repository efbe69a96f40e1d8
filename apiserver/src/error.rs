//! API errors and their one mapping to HTTP: every failure a client sees is a `Status` body with
//! upstream's code and reason. Storage errors become API errors here and nowhere else.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde::Serialize;
use serde_json::{json, Value};

use crate::catalog::ResourceInfo;

pub type Result<T, E = ApiError> = std::result::Result<T, E>;

/// One `StatusCause`: why a field was rejected.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cause {
    pub reason: String,
    pub message: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub field: String,
}

/// `Status.details`: which object the error is about.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Details {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<Cause>,
    #[serde(rename = "retryAfterSeconds", skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<i64>,
}

/// `Status.reason`: why a request failed, as upstream's `metav1.StatusReason`. Code that
/// reacts to a failure asks the reason (`is_not_found`), never the number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    BadRequest,
    Unauthorized,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    NotAcceptable,
    AlreadyExists,
    Conflict,
    Gone,
    Expired,
    RequestEntityTooLarge,
    UnsupportedMediaType,
    Invalid,
    TooManyRequests,
    InternalError,
    ServiceUnavailable,
    Timeout,
}

impl Reason {
    const ALL: [Reason; 17] = [
        Reason::BadRequest,
        Reason::Unauthorized,
        Reason::Forbidden,
        Reason::NotFound,
        Reason::MethodNotAllowed,
        Reason::NotAcceptable,
        Reason::AlreadyExists,
        Reason::Conflict,
        Reason::Gone,
        Reason::Expired,
        Reason::RequestEntityTooLarge,
        Reason::UnsupportedMediaType,
        Reason::Invalid,
        Reason::TooManyRequests,
        Reason::InternalError,
        Reason::ServiceUnavailable,
        Reason::Timeout,
    ];

    /// The reason as the `Status` body spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::BadRequest => "BadRequest",
            Reason::Unauthorized => "Unauthorized",
            Reason::Forbidden => "Forbidden",
            Reason::NotFound => "NotFound",
            Reason::MethodNotAllowed => "MethodNotAllowed",
            Reason::NotAcceptable => "NotAcceptable",
            Reason::AlreadyExists => "AlreadyExists",
            Reason::Conflict => "Conflict",
            Reason::Gone => "Gone",
            Reason::Expired => "Expired",
            Reason::RequestEntityTooLarge => "RequestEntityTooLarge",
            Reason::UnsupportedMediaType => "UnsupportedMediaType",
            Reason::Invalid => "Invalid",
            Reason::TooManyRequests => "TooManyRequests",
            Reason::InternalError => "InternalError",
            Reason::ServiceUnavailable => "ServiceUnavailable",
            Reason::Timeout => "Timeout",
        }
    }

    /// The HTTP code upstream answers this reason with.
    pub fn code(self) -> u16 {
        match self {
            Reason::BadRequest => 400,
            Reason::Unauthorized => 401,
            Reason::Forbidden => 403,
            Reason::NotFound => 404,
            Reason::MethodNotAllowed => 405,
            Reason::NotAcceptable => 406,
            Reason::AlreadyExists | Reason::Conflict => 409,
            Reason::Gone | Reason::Expired => 410,
            Reason::RequestEntityTooLarge => 413,
            Reason::UnsupportedMediaType => 415,
            Reason::Invalid => 422,
            Reason::TooManyRequests => 429,
            Reason::InternalError => 500,
            Reason::ServiceUnavailable => 503,
            Reason::Timeout => 504,
        }
    }

    /// The reason a `Status` body names, if it is one of ours.
    pub fn named(name: &str) -> Option<Reason> {
        Reason::ALL
            .into_iter()
            .find(|reason| reason.as_str() == name)
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A failed request, as the client will see it.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: Reason,
    pub message: String,
    pub details: Option<Box<Details>>,
    /// A fresh continue token, for the 410 of a list whose token outlived its revision.
    pub continue_token: Option<String>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

/// `pods "x"` or `deployments.apps "x"`: how upstream names a resource in messages.
pub fn qualified(info: &ResourceInfo) -> String {
    if info.group.is_empty() {
        info.plural.to_string()
    } else {
        format!("{}.{}", info.plural, info.group)
    }
}

fn object_details(info: &ResourceInfo, name: &str) -> Option<Box<Details>> {
    Some(Box::new(Details {
        name: name.to_string(),
        group: info.group.to_string(),
        kind: info.plural.to_string(),
        ..Details::default()
    }))
}

impl ApiError {
    /// A failure with this reason (and its code) and message.
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            code: reason.code(),
            reason,
            message: message.into(),
            details: None,
            continue_token: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(Reason::BadRequest, message)
    }

    pub fn unauthorized() -> Self {
        Self::new(Reason::Unauthorized, "Unauthorized")
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(Reason::Forbidden, message)
    }

    pub fn not_found(info: &ResourceInfo, name: &str) -> Self {
        Self {
            details: object_details(info, name),
            ..Self::new(
                Reason::NotFound,
                format!("{} \"{name}\" not found", qualified(info)),
            )
        }
    }

    pub fn namespace_not_found(name: &str) -> Self {
        Self {
            details: Some(Box::new(Details {
                name: name.to_string(),
                kind: "namespaces".into(),
                ..Details::default()
            })),
            ..Self::new(Reason::NotFound, format!("namespaces \"{name}\" not found"))
        }
    }

    /// A path that names no resource we serve.
    pub fn path_not_found() -> Self {
        Self::new(
            Reason::NotFound,
            "the server could not find the requested resource",
        )
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(Reason::MethodNotAllowed, message)
    }

    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(Reason::NotAcceptable, message)
    }

    pub fn already_exists(info: &ResourceInfo, name: &str) -> Self {
        Self {
            details: object_details(info, name),
            ..Self::new(
                Reason::AlreadyExists,
                format!("{} \"{name}\" already exists", qualified(info)),
            )
        }
    }

    /// The optimistic-concurrency failure: the object changed since the client read it.
    pub fn conflict(info: &ResourceInfo, name: &str, why: &str) -> Self {
        Self {
            details: object_details(info, name),
            ..Self::new(
                Reason::Conflict,
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": {why}",
                    qualified(info)
                ),
            )
        }
    }

    /// A 409 Conflict on a resource named as upstream qualifies it there (`pods/binding`).
    pub fn conflict_on(resource: &str, name: &str, why: &str) -> Self {
        Self {
            details: Some(Box::new(Details {
                name: name.to_string(),
                kind: resource.to_string(),
                ..Details::default()
            })),
            ..Self::new(
                Reason::Conflict,
                format!("Operation cannot be fulfilled on {resource} \"{name}\": {why}"),
            )
        }
    }

    /// A 409 Conflict with a message of its own (server-side apply's field conflicts).
    pub fn conflict_plain(message: impl Into<String>) -> Self {
        Self::new(Reason::Conflict, message)
    }

    pub fn modified(info: &ResourceInfo, name: &str) -> Self {
        Self::conflict(
            info,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(Reason::Expired, message)
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(Reason::Gone, message)
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(Reason::RequestEntityTooLarge, message)
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(Reason::UnsupportedMediaType,
            format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {content_type:?})"),
        )
    }

    /// 422 with one cause per rejected field, worded as upstream's `field.ErrorList`.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        let listed: Vec<String> = causes
            .iter()
            .map(|cause| {
                if cause.field.is_empty() {
                    cause.message.clone()
                } else {
                    format!("{}: {}", cause.field, cause.message)
                }
            })
            .collect();
        let summary = if listed.len() == 1 {
            listed.join("")
        } else {
            format!("[{}]", listed.join(", "))
        };
        Self {
            code: Reason::Invalid.code(),
            reason: Reason::Invalid,
            message: format!("{kind} \"{name}\" is invalid: {summary}"),
            details: Some(Box::new(Details {
                name: name.to_string(),
                group: group.to_string(),
                kind: kind.to_string(),
                causes,
                retry_after_seconds: None,
            })),
            continue_token: None,
        }
    }

    pub fn too_many_requests(message: impl Into<String>) -> Self {
        Self {
            details: Some(Box::new(Details {
                retry_after_seconds: Some(1),
                ..Details::default()
            })),
            ..Self::new(Reason::TooManyRequests, message)
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Reason::InternalError, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(Reason::ServiceUnavailable, message)
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(Reason::Timeout, message)
    }

    pub fn is_not_found(&self) -> bool {
        self.reason == Reason::NotFound
    }

    /// An optimistic-concurrency failure (the object changed since it was read).
    pub fn is_conflict(&self) -> bool {
        self.reason == Reason::Conflict
    }

    pub fn is_already_exists(&self) -> bool {
        self.reason == Reason::AlreadyExists
    }

    pub fn is_invalid(&self) -> bool {
        self.reason == Reason::Invalid
    }

    /// A storage failure of a watch: a start revision already compacted away (the client
    /// asked for `requested`) and a watcher that fell behind after `last_sent` are 410
    /// Expired, so clients relist; the rest map as any storage failure does.
    pub fn from_watch(error: rudder_storage::Error, requested: i64, last_sent: i64) -> Self {
        use rudder_storage::Error as E;
        match error {
            E::Compacted { compacted, .. } => ApiError::expired(format!(
                "too old resource version: {requested} ({compacted})"
            )),
            E::WatcherTooSlow(_) => ApiError::expired(format!(
                "too old resource version: {last_sent}: the watch fell behind"
            )),
            other => ApiError::from(other),
        }
    }

    /// The `Status` object for this error.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason.as_str(),
            "code": self.code,
        });
        if let Some(token) = &self.continue_token {
            status["metadata"]["continue"] = Value::from(token.clone());
        }
        if let Some(details) = &self.details {
            status["details"] = serde_json::to_value(details).unwrap_or(Value::Null);
        }
        status
    }
}

/// The one place storage failures become API errors. Conflicts and not-found are handled by
/// the store, which knows the resource; what reaches here is a backend problem.
impl ApiError {
    /// An admission plugin's refusal for a read or write of its own that failed: a server-side
    /// failure keeps its code and reason (503 while the storage is down, so clients retry),
    /// anything else is the plugin's internal error. `context` says what it was doing.
    pub fn into_denied(self, context: &str) -> rudder_admission::Denied {
        let (code, reason) = if self.code >= 500 {
            (self.code, self.reason.as_str())
        } else {
            (500, "InternalError")
        };
        rudder_admission::Denied {
            code,
            reason,
            message: format!("{context}: {}", self.message),
        }
    }
}

impl From<rudder_storage::Error> for ApiError {
    fn from(error: rudder_storage::Error) -> Self {
        use rudder_storage::Error as E;
        match &error {
            E::Compacted { .. } => ApiError::expired(format!("too old resource version: {error}")),
            E::FutureRevision { .. } => {
                ApiError::timeout(format!("Too large resource version: {error}"))
            }
            // The drivers' own guard of etcd's request limit; the registry refuses such
            // writes first (registry/storable.rs), so this is a backstop.
            E::TooLarge(_) => ApiError::too_large(format!("etcdserver: {error}")),
            E::Unavailable { message, .. } => {
                tracing::warn!(%error, "storage unavailable");
                ApiError::unavailable(format!("storage is unavailable: {message}"))
            }
            E::Closed => ApiError::unavailable(format!("storage is unavailable: {error}")),
            _ => {
                tracing::error!(%error, "storage error");
                ApiError::internal(format!("storage error: {error}"))
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (
            code,
            [(http::header::CONTENT_TYPE, "application/json")],
            self.status().to_string(),
        )
            .into_response();
        if let Some(retry) = self.details.as_ref().and_then(|d| d.retry_after_seconds) {
            if let Ok(value) = http::HeaderValue::from_str(&retry.to_string()) {
                response
                    .headers_mut()
                    .insert(http::header::RETRY_AFTER, value);
            }
        }
        response
    }
}

/// An admission refusal keeps the plugin's code and reason.
impl From<rudder_admission::Denied> for ApiError {
    fn from(denied: rudder_admission::Denied) -> Self {
        let reason = Reason::named(denied.reason).unwrap_or(Reason::Forbidden);
        Self {
            code: denied.code,
            ..Self::new(reason, denied.message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_names_itself_and_keeps_upstreams_code() {
        for reason in Reason::ALL {
            assert_eq!(Reason::named(reason.as_str()), Some(reason));
            let error = ApiError::new(reason, "m");
            assert_eq!(error.code, reason.code());
            assert_eq!(error.status()["reason"], reason.as_str());
        }
        assert_eq!(Reason::named("Teapot"), None);
        assert!(ApiError::conflict_plain("x").is_conflict());
        assert!(!ApiError::gone("x").is_not_found());
    }

    #[test]
    fn watch_failures_ask_clients_to_relist() {
        let compacted = rudder_storage::Error::Compacted {
            requested: 3,
            compacted: 9,
        };
        let error = ApiError::from_watch(compacted, 3, 3);
        assert_eq!((error.code, error.reason), (410, Reason::Expired));
        assert_eq!(error.message, "too old resource version: 3 (9)");
    }
}
