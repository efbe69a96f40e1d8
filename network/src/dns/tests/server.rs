//! The server over real sockets on 127.0.0.1: answers from the zone over UDP and TCP,
//! truncation and EDNS, error codes for bad queries, forwarding to fake upstreams bound here
//! (answering, truncating over UDP, or silent), and the load generator against it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{cluster_ip, data, headless, name, slice, Ep};
use crate::dns::{load, Config, Records, Server};

struct Running {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

async fn start(records: Records, upstreams: Vec<SocketAddr>, forward_timeout: Duration) -> Running {
    let mut config = Config::new("127.0.0.1:0".parse().unwrap(), upstreams);
    config.forward_timeout = forward_timeout;
    let server = Server::bind(config).await.unwrap();
    let addr = server.local_addr();
    assert_ne!(addr.port(), 0);
    let (_sender, receiver) = watch::channel(Arc::new(records));
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(server.run(receiver, shutdown.clone()));
    Running {
        addr,
        shutdown,
        task,
    }
}

/// A cluster with one ClusterIP Service and a headless one of `endpoints` addresses.
fn records(endpoints: usize) -> Records {
    let services = vec![
        cluster_ip("default", "web", &["10.96.0.10"], &[("http", 80, "TCP")]),
        headless("default", "big", false, &[]),
    ];
    let addresses: Vec<String> = (0..endpoints)
        .map(|i| format!("10.3.{}.{}", i / 250, i % 250 + 1))
        .collect();
    let endpoints: Vec<Ep<'_>> = addresses.iter().map(|a| (a.as_str(), None, None)).collect();
    let slices = vec![slice("default", "big", "big-a", &[], &endpoints)];
    Records::build(&services, &slices, "cluster.local")
}

fn query(id: u16, text: &str, qtype: RecordType, edns: Option<u16>) -> Vec<u8> {
    let mut message = Message::new();
    message
        .set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true)
        .add_query(Query::query(name(text), qtype));
    if let Some(size) = edns {
        let mut options = Edns::new();
        options.set_max_payload(size);
        message.set_edns(options);
    }
    message.to_vec().unwrap()
}

/// The reply over UDP, or `None` when there is none within `wait`.
async fn udp(addr: SocketAddr, bytes: &[u8], wait: Duration) -> Option<(Message, usize)> {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.send_to(bytes, addr).await.unwrap();
    let mut buffer = vec![0u8; 65535];
    let (len, _) = tokio::time::timeout(wait, socket.recv_from(&mut buffer))
        .await
        .ok()?
        .unwrap();
    Some((Message::from_vec(&buffer[..len]).unwrap(), len))
}

async fn udp_ok(addr: SocketAddr, bytes: &[u8]) -> Message {
    udp(addr, bytes, Duration::from_secs(5))
        .await
        .expect("a UDP reply")
        .0
}

async fn tcp(addr: SocketAddr, bytes: &[u8]) -> Message {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(bytes);
    stream.write_all(&framed).await.unwrap();
    let mut len = [0u8; 2];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut len))
        .await
        .unwrap()
        .unwrap();
    let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut reply).await.unwrap();
    Message::from_vec(&reply).unwrap()
}

