//! Test fixtures: a fresh, isolated backend per test case for each driver.
//!
//! - SQLite: a new database file in a temporary directory;
//! - PostgreSQL: a new schema in the database named by `RUDDER_TEST_POSTGRES_URL`;
//! - MySQL/MariaDB: a new database (the driver creates it) on the server named by
//!   `RUDDER_TEST_MYSQL_URL`, dropped by `cleanup`;
//! - Cloud Spanner: a new database on the emulator at `RUDDER_TEST_SPANNER_EMULATOR` (the
//!   driver creates the instance and the database), dropped by `cleanup`;
//! - etcd: a new key prefix on the etcd at `RUDDER_TEST_ETCD_ENDPOINT`. etcd's revision and
//!   compaction are global, so etcd cases take a process-wide lock and run one at a time.
//!
//! When a service's variable is unset, a case is skipped with a loud message, except under
//! `CI=true`, where it fails: a test that needs a service never passes without it.

use std::sync::Arc;

use async_trait::async_trait;

use crate::config::{CompactionConfig, DriverConfig, EtcdConfig, SqliteConfig, StorageConfig};
use crate::interface::Storage;

mod own_etcd_cluster;
mod own_postgres;
pub use own_etcd_cluster::{own_etcd_cluster, OwnEtcdCluster};
pub use own_postgres::{own_postgres, OwnPostgres};

/// The environment variable naming the PostgreSQL server for tests.
pub const POSTGRES_ENV: &str = "RUDDER_TEST_POSTGRES_URL";
/// The environment variable naming the MySQL/MariaDB server for tests (a URL with a database
/// the test user may connect to, e.g. `mysql://root@127.0.0.1:3306/test`; cases create
/// databases of their own beside it).
pub const MYSQL_ENV: &str = "RUDDER_TEST_MYSQL_URL";
/// The environment variable naming the Cloud Spanner emulator (`host:port`, e.g.
/// `127.0.0.1:9010`) for tests.
pub const SPANNER_ENV: &str = "RUDDER_TEST_SPANNER_EMULATOR";
/// The environment variable naming the etcd endpoint (`host:port`) for tests.
pub const ETCD_ENV: &str = "RUDDER_TEST_ETCD_ENDPOINT";

/// One test case's backend: every `open` reaches the same data, as a restarted server would.
#[async_trait]
pub trait Harness: Send + Sync {
    fn driver(&self) -> &'static str;

    /// The URL a user would give to reach this case's backend.
    fn url(&self) -> String;

    /// Opens the backend with background compaction off.
    async fn open(&self) -> Arc<dyn Storage> {
        self.open_with(CompactionConfig {
            interval: std::time::Duration::ZERO,
            retain: 0,
        })
        .await
    }

    /// Opens the backend with the given background compaction.
    async fn open_with(&self, compaction: CompactionConfig) -> Arc<dyn Storage> {
        let mut config = StorageConfig::parse(&self.url()).expect("harness URL parses");
        config.compaction = compaction;
        crate::open_config(&config)
            .await
            .expect("harness backend opens")
    }

    /// Opens the backend as a server whose wall clock is `offset` ahead of the real one (with
    /// background compaction off), for cases about clock skew between servers.
    async fn open_with_clock_offset(&self, offset: std::time::Duration) -> Arc<dyn Storage> {
        let mut config = StorageConfig::parse(&self.url()).expect("harness URL parses");
        config.compaction = CompactionConfig {
            interval: std::time::Duration::ZERO,
            retain: 0,
        };
        config.clock_offset = offset;
        crate::open_config(&config)
            .await
            .expect("harness backend opens")
    }

    /// Removes what the case left behind.
    async fn cleanup(&self) {}
}

/// Reads a service variable; `None` (with a loud message) when it is unset outside CI.
pub fn service(variable: &str) -> Option<String> {
    match std::env::var(variable) {
        Ok(value) if !value.is_empty() => Some(value),
        _ if in_ci() => {
            panic!("{variable} is not set but CI=true: this test needs its service; run scripts/test.sh")
        }
        _ => {
            eprintln!(
                "SKIPPED: {variable} is not set; run scripts/test.sh to start the test services"
            );
            None
        }
    }
}

/// Whether the tests run under `CI=true`, where a missing service fails rather than skips.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|ci| ci == "true")
}

/// A loopback port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}

/// A store URL's configuration with background compaction off, as the fixtures open stores:
/// a case's history must stay whole.
pub fn config_without_compaction(url: &str) -> StorageConfig {
    let mut config = StorageConfig::parse(url).expect("a storage URL");
    config.compaction = CompactionConfig {
        interval: std::time::Duration::ZERO,
        retain: 0,
    };
    config
}

