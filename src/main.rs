//! The `rudder` binary: every Rudder component behind one CLI.
//!
//! `server` (the Kubernetes API over a store), `kubeconfig` (print its admin kubeconfig),
//! `controller-manager` (the controllers alone, through a kubeconfig),
//! `etcd` (the etcd v3 gateway over a store), `kms-plugin` (a KMS v2 plugin with local keys, to
//! try encryption at rest through KMS), `version`, `storage check` (open a storage URL,
//! apply migrations, print the store's status), `storage migrate` and `storage snapshot` (copy a
//! store to another driver or to a file, revisions kept), `storage check-history` (record
//! concurrent histories against a store and check them for linearizability), and the benchmarks — `bench storage` (the
//! storage workloads on each driver side by side with real etcd), `bench api`, `authz`,
//! `admission`, `scheduler`, `kubelet`, `network`, `watch` and `controllers`, each printing its
//! figures beside a reference measured in the same run or published upstream.

/// mimalloc, not glibc malloc: see the dependency's note in Cargo.toml.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod agent;
mod bench;
mod controller_manager;
mod gateway;
mod image;
mod kms_plugin;
mod network;
mod scheduler;
mod serve;
mod snapshots;
mod storage_check;
mod storage_copy;
mod storage_get;
mod storage_history;
mod telemetry;
mod token;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

/// Rudder: a Kubernetes control plane on an etcd-compatible storage interface.
#[derive(Parser)]
#[command(name = "rudder", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print Rudder's version and the storage drivers it has.
    Version,
    /// Run Rudder all-in-one: the Kubernetes API (HTTPS) over the embedded SQLite store or
    /// the store --storage names.
    Server(Box<serve::ServerArgs>),
    /// Print the admin kubeconfig `rudder server` wrote.
    Kubeconfig(serve::KubeconfigArgs),
    /// Serve a store as the etcd v3 gRPC API (KV, Watch, Lease, Maintenance, Cluster).
    Etcd(gateway::EtcdArgs),
    /// Run the controllers (ReplicaSet, …) against a cluster through a kubeconfig.
    ControllerManager(controller_manager::ControllerManagerArgs),
    /// Run the scheduler alone against a cluster's API (`rudder server` runs it in-process).
    Scheduler(scheduler::SchedulerArgs),
    /// Run a node agent (kubelet): join a cluster and run its pods through containerd, or
    /// `--hollow N` fake nodes for scale runs.
    Agent(Box<agent::AgentArgs>),
    /// The node's container images (containerd's `k8s.io` namespace): import, ls.
    Image {
        #[command(subcommand)]
        command: image::ImageCommand,
    },
    /// Serve a KMS v2 plugin with local keys on a unix socket, for the `kms` provider of an
    /// EncryptionConfiguration without a cloud KMS (a test tool: as safe as its key file).
    KmsPlugin(kms_plugin::KmsPluginArgs),
    /// Bootstrap tokens for joining nodes (`create`, `join-command`).
    Token {
        #[command(subcommand)]
        command: token::TokenCommand,
    },
    /// Storage tools.
    Storage {
        #[command(subcommand)]
        command: StorageCommand,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
}

