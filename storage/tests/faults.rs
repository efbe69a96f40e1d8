//! Faults the drivers survive, judged by the linearizability checker: a PostgreSQL server
//! stopped and started again under load, an etcd cluster losing a member then its quorum,
//! and a full disk under SQLite and under PostgreSQL.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    let store = open_config(&testing::config_without_compaction(&postgres.url()))
        .await
        .unwrap();
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

/// A write through `store`, timed: its result and how long it took.
async fn timed_put(store: &dyn Storage, key: &[u8]) -> (Result<Revision>, Duration) {
    let started = Instant::now();
    let result = match tokio::time::timeout(Duration::from_secs(30), store.put(key, b"", 0)).await {
        Ok(result) => result,
        Err(_) => Err(Error::Backend {
            message: "no answer within 30 s".into(),
            source: None,
        }),
    };
    (result, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn losing_an_etcd_member_loses_no_write_and_losing_the_quorum_fails_clearly() {
    let Some(mut cluster) = testing::own_etcd_cluster().await else {
        return;
    };
    let store = open_config(&testing::config_without_compaction(&cluster.url()))
        .await
        .unwrap();
    let recorder = Recorder::new();
    let mut workload = Workload::new("/members/", 8, 1_000_000);
    workload.request_timeout = REQUEST_TIMEOUT;
    workload.after_failure = AfterFailure::Pause(Duration::from_millis(100));
    // The clients run until 8 s after the members are back, however long each phase took.
    let stop = Arc::new(AtomicBool::new(false));
    workload.stop = Some(stop.clone());
    let recording = {
        let (store, workload) = (store.clone(), workload.clone());
        tokio::spawn(async move { recorder.record(&[store], &workload).await })
    };

    tokio::time::sleep(Duration::from_millis(1500)).await;
    cluster.kill(0);
    let one_down = recorder.now();
    // The two left elect a leader (if the dead one led) and take writes again — after at
    // most one of etcd's request timeouts (5 s plus two election timeouts) for a request the
    // dead leader held.
    let killed = Instant::now();
    let serving_again = loop {
        let (written, _) = timed_put(&*store, b"/probe/one-down").await;
        if written.is_ok() {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(15),
            "no write succeeded within 15 s of losing one member: {written:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("one member down: writes succeed {serving_again:?} after the kill");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    cluster.kill(1);
    let quorum_lost = recorder.now();
    let (refused, took) = timed_put(&*store, b"/probe/no-quorum").await;
    eprintln!("no quorum: a write took {took:?}: {refused:?}");
    let error = refused.expect_err("a write without a quorum fails");
    assert!(matches!(error, Error::Unavailable { .. }), "{error:?}");
    assert!(took < REQUEST_TIMEOUT, "took {took:?}");
    cluster.restart(0);
    cluster.restart(1);
    let restarted = Instant::now();
    let back = recorder.now();
    let recovered = loop {
        let (written, _) = timed_put(&*store, b"/probe/back").await;
        if written.is_ok() {
            break restarted.elapsed();
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(20),
            "no write succeeded within 20 s of the members' return: {written:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Clients whose request went out while there was no quorum wait for etcd's request
    // timeout (~6 s) before they go on: give them that and a little more.
    tokio::time::sleep(Duration::from_secs(8)).await;
    stop.store(true, Ordering::Release);

    let history = recording.await.unwrap().unwrap();
    // The driver watches again through another member when the one serving the watch goes:
    // the one watch carries on through both losses, missing and repeating nothing.
    let log = history.watch.as_ref().unwrap();
    assert_eq!(log.error, None, "the watch ended");
    let acknowledged_while_one_down = history
        .operations
        .iter()
        .filter(|op| op.call > one_down && op.call < quorum_lost)
        .filter(|op| op.write_revision().is_some())
        .count();
    let in_window: Vec<_> = history
        .operations
        .iter()
        .filter(|op| op.call > one_down && op.call < quorum_lost)
        .collect();
    let slowest = in_window
        .iter()
        .filter_map(|op| op.returned.map(|at| at - op.call))
        .max();
    eprintln!(
        "{} requests with one member down, slowest {:?} ms; failures: {:?}",
        in_window.len(),
        slowest.map(|n| n / 1_000_000),
        in_window
            .iter()
            .filter_map(|op| match &op.output {
                Output::Unknown { error } => Some(error.clone()),
                _ => None,
            })
            .take(3)
            .collect::<Vec<_>>()
    );
    let report = check(&history);
    eprintln!(
        "{acknowledged_while_one_down} writes acknowledged with one member down; writes again {:.1} s after the members' return; {report}",
        recovered.as_secs_f64()
    );
    let acknowledged_after_return = history
        .operations
        .iter()
        .filter(|op| op.call > back && op.write_revision().is_some())
        .count();
    assert!(acknowledged_while_one_down > 20);
    assert!(
        acknowledged_after_return > 20,
        "{acknowledged_after_return}"
    );
    assert!(report.is_clean(), "{report}");
    store.close().await;
}

/// A small tmpfs mounted for the case (root only); unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(megabytes: u32) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|status| status.success());
        if mounted {
            return Some(SmallDisk { dir });
        }
        assert!(
            std::env::var("CI").map_or(true, |ci| ci != "true"),
            "cannot mount a tmpfs but CI=true: the full-disk case needs root"
        );
        eprintln!("SKIPPED: cannot mount a tmpfs (not root?)");
        None
    }

    /// Hands the mounted directory to `owner` (`user:group`).
    fn give_to(&self, owner: &str) {
        let status = std::process::Command::new("chown")
            .arg(owner)
            .arg(self.dir.path())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Gives the disk `megabytes` in all.
    fn grow(&self, megabytes: u32) {
        let status = std::process::Command::new("mount")
            .args(["-o", &format!("remount,size={megabytes}m")])
            .arg(self.dir.path())
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_sqlite_disk_fails_writes_clearly_keeps_the_data_and_recovers_when_freed() {
    let Some(disk) = SmallDisk::mount(6) else {
        return;
    };
    let url = format!(
        "sqlite://{}?compact_interval=0",
        disk.dir.path().join("state.db").display()
    );
    let store = open(&url).await.unwrap();
    fill_then_free(&store, &disk, 64).await;
    store.close().await;
}

/// PostgreSQL keeps its write-ahead log on the big disk and the database in a tablespace on
/// the small one — the usual way a data volume fills (a full WAL disk makes PostgreSQL stop
/// itself, which the restart case covers).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_postgres_disk_fails_writes_clearly_keeps_the_data_and_recovers_when_freed() {
    let Some(postgres) = testing::own_postgres() else {
        return;
    };
    // The new database is a copy of template1 (about 8 MiB) in the tablespace.
    let Some(disk) = SmallDisk::mount(16) else {
        return;
    };
    disk.give_to("postgres:postgres");
    postgres.sql(&format!(
        "CREATE TABLESPACE small LOCATION '{}'",
        disk.dir.path().display()
    ));
    postgres.sql("CREATE DATABASE rudder TABLESPACE small");
    let url = postgres.url();
    let url = match url.rsplit_once('/') {
        Some((server, _database)) => format!("{server}/rudder"),
        None => panic!("no database in {url}"),
    };
    let store = open_config(&testing::config_without_compaction(&url))
        .await
        .unwrap();
    fill_then_free(&store, &disk, 96).await;
    store.close().await;
    drop(postgres);
}

/// Fills `disk` under a recorded workload with incompressible 64 KiB values until a write
/// fails, checks the error is clear, that reads still answer and nothing written is lost,
/// then grows the disk to `grow_to` MiB and checks writes succeed within 5 s and the history
/// is linearizable.
async fn fill_then_free(store: &Arc<dyn Storage>, disk: &SmallDisk, grow_to: u32) {
    let recorder = Recorder::new();
    let mut workload = Workload::new("/disk/", 4, 1_000_000);
    workload.request_timeout = REQUEST_TIMEOUT;
    workload.after_failure = AfterFailure::Pause(Duration::from_millis(20));
    workload.duration = Some(Duration::from_secs(6));
    let recording = {
        let (store, workload) = (store.clone(), workload.clone());
        tokio::spawn(async move { recorder.record(&[store], &workload).await })
    };
    let mut written: Vec<(Vec<u8>, Revision)> = Vec::new();
    let error = loop {
        let key = format!("/fill/{:05}", written.len()).into_bytes();
        match store.put(&key, &incompressible(written.len()), 0).await {
            Ok(revision) => written.push((key, revision)),
            Err(error) => break error,
        }
        assert!(written.len() < 1000, "the small disk never filled");
    };
    eprintln!("the disk filled after {} values: {error}", written.len());
    assert!(
        error.to_string().contains("the database's disk is full"),
        "not a clear error: {error}"
    );
    // While it is full, writes keep failing the same way and reads still answer.
    let again = store
        .put(b"/fill/more", &incompressible(usize::MAX), 0)
        .await
        .unwrap_err();
    assert!(again.to_string().contains("disk is full"), "{again}");
    for (index, (key, revision)) in written.iter().enumerate() {
        let kv = store
            .get(key, 0)
            .await
            .unwrap()
            .expect("written before the disk filled");
        assert_eq!(kv.mod_revision, *revision);
        assert!(
            kv.value == incompressible(index),
            "value of {key:?} changed"
        );
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    disk.grow(grow_to);
    let freed = Instant::now();
    let revision = loop {
        match store.put(b"/fill/after", &incompressible(0), 0).await {
            Ok(revision) => break revision,
            Err(error) => {
                assert!(freed.elapsed() < Duration::from_secs(5), "{error}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    eprintln!(
        "writes succeed again {:?} after space was freed, at revision {revision}",
        freed.elapsed()
    );

    let history = recording.await.unwrap().unwrap();
    let failed = history
        .operations
        .iter()
        .filter(|op| matches!(op.output, Output::Unknown { .. }))
        .count();
    let report = check(&history);
    eprintln!("{report}");
    assert!(failed > 0, "no request of the workload met the full disk");
    assert!(report.is_clean(), "{report}");
    // Nothing written before the disk filled was lost, after all that.
    for (key, revision) in &written {
        let kv = store.get(key, 0).await.unwrap().unwrap();
        assert_eq!(kv.mod_revision, *revision);
    }
}

/// 64 KiB that no database compresses, different for each `seed`.
fn incompressible(seed: usize) -> Vec<u8> {
    let mut state = (seed as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..64 * 1024)
        .map(|_| {
            // xorshift64
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}
