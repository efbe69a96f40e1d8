//! Which kernel interface the proxy programs: nftables (one table of Rudder's own, diffed
//! transactions; the default) or, where nftables cannot be used, iptables (chains of
//! Rudder's own written with `iptables-restore`). `--proxy-mode auto` takes nftables when
//! `nft` works here and iptables otherwise, as upstream's kube-proxy picks among its modes.

use std::sync::Arc;

use super::iptables::{self, Iptables};
use super::model::ServicePort;
use super::nft::{self, Nft};
use super::rules::{self, RuleConfig};
use super::ruleset::{self, Ruleset, Skeleton};

/// What `--proxy-mode` asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProxyMode {
    /// nftables when it works here, else iptables.
    #[default]
    Auto,
    Nftables,
    Iptables,
}

impl ProxyMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Nftables => "nftables",
            Self::Iptables => "iptables",
        }
    }
}

impl std::str::FromStr for ProxyMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "auto" | "" => Ok(Self::Auto),
            "nftables" => Ok(Self::Nftables),
            "iptables" => Ok(Self::Iptables),
            other => Err(format!(
                "unknown proxy mode {other:?} (auto, nftables or iptables)"
            )),
        }
    }
}

/// The interface chosen, ready to program.
#[derive(Clone)]
pub enum Backend {
    Nftables(Arc<dyn Nft>),
    Iptables(Arc<dyn Iptables>),
}

impl Backend {
    /// The mode's name, as `--proxy-mode` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Nftables(_) => ProxyMode::Nftables.as_str(),
            Self::Iptables(_) => ProxyMode::Iptables.as_str(),
        }
    }

    /// The backend `mode` asks for among the programs given, or why there is none.
    pub async fn choose(
        mode: ProxyMode,
        nft: nft::Cli,
        ipt: iptables::Cli,
    ) -> Result<Self, String> {
        let nftables = || async { nft.available().await };
        let iptables = || async { ipt.available().await };
        const NFT_MISSING: &str = "nftables is missing or may not be changed here (install the \
                                   nftables package, run as root)";
        const IPT_MISSING: &str = "iptables is missing or may not be changed here (install the \
                                   iptables package, run as root)";
        match mode {
            ProxyMode::Nftables if nftables().await => Ok(Self::Nftables(Arc::new(nft))),
            ProxyMode::Nftables => Err(NFT_MISSING.to_owned()),
            ProxyMode::Iptables if iptables().await => Ok(Self::Iptables(Arc::new(ipt))),
            ProxyMode::Iptables => Err(IPT_MISSING.to_owned()),
            ProxyMode::Auto if nftables().await => Ok(Self::Nftables(Arc::new(nft))),
            ProxyMode::Auto if iptables().await => Ok(Self::Iptables(Arc::new(ipt))),
            ProxyMode::Auto => Err(format!("{NFT_MISSING}, and so is iptables")),
        }
    }
}

/// What the run loop keeps between syncs for its backend: what it applied last.
pub(super) enum Programmer {
    Nftables {
        nft: Arc<dyn Nft>,
        config: RuleConfig,
        skeleton: Skeleton,
        applied: Option<Ruleset>,
    },
    Iptables(iptables::Programmer),
}

impl Programmer {
    pub(super) fn new(backend: &Backend, config: &RuleConfig) -> Self {
        match backend {
            Backend::Nftables(nft) => Self::Nftables {
                nft: nft.clone(),
                config: config.clone(),
                skeleton: rules::skeleton(config),
                applied: None,
            },
            Backend::Iptables(ipt) => {
                Self::Iptables(iptables::Programmer::new(ipt.clone(), config.clone()))
            }
        }
    }

    /// Nothing is known to be in the kernel: the next sync writes everything.
    pub(super) fn fresh(&self) -> bool {
        match self {
            Self::Nftables { applied, .. } => applied.is_none(),
            Self::Iptables(programmer) => programmer.fresh(),
        }
    }

    /// After a failure: the kernel's state is unknown.
    pub(super) fn forget(&mut self) {
        match self {
            Self::Nftables { applied, .. } => *applied = None,
            Self::Iptables(programmer) => programmer.forget(),
        }
    }

    /// Brings the kernel to `ports` (everything when `full`); returns the lines written.
    pub(super) async fn program(
        &mut self,
        ports: &[ServicePort],
        full: bool,
    ) -> anyhow::Result<usize> {
        match self {
            Self::Nftables {
                nft,
                config,
                skeleton,
                applied,
            } => {
                let desired = rules::ruleset(ports, config);
                let script = match (&*applied, full) {
                    (Some(old), false) => ruleset::diff(skeleton, old, &desired),
                    _ => ruleset::full(skeleton, &desired),
                };
                if !script.is_empty() {
                    nft.apply(&script).await?;
                }
                *applied = Some(desired);
                Ok(script.lines().count())
            }
            Self::Iptables(programmer) => programmer.program(ports, full).await,
        }
    }

    /// Rules per table (nat, filter) for iptables' rule-count metric.
    pub(super) fn iptables_rules(&self) -> Option<(usize, usize)> {
        match self {
            Self::Nftables { .. } => None,
            Self::Iptables(programmer) => programmer.rule_counts(),
        }
    }
}
