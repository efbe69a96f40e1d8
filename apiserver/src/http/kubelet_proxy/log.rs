//! `GET …/pods/<name>/log`: upstream's PodLogOptions read from the query and validated (400
//! for a value that does not parse, 422 `PodLogOptions "x" is invalid` for one out of range),
//! the container chosen, then the kubelet's `/containerLogs/<ns>/<pod>/<container>` streamed
//! back as `text/plain` chunk by chunk as it arrives (`follow=true` streams until the kubelet
//! or the client ends it). A pod not yet bound has no logs: an empty 200, as upstream. A
//! kubelet's failure becomes a `Status` with the kubelet's code and its body as the message.

use axum::body::Body;
use axum::response::Response;
use http::StatusCode;
use http_body_util::BodyExt;

use super::super::AppState;
use super::client::KubeletClient;
use super::endpoint::{self, Endpoint};
use super::options::{self, bool_param, int_param};
use crate::error::{ApiError, Cause, Details, Reason, Result};
use crate::request::Query;

/// How much of a kubelet's error body becomes the message (upstream's `maxReadLength`).
const MAX_ERROR_BODY: usize = 50_000;

/// A pods/log request's options (upstream's `PodLogOptions`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogOptions {
    pub container: Option<String>,
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub since_seconds: Option<i64>,
    /// RFC 3339, in UTC, to the second (as upstream forwards it).
    pub since_time: Option<String>,
    pub tail_lines: Option<i64>,
    pub limit_bytes: Option<i64>,
}

impl LogOptions {
    /// The options a query gives; 400 for a value that does not parse.
    pub fn from_query(query: &Query) -> Result<Self> {
        let since_time = match query.get("sinceTime").filter(|text| !text.is_empty()) {
            None => None,
            Some(text) => Some(options::rfc3339_utc(text)?),
        };
        Ok(Self {
            container: query
                .get("container")
                .filter(|name| !name.is_empty())
                .map(str::to_string),
            follow: bool_param(query, "follow"),
            previous: bool_param(query, "previous"),
            timestamps: bool_param(query, "timestamps"),
            since_seconds: int_param(query, "sinceSeconds")?,
            since_time,
            tail_lines: int_param(query, "tailLines")?,
            limit_bytes: int_param(query, "limitBytes")?,
        })
    }

    /// Upstream's `ValidatePodLogOptions`: 422 naming every rejected field.
    pub fn validate(&self, pod_name: &str) -> Result<()> {
        let mut causes = Vec::new();
        let invalid = |field: &str, value: i64, why: &str| Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {value}: {why}"),
            field: field.into(),
        };
        if let Some(lines) = self.tail_lines.filter(|lines| *lines < 0) {
            causes.push(invalid(
                "tailLines",
                lines,
                "must be greater than or equal to 0",
            ));
        }
        if let Some(bytes) = self.limit_bytes.filter(|bytes| *bytes < 1) {
            causes.push(invalid("limitBytes", bytes, "must be greater than 0"));
        }
        match (self.since_seconds, &self.since_time) {
            (Some(_), Some(_)) => causes.push(Cause {
                reason: "FieldValueForbidden".into(),
                message: "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
                    .into(),
                field: String::new(),
            }),
            (Some(seconds), None) if seconds < 1 => {
                causes.push(invalid("sinceSeconds", seconds, "must be greater than 0"));
            }
            _ => {}
        }
        if causes.is_empty() {
            return Ok(());
        }
        Err(ApiError::invalid("PodLogOptions", "", pod_name, causes))
    }

    /// The kubelet's query, keys sorted as Go's `url.Values.Encode` sorts them.
    pub fn kubelet_query(&self) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        if self.follow {
            query.append_pair("follow", "true");
        }
        if let Some(bytes) = self.limit_bytes {
            query.append_pair("limitBytes", &bytes.to_string());
        }
        if self.previous {
            query.append_pair("previous", "true");
        }
        if let Some(seconds) = self.since_seconds {
            query.append_pair("sinceSeconds", &seconds.to_string());
        }
        if let Some(time) = &self.since_time {
            query.append_pair("sinceTime", time);
        }
        if let Some(lines) = self.tail_lines {
            query.append_pair("tailLines", &lines.to_string());
        }
        if self.timestamps {
            query.append_pair("timestamps", "true");
        }
        query.finish()
    }
}

