//! The SQL drivers: one log-structured engine over SQLite, PostgreSQL and MySQL/MariaDB.
//!
//! Every write appends rows to `rudder_log` (one per key written, all rows of a transaction at
//! one revision); a key's latest row is its value, a tombstone row marks a delete, and
//! compaction removes rows no revision at or above the compacted one can see. See
//! `docs/storage-sql.md` for the flow. The dialects differ only in SQL text ([`dialect`]) and
//! in how their errors are translated ([`translate`]).

mod breaker;
mod dialect;
mod leases;
mod page_counts;
mod poller;
#[cfg(all(test, feature = "testing"))]
mod query_plans;
mod reader;
mod setup;
mod txn;
mod writer;

use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::mysql::MySqlDatabaseError;
use sqlx::Executor;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::compaction::spawn_compactor;
use crate::config::{MysqlConfig, PostgresConfig, SqliteConfig, StorageConfig};
use crate::error::{Error, Result};
use crate::hub::Hub;
use crate::interface::{Storage, WatchStream};
use crate::log::front::{self, Jobs};
use crate::log::poller::Handoffs;
use crate::types::*;
use breaker::Breaker;
use dialect::Dialect;
use leases::expire_leases;
use reader::{Clock, LogHistory, Reader};
use setup::{ensure_database, ensure_schema, migrations_applied, probe};
pub(crate) use setup::{wipe_mysql, wipe_postgres};
use writer::Writer;

/// How many recent events the hub keeps for watchers that start slightly in the past.
const RING_EVENTS: usize = 10_000;
/// A pooled connection idle at least this long is pinged before it is handed out.
const PING_WHEN_IDLE_FOR: Duration = Duration::from_secs(1);
/// The longest key the SQL drivers store: PostgreSQL's index entries must stay under about
/// 2.7 KB, and no Kubernetes key comes close (a namespaced name is at most ~350 bytes).
pub const MAX_KEY_BYTES: usize = 2048;
/// The most a transaction may write (keys and values), as etcd's `--max-request-bytes`.
pub const MAX_TXN_BYTES: usize = 1536 * 1024;

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");
static MYSQL_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/mysql");

/// A SQL-backed store (SQLite, PostgreSQL or MySQL/MariaDB).
pub struct SqlStore {
    reader: Arc<Reader>,
    jobs: Jobs,
    hub: Arc<Hub>,
    /// Wakes the log poller: after a local commit, or a notification from another process.
    poke: Arc<Notify>,
    /// What the poller learns without reading the log: local commits, announced revisions.
    handoffs: Arc<Handoffs>,
    shutdown: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    clock: Clock,
}

/// Creates a missing database file readable by its owner only (it holds every Secret);
/// SQLite gives its `-wal` and `-shm` files the database's mode.
fn create_private(path: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(Error::Config(format!(
            "cannot create the SQLite database {}: {error}",
            path.display()
        ))),
    }
}

/// Where the pools connect and what each new connection must run first.
struct Connection {
    options: AnyConnectOptions,
    setup: Vec<String>,
    max_readers: u32,
    connect_timeout: Duration,
}

