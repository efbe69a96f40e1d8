//! rudder-storage: Rudder's etcd-compatible storage interface, its drivers and their
//! conformance suite.
//!
//! The [`Storage`] trait is etcd v3's KV model (one global revision, ranges at a revision,
//! compare-and-swap transactions, ordered gapless watches, leases, compaction) with named
//! result types. Drivers are chosen by URL with [`open`]: `sqlite://` (the embedded default),
//! `postgres://`, `mysql://` (all on one log-structured SQL engine, [`sql`]), `spanner://`
//! (the same design on Cloud Spanner, [`spanner`]) and `etcd://` ([`etcd`]).
//!
//! This crate knows nothing of Kubernetes objects, and its public API exposes no sqlx or
//! etcd-client types. A newcomer starts at [`interface`], then `docs/storage-sql.md` for how the
//! SQL engine writes and watches. [`linearizability`] records concurrent histories against any
//! store and checks them (`docs/linearizability.md`). The conformance suite every driver runs
//! lives in [`conformance`] behind the `testing` feature.

pub mod config;
pub mod copy;
pub mod error;
pub mod etcd;
pub mod instrumented;
pub mod interface;
pub mod linearizability;
pub mod spanner;
pub mod sql;
pub mod txn_keys;
pub mod types;

mod compaction;
mod hub;
mod log;
mod watcher;

// Test code: a failed expectation is meant to panic.
#[cfg(feature = "testing")]
#[allow(clippy::unwrap_used)]
pub mod conformance;
#[cfg(feature = "testing")]
pub mod testing;

use std::sync::Arc;

pub use config::StorageConfig;
pub use error::{Error, Result};
pub use interface::{Storage, WatchStream};
pub use types::*;

/// Opens the store a URL names, applying migrations for SQL drivers.
pub async fn open(url: &str) -> Result<Arc<dyn Storage>> {
    open_config(&StorageConfig::parse(url)?).await
}

/// Opens the store a parsed URL names.
pub async fn open_config(config: &StorageConfig) -> Result<Arc<dyn Storage>> {
    use config::DriverConfig;
    Ok(match &config.driver {
        DriverConfig::Sqlite(sqlite) => sql::SqlStore::open_sqlite(sqlite, config).await?,
        DriverConfig::Postgres(postgres) => sql::SqlStore::open_postgres(postgres, config).await?,
        DriverConfig::Mysql(mysql) => sql::SqlStore::open_mysql(mysql, config).await?,
        DriverConfig::Etcd(etcd) => etcd::EtcdStore::open(etcd, &config.compaction).await?,
        DriverConfig::Spanner(spanner) => spanner::SpannerStore::open(spanner, config).await?,
    })
}

/// Deletes everything a store URL holds: the SQLite file, the PostgreSQL schema named by
/// `schema=` (or Rudder's tables in the default schema), Rudder's tables in a MySQL database, a
/// whole Spanner database, or every key under an etcd prefix.
/// For benchmarks and tests that make throw-away stores.
pub async fn wipe(url: &str) -> Result<()> {
    use config::DriverConfig;
    let config = StorageConfig::parse(url)?;
    match &config.driver {
        DriverConfig::Sqlite(sqlite) => {
            for suffix in ["", "-wal", "-shm"] {
                let mut path = sqlite.path.clone().into_os_string();
                path.push(suffix);
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                    Err(error) => return Err(Error::backend(format!("removing {path:?}"), error)),
                }
            }
            Ok(())
        }
        DriverConfig::Postgres(postgres) => sql::wipe_postgres(postgres).await,
        DriverConfig::Mysql(mysql) => sql::wipe_mysql(mysql).await,
        DriverConfig::Spanner(spanner) => spanner::wipe(spanner).await,
        DriverConfig::Etcd(_) => {
            let store = open_config(&config).await?;
            let result = store
                .txn(TxnRequest {
                    success: vec![TxnOp::DeleteRange(DeleteRangeRequest {
                        range: KeyRange::prefix(""),
                        prev_kv: false,
                    })],
                    ..TxnRequest::default()
                })
                .await;
            store.close().await;
            result.map(|_| ())
        }
    }
}
