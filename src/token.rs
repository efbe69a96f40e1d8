//! `rudder token`: bootstrap tokens for joining nodes, as `kubeadm token` makes them.
//!
//! `create` stores a new token as the kube-system Secret `bootstrap-token-<id>` (type
//! `bootstrap.kubernetes.io/token`, for authentication and signing, in kubeadm's default node
//! group) and prints `<id>.<secret>`; `join-command` prints the `rudder agent` line a new node
//! runs: the server, a token, and the CA's public key hash the agent checks what it discovers
//! against.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use rand::Rng;

/// Which cluster, as which user.
#[derive(clap::Args)]
pub struct ClusterArgs {
    /// The data dir of the `rudder server` whose admin kubeconfig to use.
    #[arg(long, default_value = "rudder-data", conflicts_with = "kubeconfig")]
    data_dir: PathBuf,
    /// A kubeconfig of the cluster, with rights to create kube-system Secrets.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

impl ClusterArgs {
    fn kubeconfig(&self) -> PathBuf {
        self.kubeconfig
            .clone()
            .unwrap_or_else(|| self.data_dir.join("kubeconfig.yaml"))
    }
}

#[derive(clap::Args)]
pub struct CreateArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// How long the token lives (`24h`, `30m`, `2d`; `0` for ever).
    #[arg(long, default_value = "24h")]
    ttl: String,
}

#[derive(clap::Args)]
pub struct JoinCommandArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The token to print; a new one (living --ttl) when not given.
    #[arg(long)]
    token: Option<String>,
    /// How long a new token lives.
    #[arg(long, default_value = "24h")]
    ttl: String,
    /// The address nodes reach the server at (default: the kubeconfig's).
    #[arg(long)]
    server: Option<String>,
}

#[derive(clap::Subcommand)]
pub enum TokenCommand {
    /// Create a bootstrap token and print it (`<id>.<secret>`).
    Create(CreateArgs),
    /// Print the `rudder agent` command a new node joins with.
    JoinCommand(JoinCommandArgs),
}

/// `rudder token …`.
pub async fn run(command: TokenCommand) -> Result<()> {
    match command {
        TokenCommand::Create(args) => {
            let client = crate::serve::client_for(&args.cluster.kubeconfig()).await?;
            let token = create(&client, parse_ttl(&args.ttl)?).await?;
            println!("{token}");
        }
        TokenCommand::JoinCommand(args) => {
            let path = args.cluster.kubeconfig();
            let client = crate::serve::client_for(&path).await?;
            let token = match args.token {
                Some(token) => token,
                None => create(&client, parse_ttl(&args.ttl)?).await?,
            };
            let (server, ca_pem) = cluster_of(&path)?;
            let server = args.server.unwrap_or(server);
            let hash = rudder_apiserver::registry::cluster_info::ca_cert_hash(&ca_pem)
                .map_err(|error| anyhow::anyhow!(error))?;
            println!("rudder agent --server {server} --token {token} --ca-cert-hash {hash}");
        }
    }
    Ok(())
}

/// `24h`, `30m`, `90s`, `2d`, or `0` (no expiration).
fn parse_ttl(text: &str) -> Result<Option<Duration>> {
    let text = text.trim();
    if text == "0" {
        return Ok(None);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .with_context(|| format!("--ttl {text:?}: a number and a unit (s, m, h, d)"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .with_context(|| format!("--ttl {text:?}: a number and a unit (s, m, h, d)"))?;
    let seconds = match unit {
        "s" => number,
        "m" => number * 60,
        "h" => number * 3600,
        "d" => number * 86_400,
        _ => bail!("--ttl {text:?}: the unit must be s, m, h or d"),
    };
    Ok(Some(Duration::from_secs(seconds)))
}

fn random_string(length: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..length)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// Stores a new bootstrap token living `ttl` (for ever: None) and returns it.
pub async fn create(client: &kube::Client, ttl: Option<Duration>) -> Result<String> {
    let (id, secret) = (random_string(6), random_string(16));
    let mut data: std::collections::BTreeMap<String, String> = [
        ("token-id", id.as_str()),
        ("token-secret", secret.as_str()),
        ("usage-bootstrap-authentication", "true"),
        ("usage-bootstrap-signing", "true"),
        (
            "auth-extra-groups",
            "system:bootstrappers:kubeadm:default-node-token",
        ),
        (
            "description",
            "Created by `rudder token` for joining nodes.",
        ),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), value.to_string()))
    .collect();
    if let Some(ttl) = ttl {
        let at = k8s_openapi::jiff::Timestamp::now()
            + k8s_openapi::jiff::SignedDuration::from_secs(i64::try_from(ttl.as_secs())?);
        data.insert(
            "expiration".into(),
            at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        );
    }
    let object = Secret {
        metadata: ObjectMeta {
            name: Some(format!("bootstrap-token-{id}")),
            namespace: Some("kube-system".into()),
            ..ObjectMeta::default()
        },
        type_: Some("bootstrap.kubernetes.io/token".into()),
        string_data: Some(data),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(client.clone(), "kube-system")
        .create(&PostParams::default(), &object)
        .await
        .context("creating the bootstrap token Secret")?;
    Ok(format!("{id}.{secret}"))
}

/// The server and CA (PEM) of the kubeconfig's current cluster.
fn cluster_of(path: &std::path::Path) -> Result<(String, String)> {
    use base64::Engine as _;
    let config = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading {}", path.display()))?;
    let context_name = config.current_context.clone().unwrap_or_default();
    let cluster_name = config
        .contexts
        .iter()
        .find(|context| context.name == context_name)
        .and_then(|context| context.context.as_ref())
        .map(|context| context.cluster.clone())
        .unwrap_or_default();
    let cluster = config
        .clusters
        .iter()
        .find(|cluster| cluster.name == cluster_name)
        .or(config.clusters.first())
        .and_then(|cluster| cluster.cluster.clone())
        .with_context(|| format!("{} names no cluster", path.display()))?;
    let server = cluster
        .server
        .with_context(|| format!("{} names no server", path.display()))?;
    let ca_pem = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => {
            String::from_utf8(base64::engine::general_purpose::STANDARD.decode(data.trim())?)?
        }
        (None, Some(file)) => {
            std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?
        }
        (None, None) => bail!("{} names no cluster CA", path.display()),
    };
    Ok((server, ca_pem))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_read_like_kubeadms() {
        assert_eq!(
            parse_ttl("24h").ok().flatten(),
            Some(Duration::from_secs(86_400))
        );
        assert_eq!(
            parse_ttl("30m").ok().flatten(),
            Some(Duration::from_secs(1800))
        );
        assert_eq!(parse_ttl("0").ok().flatten(), None);
        assert!(parse_ttl("soon").is_err());
        assert!(parse_ttl("5y").is_err());
    }

    #[test]
    fn tokens_have_kubeadms_shape() {
        let id = random_string(6);
        assert_eq!(id.len(), 6);
        assert!(id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
    }
}
