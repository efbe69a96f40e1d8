//! rudder-tests: support for the cross-crate tests in `tests/tests/` and the component crates'
//! own end-to-end tests: the real `rudder` binary run as a user would ([`RudderServer`], and
//! [`Kubectl`] driving it), and an apiserver in the test's process ([`start_apiserver`],
//! [`admin_client`]). The files in `tests/tests/` are test targets of the root package, so cargo
//! builds the binary for them and hands its path over as `CARGO_BIN_EXE_rudder`.

use std::process::{Command, Output};
use std::time::Duration;

pub mod https;
pub mod in_process;
pub mod kubectl;
pub mod netns;
pub mod server;

pub use in_process::{admin_client, start_apiserver};
pub use kubectl::Kubectl;
pub use netns::NodeNetns;
pub use server::RudderServer;

/// Runs `binary` with `args` and returns its output.
pub fn run(binary: &str, args: &[&str]) -> Output {
    Command::new(binary)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("cannot run {binary}: {error}"))
}

/// Waits until `check` holds, polling every 200 ms; fails with `what` after `limit`.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One `#[tokio::test]` per storage driver, each running `scenario(storage_url)` on a fresh
/// backend of that driver and cleaning it up after:
///
/// ```text
/// rudder_tests::on_every_driver!(pods_are_placed;
///     on_sqlite => sqlite, on_postgres => postgres, on_etcd => etcd);
/// ```
///
/// A missing service skips loudly, or fails under `CI=true` (see `rudder_storage::testing`).
#[macro_export]
macro_rules! on_every_driver {
    ($scenario:path; $($name:ident => $driver:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let Some(harness) = rudder_storage::testing::$driver().await else {
                    return;
                };
                $scenario(harness.url()).await;
                harness.cleanup().await;
            }
        )+
    };
}

/// One `#[tokio::test]` per storage driver, each running `check(harness)` with a fresh backend
/// of that driver, for tests that compare Rudder with the real etcd the test script starts:
///
/// ```text
/// rudder_tests::on_every_driver_beside_real_etcd!(compare_with_real_etcd;
///     over_sqlite => sqlite, over_postgres => postgres, over_etcd => etcd);
/// ```
///
/// A missing service skips loudly, or fails under `CI=true` (see `rudder_storage::testing`).
#[macro_export]
macro_rules! on_every_driver_beside_real_etcd {
    ($check:path; $($name:ident => $driver:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let Some(harness) = rudder_storage::testing::$driver().await else {
                    return;
                };
                if rudder_storage::testing::service(rudder_storage::testing::ETCD_ENV).is_none() {
                    return;
                }
                $check(harness).await;
            }
        )+
    };
}
