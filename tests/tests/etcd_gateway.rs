//! The etcd gateway against real etcd: the same etcd-client scenario runs against real etcd and
//! against Rudder's gateway over each driver, and the observable results must be identical
//! (revisions are compared relative to the revision each run started at).

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, EventType, GetOptions, LeaseTimeToLiveOptions,
    PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, WatchFilterType, WatchOptions,
};
use rudder_etcd_gateway::Gateway;
use rudder_storage::testing::{self, Harness};

/// Runs the scenario against real etcd and against the gateway over `harness`'s store.
async fn compare_with_real_etcd(harness: Box<dyn Harness>) {
    let endpoint = testing::service(testing::ETCD_ENV).expect("the reference etcd");
    // Revisions and compaction are global in etcd: one scenario at a time (an etcd harness
    // already holds the lock).
    let _exclusive = if harness.driver() == "etcd" {
        None
    } else {
        Some(testing::etcd_lock().await)
    };
    let reference_prefix = format!("/reference-{:08x}/", rand::random::<u32>());
    let mut reference = Client::connect([endpoint.as_str()], None).await.unwrap();

    let mut expected = scenario(&mut reference, &reference_prefix).await;
    let reference_prefix = format!("/reference-{:08x}/", rand::random::<u32>());
    expected.extend(edge_cases(&mut reference, &reference_prefix).await);

    let store = harness.open().await;
    let gateway = Gateway::spawn(store.clone(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let mut client = Client::connect([gateway.local_addr.to_string()], None)
        .await
        .unwrap();
    let mut observed = scenario(&mut client, "/gw/").await;
    observed.extend(edge_cases(&mut client, "/gw-edge/").await);
    gateway.shutdown().await;
    store.close().await;
    harness.cleanup().await;

    let differences: Vec<String> = expected
        .iter()
        .zip(&observed)
        .enumerate()
        .filter(|(_, (want, got))| want != got)
        .map(|(index, (want, got))| format!("step {index}:\n  etcd:    {want}\n  gateway: {got}"))
        .collect();
    assert!(
        differences.is_empty(),
        "the gateway over {} differs from real etcd:\n{}",
        harness.driver(),
        differences.join("\n")
    );
    assert_eq!(observed.len(), expected.len());
}

/// Everything the scenario observes, one line per observation, revisions relative to `base`.
async fn scenario(client: &mut Client, prefix: &str) -> Vec<String> {
    let key = |name: &str| format!("{prefix}{name}");
    let mut log = Vec::new();
    let base = client
        .get(key("none"), None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    let rel = |revision: i64| if revision == 0 { 0 } else { revision - base };
    let kv_line = |kv: &etcd_client::KeyValue| {
        format!(
            "{}={} c{} m{} v{} l{}",
            kv.key_str().unwrap().trim_start_matches(prefix),
            kv.value_str().unwrap(),
            rel(kv.create_revision()),
            rel(kv.mod_revision()),
            kv.version(),
            kv.lease() != 0
        )
    };

    // Puts, with and without prev_kv.
    let put = client.put(key("a"), "1", None).await.unwrap();
    log.push(format!(
        "put a rev {}",
        rel(put.header().unwrap().revision())
    ));
    client.put(key("b"), "2", None).await.unwrap();
    let put = client
        .put(key("a"), "3", Some(PutOptions::new().with_prev_key()))
        .await
        .unwrap();
    log.push(format!("put a prev {:?}", put.prev_key().map(kv_line)));
    client.put(key("c"), "9", None).await.unwrap();

    // Ranges with every option.
    let get = |options: GetOptions| (key(""), Some(options.with_prefix()));
    for (name, options) in [
        ("all", GetOptions::new()),
        ("limit", GetOptions::new().with_limit(1)),
        ("keys-only", GetOptions::new().with_keys_only()),
        ("count-only", GetOptions::new().with_count_only()),
        (
            "by-mod-desc",
            GetOptions::new().with_sort(SortTarget::Mod, SortOrder::Descend),
        ),
        (
            "by-value",
            GetOptions::new().with_sort(SortTarget::Value, SortOrder::None),
        ),
        ("min-mod", GetOptions::new().with_min_mod_revision(base + 3)),
        (
            "max-create",
            GetOptions::new()
                .with_max_create_revision(base + 2)
                .with_limit(1),
        ),
        ("at-rev-2", GetOptions::new().with_revision(base + 2)),
    ] {
        let (k, o) = get(options);
        let response = client.get(k, o).await.unwrap();
        log.push(format!(
            "get {name}: {:?} more={} count={} rev={}",
            response.kvs().iter().map(kv_line).collect::<Vec<_>>(),
            response.more(),
            response.count(),
            rel(response.header().unwrap().revision())
        ));
    }
    let from_key = client
        .get(key("b"), Some(GetOptions::new().with_range(key("c"))))
        .await
        .unwrap();
    log.push(format!(
        "get [b,c): {:?}",
        from_key.kvs().iter().map(kv_line).collect::<Vec<_>>()
    ));

    // Deletes.
    let deleted = client
        .delete(key("b"), Some(DeleteOptions::new().with_prev_key()))
        .await
        .unwrap();
    log.push(format!(
        "del b: {} {:?}",
        deleted.deleted(),
        deleted.prev_kvs().iter().map(kv_line).collect::<Vec<_>>()
    ));
    let deleted = client.delete(key("zz"), None).await.unwrap();
    log.push(format!(
        "del zz: {} rev={}",
        deleted.deleted(),
        rel(deleted.header().unwrap().revision())
    ));

    // Transactions.
    let txn = Txn::new()
        .when([
            Compare::value(key("a"), CompareOp::Equal, "3"),
            Compare::version(key("b"), CompareOp::Equal, 0),
        ])
        .and_then([
            TxnOp::put(key("t"), "yes", None),
            TxnOp::get(key("a"), None),
            TxnOp::txn(
                Txn::new()
                    .when([Compare::create_revision(key("t"), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(key("n"), "nested", None)]),
            ),
        ])
        .or_else([TxnOp::put(key("t"), "no", None)]);
    log.push(describe_txn(client.txn(txn).await.unwrap(), &kv_line, &rel));
    let txn = Txn::new()
        .when([Compare::mod_revision(key("a"), CompareOp::Less, base)])
        .and_then([TxnOp::put(key("t"), "never", None)])
        .or_else([
            TxnOp::get(
                key(""),
                Some(GetOptions::new().with_prefix().with_count_only()),
            ),
            TxnOp::delete(key("c"), None),
        ]);
    log.push(describe_txn(client.txn(txn).await.unwrap(), &kv_line, &rel));
    let duplicate = Txn::new().and_then([
        TxnOp::put(key("d"), "1", None),
        TxnOp::put(key("d"), "2", None),
    ]);
    log.push(format!(
        "duplicate txn: {}",
        error_text(client.txn(duplicate).await.unwrap_err())
    ));

    // Watch history with prev_kv and filters, from the first write.
    let mut stream = client
        .watch(
            key(""),
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_prev_key()
                    .with_start_revision(base + 1),
            ),
        )
        .await
        .unwrap();
    let mut events = Vec::new();
    while events.len() < 8 {
        let response = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        for event in response.events() {
            let kind = if event.event_type() == EventType::Put {
                "PUT"
            } else {
                "DELETE"
            };
            events.push(format!(
                "{kind} {} prev={:?}",
                event.kv().map(&kv_line).unwrap_or_default(),
                event.prev_kv().map(&kv_line)
            ));
        }
    }
    log.extend(events);
    drop(stream);

    // One stream, two watches (one without puts), a progress request, a cancel.
    let filtered = WatchOptions::new()
        .with_prefix()
        .with_filters([WatchFilterType::NoPut]);
    let mut stream = client.watch(key("f/"), Some(filtered)).await.unwrap();
    let created = next_response(&mut stream).await;
    log.push(format!(
        "watch created={} id={}",
        created.created(),
        created.watch_id()
    ));
    stream
        .watch(key("g/"), Some(WatchOptions::new().with_prefix()))
        .await
        .unwrap();
    let created = next_response(&mut stream).await;
    log.push(format!(
        "watch created={} id={}",
        created.created(),
        created.watch_id()
    ));
    client.put(key("f/x"), "1", None).await.unwrap();
    client.delete(key("f/x"), None).await.unwrap();
    let last = client
        .put(key("g/y"), "2", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let response = next_response(&mut stream).await;
        for event in response.events() {
            let kind = if event.event_type() == EventType::Put {
                "PUT"
            } else {
                "DELETE"
            };
            let name = event
                .kv()
                .map(|kv| kv.key_str().unwrap().trim_start_matches(prefix).to_string());
            seen.push(format!("watch {}: {kind} {name:?}", response.watch_id()));
        }
    }
    seen.sort();
    log.extend(seen);
    stream.request_progress().await.unwrap();
    let progress = next_response(&mut stream).await;
    log.push(format!(
        "progress id={} events={} covers last write={}",
        progress.watch_id(),
        progress.events().len(),
        progress.header().unwrap().revision() >= last
    ));
    stream.cancel(created.watch_id()).await.unwrap();
    let canceled = next_response(&mut stream).await;
    log.push(format!(
        "cancel id={} canceled={}",
        canceled.watch_id(),
        canceled.canceled()
    ));
    drop(stream);

    // Leases.
    let lease = client.lease_grant(30, None).await.unwrap();
    log.push(format!("lease ttl {}", lease.ttl()));
    client
        .put(
            key("leased"),
            "x",
            Some(PutOptions::new().with_lease(lease.id())),
        )
        .await
        .unwrap();
    let ttl = client
        .lease_time_to_live(lease.id(), Some(LeaseTimeToLiveOptions::new().with_keys()))
        .await
        .unwrap();
    log.push(format!(
        "ttl granted {} keys {:?}",
        ttl.granted_ttl(),
        ttl.keys()
            .iter()
            .map(|k| String::from_utf8_lossy(k)
                .trim_start_matches(prefix)
                .to_string())
            .collect::<Vec<_>>()
    ));
    let listed = client.leases().await.unwrap();
    log.push(format!(
        "lease listed {}",
        listed.leases().iter().any(|l| l.id() == lease.id())
    ));
    client.lease_revoke(lease.id()).await.unwrap();
    log.push(format!(
        "after revoke: {:?}",
        client.get(key("leased"), None).await.unwrap().kvs().len()
    ));
    log.push(format!(
        "ttl after revoke {}",
        client
            .lease_time_to_live(lease.id(), None)
            .await
            .unwrap()
            .ttl()
    ));
    log.push(format!(
        "revoke again: {}",
        error_text(client.lease_revoke(lease.id()).await.unwrap_err())
    ));
    let unknown = Some(PutOptions::new().with_lease(0x7fff_0000_1234));
    log.push(format!(
        "put with unknown lease: {}",
        error_text(client.put(key("x"), "1", unknown).await.unwrap_err())
    ));

    // Errors: future revision, compaction, oversized request.
    let future = client
        .get(key("a"), Some(GetOptions::new().with_revision(base + 1000)))
        .await
        .unwrap_err();
    log.push(format!("future: {}", error_text(future)));
    let current = client
        .get(key("a"), None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    client.compact(current, None).await.unwrap();
    let compacted = client
        .get(key("a"), Some(GetOptions::new().with_revision(base + 1)))
        .await
        .unwrap_err();
    log.push(format!("compacted: {}", error_text(compacted)));
    let mut stream = client
        .watch(
            key(""),
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(base + 1),
            ),
        )
        .await
        .unwrap();
    let mut cancel = None;
    while cancel.is_none() {
        let response = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if response.canceled() {
            // (Compared with the compaction point, not the start: progress requests over the
            // etcd driver on etcd < 3.4.31 are fenced with writes, which take revisions.)
            cancel = Some(format!(
                "watch compacted: at the compaction point {} reason {}",
                response.compact_revision() == current,
                response.cancel_reason()
            ));
        }
    }
    log.extend(cancel);
    let large = vec![b'x'; 1600 * 1024];
    log.push(format!(
        "1.6 MiB put: {}",
        error_text(client.put(key("large"), large, None).await.unwrap_err())
    ));
    let big = vec![b'x'; 2 * 1024 * 1024];
    log.push(format!(
        "2 MiB put: {}",
        error_text(client.put(key("big"), big, None).await.unwrap_err())
    ));
    log
}

/// Corners where the gateway once differed from etcd: duplicate keys across nested
/// transactions, watch ids, degenerate watch ranges, put flags that contradict their values,
/// and a limit with a sort target but no sort order.
async fn edge_cases(client: &mut Client, prefix: &str) -> Vec<String> {
    let key = |name: &str| format!("{prefix}{name}");
    let mut log = Vec::new();
    let shapes = [
        (
            "put + nested put",
            Txn::new().and_then([
                TxnOp::put(key("k"), "1", None),
                TxnOp::txn(Txn::new().and_then([TxnOp::put(key("k"), "2", None)])),
            ]),
        ),
        (
            "delete + nested put",
            Txn::new().and_then([
                TxnOp::delete(key("k"), None),
                TxnOp::txn(Txn::new().and_then([TxnOp::put(key("k"), "2", None)])),
            ]),
        ),
        (
            "nested then/else put one key",
            Txn::new().and_then([TxnOp::txn(
                Txn::new()
                    .and_then([TxnOp::put(key("k"), "then", None)])
                    .or_else([TxnOp::put(key("k"), "else", None)]),
            )]),
        ),
    ];
    for (name, txn) in shapes {
        log.push(match client.txn(txn).await {
            Ok(response) => format!("{name}: succeeded={}", response.succeeded()),
            Err(error) => format!("{name}: {}", error_text(error)),
        });
    }
    for (name, options) in [
        (
            "ignore_value with a value",
            PutOptions::new().with_ignore_value(),
        ),
        (
            "ignore_lease with a lease",
            PutOptions::new().with_ignore_lease().with_lease(0x1234),
        ),
    ] {
        let result = client.put(key("k"), "value", Some(options)).await;
        log.push(format!(
            "{name}: {}",
            result.map_or_else(error_text, |_| "ok".into())
        ));
    }
    for (name, value) in [("a", "3"), ("b", "1"), ("c", "2"), ("d", "0")] {
        client.put(key(name), value, None).await.unwrap();
    }
    let sorted = client
        .get(
            key(""),
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Value, SortOrder::None)
                    .with_limit(2),
            ),
        )
        .await
        .unwrap();
    log.push(format!(
        "limit 2 by value, no order: {:?} more={}",
        sorted
            .kvs()
            .iter()
            .map(|kv| kv.key_str().unwrap().trim_start_matches(prefix).to_string())
            .collect::<Vec<_>>(),
        sorted.more()
    ));

    // Watch ids are never reused on a stream, even after a cancel.
    let mut stream = client
        .watch(key("w/"), Some(WatchOptions::new().with_prefix()))
        .await
        .unwrap();
    let first = next_response(&mut stream).await;
    stream.cancel(first.watch_id()).await.unwrap();
    let canceled = next_response(&mut stream).await;
    stream
        .watch(key("w/"), Some(WatchOptions::new().with_prefix()))
        .await
        .unwrap();
    let second = next_response(&mut stream).await;
    log.push(format!(
        "watch ids: {} canceled={}, then {}",
        first.watch_id(),
        canceled.canceled(),
        second.watch_id()
    ));
    // A key at or past its range end: created, then cancelled with etcd's reason.
    stream
        .watch(key("z"), Some(WatchOptions::new().with_range(key("a"))))
        .await
        .unwrap();
    log.push(format!("watch [z, a): {}", next_text(&mut stream).await));
    // The stream keeps working.
    client.put(key("w/x"), "1", None).await.unwrap();
    log.push(format!("then: {}", next_text(&mut stream).await));
    // An empty key.
    stream.watch("", None).await.unwrap();
    log.push(format!(
        "watch of the empty key: {}",
        next_text(&mut stream).await
    ));
    log
}

/// The next watch response in words (or the error that ended the stream).
async fn next_text(stream: &mut etcd_client::WatchStream) -> String {
    match tokio::time::timeout(Duration::from_secs(10), stream.message()).await {
        Err(_) => "nothing within 10 s".into(),
        Ok(Err(error)) => error_text(error),
        Ok(Ok(None)) => "end of stream".into(),
        Ok(Ok(Some(response))) => format!(
            "id={} created={} canceled={} reason={:?} events={}",
            response.watch_id(),
            response.created(),
            response.canceled(),
            response.cancel_reason(),
            response.events().len()
        ),
    }
}

async fn next_response(stream: &mut etcd_client::WatchStream) -> etcd_client::WatchResponse {
    tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("a watch response within 10 s")
        .unwrap()
        .expect("the watch stream is open")
}

fn describe_txn(
    response: etcd_client::TxnResponse,
    kv_line: &dyn Fn(&etcd_client::KeyValue) -> String,
    rel: &dyn Fn(i64) -> i64,
) -> String {
    let revision = response.header().map_or(0, |h| h.revision());
    let mut parts = vec![format!(
        "txn succeeded={} rev={}",
        response.succeeded(),
        rel(revision)
    )];
    for op in response.op_responses() {
        parts.push(match op {
            TxnOpResponse::Put(put) => {
                format!("put rev={}", rel(put.header().map_or(0, |h| h.revision())))
            }
            TxnOpResponse::Get(get) => format!(
                "get {:?} count={} rev={}",
                get.kvs().iter().map(kv_line).collect::<Vec<_>>(),
                get.count(),
                rel(get.header().map_or(0, |h| h.revision()))
            ),
            TxnOpResponse::Delete(delete) => {
                format!(
                    "delete {} rev={}",
                    delete.deleted(),
                    rel(delete.header().map_or(0, |h| h.revision()))
                )
            }
            TxnOpResponse::Txn(nested) => format!("[{}]", describe_txn(nested, kv_line, rel)),
        });
    }
    parts.join("; ")
}

/// The gRPC code and message of an error; transport errors (the size limit) by kind only.
fn error_text(error: etcd_client::Error) -> String {
    match error {
        etcd_client::Error::GRpcStatus(status)
            if status.code() == tonic::Code::ResourceExhausted =>
        {
            "resource exhausted".to_string()
        }
        etcd_client::Error::GRpcStatus(status) => {
            format!("{:?}: {}", status.code(), status.message())
        }
        other => format!("{other}"),
    }
}

/// A watch that asks for progress notifications gets them at the configured interval, with a
/// revision that covers the writes before it (etcd's default interval is 10 minutes, so this is
/// checked on the gateway alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_get_progress_notifications_at_the_configured_interval() {
    let Some(harness) = testing::sqlite().await else {
        return;
    };
    let store = harness.open().await;
    let gateway = Gateway::spawn_with(store.clone(), SocketAddr::from(([127, 0, 0, 1], 0)), |g| {
        g.with_progress_notify_interval(Duration::from_millis(200))
    })
    .await
    .unwrap();
    let mut client = Client::connect([gateway.local_addr.to_string()], None)
        .await
        .unwrap();
    let options = WatchOptions::new().with_prefix().with_progress_notify();
    let mut stream = client.watch("/quiet/", Some(options)).await.unwrap();
    let created = next_response(&mut stream).await;
    assert!(created.created());
    let written = client
        .put("/elsewhere", "x", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    loop {
        let response = next_response(&mut stream).await;
        assert!(
            response.events().is_empty(),
            "nothing was written under /quiet/"
        );
        assert_eq!(response.watch_id(), created.watch_id());
        if response.header().unwrap().revision() >= written {
            break;
        }
    }
    drop(stream);
    gateway.shutdown().await;
    store.close().await;
}

rudder_tests::on_every_driver_beside_real_etcd!(compare_with_real_etcd;
    gateway_over_sqlite_behaves_like_real_etcd => sqlite,
    gateway_over_postgres_behaves_like_real_etcd => postgres,
    gateway_over_etcd_behaves_like_real_etcd => etcd,
);

/// Served with TLS and a client CA, the gateway talks only to clients whose certificate that
/// CA issued (etcd's `--client-cert-auth`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_gateway_requires_a_client_certificate_from_its_ca() {
    use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};

    let Some(harness) = testing::sqlite().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pki = rudder_apiserver::pki::Pki::load_or_create(dir.path(), &[], &[]).unwrap();
    let store = harness.open().await;
    let tls = rudder_etcd_gateway::Tls {
        cert_pem: pki.serving_cert_pem.clone().into_bytes(),
        key_pem: pki.serving_key_pem.clone().into_bytes(),
        client_ca_pem: Some(pki.ca_cert_pem.clone().into_bytes()),
    };
    let gateway = Gateway::spawn_with(store.clone(), SocketAddr::from(([127, 0, 0, 1], 0)), |g| {
        g.with_tls(tls)
    })
    .await
    .unwrap();
    let url = format!("https://localhost:{}", gateway.local_addr.port());
    let ca = Certificate::from_pem(pki.ca_cert_pem.clone());

    let with_cert =
        ConnectOptions::new().with_tls(TlsOptions::new().ca_certificate(ca.clone()).identity(
            Identity::from_pem(pki.admin_cert_pem.clone(), pki.admin_key_pem.clone()),
        ));
    let mut client = Client::connect([url.clone()], Some(with_cert))
        .await
        .unwrap();
    client.put("/tls/k", "v", None).await.unwrap();
    let got = client.get("/tls/k", None).await.unwrap();
    assert_eq!(got.kvs()[0].value(), b"v");
    let members = client.member_list().await.unwrap();
    assert!(members.members()[0].client_urls()[0].starts_with("https://"));

    let anonymous = ConnectOptions::new()
        .with_tls(TlsOptions::new().ca_certificate(ca))
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(5));
    let refused = match Client::connect([url], Some(anonymous)).await {
        Ok(mut client) => client.get("/tls/k", None).await.is_err(),
        Err(_) => true,
    };
    assert!(refused, "a client without a certificate is refused");
    drop(client);
    gateway.shutdown().await;
    store.close().await;
}