/// Serves one pods/log request.
pub async fn serve(
    state: &AppState,
    client: &KubeletClient,
    namespace: &str,
    name: &str,
    query: &Query,
) -> Result<Response> {
    let options = LogOptions::from_query(query)?;
    options.validate(name)?;
    let pod = endpoint::pod(state, namespace, name).await?;
    let container = endpoint::container(&pod, options.container.as_deref())?;
    let Some(node_name) = endpoint::node_name(&pod) else {
        return Ok(text(Body::empty()));
    };
    let kubelet = endpoint::of_node_named(state, node_name).await?;
    let path = options::path_segments(&["containerLogs", namespace, name, &container]);
    let kubelet_query = options.kubelet_query();
    let target = if kubelet_query.is_empty() {
        path
    } else {
        format!("{path}?{kubelet_query}")
    };
    let request = http::Request::get(target.as_str())
        .body(Body::empty())
        .map_err(|error| ApiError::internal(format!("the kubelet request: {error}")))?;
    let response = client.send(&kubelet, request).await.map_err(|error| {
        ApiError::internal(format!("Get \"{}\": {error}", url(&kubelet, &target)))
    })?;
    let status = response.status();
    if !(200..=206).contains(&status.as_u16()) {
        let body = read_error_body(response.into_body()).await;
        return Err(kubelet_failure(status.as_u16(), "pods/log", name, &body));
    }
    Ok(text(Body::new(response.into_body())))
}

fn url(kubelet: &Endpoint, target: &str) -> String {
    format!("https://{}{target}", kubelet.authority())
}

/// A 200 `text/plain` answer carrying `body` as it comes.
fn text(body: Body) -> Response {
    let mut response = Response::new(body);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    *response.status_mut() = StatusCode::OK;
    response
}

/// Up to [`MAX_ERROR_BODY`] bytes of a failed answer, as text.
async fn read_error_body(mut body: hyper::body::Incoming) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < MAX_ERROR_BODY {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    bytes.extend_from_slice(data);
                }
            }
            _ => break,
        }
    }
    bytes.truncate(MAX_ERROR_BODY);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A kubelet's failed answer as upstream's response checker words it: 500 and 400 carry the
/// kubelet's text as their message; other codes keep their code with upstream's generic
/// message for it, naming the subresource and the object.
pub fn kubelet_failure(code: u16, resource: &str, name: &str, body: &str) -> ApiError {
    match code {
        500 => return ApiError::internal(format!("Internal error occurred: {body}")),
        400 => return ApiError::bad_request(body),
        _ => {}
    }
    let (reason, message) = match code {
        409 => (Reason::Conflict, "the server reported a conflict".to_string()),
        404 => (
            Reason::NotFound,
            "the server could not find the requested resource".to_string(),
        ),
        401 => (
            Reason::Unauthorized,
            "the server has asked for the client to provide credentials".to_string(),
        ),
        403 => (Reason::Forbidden, body.to_string()),
        405 => (
            Reason::MethodNotAllowed,
            "the server does not allow this method on the requested resource".to_string(),
        ),
        406 => (Reason::NotAcceptable, body.to_string()),
        415 => (Reason::UnsupportedMediaType, body.to_string()),
        422 => (
            Reason::Invalid,
            "the server rejected our request due to an error in our request".to_string(),
        ),
        429 => (
            Reason::TooManyRequests,
            "the server has received too many requests and has asked us to try again later"
                .to_string(),
        ),
        503 => (
            Reason::ServiceUnavailable,
            "the server is currently unable to handle the request".to_string(),
        ),
        504 => (
            Reason::Timeout,
            "the server was unable to return a response in the time allotted, but may still be processing the request".to_string(),
        ),
        code if code >= 500 => (
            Reason::InternalError,
            format!("an error on the server ({body:?}) has prevented the request from succeeding"),
        ),
        code => (
            Reason::BadRequest,
            format!("the server responded with the status code {code} but did not return more information"),
        ),
    };
    ApiError {
        code,
        details: Some(Box::new(Details {
            name: name.to_string(),
            kind: resource.to_string(),
            ..Details::default()
        })),
        ..ApiError::new(reason, format!("{message} ( {resource} {name})"))
    }
}
