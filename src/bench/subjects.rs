//! The subjects a storage benchmark measures. A subject is a name, an open
//! `Arc<dyn Storage>` and a cleanup that runs once at the end (close the store, wipe what it
//! wrote, stop whatever was started for it). `sqlite`, `postgres`, `mysql` and `etcd` are
//! Rudder's drivers opened by URL (`sqlite-normal` is SQLite with `synchronous=normal`;
//! `postgres-pair`, `mysql-pair` and `spanner-pair` watch through a second store on the same
//! database; `spanner` runs on the Cloud Spanner emulator); `etcd` (real etcd through Rudder's etcd driver) is the reference the
//! report divides by. A new kind of subject (the etcd gateway serving a driver, say) is one more
//! arm in [`open`] that starts its server and returns a [`Subject`] whose cleanup stops it.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use futures::future::BoxFuture;
use rudder_storage::{
    Lease, LeaseId, LeaseInfo, RangeRequest, RangeResponse, Revision, Status, Storage, TxnRequest,
    TxnResponse, WatchRequest, WatchStream,
};

/// The subject every ratio is computed against.
pub const REFERENCE: &str = "etcd";

/// Where the subjects' backing services are, and a tag that keeps this run's data apart.
pub struct Options {
    pub tag: String,
    pub etcd_endpoint: String,
    pub postgres_url: String,
    /// A MySQL/MariaDB server URL; the subjects use databases of their own on it.
    pub mysql_url: String,
    /// A Cloud Spanner emulator (`host:port`); the subjects use databases of their own on it.
    pub spanner_emulator: String,
}

/// One store under test.
pub struct Subject {
    pub name: String,
    pub store: Arc<dyn Storage>,
    /// The TCP port of the server process behind the store (etcd, PostgreSQL, MySQL, the
    /// Spanner emulator), for its memory; `None` for stores in this process.
    pub server_port: Option<u16>,
    cleanup: Option<BoxFuture<'static, Result<()>>>,
}

impl Subject {
    /// Closes the store and runs the subject's cleanup.
    pub async fn close(mut self) -> Result<()> {
        self.store.close().await;
        match self.cleanup.take() {
            Some(cleanup) => cleanup.await,
            None => Ok(()),
        }
    }
}

/// Opens every named subject; if one fails, the ones already open are closed again.
pub async fn open_all(names: &[String], options: &Options) -> Result<Vec<Subject>> {
    let mut subjects: Vec<Subject> = Vec::new();
    for name in names {
        if subjects.iter().any(|s| &s.name == name) {
            bail!("subject {name:?} is named twice");
        }
        match open(name, options).await {
            Ok(subject) => subjects.push(subject),
            Err(error) => {
                close_all(subjects).await;
                return Err(error);
            }
        }
    }
    Ok(subjects)
}

/// Closes and cleans up every subject, reporting (not failing on) cleanup errors.
pub async fn close_all(subjects: Vec<Subject>) {
    for subject in subjects {
        let name = subject.name.clone();
        if let Err(error) = subject.close().await {
            eprintln!("warning: could not clean up the {name} subject: {error:#}");
        }
    }
}