fn unique_name(prefix: &str) -> String {
    format!("{prefix}{:016x}", rand::random::<u64>())
}

/// A SQLite file in a temporary directory.
pub struct SqliteHarness {
    dir: tempfile::TempDir,
}

#[async_trait]
impl Harness for SqliteHarness {
    fn driver(&self) -> &'static str {
        "sqlite"
    }
    fn url(&self) -> String {
        format!("sqlite://{}", self.dir.path().join("state.db").display())
    }
}

/// A fresh SQLite harness.
pub async fn sqlite() -> Option<Box<dyn Harness>> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let harness = SqliteHarness { dir };
    // Validate the URL form once, so a broken fixture fails loudly.
    let config = StorageConfig::parse(&harness.url()).expect("sqlite URL");
    assert!(matches!(
        config.driver,
        DriverConfig::Sqlite(SqliteConfig { .. })
    ));
    Some(Box::new(harness))
}

/// A schema of its own on the test PostgreSQL.
pub struct PostgresHarness {
    base: String,
    schema: String,
}

#[async_trait]
impl Harness for PostgresHarness {
    fn driver(&self) -> &'static str {
        "postgres"
    }
    fn url(&self) -> String {
        let separator = if self.base.contains('?') { '&' } else { '?' };
        format!(
            "{}{separator}schema={}&max_connections=4",
            self.base, self.schema
        )
    }
    async fn cleanup(&self) {
        if let Err(error) = crate::wipe(&self.url()).await {
            eprintln!("could not drop test schema {}: {error}", self.schema);
        }
    }
}

/// A fresh PostgreSQL harness, or `None` when no test PostgreSQL is configured.
pub async fn postgres() -> Option<Box<dyn Harness>> {
    let base = service(POSTGRES_ENV)?;
    Some(Box::new(PostgresHarness {
        base,
        schema: unique_name("rudder_test_"),
    }))
}

/// A database of its own on the test MySQL/MariaDB server.
pub struct MysqlHarness {
    /// `mysql://USER@HOST:PORT`, without a database.
    server: String,
    /// The query of the test URL (sqlx's TLS options, for instance), without the `?`.
    query: String,
    database: String,
}

#[async_trait]
impl Harness for MysqlHarness {
    fn driver(&self) -> &'static str {
        "mysql"
    }
    fn url(&self) -> String {
        let extra = if self.query.is_empty() {
            String::new()
        } else {
            format!("&{}", self.query)
        };
        format!("{}/{}?max_connections=4{extra}", self.server, self.database)
    }
    async fn cleanup(&self) {
        let drop = format!("DROP DATABASE IF EXISTS {}", self.database);
        if let Err(error) = mysql_admin(&self.server, &self.query, &drop).await {
            eprintln!("could not drop test database {}: {error}", self.database);
        }
    }
}

/// Runs one statement on the test server, connected to its own URL's database.
async fn mysql_admin(server: &str, query: &str, statement: &str) -> Result<(), sqlx::Error> {
    use sqlx::{Connection, Executor};
    sqlx::any::install_default_drivers();
    let base = std::env::var(MYSQL_ENV).unwrap_or_else(|_| format!("{server}/mysql?{query}"));
    // Bounded as the driver's own connects are: a server that never answers fails the
    // cleanup, it does not hold the test for ever.
    let mut conn = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        sqlx::AnyConnection::connect(&base),
    )
    .await
    .map_err(|_| {
        sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer from {base} within 10 s"),
        ))
    })??;
    conn.execute(statement).await?;
    conn.close().await
}

/// A fresh MySQL/MariaDB harness, or `None` when no test server is configured. The driver
/// creates the case's database when it first opens it (so that path is tested too); a
/// configured server that cannot be reached fails the case.
pub async fn mysql() -> Option<Box<dyn Harness>> {
    let url = service(MYSQL_ENV)?;
    let (without_query, query) = url.split_once('?').unwrap_or((url.as_str(), ""));
    // mysql://USER@HOST:PORT[/DATABASE]: the server is everything before the database.
    let authority = without_query
        .strip_prefix("mysql://")
        .unwrap_or(without_query);
    let host = authority.split('/').next().unwrap_or(authority);
    let server = format!("mysql://{host}");
    let harness = MysqlHarness {
        server,
        query: query.to_string(),
        database: unique_name("rudder_test_"),
    };
    let config = StorageConfig::parse(&harness.url()).expect("mysql URL");
    assert!(matches!(config.driver, DriverConfig::Mysql(_)));
    Some(Box::new(harness))
}

