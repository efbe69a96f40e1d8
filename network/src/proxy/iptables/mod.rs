//! The proxy's iptables mode, for nodes where nftables cannot be used: the same model
//! ([`super::model`]) turned into chains of Rudder's own in the `nat` and `filter` tables
//! ([`rules`]), written with `iptables-restore --noflush` so no other chain is touched
//! ([`restore`]): every chain at start, after a failure and every full-sync period, otherwise
//! only the chains that changed. The builtin chains get one jump each into Rudder's, added
//! when missing (checked with `iptables -C`). As upstream's iptables mode, packets walk one
//! rule per Service port, so the cost grows with the number of Services.
//!
//! This module is the boundary to the programs (`iptables`, `iptables-restore`,
//! `iptables-save`, optionally run through a prefix such as `ip netns exec NS`), with a fake
//! for unit tests.

pub mod restore;
pub mod rules;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::io::AsyncWriteExt;

use super::model::ServicePort;
use super::rules::RuleConfig;
pub use rules::Tables;

/// What `iptables` is asked to do with one rule of a builtin chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleOp {
    /// `-C`: is it there?
    Check,
    /// `-I`: put it first.
    Insert,
    /// `-D`: remove one copy.
    Delete,
}

impl RuleOp {
    fn flag(self) -> &'static str {
        match self {
            Self::Check => "-C",
            Self::Insert => "-I",
            Self::Delete => "-D",
        }
    }
}

#[async_trait]
pub trait Iptables: Send + Sync {
    /// Hands `input` to `iptables-restore --noflush` (each table's part applies whole or not
    /// at all; chains not named in it are left alone).
    async fn restore(&self, input: &str) -> anyhow::Result<()>;
    /// `iptables-save -t <table>`.
    async fn save(&self, table: &str) -> anyhow::Result<String>;
    /// `iptables -t <table> <op> <chain> <args>`: `Ok(false)` when iptables answers that the
    /// rule is not there (exit status 1), an error for anything else that fails.
    async fn rule(
        &self,
        table: &str,
        op: RuleOp,
        chain: &str,
        args: &[String],
    ) -> anyhow::Result<bool>;
}

/// The programs, run directly or behind `prefix` (e.g. `["ip", "netns", "exec", NS]`).
#[derive(Clone, Debug, Default)]
pub struct Cli {
    pub prefix: Vec<String>,
}

/// How long a call waits for the xtables lock another program holds.
const LOCK_WAIT_SECONDS: &str = "5";

impl Cli {
    fn command(&self, program: &str) -> tokio::process::Command {
        let mut words = self.prefix.iter();
        let mut command = match words.next() {
            Some(first) => {
                let mut command = tokio::process::Command::new(first);
                command.args(words).arg(program);
                command
            }
            None => tokio::process::Command::new(program),
        };
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }

    /// Whether `iptables` and `iptables-restore` run here and may change this network
    /// namespace's `nat` table.
    pub async fn available(&self) -> bool {
        let listed = self
            .command("iptables")
            .args(["-w", LOCK_WAIT_SECONDS, "-t", "nat", "-S", "POSTROUTING"])
            .output()
            .await
            .is_ok_and(|o| o.status.success());
        let restore = self
            .command("iptables-restore")
            .arg("--version")
            .output()
            .await
            .is_ok_and(|o| o.status.success());
        listed && restore
    }
}

fn failure(program: &str, output: &std::process::Output) -> anyhow::Error {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let first: String = stderr.lines().take(6).collect::<Vec<_>>().join("\n");
    anyhow::anyhow!("{program} failed ({}): {first}", output.status)
}

