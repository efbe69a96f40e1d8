//! `rudder bench authz`: what authorization costs. ConfigMap creates by a token user bound to
//! `edit` (so every request goes through the authorizer chain, not the `system:masters`
//! shortcut), against one in-process apiserver on SQLite per variant:
//!
//! - `always-allow`: `--authorization-mode=AlwaysAllow` (the reference);
//! - `rbac`: RBAC with the default roles and bindings;
//! - `rbac-<N>`: RBAC with `--role-bindings` more RoleBindings (spread over
//!   `--binding-namespaces` namespaces, the bench's own among them).
//!
//! Variants run round-robin in rotating order; each figure is also a ratio to `always-allow` in
//! the same run. It also times the authorizer alone (the decision for one create, on the
//! largest policy), which is what the ratio's difference is made of.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use rudder_apiserver::authz::Mode;
use rudder_apiserver::server::{self, Config, Running};
use rudder_storage::Storage;
use tokio_util::sync::CancellationToken;

use super::api::{admin_config, concise, concurrently, configmap};

const NAMESPACE: &str = "bench";
const TOKEN: &str = "bench-token";

#[derive(clap::Args)]
pub struct AuthzBenchArgs {
    /// ConfigMap creates per variant in each round.
    #[arg(long, default_value_t = 5_000)]
    creates: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Rounds; each runs every variant once, in rotating order.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// RoleBindings added for the largest variant.
    #[arg(long, default_value_t = 5_000)]
    role_bindings: usize,
    /// Namespaces those RoleBindings are spread over.
    #[arg(long, default_value_t = 100)]
    binding_namespaces: usize,
}

struct Variant {
    name: String,
    running: Running,
    store: Arc<dyn Storage>,
    clients: Vec<Client>,
    _dir: tempfile::TempDir,
}

/// Clients that authenticate with the bench user's token (the admin kubeconfig's cluster,
/// another user).
async fn token_clients(running: &Running, count: usize) -> Result<Vec<Client>> {
    let mut config = admin_config(running).await?;
    config.auth_info = kube::config::AuthInfo {
        token: Some(TOKEN.to_string().into()),
        ..Default::default()
    };
    (0..count)
        .map(|_| Ok(Client::try_from(config.clone())?))
        .collect()
}

fn binding(name: String, namespace: &str, user: &str) -> RoleBinding {
    RoleBinding {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: "view".into(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: user.into(),
            ..Default::default()
        }]),
    }
}

async fn open(
    name: &str,
    mode: Mode,
    extra_bindings: usize,
    args: &AuthzBenchArgs,
) -> Result<Variant> {
    let dir = tempfile::tempdir()?;
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, format!("{TOKEN},bench,2000,\"bench\"\n"))?;
    let mut config = Config::new(dir.path().join("apiserver"));
    config.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    config.token_auth_file = Some(tokens);
    config.authorization_modes = vec![mode];
    let url = format!(
        "sqlite://{}?compact_interval=0",
        dir.path().join("state.db").display()
    );
    let store = rudder_storage::open(&url).await?;
    let running = server::start(config, store.clone(), CancellationToken::new()).await?;
    let admin = Client::try_from(admin_config(&running).await?)?;
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let mut names = vec![NAMESPACE.to_string()];
    names.extend((1..args.binding_namespaces.max(1)).map(|i| format!("bench-{i}")));
    for namespace in &names {
        let object = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        namespaces
            .create(&PostParams::default(), &object)
            .await
            .map_err(concise)?;
    }
    let edit: Api<RoleBinding> = Api::namespaced(admin.clone(), NAMESPACE);
    let mut bench_binding = binding("bench-edits".into(), NAMESPACE, "bench");
    bench_binding.role_ref.name = "edit".into();
    edit.create(&PostParams::default(), &bench_binding)
        .await
        .map_err(concise)?;
    if extra_bindings > 0 {
        let started = Instant::now();
        let spread = names.clone();
        let admins: Vec<Client> = (0..8).map(|_| admin.clone()).collect();
        concurrently(&admins, extra_bindings, move |client, index| {
            let namespace = spread[index % spread.len()].clone();
            async move {
                let api: Api<RoleBinding> = Api::namespaced(client, &namespace);
                let object = binding(
                    format!("other-{index}"),
                    &namespace,
                    &format!("user-{index}"),
                );
                api.create(&PostParams::default(), &object)
                    .await
                    .map_err(concise)?;
                Ok(())
            }
        })
        .await?;
        eprintln!(
            "setup {name}: {extra_bindings} RoleBindings over {} namespaces in {:.1} s (untimed)",
            names.len(),
            started.elapsed().as_secs_f64()
        );
    }
    let clients = token_clients(&running, args.clients).await?;
    // The policy follows the store by a watch: wait until the bench user may create.
    let probe: Api<ConfigMap> = Api::namespaced(clients[0].clone(), NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match probe
            .create(&PostParams::default(), &configmap(format!("probe-{name}")))
            .await
        {
            Ok(_) => break,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(error) => return Err(concise(error)).context("the bench user never got `edit`"),
        }
    }
    Ok(Variant {
        name: name.to_string(),
        running,
        store,
        clients,
        _dir: dir,
    })
}

async fn creates(variant: &Variant, count: usize, round: usize) -> Result<(f64, u64, u64)> {
    let started = Instant::now();
    let latencies = concurrently(&variant.clients, count, move |client, index| async move {
        let api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
        api.create(
            &PostParams::default(),
            &configmap(format!("c-r{round}-{index}")),
        )
        .await
        .map_err(concise)?;
        Ok(())
    })
    .await?;
    let rate = count as f64 / started.elapsed().as_secs_f64();
    Ok((
        rate,
        latencies.value_at_quantile(0.5),
        latencies.value_at_quantile(0.99),
    ))
}