/// A database of its own on the test Spanner emulator.
pub struct SpannerHarness {
    emulator: String,
    database: String,
}

#[async_trait]
impl Harness for SpannerHarness {
    fn driver(&self) -> &'static str {
        "spanner"
    }
    fn url(&self) -> String {
        format!(
            "spanner://projects/rudder-test/instances/rudder/databases/{}?emulator_host={}&poll_interval=20ms",
            self.database, self.emulator
        )
    }
    async fn cleanup(&self) {
        if let Err(error) = crate::wipe(&self.url()).await {
            eprintln!("could not drop test database {}: {error}", self.database);
        }
    }
}

/// A fresh Spanner harness, or `None` when no test emulator is configured.
pub async fn spanner() -> Option<Box<dyn Harness>> {
    let emulator = service(SPANNER_ENV)?;
    // Database ids: 2 to 30 characters, a lowercase letter first.
    let database = format!("t{:016x}", rand::random::<u64>());
    Some(Box::new(SpannerHarness { emulator, database }))
}

/// A key prefix of its own on the test etcd; holds the etcd lock for the case's lifetime.
pub struct EtcdHarness {
    endpoint: String,
    prefix: String,
    _exclusive: tokio::sync::MutexGuard<'static, ()>,
}

static ETCD_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Exclusive use of the test etcd (its revisions and compaction are global) for tests that use
/// it directly; an [`etcd`] harness holds the same lock.
pub async fn etcd_lock() -> tokio::sync::MutexGuard<'static, ()> {
    ETCD_LOCK.lock().await
}

#[async_trait]
impl Harness for EtcdHarness {
    fn driver(&self) -> &'static str {
        "etcd"
    }
    fn url(&self) -> String {
        format!("etcd://{}/{}", self.endpoint, self.prefix)
    }
}

/// A fresh etcd harness, or `None` when no test etcd is configured.
pub async fn etcd() -> Option<Box<dyn Harness>> {
    let endpoint = service(ETCD_ENV)?;
    let exclusive = ETCD_LOCK.lock().await;
    let harness = EtcdHarness {
        endpoint,
        prefix: unique_name("rudder-test-"),
        _exclusive: exclusive,
    };
    let config = StorageConfig::parse(&harness.url()).expect("etcd URL");
    assert!(matches!(
        config.driver,
        DriverConfig::Etcd(EtcdConfig { .. })
    ));
    Some(Box::new(harness))
}

/// An etcd process of the case's own (a new data directory, loopback ports), for cases that
/// need an etcd nobody else has written to — a copy keeps its revisions only in a new etcd.
/// Killed when dropped.
pub struct OwnEtcd {
    endpoint: String,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Drop for OwnEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[async_trait]
impl Harness for OwnEtcd {
    fn driver(&self) -> &'static str {
        "etcd"
    }
    fn url(&self) -> String {
        format!("etcd://{}", self.endpoint)
    }
}

/// Starts an etcd of the case's own; `None` (loudly) when the `etcd` binary is missing
/// outside CI, a failure under `CI=true`.
pub async fn own_etcd() -> Option<OwnEtcd> {
    let binary = std::env::var("RUDDER_TEST_ETCD_BINARY").unwrap_or_else(|_| "etcd".into());
    let (client, peer) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("temporary directory");
    let endpoint = format!("127.0.0.1:{client}");
    let spawned = std::process::Command::new(&binary)
        .arg("--data-dir")
        .arg(dir.path().join("etcd"))
        .arg("--listen-client-urls")
        .arg(format!("http://{endpoint}"))
        .arg("--advertise-client-urls")
        .arg(format!("http://{endpoint}"))
        .arg("--listen-peer-urls")
        .arg(format!("http://127.0.0.1:{peer}"))
        .arg("--initial-advertise-peer-urls")
        .arg(format!("http://127.0.0.1:{peer}"))
        .arg("--initial-cluster")
        .arg(format!("default=http://127.0.0.1:{peer}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let child = match spawned {
        Ok(child) => child,
        Err(error) if in_ci() => {
            panic!("cannot start {binary} but CI=true: {error}; run scripts/test.sh")
        }
        Err(error) => {
            eprintln!("SKIPPED: cannot start {binary}: {error}");
            return None;
        }
    };
    let etcd = OwnEtcd {
        endpoint,
        child,
        _dir: dir,
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let config = StorageConfig::parse(&etcd.url()).expect("etcd URL");
        if let Ok(store) = crate::open_config(&config).await {
            store.close().await;
            return Some(etcd);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the case's own etcd did not answer within 20 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