impl SqlStore {
    /// Opens (creating if needed) a SQLite database file; `shared` holds the options every
    /// driver takes (compaction, the watch stall bound).
    pub async fn open_sqlite(config: &SqliteConfig, shared: &StorageConfig) -> Result<Arc<Self>> {
        if let Some(parent) = config.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|error| {
                Error::Config(format!(
                    "cannot create the directory {} for the SQLite database: {error}",
                    parent.display()
                ))
            })?;
        }
        create_private(&config.path)?;
        let url = format!("sqlite://{}?mode=rwc", config.path.display());
        let options =
            AnyConnectOptions::from_str(&url).map_err(|error| Error::Config(error.to_string()))?;
        let synchronous = if config.synchronous_full {
            "FULL"
        } else {
            "NORMAL"
        };
        let connection = Connection {
            options,
            setup: vec![
                "PRAGMA journal_mode = WAL".into(),
                format!("PRAGMA synchronous = {synchronous}"),
                "PRAGMA busy_timeout = 30000".into(),
            ],
            max_readers: 8,
            connect_timeout: Duration::from_secs(30),
        };
        Self::open(
            &dialect::SQLITE,
            connection,
            &SQLITE_MIGRATIONS,
            String::new(),
            Duration::from_secs(1),
            shared,
        )
        .await
    }

    /// Opens a PostgreSQL database (and schema), applying migrations.
    pub async fn open_postgres(
        config: &PostgresConfig,
        shared: &StorageConfig,
    ) -> Result<Arc<Self>> {
        let options = AnyConnectOptions::from_str(&config.url).map_err(|error| {
            Error::Config(format!("postgres URL is not valid ({error}): use postgres://USER:PASSWORD@HOST:PORT/DATABASE"))
        })?;
        let mut setup = Vec::new();
        if let Some(schema) = &config.schema {
            // Created once here, not by every new connection (which would need CREATE on the
            // database even when the schema exists).
            ensure_schema(&options, schema, config.connect_timeout).await?;
            setup.push(format!("SET search_path TO {schema}"));
        }
        if let Some(ms) = config.statement_timeout_ms {
            setup.push(format!("SET statement_timeout = {ms}"));
        }
        let channel = format!("rudder_{}", config.schema.as_deref().unwrap_or("public"));
        // Lets a DBA (and the tests) tell Rudder's connections apart in pg_stat_activity.
        setup.push(format!("SET application_name = '{channel}'"));
        // Without planner statistics (a log that has just grown, before autovacuum analyzes
        // it) PostgreSQL took a key range for a handful of rows and read a page by fetching
        // the whole rest of the range through a bitmap and sorting it: each page of a 10k-key
        // list cost ~8 ms instead of ~0.3 ms. Every statement here is served well by walking
        // an index in order (see `query_plans`), so bitmap scans are off on these sessions.
        setup.push("SET enable_bitmapscan = off".into());
        setup.push("SET enable_seqscan = off".into());
        let connection = Connection {
            options,
            setup,
            max_readers: config.max_connections.saturating_sub(1).max(1),
            connect_timeout: config.connect_timeout,
        };
        let store = Self::open(
            &dialect::POSTGRES,
            connection,
            &POSTGRES_MIGRATIONS,
            channel.clone(),
            Duration::from_millis(250),
            shared,
        )
        .await?;
        let listener = poller::listen(
            config.url.clone(),
            channel,
            store.handoffs.clone(),
            store.poke.clone(),
            store.shutdown.clone(),
        );
        store.track(tokio::spawn(listener));
        Ok(store)
    }

    /// Opens a MySQL or MariaDB database (created if missing), applying migrations. Other
    /// servers' commits are found by polling the log every `poll_interval` (MySQL has no
    /// NOTIFY).
    pub async fn open_mysql(config: &MysqlConfig, shared: &StorageConfig) -> Result<Arc<Self>> {
        let options = AnyConnectOptions::from_str(&config.url).map_err(|error| {
            Error::Config(format!(
                "mysql URL is not valid ({error}): use mysql://USER:PASSWORD@HOST:PORT/DATABASE"
            ))
        })?;
        ensure_database(config).await?;
        let connection = Connection {
            options,
            // READ COMMITTED, deliberately (see `dialect::MYSQL.begin_and_lock`): the writer
            // reads under the meta row lock, so each statement must see the commits before it
            // (REPEATABLE READ would pin a snapshot at its first read), and its updates and
            // deletes must not take gap locks that block compaction and other servers. Readers
            // need nothing more: every read is one statement, consistent on its own.
            setup: vec!["SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED".into()],
            max_readers: config.max_connections.saturating_sub(1).max(1),
            connect_timeout: config.connect_timeout,
        };
        Self::open(
            &dialect::MYSQL,
            connection,
            &MYSQL_MIGRATIONS,
            String::new(),
            config.poll_interval,
            shared,
        )
        .await
    }

    async fn open(
        dialect: &'static Dialect,
        connection: Connection,
        migrations: &'static sqlx::migrate::Migrator,
        channel: String,
        poll_interval: Duration,
        shared: &StorageConfig,
    ) -> Result<Arc<Self>> {
        let clock = Clock {
            offset_ms: shared.clock_offset.as_millis() as i64,
        };
        sqlx::any::install_default_drivers();
        probe(dialect, &connection).await?;
        let setup = Arc::new(connection.setup);
        // Connections are pinged only after a second idle (a ping is a round trip): a read
        // that finds its connection gone is repeated on another, and so is a write batch
        // whose first statement does.
        let pool_options = |max: u32| {
            let setup = setup.clone();
            AnyPoolOptions::new()
                .max_connections(max)
                .acquire_timeout(connection.connect_timeout)
                // A ping finds a dead network connection before a query does, but costs a
                // round trip. An SQLite file's connection cannot die that way.
                .test_before_acquire(false)
                .before_acquire(move |conn, meta| {
                    Box::pin(async move {
                        if dialect.name == "sqlite" || meta.idle_for < PING_WHEN_IDLE_FOR {
                            return Ok(true);
                        }
                        // A failed ping drops this connection; the pool opens another.
                        Ok(sqlx::Connection::ping(conn).await.is_ok())
                    })
                })
                .after_connect(move |conn, _| {
                    let setup = setup.clone();
                    Box::pin(async move {
                        for statement in setup.iter() {
                            conn.execute(statement.as_str()).await?;
                        }
                        Ok(())
                    })
                })
        };
        let write_pool = pool_options(1)
            .connect_with(connection.options.clone())
            .await
            .map_err(translate)?;
        if !migrations_applied(&write_pool, migrations).await {
            migrations
                .run(&write_pool)
                .await
                .map_err(|error| Error::backend("applying migrations failed", error))?;
        }
        let shutdown = CancellationToken::new();
        let breaker = Breaker::new(
            (dialect.name != "sqlite").then(|| connection.options.clone()),
            connection.connect_timeout,
            shutdown.clone(),
        );
        let read_pool = pool_options(connection.max_readers)
            .connect_with(connection.options)
            .await
            .map_err(translate)?;

        let reader = Arc::new(Reader {
            pool: read_pool,
            dialect,
            breaker: breaker.clone(),
            page_counts: Default::default(),
        });
        let meta = reader.meta().await?;
        let hub = Hub::new(meta.revision, RING_EVENTS);
        let committed = Arc::new(Notify::new());
        let handoffs = Arc::new(Handoffs::default());
        let (jobs, receiver) = mpsc::channel(4096);
        let (published, published_receiver) = watch::channel(meta.revision);
        let writer = Writer {
            pool: write_pool,
            breaker,
            dialect,
            jobs: receiver,
            committed: committed.clone(),
            handoffs: handoffs.clone(),
            channel,
            shutdown: shutdown.clone(),
            published: published_receiver,
            resume_purge: meta.compact_revision,
        };
        let store = Arc::new(Self {
            reader: reader.clone(),
            jobs: Jobs::new(jobs),
            hub: hub.clone(),
            poke: committed.clone(),
            handoffs: handoffs.clone(),
            shutdown: shutdown.clone(),
            tasks: Mutex::new(Vec::new()),
            clock,
        });
        store.track(tokio::spawn(writer.run()));
        let poller = crate::log::poller::Poller {
            source: reader,
            handoffs,
            hub,
            poke: committed,
            interval: poll_interval,
            shutdown: shutdown.clone(),
            stall_timeout: shared.watch_stall_timeout,
            published,
        };
        store.track(tokio::spawn(poller.run(meta.revision)));
        store.track(tokio::spawn(expire_leases(
            Arc::downgrade(&store),
            shutdown.clone(),
        )));
        store.track(spawn_compactor(
            Arc::downgrade(&store),
            shared.compaction.clone(),
            shutdown,
        ));
        Ok(store)
    }

    fn track(&self, task: JoinHandle<()>) {
        self.tasks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(task);
    }
}