#[tokio::test]
async fn answers_from_the_zone_over_udp_and_tcp() {
    let server = start(records(3), Vec::new(), Duration::from_secs(1)).await;
    let ask = query(0x1234, "Web.Default.svc.cluster.local", RecordType::A, None);
    for reply in [
        udp_ok(server.addr, &ask).await,
        tcp(server.addr, &ask).await,
    ] {
        assert_eq!(reply.id(), 0x1234);
        assert_eq!(reply.message_type(), MessageType::Response);
        assert_eq!(reply.response_code(), ResponseCode::NoError);
        assert!(reply.authoritative());
        assert!(reply.recursion_available());
        assert!(reply.recursion_desired());
        assert!(!reply.truncated());
        assert!(reply.extensions().is_none());
        assert_eq!(data(reply.answers()), ["10.96.0.10"]);
        assert_eq!(
            reply.answers()[0].name().to_ascii(),
            "Web.Default.svc.cluster.local."
        );
        assert_eq!(
            reply.queries()[0].name().to_ascii(),
            "Web.Default.svc.cluster.local."
        );
    }

    // NXDOMAIN with the SOA; an SRV with its additional address.
    let reply = udp_ok(
        server.addr,
        &query(7, "nope.default.svc.cluster.local", RecordType::A, None),
    )
    .await;
    assert_eq!(reply.response_code(), ResponseCode::NXDomain);
    assert_eq!(reply.name_servers().len(), 1);
    assert_eq!(reply.name_servers()[0].record_type(), RecordType::SOA);
    let srv = query(
        8,
        "_http._tcp.web.default.svc.cluster.local",
        RecordType::SRV,
        Some(1232),
    );
    let reply = udp_ok(server.addr, &srv).await;
    assert_eq!(
        data(reply.answers()),
        ["0 100 80 web.default.svc.cluster.local."]
    );
    assert_eq!(data(reply.additionals()), ["10.96.0.10"]);
    assert!(
        reply.extensions().is_some(),
        "an OPT record for an EDNS query"
    );

    // Nowhere to forward to.
    let reply = udp_ok(server.addr, &query(9, "example.com", RecordType::A, None)).await;
    assert_eq!(reply.response_code(), ResponseCode::Refused);
    assert_eq!(reply.id(), 9);
    server.stop().await;
}