/// Concurrent histories through the gateway — etcd's own client on the wire, the etcd driver
/// of Rudder as the recorder — are linearizable, and the gateway's watch keeps every
/// guarantee (ordered, no gap, no duplicate, right `prev_kv`).
async fn gateway_histories_are_linearizable(harness: Option<Box<dyn Harness>>) {
    use rudder_storage::linearizability::{check, record, Workload};
    let Some(harness) = harness else { return };
    let store = harness.open().await;
    let gateway = Gateway::spawn(store.clone(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let client = rudder_storage::open(&format!("etcd://{}", gateway.local_addr))
        .await
        .unwrap();
    let history = record(
        std::slice::from_ref(&client),
        &Workload::new("/history/", 8, 100),
    )
    .await
    .unwrap();
    let report = check(&history);
    eprintln!("through the gateway over {}: {report}", harness.driver());
    assert!(report.is_clean(), "{report}");
    assert!(report.watch_events > 50, "{report}");
    client.close().await;
    gateway.shutdown().await;
    store.close().await;
    harness.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn histories_through_the_gateway_over_sqlite_are_linearizable() {
    gateway_histories_are_linearizable(testing::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn histories_through_the_gateway_over_postgres_are_linearizable() {
    gateway_histories_are_linearizable(testing::postgres().await).await;
}
