//! The one boundary to the kernel: a transaction handed to `nft -f -` (atomic: all of it
//! applies or none), and a fake that records transactions for unit tests.

use std::process::Stdio;
use std::sync::Mutex;

use async_trait::async_trait;
use tokio::io::AsyncWriteExt;

#[async_trait]
pub trait Nft: Send + Sync {
    /// Applies one transaction of `nft` statements.
    async fn apply(&self, script: &str) -> anyhow::Result<()>;
}

/// The `nft` program (`command` is `["nft"]`, or e.g. `["ip", "netns", "exec", NS, "nft"]`).
pub struct Cli {
    pub command: Vec<String>,
}

impl Default for Cli {
    fn default() -> Self {
        Self {
            command: vec!["nft".into()],
        }
    }
}

impl Cli {
    /// Whether `nft` runs here and may change this network namespace's rules.
    pub async fn available(&self) -> bool {
        self.apply("list tables\n").await.is_ok()
    }
}

#[async_trait]
impl Nft for Cli {
    async fn apply(&self, script: &str) -> anyhow::Result<()> {
        let (program, args) = self
            .command
            .split_first()
            .ok_or_else(|| anyhow::anyhow!("no nft command"))?;
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| anyhow::anyhow!("running {program}: {error}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(script.as_bytes()).await?;
            stdin.shutdown().await?;
        }
        let output = child.wait_with_output().await?;
        if output.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first: String = stderr.lines().take(6).collect::<Vec<_>>().join("\n");
        anyhow::bail!("{program} -f - failed ({}): {first}", output.status)
    }
}

/// Records every transaction; fails the next one when told to.
#[derive(Default)]
pub struct Fake {
    pub applied: Mutex<Vec<String>>,
    pub fail_next: Mutex<bool>,
}

#[async_trait]
impl Nft for Fake {
    async fn apply(&self, script: &str) -> anyhow::Result<()> {
        let fail = std::mem::take(&mut *self.fail_next.lock().map_err(poisoned)?);
        if fail {
            anyhow::bail!("fake nft failure");
        }
        self.applied
            .lock()
            .map_err(poisoned)?
            .push(script.to_owned());
        Ok(())
    }
}

fn poisoned<T>(_: T) -> anyhow::Error {
    anyhow::anyhow!("a lock was poisoned")
}