#[tokio::test]
async fn big_answers_are_truncated_over_udp_and_whole_over_tcp() {
    let server = start(records(100), Vec::new(), Duration::from_secs(1)).await;
    let ask = query(1, "big.default.svc.cluster.local", RecordType::A, None);

    let (reply, len) = udp(server.addr, &ask, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(reply.truncated());
    assert!(len <= 512, "{len} bytes");
    assert!(reply.answers().is_empty());
    assert_eq!(reply.queries().len(), 1);

    let reply = tcp(server.addr, &ask).await;
    assert!(!reply.truncated());
    assert_eq!(reply.answers().len(), 100);

    // A client taking 4096 bytes gets all of them over UDP, with an OPT record.
    let ask = query(
        2,
        "big.default.svc.cluster.local",
        RecordType::A,
        Some(4096),
    );
    let (reply, len) = udp(server.addr, &ask, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(!reply.truncated());
    assert!(len > 512, "{len} bytes");
    assert_eq!(reply.answers().len(), 100);
    assert!(reply.extensions().is_some());

    // But not more than it takes: 300 addresses are over 4096 bytes.
    server.stop().await;
    let server = start(records(300), Vec::new(), Duration::from_secs(1)).await;
    let ask = query(
        3,
        "big.default.svc.cluster.local",
        RecordType::A,
        Some(65000),
    );
    let (reply, len) = udp(server.addr, &ask, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(reply.truncated());
    assert!(len <= 4096);
    assert_eq!(tcp(server.addr, &ask).await.answers().len(), 300);
    server.stop().await;
}

#[tokio::test]
async fn bad_queries_get_error_codes_or_nothing() {
    let server = start(records(1), Vec::new(), Duration::from_secs(1)).await;
    let wait = Duration::from_millis(300);

    // Not even a header: dropped.
    assert!(udp(server.addr, b"xyz", wait).await.is_none());
    // A header promising a question that is not there: FORMERR.
    let header = [0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    let (reply, _) = udp(server.addr, &header, wait).await.unwrap();
    assert_eq!(reply.id(), 0xabcd);
    assert_eq!(reply.response_code(), ResponseCode::FormErr);
    // A response sent to the server: dropped.
    let mut response = Message::from_vec(&query(
        5,
        "web.default.svc.cluster.local",
        RecordType::A,
        None,
    ))
    .unwrap();
    response.set_message_type(MessageType::Response);
    assert!(udp(server.addr, &response.to_vec().unwrap(), wait)
        .await
        .is_none());

    let mut two = Message::from_vec(&query(
        6,
        "web.default.svc.cluster.local",
        RecordType::A,
        None,
    ))
    .unwrap();
    two.add_query(Query::query(name("example.com"), RecordType::A));
    let reply = udp_ok(server.addr, &two.to_vec().unwrap()).await;
    assert_eq!(reply.response_code(), ResponseCode::FormErr);

    let mut status = Message::from_vec(&query(
        7,
        "web.default.svc.cluster.local",
        RecordType::A,
        None,
    ))
    .unwrap();
    status.set_op_code(OpCode::Status);
    let reply = udp_ok(server.addr, &status.to_vec().unwrap()).await;
    assert_eq!(reply.response_code(), ResponseCode::NotImp);

    let mut chaos = Message::from_vec(&query(
        8,
        "web.default.svc.cluster.local",
        RecordType::A,
        None,
    ))
    .unwrap();
    chaos.queries_mut()[0].set_query_class(DNSClass::CH);
    let reply = udp_ok(server.addr, &chaos.to_vec().unwrap()).await;
    assert_eq!(reply.response_code(), ResponseCode::Refused);

    // EDNS above version 0: BADVERS, with an OPT record of version 0.
    let mut future = Message::from_vec(&query(
        10,
        "web.default.svc.cluster.local",
        RecordType::A,
        Some(1232),
    ))
    .unwrap();
    future.extensions_mut().as_mut().unwrap().set_version(1);
    let reply = udp_ok(server.addr, &future.to_vec().unwrap()).await;
    // 16 is both BADVERS and BADSIG; hickory reads it as the latter.
    assert_eq!(u16::from(reply.response_code()), 16);
    assert_eq!(reply.extensions().as_ref().map(Edns::version), Some(0));
    assert!(reply.answers().is_empty());

    // Garbage over TCP closes the connection; the server goes on.
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream.write_all(&[0, 3, b'x', b'y', b'z']).await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
    assert!(matches!(read, Ok(Ok(0))), "{read:?}");
    let reply = udp_ok(
        server.addr,
        &query(9, "web.default.svc.cluster.local", RecordType::A, None),
    )
    .await;
    assert_eq!(data(reply.answers()), ["10.96.0.10"]);
    server.stop().await;
}

/// How a fake upstream behaves.
#[derive(Clone, Copy)]
enum Upstream {
    /// Answers 192.0.2.1 over UDP and TCP.
    Answer,
    /// Answers TC with no records over UDP, and 192.0.2.1 .. 192.0.2.3 over TCP.
    Truncate,
    /// Never answers.
    Silent,
}

fn upstream_reply(query: &Message, truncated: bool, count: u8) -> Vec<u8> {
    let mut reply = Message::new();
    reply
        .set_id(query.id())
        .set_message_type(MessageType::Response)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(query.recursion_desired())
        .set_recursion_available(true)
        .set_truncated(truncated)
        .add_queries(query.queries().iter().cloned());
    if !truncated {
        let owner = query.queries()[0].name().clone();
        for i in 1..=count {
            let rdata = RData::A(A::new(192, 0, 2, i));
            reply.add_answer(Record::from_rdata(owner.clone(), 60, rdata));
        }
    }
    reply.to_vec().unwrap()
}

/// A fake upstream on UDP and TCP of one port; it reports the ids it was asked with.
async fn fake_upstream(mode: Upstream) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<u16>) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let listener = TcpListener::bind(addr).await.unwrap();
    let (ids, received) = tokio::sync::mpsc::unbounded_channel();
    let udp_ids = ids.clone();
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 65535];
        loop {
            let Ok((len, peer)) = socket.recv_from(&mut buffer).await else {
                return;
            };
            let query = Message::from_vec(&buffer[..len]).unwrap();
            let _ = udp_ids.send(query.id());
            let reply = match mode {
                Upstream::Answer => upstream_reply(&query, false, 1),
                Upstream::Truncate => upstream_reply(&query, true, 0),
                Upstream::Silent => continue,
            };
            socket.send_to(&reply, peer).await.unwrap();
        }
    });
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let mut len = [0u8; 2];
            stream.read_exact(&mut len).await.unwrap();
            let mut bytes = vec![0u8; usize::from(u16::from_be_bytes(len))];
            stream.read_exact(&mut bytes).await.unwrap();
            let query = Message::from_vec(&bytes).unwrap();
            let _ = ids.send(query.id());
            let reply = match mode {
                Upstream::Answer => upstream_reply(&query, false, 1),
                Upstream::Truncate => upstream_reply(&query, false, 3),
                Upstream::Silent => continue,
            };
            let mut framed = (reply.len() as u16).to_be_bytes().to_vec();
            framed.extend_from_slice(&reply);
            stream.write_all(&framed).await.unwrap();
        }
    });
    (addr, received)
}

