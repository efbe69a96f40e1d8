//! A three-member etcd cluster of the test case's own on loopback ports, whose members the
//! case kills and restarts (same data directories) to test what the etcd driver does when a
//! member, or the quorum, is lost.

use std::process::{Child, Command, Stdio};

use super::free_port;

/// The cluster; every member still running is killed when dropped.
pub struct OwnEtcdCluster {
    binary: String,
    dir: tempfile::TempDir,
    /// (client port, peer port) per member.
    ports: Vec<(u16, u16)>,
    children: Vec<Option<Child>>,
}

impl OwnEtcdCluster {
    /// `etcd://` with every member's client endpoint.
    pub fn url(&self) -> String {
        let endpoints: Vec<String> = self
            .ports
            .iter()
            .map(|(client, _)| format!("127.0.0.1:{client}"))
            .collect();
        format!("etcd://{}", endpoints.join(","))
    }

    /// The client endpoint of member `index`.
    pub fn endpoint(&self, index: usize) -> String {
        format!("127.0.0.1:{}", self.ports[index].0)
    }

    fn spawn(&self, index: usize) -> std::io::Result<Child> {
        let initial_cluster: Vec<String> = self
            .ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect();
        let (client, peer) = self.ports[index];
        let log = std::fs::File::create(self.dir.path().join(format!("m{index}.log")))?;
        Command::new(&self.binary)
            .arg("--name")
            .arg(format!("m{index}"))
            .arg("--data-dir")
            .arg(self.dir.path().join(format!("m{index}")))
            .arg("--listen-client-urls")
            .arg(format!("http://127.0.0.1:{client}"))
            .arg("--advertise-client-urls")
            .arg(format!("http://127.0.0.1:{client}"))
            .arg("--listen-peer-urls")
            .arg(format!("http://127.0.0.1:{peer}"))
            .arg("--initial-advertise-peer-urls")
            .arg(format!("http://127.0.0.1:{peer}"))
            .arg("--initial-cluster")
            .arg(initial_cluster.join(","))
            .arg("--initial-cluster-token")
            .arg("rudder-test")
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
    }

    /// Kills member `index` with SIGKILL.
    pub fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.children[index].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `index` again on its data directory.
    pub fn restart(&mut self, index: usize) {
        self.kill(index);
        self.children[index] = Some(self.spawn(index).expect("etcd member restarts"));
    }

    /// The members' logs, for a failing case's message.
    pub fn logs(&self) -> String {
        (0..self.ports.len())
            .map(|index| {
                let path = self.dir.path().join(format!("m{index}.log"));
                let text = std::fs::read_to_string(path).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(20).collect();
                format!(
                    "member {index}:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for OwnEtcdCluster {
    fn drop(&mut self) {
        for index in 0..self.children.len() {
            self.kill(index);
        }
    }
}

/// Starts a three-member cluster and waits until it has a leader; `None` (loudly) when the
/// `etcd` binary is missing outside CI, a failure under `CI=true`.
pub async fn own_etcd_cluster() -> Option<OwnEtcdCluster> {
    let binary = std::env::var("RUDDER_TEST_ETCD_BINARY").unwrap_or_else(|_| "etcd".into());
    let mut cluster = OwnEtcdCluster {
        binary,
        dir: tempfile::tempdir().expect("temporary directory"),
        ports: (0..3).map(|_| (free_port(), free_port())).collect(),
        children: Vec::new(),
    };
    for index in 0..3 {
        match cluster.spawn(index) {
            Ok(child) => cluster.children.push(Some(child)),
            Err(error) if super::in_ci() => {
                panic!(
                    "cannot start {} but CI=true: {error}; run scripts/test.sh",
                    cluster.binary
                )
            }
            Err(error) => {
                eprintln!("SKIPPED: cannot start {}: {error}", cluster.binary);
                return None;
            }
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let config = crate::StorageConfig::parse(&cluster.url()).expect("etcd URL");
    loop {
        if let Ok(store) = crate::open_config(&config).await {
            let written = store.put(b"/cluster-ready", b"", 0).await.is_ok();
            store.close().await;
            if written {
                return Some(cluster);
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the three-member etcd did not take a write within 30 s:\n{}",
            cluster.logs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