/// Refuses what the SQL drivers cannot or will not store, before it reaches the writer.
pub(crate) fn check_txn_limits(request: &TxnRequest) -> Result<()> {
    fn visit(ops: &[TxnOp], bytes: &mut usize) -> Result<()> {
        for op in ops {
            match op {
                TxnOp::Put(put) => {
                    if put.key.len() > MAX_KEY_BYTES {
                        return Err(Error::TooLarge(format!(
                            "a key of {} bytes is over the limit of {MAX_KEY_BYTES}",
                            put.key.len()
                        )));
                    }
                    *bytes += put.key.len() + put.value.len();
                }
                TxnOp::Txn(nested) => {
                    visit(&nested.success, bytes)?;
                    visit(&nested.failure, bytes)?;
                }
                TxnOp::Range(_) | TxnOp::DeleteRange(_) => {}
            }
        }
        Ok(())
    }
    let mut bytes = 0;
    visit(&request.success, &mut bytes)?;
    let mut failure = 0;
    visit(&request.failure, &mut failure)?;
    let largest = bytes.max(failure);
    if largest > MAX_TXN_BYTES {
        return Err(Error::TooLarge(format!(
            "a transaction writing {largest} bytes is over the limit of {MAX_TXN_BYTES}"
        )));
    }
    crate::txn_keys::check_duplicate_keys(request)
}