#[tokio::test]
async fn forwards_with_the_clients_id() {
    let (upstream, mut ids) = fake_upstream(Upstream::Answer).await;
    let server = start(records(1), vec![upstream], Duration::from_secs(2)).await;
    let ask = query(0xbeef, "www.example.com", RecordType::A, None);
    for reply in [
        udp_ok(server.addr, &ask).await,
        tcp(server.addr, &ask).await,
    ] {
        assert_eq!(reply.id(), 0xbeef);
        assert_eq!(reply.response_code(), ResponseCode::NoError);
        assert!(!reply.authoritative());
        assert_eq!(data(reply.answers()), ["192.0.2.1"]);
        assert!(ids.try_recv().is_ok(), "the upstream was asked");
    }
    // A reverse name not ours is forwarded too.
    let reply = udp_ok(
        server.addr,
        &query(3, "8.8.8.8.in-addr.arpa", RecordType::PTR, None),
    )
    .await;
    assert_eq!(reply.response_code(), ResponseCode::NoError);
    assert_eq!(reply.id(), 3);
    server.stop().await;
}

#[tokio::test]
async fn a_truncated_upstream_reply_is_asked_again_over_tcp() {
    let (upstream, mut ids) = fake_upstream(Upstream::Truncate).await;
    let server = start(records(1), vec![upstream], Duration::from_secs(2)).await;
    let reply = udp_ok(
        server.addr,
        &query(0x4242, "many.example.com", RecordType::A, None),
    )
    .await;
    assert_eq!(reply.id(), 0x4242);
    assert!(!reply.truncated());
    assert_eq!(
        data(reply.answers()),
        ["192.0.2.1", "192.0.2.2", "192.0.2.3"]
    );
    // Asked over UDP, then over TCP.
    assert!(ids.recv().await.is_some());
    assert!(ids.recv().await.is_some());
    server.stop().await;
}

#[tokio::test]
async fn servfail_when_no_upstream_answers_and_the_next_one_is_tried() {
    let (silent, mut asked) = fake_upstream(Upstream::Silent).await;
    let timeout = Duration::from_millis(200);
    let server = start(records(1), vec![silent], timeout).await;
    let started = std::time::Instant::now();
    let reply = udp_ok(
        server.addr,
        &query(0x0bad, "www.example.com", RecordType::A, None),
    )
    .await;
    assert_eq!(reply.id(), 0x0bad);
    assert_eq!(reply.response_code(), ResponseCode::ServFail);
    assert!(started.elapsed() >= timeout);
    assert!(asked.recv().await.is_some());
    server.stop().await;

    let (answering, _) = fake_upstream(Upstream::Answer).await;
    let server = start(records(1), vec![silent, answering], timeout).await;
    let reply = udp_ok(
        server.addr,
        &query(5, "www.example.com", RecordType::A, None),
    )
    .await;
    assert_eq!(reply.response_code(), ResponseCode::NoError);
    assert_eq!(data(reply.answers()), ["192.0.2.1"]);
    server.stop().await;
}

#[tokio::test]
async fn the_load_generator_reports() {
    let server = start(records(3), Vec::new(), Duration::from_secs(1)).await;
    let addr = server.addr;
    let names = vec![
        "web.default.svc.cluster.local".to_string(),
        "nope.default.svc.cluster.local".to_string(),
        "not a name..".to_string(),
    ];
    let report = load::run(server.addr, names, 4, Duration::from_millis(300)).await;
    assert!(report.sent > 0, "{report:?}");
    assert!(report.noerror > 0, "{report:?}");
    assert!(report.nxdomain > 0, "{report:?}");
    assert_eq!(report.errors, 0, "{report:?}");
    assert_eq!(report.other, 0, "{report:?}");
    assert_eq!(report.answered(), report.sent, "{report:?}");
    assert!(report.elapsed >= Duration::from_millis(300), "{report:?}");
    assert!(report.qps() > 0.0, "{report:?}");
    assert!(
        report.p50 <= report.p99 && report.p99 <= report.max,
        "{report:?}"
    );
    server.stop().await;

    // Nothing listening: every query is an error, none answered.
    let report = load::run(
        addr,
        vec!["web.default.svc.cluster.local".to_string()],
        1,
        Duration::from_millis(100),
    )
    .await;
    assert_eq!(report.answered(), 0, "{report:?}");
    assert!(report.errors > 0, "{report:?}");
}
