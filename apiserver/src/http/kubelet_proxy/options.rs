//! Query parameters as upstream's parameter codec reads them, and the kubelet's own names for
//! the streaming options: `stdin`/`stdout`/`stderr`/`tty` become `input`/`output`/`error`/
//! `tty` (`=1`), `command` repeats, and port-forward's `ports` become one `port` list.

use serde_json::{json, Value};

use crate::catalog::Subresource;
use crate::error::{ApiError, Result};
use crate::request::Query;

/// A boolean option as upstream converts one from a query: absent is false, and any value but
/// `0` or `false` (in any case) is true, the empty value included.
pub fn bool_param(query: &Query, key: &str) -> bool {
    match query.get(key) {
        None => false,
        Some(value) => value != "0" && !value.eq_ignore_ascii_case("false"),
    }
}

/// An integer option: absent or empty is none; otherwise 400 with Go's parse error.
pub fn int_param(query: &Query, key: &str) -> Result<Option<i64>> {
    match query.get(key).filter(|text| !text.is_empty()) {
        None => Ok(None),
        Some(text) => text.parse::<i64>().map(Some).map_err(|_| {
            ApiError::bad_request(format!(
                "strconv.ParseInt: parsing {text:?}: invalid syntax"
            ))
        }),
    }
}

/// An RFC 3339 time, re-written in UTC to the second, as upstream forwards `sinceTime`.
pub fn rfc3339_utc(text: &str) -> Result<String> {
    let timestamp: jiff::Timestamp = text.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "parsing time {text:?} as \"2006-01-02T15:04:05Z07:00\": cannot parse"
        ))
    })?;
    Ok(timestamp.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// `/a/b/c` from segments, each percent-encoded as a path segment.
pub fn path_segments(segments: &[&str]) -> String {
    const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
        .add(b' ')
        .add(b'"')
        .add(b'#')
        .add(b'%')
        .add(b'/')
        .add(b'<')
        .add(b'>')
        .add(b'?')
        .add(b'`')
        .add(b'{')
        .add(b'}');
    segments
        .iter()
        .map(|segment| {
            format!(
                "/{}",
                percent_encoding::utf8_percent_encode(segment, SEGMENT)
            )
        })
        .collect()
}

/// The kubelet path and query of an exec, attach or port-forward of `pod` (in `namespace`;
/// `container` for exec and attach): `/exec/<ns>/<pod>/<container>?command=…&input=1…`,
/// `/attach/…?input=1…`, `/portForward/<ns>/<pod>?port=80,443`. Keys are sorted as Go's
/// `url.Values.Encode` sorts them.
pub fn stream_target(
    sub: Subresource,
    namespace: &str,
    pod: &str,
    container: &str,
    query: &Query,
) -> Result<String> {
    let mut out = form_urlencoded::Serializer::new(String::new());
    let path = match sub {
        Subresource::Exec | Subresource::Attach => {
            if sub == Subresource::Exec {
                for command in query.all("command") {
                    out.append_pair("command", command);
                }
            }
            for (theirs, kubelets) in [
                ("stderr", "error"),
                ("stdin", "input"),
                ("stdout", "output"),
                ("tty", "tty"),
            ] {
                if bool_param(query, theirs) {
                    out.append_pair(kubelets, "1");
                }
            }
            let verb = if sub == Subresource::Exec {
                "exec"
            } else {
                "attach"
            };
            path_segments(&[verb, namespace, pod, container])
        }
        Subresource::PortForward => {
            let ports = ports(query)?;
            if !ports.is_empty() {
                out.append_pair("port", &ports.join(","));
            }
            path_segments(&["portForward", namespace, pod])
        }
        other => {
            return Err(ApiError::internal(format!(
                "{other} is not a streaming subresource"
            )))
        }
    };
    let query = out.finish();
    Ok(if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    })
}

/// Port-forward's `ports` (repeated, or comma-separated), each a port number.
fn ports(query: &Query) -> Result<Vec<String>> {
    let mut ports = Vec::new();
    for value in query.all("ports") {
        for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let port: u16 = part.parse().map_err(|_| {
                ApiError::bad_request(format!(
                    "strconv.ParseInt: parsing {part:?}: invalid syntax"
                ))
            })?;
            ports.push(port.to_string());
        }
    }
    Ok(ports)
}

/// The options object a CONNECT is admitted with, as upstream's parameter codec builds it
/// from the query (booleans only when set, as their `omitempty` tags write them):
/// PodExecOptions, PodAttachOptions, PodPortForwardOptions, or NodeProxyOptions with the path
/// after `/proxy/` (`proxied`, still percent-encoded).
pub fn connect_options(sub: Subresource, query: &Query, proxied: &str) -> Result<Value> {
    let kind = match sub {
        Subresource::Exec => "PodExecOptions",
        Subresource::Attach => "PodAttachOptions",
        Subresource::PortForward => "PodPortForwardOptions",
        Subresource::Proxy => "NodeProxyOptions",
        other => {
            return Err(ApiError::internal(format!(
                "{other} is not a connect subresource"
            )))
        }
    };
    let mut options = json!({"kind": kind, "apiVersion": "v1"});
    match sub {
        Subresource::Exec | Subresource::Attach => {
            for flag in ["stdin", "stdout", "stderr", "tty"] {
                if bool_param(query, flag) {
                    options[flag] = json!(true);
                }
            }
            if let Some(container) = query.get("container").filter(|c| !c.is_empty()) {
                options["container"] = json!(container);
            }
            if sub == Subresource::Exec {
                options["command"] = json!(query.all("command"));
            }
        }
        Subresource::PortForward => {
            let ports = ports(query)?
                .iter()
                .filter_map(|port| port.parse::<u16>().ok())
                .collect::<Vec<_>>();
            if !ports.is_empty() {
                options["ports"] = json!(ports);
            }
        }
        _ => {
            let path = proxied.trim_start_matches('/');
            if !path.is_empty() {
                options["path"] = json!(path);
            }
        }
    }
    Ok(options)
}