#[derive(Subcommand)]
enum StorageCommand {
    /// Open a store, apply its migrations and print its status.
    Check {
        /// sqlite://PATH, postgres://USER@HOST:PORT/DB, mysql://USER@HOST:PORT/DB,
        /// spanner://projects/P/instances/I/databases/D or etcd://HOST:PORT[,HOST:PORT…]
        #[arg(long, env = "RUDDER_STORAGE")]
        storage: String,
    },
    /// Print what the store holds under a key or prefix, decoded (protobuf or JSON) and
    /// decrypted (with --encryption-provider-config).
    Get(storage_get::GetArgs),
    /// Copy a whole store into another (any two drivers), keeping every key's revisions so
    /// clients' resourceVersions stay valid; verifies the copy key by key.
    Migrate(storage_copy::MigrateArgs),
    /// Record concurrent histories against a store and check them for linearizability and
    /// the watch guarantees (under a throw-away prefix).
    CheckHistory(storage_history::CheckHistoryArgs),
    /// Consistent snapshots of a store in Rudder's own file format, restorable into any driver.
    Snapshot {
        #[command(subcommand)]
        command: storage_copy::SnapshotCommand,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Storage workloads (create, update, get, list, watch, compact) on each driver,
    /// interleaved in one run, with ratios to real etcd.
    Storage(bench::StorageBenchArgs),
    /// Kubernetes API workloads over HTTPS (ConfigMap creates by concurrent clients, full and
    /// paged LISTs of many pods) on an in-process apiserver per driver, with ratios to etcd.
    Api(bench::api::ApiBenchArgs),
    /// What authorization costs: ConfigMap creates by an RBAC-bound token user with
    /// AlwaysAllow, RBAC, and RBAC with thousands of RoleBindings, with ratios to AlwaysAllow.
    Authz(bench::authz::AuthzBenchArgs),
    /// What extending the API costs a write: creates of a custom resource with a 500-line
    /// schema and 10 CEL rules, and ConfigMap creates behind one webhook or one
    /// ValidatingAdmissionPolicy, beside plain ConfigMap creates, per driver.
    Admission(bench::admission::AdmissionBenchArgs),
    /// Scheduling throughput shaped like upstream's scheduler_perf (SchedulingBasic, pod
    /// anti-affinity, topology spreading, preemption) on an in-process apiserver per driver.
    Scheduler(bench::scheduler::SchedulerBenchArgs),
    /// The node agent: pod start latency on real containerd (1, 10, 50 pods at once) beside
    /// upstream's SLO, the agent's RSS and CPU, and hollow-node density per driver.
    Kubelet(bench::kubelet::KubeletBenchArgs),
    /// Service networking: EndpointSlice change → nftables rules latency at 10, 1,000 and
    /// 10,000 Services beside a whole-table rewrite, and cluster DNS queries per second.
    Network(bench::network::NetworkBenchArgs),
    /// Many watchers of pods on a `rudder server` child process per driver: the server's RSS
    /// holding the pods and with the watchers open, and write → event latency to every
    /// watcher, with the watch cache on and off.
    Watch(bench::watch::WatchBenchArgs),
    /// The controller-manager's throughput: 1,000 Deployments × 10 replicas on nodes whose pods
    /// hollow nodes mark Ready, per driver — time until all are available, pods created per
    /// second beside upstream's 20 QPS, and the controller-manager's CPU and RSS.
    Controllers(bench::controllers::ControllersBenchArgs),
}

/// The process's one signal handler: a token cancelled on SIGINT (ctrl-c) or SIGTERM, handed to
/// the command, which stops gracefully.
fn shutdown_on_signal() -> CancellationToken {
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot handle SIGTERM");
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = terminate => {}
        }
        tracing::info!("shutting down");
        stop.cancel();
    });
    shutdown
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let tracing = match &cli.command {
        Command::Server(args) => args.tracing_config_file.as_deref(),
        _ => None,
    };
    let telemetry = {
        // The span exporter's gRPC channel is made on the runtime.
        let _entered = runtime.enter();
        tracing
            .map(telemetry::TracingConfig::load)
            .transpose()
            .and_then(|config| telemetry::init(config.as_ref(), "apiserver"))
    };
    let telemetry = match telemetry {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("error: {error:#}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Server(args) => serve::server(*args, shutdown_on_signal()).await,
            Command::Etcd(args) => gateway::etcd(args, shutdown_on_signal()).await,
            Command::ControllerManager(args) => {
                controller_manager::run(args, shutdown_on_signal()).await
            }
            Command::Scheduler(args) => scheduler::run(args, shutdown_on_signal()).await,
            Command::Agent(args) => agent::run(*args, shutdown_on_signal()).await,
            Command::Image { command } => image::run(command).await,
            Command::Kubeconfig(args) => serve::kubeconfig(args),
            Command::Token { command } => token::run(command).await,
            Command::KmsPlugin(args) => kms_plugin::run(args, shutdown_on_signal()).await,
            Command::Version => {
                println!("rudder {}", env!("CARGO_PKG_VERSION"));
                println!("storage drivers: sqlite, postgres, mysql, spanner, etcd");
                Ok(())
            }
            Command::Storage {
                command: StorageCommand::Check { storage },
            } => storage_check::run(&storage).await,
            Command::Storage {
                command: StorageCommand::Get(args),
            } => storage_get::run(args).await,
            Command::Storage {
                command: StorageCommand::Migrate(args),
            } => storage_copy::migrate(args).await,
            Command::Storage {
                command: StorageCommand::CheckHistory(args),
            } => storage_history::run(args).await,
            Command::Storage {
                command: StorageCommand::Snapshot { command },
            } => storage_copy::snapshot(command).await,
            Command::Bench {
                command: BenchCommand::Storage(args),
            } => bench::run(args).await,
            Command::Bench {
                command: BenchCommand::Api(args),
            } => bench::api::run(args).await,
            Command::Bench {
                command: BenchCommand::Authz(args),
            } => bench::authz::run(args).await,
            Command::Bench {
                command: BenchCommand::Admission(args),
            } => bench::admission::run(args).await,
            Command::Bench {
                command: BenchCommand::Scheduler(args),
            } => bench::scheduler::run(args).await,
            Command::Bench {
                command: BenchCommand::Kubelet(args),
            } => bench::kubelet::run(args).await,
            Command::Bench {
                command: BenchCommand::Network(args),
            } => bench::network::run(args).await,
            Command::Bench {
                command: BenchCommand::Watch(args),
            } => bench::watch::run(args).await,
            Command::Bench {
                command: BenchCommand::Controllers(args),
            } => bench::controllers::run(args).await,
        }
    });
    telemetry.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Cli;

    /// Every command's flags parse with their defaults and with the values users give (clap
    /// finds a mistyped default or parser only when it parses one).
    #[test]
    fn the_commands_parse_with_their_defaults() {
        Cli::command().debug_assert();
        for args in [
            &["rudder", "server"][..],
            &[
                "rudder",
                "server",
                "--cluster-cidr",
                "10.42.0.0/16,fd42::/48",
            ],
            &["rudder", "scheduler", "--kubeconfig", "k"],
            &[
                "rudder",
                "scheduler",
                "--kubeconfig",
                "k",
                "--metrics-bind-address=",
            ],
            &["rudder", "controller-manager", "--kubeconfig", "k"],
            &[
                "rudder",
                "controller-manager",
                "--kubeconfig",
                "k",
                "--metrics-bind-address=0.0.0.0:10257",
                "--cluster-cidr=10.42.0.0/16,fd42::/48",
            ],
            &["rudder", "agent"],
            &["rudder", "agent", "--pod-cidr", "10.244.9.0/24"],
            &["rudder", "etcd"],
        ] {
            if let Err(error) = Cli::try_parse_from(args) {
                panic!("{args:?}: {error}");
            }
        }
        assert!(Cli::try_parse_from([
            "rudder",
            "scheduler",
            "--kubeconfig",
            "k",
            "--metrics-bind-address=nonsense"
        ])
        .is_err());
    }
}
