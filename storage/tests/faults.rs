//! Faults the drivers survive, judged by the linearizability checker: a PostgreSQL server
//! stopped and started again under load.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use rudder_storage::config::CompactionConfig;
use rudder_storage::linearizability::{check, AfterFailure, Output, Recorder, Workload};
use rudder_storage::testing;
use rudder_storage::*;

/// How long requests may wait for an answer while the database is down.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgres_restart_under_load_fails_fast_reconnects_and_loses_no_event() {
    let Some(postgres) = testing::own_postgres() else {
        return;
    };
    let mut config = StorageConfig::parse(&postgres.url()).unwrap();
    config.compaction = CompactionConfig {
        interval: Duration::ZERO,
        retain: 0,
    };
    let store = open_config(&config).await.unwrap();
    let recorder = Recorder::new();
    let mut workload = Workload::new("/restart/", 8, 1_000_000);
    workload.request_timeout = REQUEST_TIMEOUT;
    workload.after_failure = AfterFailure::Pause(Duration::from_millis(50));
    workload.duration = Some(Duration::from_secs(7));
    let recording = {
        let (store, workload) = (store.clone(), workload.clone());
        tokio::spawn(async move { recorder.record(&[store], &workload).await })
    };

    tokio::time::sleep(Duration::from_millis(1500)).await;
    tokio::task::block_in_place(|| postgres.stop());
    // While it is down a write fails at once, as unavailable (retriable).
    let probe = Instant::now();
    let error = store.put(b"/probe", b"down", 0).await.unwrap_err();
    let failed_in = probe.elapsed();
    assert!(matches!(error, Error::Unavailable { .. }), "{error:?}");
    assert!(failed_in < Duration::from_secs(5), "took {failed_in:?}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    tokio::task::block_in_place(|| postgres.start());
    let up = recorder.now();

    let mut history = recording.await.unwrap().unwrap();
    // Nothing commits while the server is down: whatever failed before it came back was
    // decided by then.
    let mut failures = 0;
    for op in &mut history.operations {
        if let Output::Unknown { error } = &op.output {
            failures += 1;
            assert!(!error.contains("no answer within"), "a request hung: {op}");
            if op.call < up {
                op.returned = Some(up);
            }
        }
    }
    assert!(failures > 0, "no request met the outage");
    let back_in = history
        .operations
        .iter()
        .filter(|op| op.call >= up && op.response_revision().is_some())
        .filter_map(|op| op.returned)
        .min()
        .map(|at| Duration::from_nanos(at - up))
        .expect("requests succeed after the restart");
    let report = check(&history);
    eprintln!(
        "{failures} requests failed during the outage, {:.0} ms from the restart to the first answer; {report}",
        back_in.as_secs_f64() * 1000.0
    );
    assert!(
        back_in < Duration::from_secs(5),
        "reconnected after {back_in:?}"
    );
    assert!(report.is_clean(), "{report}");
    let writes_after = history
        .operations
        .iter()
        .filter(|op| op.call >= up && op.write_revision().is_some())
        .count();
    assert!(
        writes_after > 20,
        "only {writes_after} writes after the restart"
    );
    store.close().await;
}
