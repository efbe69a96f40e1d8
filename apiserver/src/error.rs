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

/// A failed request, as the client will see it.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
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
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            continue_token: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    pub fn not_found(info: &ResourceInfo, name: &str) -> Self {
        Self {
            details: object_details(info, name),
            ..Self::new(
                404,
                "NotFound",
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
            ..Self::new(404, "NotFound", format!("namespaces \"{name}\" not found"))
        }
    }

    /// A path that names no resource we serve.
    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    pub fn already_exists(info: &ResourceInfo, name: &str) -> Self {
        Self {
            details: object_details(info, name),
            ..Self::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", qualified(info)),
            )
        }
    }

    /// The optimistic-concurrency failure: the object changed since the client read it.
    pub fn conflict(info: &ResourceInfo, name: &str, why: &str) -> Self {
        Self {
            details: object_details(info, name),
            ..Self::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": {why}",
                    qualified(info)
                ),
            )
        }
    }

    /// A 409 Conflict with a message of its own (server-side apply's field conflicts).
    pub fn conflict_plain(message: impl Into<String>) -> Self {
        Self::new(409, "Conflict", message)
    }

    pub fn modified(info: &ResourceInfo, name: &str) -> Self {
        Self::conflict(
            info,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Gone", message)
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(413, "RequestEntityTooLarge", message)
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
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
            code: 422,
            reason: "Invalid",
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
            ..Self::new(429, "TooManyRequests", message)
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }

    /// The `Status` object for this error.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
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
            E::Unavailable { .. } | E::Closed => {
                tracing::warn!(%error, "storage unavailable");
                ApiError::unavailable(format!("storage is unavailable: {error}"))
            }
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
        Self::new(denied.code, denied.reason, denied.message)
    }
}
