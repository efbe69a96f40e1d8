//! `/containerLogs/{ns}/{pod}/{container}`: a container's CRI log file (`<RFC3339Nano>
//! <stream> <P|F> <text>` per line, P marking a partial line) turned back into what the
//! container wrote, with upstream's options: `previous`, `tailLines`, `sinceSeconds` /
//! `sinceTime`, `timestamps`, `limitBytes` and `follow` (which keeps the stream open, reading
//! what the container writes, until it exits).

use std::io::SeekFrom;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncSeekExt, BufReader};

use super::{query_values, text, Body, Server};
use crate::runtime::api;

/// What the request asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub tail_lines: Option<usize>,
    pub limit_bytes: Option<usize>,
    /// Only lines logged at or after this time (Unix ns).
    pub since: Option<i64>,
}

/// One decoded line of a CRI log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub time: String,
    pub nanos: i64,
    pub text: Vec<u8>,
    /// The line is complete (the container wrote a newline).
    pub full: bool,
}

/// Parses one CRI log line (without its newline).
pub fn parse(raw: &[u8]) -> Option<Line> {
    let mut parts = raw.splitn(4, |b| *b == b' ');
    let time = std::str::from_utf8(parts.next()?).ok()?.to_owned();
    let _stream = parts.next()?;
    let tag = parts.next()?;
    let text = parts.next().unwrap_or_default().to_vec();
    let nanos = time
        .parse::<jiff::Timestamp>()
        .ok()
        .and_then(|t| i64::try_from(t.as_nanosecond()).ok())
        .unwrap_or(0);
    Some(Line {
        time,
        nanos,
        text,
        full: !tag.starts_with(b"P"),
    })
}

/// What a line looks like in the answer.
pub fn render(line: &Line, timestamps: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.text.len() + 40);
    if timestamps {
        out.extend_from_slice(line.time.as_bytes());
        out.push(b' ');
    }
    out.extend_from_slice(&line.text);
    if line.full {
        out.push(b'\n');
    }
    out
}

fn options(request: &Request<Incoming>) -> Result<Options, String> {
    let first = |key: &str| query_values(request, key).into_iter().next();
    let truthy = |key: &str| first(key).is_some_and(|v| v == "true" || v == "1");
    let number = |key: &str| -> Result<Option<i64>, String> {
        first(key)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| format!("invalid {key}: {v:?}"))
            })
            .transpose()
    };
    let since = match (number("sinceSeconds")?, first("sinceTime")) {
        (Some(seconds), _) => {
            let now = jiff::Timestamp::now().as_nanosecond();
            Some(i64::try_from(now - i128::from(seconds) * 1_000_000_000).unwrap_or(0))
        }
        (None, Some(time)) => Some(
            time.parse::<jiff::Timestamp>()
                .map_err(|_| format!("invalid sinceTime: {time:?}"))
                .map(|t| i64::try_from(t.as_nanosecond()).unwrap_or(0))?,
        ),
        (None, None) => None,
    };
    Ok(Options {
        follow: truthy("follow"),
        previous: truthy("previous"),
        timestamps: truthy("timestamps"),
        tail_lines: number("tailLines")?.map(|n| usize::try_from(n.max(0)).unwrap_or(0)),
        limit_bytes: number("limitBytes")?.map(|n| usize::try_from(n.max(0)).unwrap_or(0)),
        since,
    })
}

/// The lines of `content` as the options want them (without `follow`).
pub fn select(content: &[u8], options: &Options) -> Vec<Line> {
    let mut lines: Vec<Line> = content
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(parse)
        .filter(|l| options.since.is_none_or(|since| l.nanos >= since))
        .collect();
    if let Some(tail) = options.tail_lines {
        // Count whole lines: a run of partials and its final piece are one line.
        let mut kept = 0;
        let mut start = lines.len();
        for (index, line) in lines.iter().enumerate().rev() {
            if line.full {
                if kept == tail {
                    break;
                }
                kept += 1;
            }
            start = index;
        }
        if tail == 0 {
            start = lines.len();
        }
        lines.drain(..start);
    }
    lines
}