/// Opens one subject by name.
async fn open(name: &str, options: &Options) -> Result<Subject> {
    let tag = &options.tag;
    match name {
        // `sqlite` is the embedded default (synchronous=FULL: every commit on disk before it
        // is acknowledged); `sqlite-normal` shows what that durability costs.
        "sqlite" | "sqlite-normal" => {
            let dir = std::env::temp_dir().join(format!("rudder-bench-{tag}-{name}"));
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let synchronous = if name == "sqlite" { "full" } else { "normal" };
            let url = format!(
                "sqlite://{}?compact_interval=0&synchronous={synchronous}",
                dir.join("state.db").display()
            );
            let opened = driver(name, url, Some(dir.clone())).await;
            if opened.is_err() {
                let _ = std::fs::remove_dir_all(&dir);
            }
            opened
        }
        "postgres" => {
            let base = &options.postgres_url;
            let separator = if base.contains('?') { '&' } else { '?' };
            let url = format!("{base}{separator}schema=rudder_bench_{tag}&compact_interval=0");
            driver(name, url, None).await
        }
        "etcd" => {
            let endpoint = &options.etcd_endpoint;
            let url = format!("etcd://{endpoint}/rudder-bench-{tag}?compact_interval=0");
            driver(name, url, None).await
        }
        "postgres-pair" => {
            // Two stores on one database, as two Rudder servers: writes and reads go through
            // the first, watches through the second, so watch latency crosses processes
            // (LISTEN/NOTIFY) the way it does in an HA control plane.
            let base = &options.postgres_url;
            let separator = if base.contains('?') { '&' } else { '?' };
            let url = format!("{base}{separator}schema=rudder_bench_{tag}pair&compact_interval=0");
            pair(name, url).await
        }
        "mysql" => driver(name, mysql_url(options, ""), None).await,
        // As postgres-pair; the second store finds the first one's commits by polling the log.
        "mysql-pair" => pair(name, mysql_url(options, "_pair")).await,
        "spanner" => driver(name, spanner_url(options, ""), None).await,
        // As mysql-pair: the second store finds the first one's commits by polling the log.
        "spanner-pair" => pair(name, spanner_url(options, "pair")).await,
        gateway if gateway.starts_with("gateway-") => {
            let inner_name = &gateway["gateway-".len()..];
            if inner_name.starts_with("gateway-") {
                bail!("unknown subject {gateway:?}: a gateway serves a driver, not another gateway");
            }
            // Its own data, apart from the plain driver subject's.
            let apart = Options {
                tag: format!("{}gw", options.tag),
                etcd_endpoint: options.etcd_endpoint.clone(),
                postgres_url: options.postgres_url.clone(),
                mysql_url: options.mysql_url.clone(),
                spanner_emulator: options.spanner_emulator.clone(),
            };
            let inner = Box::pin(open(inner_name, &apart)).await?;
            behind_gateway(gateway, inner).await
        }
        other => bail!(
            "unknown subject {other:?}: use sqlite, sqlite-normal, postgres, postgres-pair, mysql, mysql-pair, spanner, spanner-pair, etcd, or gateway-<driver> (e.g. gateway-sqlite)"
        ),
    }
}

/// The URL of a MySQL subject's database: one name per subject kind, not per run (the
/// driver creates it, the cleanup drops Rudder's tables in it), so runs leave no databases.
fn mysql_url(options: &Options, suffix: &str) -> String {
    let (without_query, query) = options
        .mysql_url
        .split_once('?')
        .unwrap_or((options.mysql_url.as_str(), ""));
    let authority = without_query
        .strip_prefix("mysql://")
        .unwrap_or(without_query);
    let server = authority.split('/').next().unwrap_or(authority);
    let gateway = if options.tag.ends_with("gw") {
        "_gw"
    } else {
        ""
    };
    let separator = if query.is_empty() { "" } else { "&" };
    format!("mysql://{server}/rudder_bench{gateway}{suffix}?{query}{separator}compact_interval=0")
}

/// The URL of a Spanner subject's database on the emulator: one database per run and subject,
/// dropped by the cleanup.
fn spanner_url(options: &Options, suffix: &str) -> String {
    format!(
        "spanner://projects/rudder-bench/instances/rudder/databases/b{}{suffix}?emulator_host={}&compact_interval=0&poll_interval=20ms",
        options.tag, options.spanner_emulator
    )
}

/// Two stores on the database `url` names: `name` writes and reads through the first and
/// watches through the second.
async fn pair(name: &str, url: String) -> Result<Subject> {
    let mut subject = driver(name, url.clone(), None).await?;
    let watcher = match rudder_storage::open(&url).await {
        Ok(watcher) => watcher,
        Err(error) => {
            let _ = subject.close().await;
            return Err(error).with_context(|| format!("opening the second {name} store"));
        }
    };
    subject.store = Arc::new(SplitStore {
        writer: subject.store.clone(),
        watcher,
    });
    Ok(subject)
}

/// `inner` served by Rudder's etcd gateway on a free local port, measured through the same etcd
/// client as real etcd (Rudder's etcd driver), the way kine-style access would be.
async fn behind_gateway(name: &str, inner: Subject) -> Result<Subject> {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let gateway = match rudder_etcd_gateway::Gateway::spawn(inner.store.clone(), address).await {
        Ok(gateway) => gateway,
        Err(error) => {
            let _ = inner.close().await;
            return Err(error).context("starting the etcd gateway");
        }
    };
    let url = format!("etcd://{}?compact_interval=0", gateway.local_addr);
    let store = match rudder_storage::open(&url).await {
        Ok(store) => store,
        Err(error) => {
            gateway.shutdown().await;
            let _ = inner.close().await;
            return Err(error).with_context(|| format!("connecting to the {name} gateway"));
        }
    };
    let server_port = inner.server_port;
    let cleanup = Box::pin(async move {
        gateway.shutdown().await;
        inner.close().await
    });
    Ok(Subject {
        name: name.to_string(),
        store,
        server_port,
        cleanup: Some(cleanup),
    })
}

