//! An apiserver in the test's own process, on a storage driver's test backend, and an admin
//! client of it: for tests that need the library's view (the `Running` handle, the PKI) rather
//! than the binary's.

// Test support: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use rudder_apiserver::server::{self, Config, Running};
use rudder_storage::testing::Harness;
use tokio_util::sync::CancellationToken;

/// Starts an apiserver on `harness`'s backend, listening on a free loopback port, with its
/// data dir in the returned temporary directory; `adjust` changes the configuration first.
/// The store closes once the server has stopped and dropped it.
pub async fn start_apiserver(
    harness: &dyn Harness,
    adjust: impl FnOnce(&mut Config),
) -> (Running, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(dir.path());
    config.listen = "127.0.0.1:0".parse().unwrap();
    adjust(&mut config);
    let store = rudder_storage::open(&harness.url()).await.unwrap();
    let running = server::start(config, store, CancellationToken::new())
        .await
        .unwrap();
    (running, dir)
}

/// A kube-rs client with the admin credentials of the kubeconfig at `path`.
pub async fn admin_client(kubeconfig: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}