pub async fn serve(
    server: &Server,
    request: &Request<Incoming>,
    namespace: &str,
    pod: &str,
    container: &str,
) -> Response<Body> {
    let options = match options(request) {
        Ok(options) => options,
        Err(message) => return text(StatusCode::BAD_REQUEST, message),
    };
    let containers = server.containers(namespace, pod, container).await;
    let chosen = if options.previous {
        containers.get(1)
    } else {
        containers.first()
    };
    let Some(status) = chosen.cloned() else {
        let message = if options.previous {
            format!("previous terminated container \"{container}\" in pod \"{pod}\" not found")
        } else {
            format!("container \"{container}\" in pod \"{pod}\" is not available")
        };
        return text(StatusCode::NOT_FOUND, message);
    };
    let path = std::path::PathBuf::from(&status.log_path);
    let file = match tokio::fs::File::open(&path).await {
        Ok(file) => file,
        Err(error) => {
            return text(
                StatusCode::NOT_FOUND,
                format!("failed to open log file {:?}: {error}", status.log_path),
            )
        }
    };
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(16);
    let runtime = server.runtime.clone();
    let follow = options.follow && !options.previous;
    tokio::spawn(async move {
        let _ = stream_file(file, options, follow, &status, runtime.as_ref(), &sender).await;
    });
    let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(receiver));
    let mut response = Response::new(BodyExt::boxed(body));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    response
}

type Sender = tokio::sync::mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>;

async fn stream_file(
    mut file: tokio::fs::File,
    options: Options,
    follow: bool,
    status: &api::ContainerStatus,
    runtime: &dyn crate::runtime::Runtime,
    sender: &Sender,
) -> Result<(), ()> {
    let mut content = Vec::new();
    file.read_to_end(&mut content).await.map_err(|_| ())?;
    let mut budget = options.limit_bytes.unwrap_or(usize::MAX);
    let send = |bytes: Vec<u8>, budget: &mut usize| {
        let take = bytes.len().min(*budget);
        *budget -= take;
        let mut bytes = bytes;
        bytes.truncate(take);
        bytes
    };
    let mut chunk = Vec::new();
    for line in select(&content, &options) {
        chunk.extend(send(render(&line, options.timestamps), &mut budget));
    }
    if !chunk.is_empty() {
        sender
            .send(Ok(Frame::data(Bytes::from(chunk))))
            .await
            .map_err(|_| ())?;
    }
    if !follow || budget == 0 {
        return Ok(());
    }
    // Follow: read what is appended, line by line, until the container has exited and the
    // file has nothing more.
    let offset = content.len() as u64;
    file.seek(SeekFrom::Start(offset)).await.map_err(|_| ())?;
    let mut reader = BufReader::new(file);
    let mut pending = Vec::new();
    let mut idle_checks = 0u32;
    loop {
        let mut line = Vec::new();
        let read = reader.read_until(b'\n', &mut line).await.map_err(|_| ())?;
        if read > 0 {
            pending.extend_from_slice(&line);
            if pending.ends_with(b"\n") {
                let raw = std::mem::take(&mut pending);
                if let Some(parsed) = parse(raw.strip_suffix(b"\n").unwrap_or(&raw)) {
                    let bytes = send(render(&parsed, options.timestamps), &mut budget);
                    sender
                        .send(Ok(Frame::data(Bytes::from(bytes))))
                        .await
                        .map_err(|_| ())?;
                    if budget == 0 {
                        return Ok(());
                    }
                }
            }
            continue;
        }
        if sender.is_closed() {
            return Ok(());
        }
        idle_checks += 1;
        if idle_checks.is_multiple_of(10) {
            let running = runtime
                .container_status(&status.id)
                .await
                .is_ok_and(|s| s.state == api::ContainerState::ContainerRunning as i32);
            if !running {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &[u8] = b"2026-11-29T18:14:46.482529029Z stdout F one\n\
2026-11-29T18:14:47.000000000Z stderr P par\n\
2026-11-29T18:14:47.100000000Z stderr F tial\n\
2026-11-29T18:14:48.000000000Z stdout F three\n";

    fn rendered(options: &Options) -> String {
        let lines = select(LOG, options);
        String::from_utf8(
            lines
                .iter()
                .flat_map(|l| render(l, options.timestamps))
                .collect(),
        )
        .expect("utf8")
    }

    #[test]
    fn partial_lines_are_joined_and_tails_count_whole_lines() {
        assert_eq!(rendered(&Options::default()), "one\npartial\nthree\n");
        let tail = Options {
            tail_lines: Some(2),
            ..Default::default()
        };
        assert_eq!(rendered(&tail), "partial\nthree\n");
        let none = Options {
            tail_lines: Some(0),
            ..Default::default()
        };
        assert_eq!(rendered(&none), "");
    }

    #[test]
    fn since_and_timestamps() {
        let since = "2026-11-29T18:14:47.5Z"
            .parse::<jiff::Timestamp>()
            .expect("time");
        let options = Options {
            since: Some(i64::try_from(since.as_nanosecond()).expect("fits")),
            timestamps: true,
            ..Default::default()
        };
        assert_eq!(rendered(&options), "2026-11-29T18:14:48.000000000Z three\n");
    }
}