#[async_trait]
impl Storage for SqlStore {
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        self.reader.range(&request).await
    }

    async fn txn(&self, request: TxnRequest) -> Result<TxnResponse> {
        self.jobs.txn(request).await
    }

    async fn watch(&self, request: WatchRequest) -> Result<WatchStream> {
        let meta = self.reader.meta().await?;
        let history = Arc::new(LogHistory(self.reader.clone()));
        front::watch(
            self.hub.clone(),
            history,
            request,
            meta.revision,
            meta.compact_revision,
        )
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.jobs.compact(revision).await
    }

    async fn restore(&self, step: RestoreStep) -> Result<()> {
        self.jobs.restore(step).await
    }

    async fn lease_grant(&self, ttl: i64, id: LeaseId) -> Result<Lease> {
        self.jobs.lease_grant(ttl, id).await
    }

    async fn lease_keep_alive(&self, id: LeaseId) -> Result<i64> {
        self.jobs.lease_keep_alive(id).await
    }

    async fn lease_revoke(&self, id: LeaseId) -> Result<()> {
        self.jobs.lease_revoke(id, false).await
    }

    async fn lease_time_to_live(&self, id: LeaseId, keys: bool) -> Result<LeaseInfo> {
        let lease = front::live_lease(id, self.reader.lease(id).await?)?;
        let keys = if keys {
            self.reader.lease_keys(id).await?
        } else {
            Vec::new()
        };
        Ok(front::lease_info(id, lease, keys))
    }

    async fn lease_list(&self) -> Result<Vec<LeaseId>> {
        self.reader.ids(self.reader.dialect.list_leases).await
    }

    async fn status(&self) -> Result<Status> {
        let meta = self.reader.meta().await?;
        Ok(Status {
            driver: self.reader.dialect.name.to_string(),
            revision: meta.revision,
            compact_revision: meta.compact_revision,
            db_size_bytes: self.reader.db_size().await?,
            server_version: self.reader.server_version().await?,
        })
    }

    async fn close(&self) {
        self.shutdown.cancel();
        self.hub.close();
        let tasks: Vec<_> = std::mem::take(
            &mut *self
                .tasks
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for task in tasks {
            let _ = task.await;
        }
        self.reader.pool.close().await;
    }
}

/// Whether the database refused a write for want of disk space: SQLite's SQLITE_FULL (13),
/// PostgreSQL's disk_full (53100), MySQL's "table is full" (1114) and "disk full" (1021).
fn is_disk_full(db: &dyn sqlx::error::DatabaseError) -> bool {
    if let Some(mysql) = db.try_downcast_ref::<MySqlDatabaseError>() {
        return matches!(mysql.number(), 1021 | 1114);
    }
    matches!(db.code().as_deref(), Some("13" | "53100"))
}

/// Translates a sqlx error into the storage error: connection trouble, and conflicts worth
/// retrying, are `Unavailable`; a statement over the server's packet limit is `TooLarge`;
/// everything else a backend error.
/// Whether `error` says the connection itself is gone (the server restarted or dropped it),
/// rather than anything about the statement.
pub(crate) fn connection_lost(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) => true,
        sqlx::Error::Database(db) => match db.try_downcast_ref::<MySqlDatabaseError>() {
            // Server gone away, lost connection.
            Some(mysql) => matches!(mysql.number(), 2006 | 2013),
            // Administrator or crash shutdown.
            None => matches!(db.code().as_deref(), Some("57P01" | "57P02")),
        },
        _ => false,
    }
}

/// Whether a translated error came from a connection that was gone ([`connection_lost`]).
pub(crate) fn lost_connection(error: &Error) -> bool {
    match error {
        Error::Unavailable {
            source: Some(source),
            ..
        } => source
            .downcast_ref::<sqlx::Error>()
            .is_some_and(connection_lost),
        _ => false,
    }
}

pub(crate) fn translate(error: sqlx::Error) -> Error {
    match &error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed => Error::unavailable(error.to_string(), error),
        sqlx::Error::Database(db) if db.try_downcast_ref::<MySqlDatabaseError>().is_some() => {
            let number = db
                .try_downcast_ref::<MySqlDatabaseError>()
                .map_or(0, MySqlDatabaseError::number);
            let message = format!("{} (MySQL error {number})", db.message());
            match number {
                // Lock wait timeout, deadlock: another server held the rows; try again.
                1205 | 1213 => Error::unavailable(message, error),
                // Packet over max_allowed_packet.
                1153 | 1301 => Error::TooLarge(format!(
                    "{message}: raise the server's max_allowed_packet (at least 8 MiB)"
                )),
                // Access denied, unknown database, too many connections, server shutting
                // down or gone, read-only server.
                1044 | 1045 | 1049 | 1040 | 1053 | 1927 | 2006 | 2013 | 1290 | 1836 => {
                    Error::unavailable(message, error)
                }
                // 1062 (duplicate key) included: the meta row lock makes it impossible
                // unless something bypassed it.
                _ => Error::backend(message, error),
            }
        }
        sqlx::Error::Database(db) if is_disk_full(db.as_ref()) => Error::backend(
            format!(
                "the database's disk is full ({}); data written so far is kept, and writes \
                 resume once space is freed",
                db.message()
            ),
            error,
        ),
        sqlx::Error::Database(db) => {
            let message = db.message().to_string();
            let code = db.code().map(|c| c.to_string()).unwrap_or_default();
            // PostgreSQL: 28xxx authentication, 3D000 unknown database, 57P0x shutdown.
            if code.starts_with("28") || code == "3D000" || code.starts_with("57P") {
                Error::unavailable(format!("{message} (SQLSTATE {code})"), error)
            } else {
                Error::backend(message, error)
            }
        }
        _ => Error::backend(error.to_string(), error),
    }
}