/// Two stores on one backend: everything goes to `writer` except watches, which `watcher` serves.
struct SplitStore {
    writer: Arc<dyn Storage>,
    watcher: Arc<dyn Storage>,
}

#[async_trait::async_trait]
impl Storage for SplitStore {
    async fn range(&self, request: RangeRequest) -> rudder_storage::Result<RangeResponse> {
        self.writer.range(request).await
    }
    async fn txn(&self, request: TxnRequest) -> rudder_storage::Result<TxnResponse> {
        self.writer.txn(request).await
    }
    async fn watch(&self, request: WatchRequest) -> rudder_storage::Result<WatchStream> {
        self.watcher.watch(request).await
    }
    async fn compact(&self, revision: Revision) -> rudder_storage::Result<()> {
        self.writer.compact(revision).await
    }
    async fn lease_grant(&self, ttl: i64, id: LeaseId) -> rudder_storage::Result<Lease> {
        self.writer.lease_grant(ttl, id).await
    }
    async fn lease_keep_alive(&self, id: LeaseId) -> rudder_storage::Result<i64> {
        self.writer.lease_keep_alive(id).await
    }
    async fn lease_revoke(&self, id: LeaseId) -> rudder_storage::Result<()> {
        self.writer.lease_revoke(id).await
    }
    async fn lease_time_to_live(
        &self,
        id: LeaseId,
        keys: bool,
    ) -> rudder_storage::Result<LeaseInfo> {
        self.writer.lease_time_to_live(id, keys).await
    }
    async fn lease_list(&self) -> rudder_storage::Result<Vec<LeaseId>> {
        self.writer.lease_list().await
    }
    async fn status(&self) -> rudder_storage::Result<Status> {
        self.writer.status().await
    }
    async fn close(&self) {
        self.watcher.close().await;
        self.writer.close().await;
    }
}

/// A Rudder driver opened by URL; the cleanup wipes the URL (and removes `scratch`).
async fn driver(name: &str, url: String, scratch: Option<PathBuf>) -> Result<Subject> {
    let store = rudder_storage::open(&url)
        .await
        .with_context(|| format!("opening the {name} subject"))?;
    let wiped = format!("wiping what the {name} subject wrote");
    let port = server_port(&url);
    let cleanup = Box::pin(async move {
        rudder_storage::wipe(&url).await.context(wiped)?;
        if let Some(dir) = scratch {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        Ok(())
    });
    Ok(Subject {
        name: name.to_string(),
        store,
        server_port: port,
        cleanup: Some(cleanup),
    })
}

/// The port of the server a store URL names (its first endpoint; the emulator for Spanner),
/// `None` for SQLite, which runs in this process.
fn server_port(url: &str) -> Option<u16> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = match scheme {
        "sqlite" => return None,
        "spanner" => rest.split_once("emulator_host=")?.1.split('&').next()?,
        _ => rest.split(['/', '?', ',']).next()?,
    };
    let host_port = authority.rsplit('@').next()?;
    match host_port.rsplit_once(':') {
        Some((_, port)) => port.parse().ok(),
        None => match scheme {
            "postgres" | "postgresql" => Some(5432),
            "mysql" => Some(3306),
            "etcd" => Some(2379),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::server_port;

    #[test]
    fn finds_the_servers_port_in_a_store_url() {
        assert_eq!(
            server_port("sqlite:///tmp/x/state.db?synchronous=full"),
            None
        );
        assert_eq!(
            server_port("postgres://postgres:pw@127.0.0.1:5433/postgres?schema=b"),
            Some(5433)
        );
        assert_eq!(
            server_port("postgres://postgres@localhost/postgres"),
            Some(5432)
        );
        assert_eq!(
            server_port("mysql://root@127.0.0.1:3306/rudder_bench?x=1"),
            Some(3306)
        );
        assert_eq!(
            server_port("etcd://127.0.0.1:2379,127.0.0.1:22379/rudder-bench"),
            Some(2379)
        );
        assert_eq!(
            server_port("spanner://projects/p/instances/i/databases/d?emulator_host=127.0.0.1:9010&poll_interval=20ms"),
            Some(9010)
        );
    }
}