/// The RBAC decision alone for one of the bench's creates, on the default policy plus
/// `extra` RoleBindings over `namespaces` namespaces: the mean over many decisions.
fn decision_time(extra: usize, namespaces: usize) -> Result<Duration> {
    use rudder_apiserver::authz::rbac::{defaults, Policy};
    let mut policy = Policy::default();
    let put = |policy: &mut Policy, key: String, value: &serde_json::Value| -> Result<()> {
        policy.apply(&key, Some(value));
        Ok(())
    };
    for role in defaults::cluster_roles() {
        let name = role["metadata"]["name"].as_str().unwrap_or("").to_string();
        put(&mut policy, format!("/registry/clusterroles/{name}"), &role)?;
    }
    for binding in defaults::cluster_role_bindings() {
        let name = binding["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        put(
            &mut policy,
            format!("/registry/clusterrolebindings/{name}"),
            &binding,
        )?;
    }
    let mut bench = binding("bench-edits".into(), NAMESPACE, "bench");
    bench.role_ref.name = "edit".into();
    put(
        &mut policy,
        format!("/registry/rolebindings/{NAMESPACE}/bench-edits"),
        &serde_json::to_value(&bench)?,
    )?;
    for index in 0..extra {
        let slot = index % namespaces.max(1);
        let namespace = if slot == 0 {
            NAMESPACE.to_string()
        } else {
            format!("bench-{slot}")
        };
        let object = binding(
            format!("other-{index}"),
            &namespace,
            &format!("user-{index}"),
        );
        put(
            &mut policy,
            format!("/registry/rolebindings/{namespace}/other-{index}"),
            &serde_json::to_value(&object)?,
        )?;
    }
    let attributes = rudder_apiserver::authz::Attributes {
        user: "bench".into(),
        groups: vec!["bench".into(), "system:authenticated".into()],
        verb: "create".into(),
        resource_request: true,
        version: "v1".into(),
        resource: "configmaps".into(),
        namespace: NAMESPACE.into(),
        ..Default::default()
    };
    const DECISIONS: u32 = 20_000;
    let started = Instant::now();
    for _ in 0..DECISIONS {
        if !matches!(
            policy.decide(&attributes),
            rudder_apiserver::authz::Decision::Allow { .. }
        ) {
            bail!("the bench user is not allowed to create ConfigMaps");
        }
    }
    Ok(started.elapsed() / DECISIONS)
}

pub async fn run(args: AuthzBenchArgs) -> Result<()> {
    if args.creates == 0 || args.clients == 0 || args.rounds == 0 {
        bail!("--creates, --clients and --rounds must be at least 1");
    }
    let largest = format!("rbac-{}", args.role_bindings);
    let plan = [
        ("always-allow".to_string(), Mode::AlwaysAllow, 0),
        ("rbac".to_string(), Mode::Rbac, 0),
        (largest, Mode::Rbac, args.role_bindings),
    ];
    let mut variants = Vec::new();
    for (name, mode, bindings) in &plan {
        variants.push(
            open(name, *mode, *bindings, &args)
                .await
                .with_context(|| format!("starting {name}"))?,
        );
    }
    let mut rates = vec![Vec::new(); variants.len()];
    let mut p50s = vec![Vec::new(); variants.len()];
    let mut p99s = vec![Vec::new(); variants.len()];
    for round in 0..args.rounds {
        for offset in 0..variants.len() {
            let index = (round + offset) % variants.len();
            let (rate, p50, p99) = creates(&variants[index], args.creates, round).await?;
            eprintln!(
                "{} round {}/{}: {rate:.0} creates/s, p50 {p50} µs, p99 {p99} µs",
                variants[index].name,
                round + 1,
                args.rounds
            );
            rates[index].push(rate);
            p50s[index].push(p50);
            p99s[index].push(p99);
        }
    }
    let median = |values: &[f64]| {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        sorted[sorted.len() / 2]
    };
    let reference = median(&rates[0]);
    println!(
        "rudder bench authz: {} creates by {} token clients (user bound to edit), {} round(s), SQLite",
        args.creates, args.clients, args.rounds
    );
    println!(
        "{:<16} {:>12} {:>10} {:>10} {:>16}",
        "variant", "creates/s", "p50 µs", "p99 µs", "vs always-allow"
    );
    for (index, variant) in variants.iter().enumerate() {
        let rate = median(&rates[index]);
        let p50 = p50s[index].iter().copied().min().unwrap_or(0);
        let p99 = p99s[index].iter().copied().min().unwrap_or(0);
        println!(
            "{:<16} {:>12.0} {:>10} {:>10} {:>16.3}",
            variant.name,
            rate,
            p50,
            p99,
            rate / reference
        );
    }
    for (label, extra) in [("rbac", 0), (plan[2].0.as_str(), args.role_bindings)] {
        let each = decision_time(extra, args.binding_namespaces)?;
        let median_create = 1.0 / median(&rates[0]) * args.clients as f64;
        println!(
            "RBAC decision alone ({label}): {:.1} µs per create, {:.2}% of an always-allow create's {:.0} µs",
            each.as_secs_f64() * 1e6,
            each.as_secs_f64() / median_create * 100.0,
            median_create * 1e6
        );
    }
    println!(
        "creates/s: the median over rounds of creates ÷ wall time; p50/p99: the best round's. vs always-allow: creates/s ÷ always-allow's (below 1 is the cost of authorization)."
    );
    for variant in variants {
        variant.running.stop().await?;
        variant.store.close().await;
    }
    Ok(())
}