#[async_trait]
impl Iptables for Cli {
    async fn restore(&self, input: &str) -> anyhow::Result<()> {
        let mut child = self
            .command("iptables-restore")
            .args(["-w", LOCK_WAIT_SECONDS, "--noflush"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|error| anyhow::anyhow!("running iptables-restore: {error}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(input.as_bytes()).await?;
            stdin.shutdown().await?;
        }
        let output = child.wait_with_output().await?;
        if output.status.success() {
            return Ok(());
        }
        Err(failure("iptables-restore --noflush", &output))
    }

    async fn save(&self, table: &str) -> anyhow::Result<String> {
        let output = self
            .command("iptables-save")
            .args(["-t", table])
            .output()
            .await
            .map_err(|error| anyhow::anyhow!("running iptables-save: {error}"))?;
        if !output.status.success() {
            return Err(failure("iptables-save", &output));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    async fn rule(
        &self,
        table: &str,
        op: RuleOp,
        chain: &str,
        args: &[String],
    ) -> anyhow::Result<bool> {
        let output = self
            .command("iptables")
            .args(["-w", LOCK_WAIT_SECONDS, "-t", table, op.flag(), chain])
            .args(args)
            .output()
            .await
            .map_err(|error| anyhow::anyhow!("running iptables: {error}"))?;
        match output.status.code() {
            Some(0) => Ok(true),
            Some(1) if op != RuleOp::Insert => Ok(false),
            _ => Err(failure(
                &format!("iptables -t {table} {}", op.flag()),
                &output,
            )),
        }
    }
}

/// Records restores and keeps builtin-chain rules in memory; fails the next restore when
/// told to.
#[derive(Default)]
pub struct Fake {
    pub restored: Mutex<Vec<String>>,
    /// (table, chain, rule) of the rules added to builtin chains.
    pub builtin: Mutex<Vec<(String, String, Vec<String>)>>,
    /// What `save` answers, by table.
    pub saved: Mutex<std::collections::BTreeMap<String, String>>,
    pub fail_next: Mutex<bool>,
}

fn poisoned<T>(_: T) -> anyhow::Error {
    anyhow::anyhow!("a lock was poisoned")
}

#[async_trait]
impl Iptables for Fake {
    async fn restore(&self, input: &str) -> anyhow::Result<()> {
        if std::mem::take(&mut *self.fail_next.lock().map_err(poisoned)?) {
            anyhow::bail!("fake iptables-restore failure");
        }
        self.restored
            .lock()
            .map_err(poisoned)?
            .push(input.to_owned());
        Ok(())
    }

    async fn save(&self, table: &str) -> anyhow::Result<String> {
        Ok(self
            .saved
            .lock()
            .map_err(poisoned)?
            .get(table)
            .cloned()
            .unwrap_or_default())
    }

    async fn rule(
        &self,
        table: &str,
        op: RuleOp,
        chain: &str,
        args: &[String],
    ) -> anyhow::Result<bool> {
        let mut builtin = self.builtin.lock().map_err(poisoned)?;
        let key = (table.to_owned(), chain.to_owned(), args.to_vec());
        let found = builtin.iter().position(|r| *r == key);
        Ok(match (op, found) {
            (RuleOp::Check, found) => found.is_some(),
            (RuleOp::Insert, _) => {
                builtin.insert(0, key);
                true
            }
            (RuleOp::Delete, Some(index)) => {
                builtin.remove(index);
                true
            }
            (RuleOp::Delete, None) => false,
        })
    }
}

/// Rudder's chains in the kernel now, per table (from `iptables-save`).
pub async fn existing(ipt: &dyn Iptables) -> anyhow::Result<restore::Existing> {
    Ok(restore::Existing {
        nat: restore::rudder_chains(&ipt.save("nat").await?),
        filter: restore::rudder_chains(&ipt.save("filter").await?),
    })
}

/// Adds the jumps from the builtin chains into Rudder's that are missing.
pub async fn ensure_jumps(ipt: &dyn Iptables) -> anyhow::Result<()> {
    for jump in rules::jumps() {
        if !ipt
            .rule(jump.table, RuleOp::Check, jump.chain, &jump.args)
            .await?
        {
            ipt.rule(jump.table, RuleOp::Insert, jump.chain, &jump.args)
                .await?;
            tracing::debug!(
                table = jump.table,
                chain = jump.chain,
                target = jump.target,
                "jump added"
            );
        }
    }
    Ok(())
}

/// Removes the jumps into Rudder's chains, then the chains (and nothing else). Returns
/// whether there was anything to remove.
pub async fn cleanup(ipt: &dyn Iptables) -> anyhow::Result<bool> {
    let existing = existing(ipt).await?;
    for jump in rules::jumps() {
        let chains: &BTreeSet<String> = match jump.table {
            "nat" => &existing.nat,
            _ => &existing.filter,
        };
        if !chains.contains(jump.target) {
            continue;
        }
        // Someone may have added it twice; a bounded number of tries all the same.
        for _ in 0..16 {
            if !ipt
                .rule(jump.table, RuleOp::Delete, jump.chain, &jump.args)
                .await?
            {
                break;
            }
        }
    }
    let input = restore::cleanup(&existing);
    if input.is_empty() {
        return Ok(false);
    }
    ipt.restore(&input).await?;
    Ok(true)
}

/// The iptables side of the run loop: what it applied last, so a sync writes only the
/// chains that changed.
pub struct Programmer {
    ipt: Arc<dyn Iptables>,
    config: RuleConfig,
    applied: Option<Tables>,
}

impl Programmer {
    pub fn new(ipt: Arc<dyn Iptables>, config: RuleConfig) -> Self {
        Self {
            ipt,
            config,
            applied: None,
        }
    }

    /// Whether nothing is known to be in the kernel (the next sync must write everything).
    pub fn fresh(&self) -> bool {
        self.applied.is_none()
    }

    pub fn forget(&mut self) {
        self.applied = None;
    }

    /// Brings the kernel to `ports` (every chain when `full`, removing Rudder's chains that
    /// are no longer wanted); returns the lines written.
    pub async fn program(&mut self, ports: &[ServicePort], full: bool) -> anyhow::Result<usize> {
        let desired = rules::tables(ports, &self.config);
        let input = match (&self.applied, full) {
            (Some(old), false) => restore::diff(old, &desired),
            _ => restore::full(&existing(&*self.ipt).await?, &desired),
        };
        if !input.is_empty() {
            self.ipt.restore(&input).await?;
        }
        if full {
            ensure_jumps(&*self.ipt).await?;
        }
        self.applied = Some(desired);
        Ok(input.lines().count())
    }

    /// Rules per table in the last applied state (for the metrics).
    pub fn rule_counts(&self) -> Option<(usize, usize)> {
        self.applied.as_ref().map(Tables::rule_counts)
    }
}
