//! Probes, as upstream's prober: exec (through the runtime's ExecSync), httpGet (2xx/3xx is
//! success), tcpSocket (a connection is success) and grpc (the standard health service),
//! scheduled per container by `initialDelaySeconds` and `periodSeconds`, judged after
//! `successThreshold` / `failureThreshold` consecutive results. A startup probe holds back the
//! other two until it succeeds.

use std::time::Duration;

use http_body_util::Empty;
use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::time::Instant;

use crate::runtime::Runtime;

/// Which of a container's probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Startup,
    Liveness,
    Readiness,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Startup => "Startup",
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
        }
    }
}

/// One probe of one container instance.
#[derive(Debug, Clone)]
pub struct ProbeState {
    /// The container instance it judges; a new instance starts a new state.
    pub container_id: String,
    successes: i32,
    failures: i32,
    /// The current verdict: `None` until the thresholds have spoken.
    pub verdict: Option<bool>,
    next_at: Instant,
    /// What the last failure said, for the event.
    pub last_output: String,
}

impl ProbeState {
    pub fn new(container_id: &str, probe: &Probe, started: Instant) -> Self {
        let delay = u64::try_from(probe.initial_delay_seconds.unwrap_or(0)).unwrap_or(0);
        Self {
            container_id: container_id.to_owned(),
            successes: 0,
            failures: 0,
            verdict: None,
            next_at: started + Duration::from_secs(delay),
            last_output: String::new(),
        }
    }

    pub fn due(&self, now: Instant) -> bool {
        now >= self.next_at
    }

    pub fn next_at(&self) -> Instant {
        self.next_at
    }

    /// Counts one result; returns whether the verdict changed.
    pub fn record(&mut self, probe: &Probe, success: bool, output: String, now: Instant) -> bool {
        let period = u64::try_from(probe.period_seconds.unwrap_or(10).max(1)).unwrap_or(10);
        self.next_at = now + Duration::from_secs(period);
        if success {
            self.successes += 1;
            self.failures = 0;
        } else {
            self.failures += 1;
            self.successes = 0;
            self.last_output = output;
        }
        let before = self.verdict;
        if self.successes >= probe.success_threshold.unwrap_or(1).max(1) {
            self.verdict = Some(true);
        } else if self.failures >= probe.failure_threshold.unwrap_or(3).max(1) {
            self.verdict = Some(false);
        }
        before != self.verdict
    }
}

/// A port of `container` given by number or by name.
fn port(container: &Container, port: &IntOrString) -> Option<u16> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).ok(),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .or_else(|| name.parse().ok()),
    }
}

/// Runs `probe` once against a container instance; returns (success, output).
pub async fn run(
    probe: &Probe,
    runtime: &dyn Runtime,
    container: &Container,
    container_id: &str,
    pod_ip: &str,
) -> (bool, String) {
    let timeout =
        Duration::from_secs(u64::try_from(probe.timeout_seconds.unwrap_or(1).max(1)).unwrap_or(1));
    if let Some(exec) = &probe.exec {
        let command = exec.command.clone().unwrap_or_default();
        let seconds = i64::try_from(timeout.as_secs()).unwrap_or(1);
        return match runtime.exec_sync(container_id, &command, seconds).await {
            Ok(output) => {
                let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
                text.push_str(&String::from_utf8_lossy(&output.stderr));
                (output.exit_code == 0, text)
            }
            Err(error) => (false, error.to_string()),
        };
    }
    if let Some(http) = &probe.http_get {
        let host = http
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| pod_ip.to_owned());
        let Some(port) = port(container, &http.port) else {
            return (false, format!("unknown port {:?}", http.port));
        };
        let path = http.path.clone().unwrap_or_else(|| "/".into());
        let headers: Vec<(String, String)> = http
            .http_headers
            .iter()
            .flatten()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        return match tokio::time::timeout(timeout, http_get(&host, port, &path, &headers)).await {
            Ok(Ok(code)) if (200..400).contains(&code) => (true, String::new()),
            Ok(Ok(code)) => (false, format!("HTTP probe failed with statuscode: {code}")),
            Ok(Err(error)) => (
                false,
                format!("Get \"http://{host}:{port}{path}\": {error}"),
            ),
            Err(_) => (
                false,
                format!("Get \"http://{host}:{port}{path}\": context deadline exceeded"),
            ),
        };
    }
    if let Some(tcp) = &probe.tcp_socket {
        let host = tcp
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| pod_ip.to_owned());
        let Some(port) = port(container, &tcp.port) else {
            return (false, format!("unknown port {:?}", tcp.port));
        };
        return match tokio::time::timeout(
            timeout,
            tokio::net::TcpStream::connect((host.as_str(), port)),
        )
        .await
        {
            Ok(Ok(_)) => (true, String::new()),
            Ok(Err(error)) => (false, format!("dial tcp {host}:{port}: {error}")),
            Err(_) => (false, format!("dial tcp {host}:{port}: i/o timeout")),
        };
    }
    if let Some(grpc) = &probe.grpc {
        let Ok(port) = u16::try_from(grpc.port) else {
            return (false, format!("invalid port {}", grpc.port));
        };
        let service = grpc.service.clone().unwrap_or_default();
        return match tokio::time::timeout(timeout, grpc_health(pod_ip, port, service)).await {
            Ok(Ok(())) => (true, String::new()),
            Ok(Err(message)) => (false, message),
            Err(_) => (
                false,
                format!("timeout: health rpc did not complete within {timeout:?}"),
            ),
        };
    }
    (true, String::new())
}

/// The standard gRPC health check (`grpc.health.v1.Health/Check`), as upstream's grpc probe.
async fn grpc_health(host: &str, port: u16, service: String) -> Result<(), String> {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{host}:{port}"))
        .map_err(|e| e.to_string())?;
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| format!("failed to connect service \"{host}:{port}\" within 1s: {e}"))?;
    let answer = HealthClient::new(channel)
        .check(HealthCheckRequest { service })
        .await
        .map_err(|status| format!("health rpc failed: {}", status.message()))?;
    let status = answer.into_inner().status;
    if status == ServingStatus::Serving as i32 {
        Ok(())
    } else {
        Err(format!(
            "service unhealthy (responded with \"{}\")",
            ServingStatus::try_from(status)
                .map(|s| s.as_str_name())
                .unwrap_or("UNKNOWN")
        ))
    }
}

async fn http_get(
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
) -> Result<u16, String> {
    let stream = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut request = http::Request::get(path)
        .header(http::header::HOST, format!("{host}:{port}"))
        .header(http::header::USER_AGENT, "kube-probe/1.33")
        .header(http::header::ACCEPT, "*/*");
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request
        .body(Empty::<bytes::Bytes>::new())
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    Ok(response.status().as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_decide_the_verdict() {
        let probe = Probe {
            success_threshold: Some(1),
            failure_threshold: Some(2),
            period_seconds: Some(5),
            ..Default::default()
        };
        let now = Instant::now();
        let mut state = ProbeState::new("c1", &probe, now);
        assert!(state.due(now));
        assert_eq!(state.verdict, None);
        assert!(!state.record(&probe, false, "no".into(), now));
        assert_eq!(
            state.verdict, None,
            "one failure of two is not yet a verdict"
        );
        assert!(state.record(&probe, false, "no".into(), now));
        assert_eq!(state.verdict, Some(false));
        assert!(!state.due(now + Duration::from_secs(4)));
        assert!(state.record(&probe, true, String::new(), now));
        assert_eq!(state.verdict, Some(true));
    }

    #[tokio::test]
    async fn tcp_and_http_probes_against_a_real_listener() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buffer = [0u8; 1024];
                let _ = stream.read(&mut buffer).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
        let runtime = crate::runtime::fake::FakeRuntime::new("10.0.0", Duration::ZERO);
        let container = Container::default();
        let tcp = Probe {
            tcp_socket: Some(k8s_openapi::api::core::v1::TCPSocketAction {
                port: IntOrString::Int(i32::from(port)),
                host: None,
            }),
            ..Default::default()
        };
        assert!(run(&tcp, &runtime, &container, "c", "127.0.0.1").await.0);
        let http = Probe {
            http_get: Some(k8s_openapi::api::core::v1::HTTPGetAction {
                port: IntOrString::Int(i32::from(port)),
                ..Default::default()
            }),
            ..Default::default()
        };
        let (ok, output) = run(&http, &runtime, &container, "c", "127.0.0.1").await;
        assert!(!ok);
        assert_eq!(output, "HTTP probe failed with statuscode: 503");
    }

    #[tokio::test]
    async fn grpc_probes_ask_the_health_service() {
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter
            .set_service_status("", tonic_health::ServingStatus::Serving)
            .await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let runtime = crate::runtime::fake::FakeRuntime::new("10.0.0", Duration::ZERO);
        let probe = Probe {
            grpc: Some(k8s_openapi::api::core::v1::GRPCAction {
                port: i32::from(port),
                service: None,
            }),
            timeout_seconds: Some(2),
            ..Default::default()
        };
        let container = Container::default();
        assert_eq!(
            run(&probe, &runtime, &container, "c", "127.0.0.1").await,
            (true, String::new())
        );
        reporter
            .set_service_status("", tonic_health::ServingStatus::NotServing)
            .await;
        let (ok, output) = run(&probe, &runtime, &container, "c", "127.0.0.1").await;
        assert!(!ok);
        assert!(output.contains("NOT_SERVING"), "{output}");
    }
}
