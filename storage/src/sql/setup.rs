//! Opening a SQL database: a first direct connection that reports why it failed, the
//! PostgreSQL schema created once (not by every connection), migrations applied only when some
//! are missing (so a role without DDL rights can run on a prepared database), and wiping a
//! store for tests and benchmarks.

use std::str::FromStr;
use std::time::Duration;

use sqlx::any::AnyConnectOptions;
use sqlx::mysql::MySqlDatabaseError;
use sqlx::Executor;

use super::dialect::Dialect;
use super::{translate, Connection};
use crate::config::{MysqlConfig, PostgresConfig};
use crate::error::{Error, Result};

/// A direct connection, given up after `timeout`: a server that accepts the TCP connection
/// but never answers would otherwise hold it for ever (sqlx puts no deadline on a handshake).
async fn connect_within(
    options: &AnyConnectOptions,
    timeout: Duration,
) -> Option<std::result::Result<sqlx::AnyConnection, sqlx::Error>> {
    use sqlx::ConnectOptions;
    sqlx::any::install_default_drivers();
    tokio::time::timeout(timeout, options.connect()).await.ok()
}

/// Creates `schema` unless it exists; two servers starting at once may both try.
pub(super) async fn ensure_schema(
    options: &AnyConnectOptions,
    schema: &str,
    connect_timeout: Duration,
) -> Result<()> {
    let Some(Ok(mut conn)) = connect_within(options, connect_timeout).await else {
        // `probe` reports why the server cannot be reached.
        return Ok(());
    };
    let exists = sqlx::query("SELECT 1 FROM pg_namespace WHERE nspname = $1")
        .bind(schema.to_string())
        .fetch_optional(&mut conn)
        .await
        .map_err(translate)?
        .is_some();
    let result = if exists {
        Ok(())
    } else {
        match conn
            .execute(format!("CREATE SCHEMA IF NOT EXISTS {schema}").as_str())
            .await
        {
            Ok(_) => Ok(()),
            // Another server created it meanwhile (unique violation on pg_namespace).
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("23505") => Ok(()),
            Err(error) => Err(Error::Unavailable {
                message: format!(
                    "cannot create the schema {schema}: {error}; create it (CREATE SCHEMA {schema}) \
                     as a role allowed to, or grant this role CREATE on the database"
                ),
                source: None,
            }),
        }
    };
    let _ = sqlx::Connection::close(conn).await;
    result
}

/// MySQL's error for a database that does not exist (ER_BAD_DB_ERROR).
const UNKNOWN_DATABASE: u16 = 1049;

/// Creates the database a MySQL URL names when it is missing (two servers starting at once may
/// both try); a name that would need quoting is left to the DBA, and `probe` reports it missing.
pub(super) async fn ensure_database(config: &MysqlConfig) -> Result<()> {
    use sqlx::Connection as _;
    sqlx::any::install_default_drivers();
    let plain = config
        .database
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !plain {
        return Ok(());
    }
    let options = |url: &str| {
        AnyConnectOptions::from_str(url).map_err(|error| Error::Config(error.to_string()))
    };
    match connect_within(&options(&config.url)?, config.connect_timeout).await {
        // Only a missing database is this function's business; `probe` reports the rest (an
        // unreachable or silent server, bad credentials) with the fix.
        Some(Err(sqlx::Error::Database(error)))
            if error
                .try_downcast_ref::<MySqlDatabaseError>()
                .is_some_and(|error| error.number() == UNKNOWN_DATABASE) => {}
        Some(Ok(conn)) => {
            let _ = conn.close().await;
            return Ok(());
        }
        Some(Err(_)) | None => return Ok(()),
    }
    let Some(Ok(mut conn)) =
        connect_within(&options(&config.server_url)?, config.connect_timeout).await
    else {
        return Ok(());
    };
    let create = format!("CREATE DATABASE IF NOT EXISTS {}", config.database);
    let result = conn.execute(create.as_str()).await.map(|_| ());
    let _ = conn.close().await;
    result.map_err(|error| Error::Unavailable {
        message: format!(
            "cannot create the database {}: {error}; create it (CREATE DATABASE {}) as a user \
             allowed to, or grant this user CREATE",
            config.database, config.database
        ),
        source: None,
    })
}

/// Whether every migration is already recorded as applied, so a role that may use Rudder's
/// tables but not create them can open the store.
pub(super) async fn migrations_applied(
    pool: &sqlx::AnyPool,
    migrations: &sqlx::migrate::Migrator,
) -> bool {
    let Ok(rows) = sqlx::query("SELECT version FROM _sqlx_migrations WHERE success")
        .fetch_all(pool)
        .await
    else {
        return false;
    };
    let applied: Vec<i64> = rows
        .iter()
        .filter_map(|row| sqlx::Row::try_get(row, 0).ok())
        .collect();
    migrations
        .iter()
        .all(|migration| applied.contains(&migration.version))
}

/// Rudder's tables, for wiping a store.
const TABLES: [&str; 4] = [
    "rudder_log",
    "rudder_meta",
    "rudder_lease",
    "_sqlx_migrations",
];

/// Drops the schema a PostgreSQL URL names, or Rudder's tables when it names none.
pub(crate) async fn wipe_postgres(config: &PostgresConfig) -> Result<()> {
    let statements = match &config.schema {
        Some(schema) => vec![format!("DROP SCHEMA IF EXISTS {schema} CASCADE")],
        None => TABLES
            .iter()
            .map(|table| format!("DROP TABLE IF EXISTS {table}"))
            .collect(),
    };
    run_all(&config.url, config.connect_timeout, statements).await
}

/// Drops Rudder's tables from the database a MySQL URL names (the database stays).
pub(crate) async fn wipe_mysql(config: &MysqlConfig) -> Result<()> {
    let statements = TABLES
        .iter()
        .map(|table| format!("DROP TABLE IF EXISTS {table}"))
        .collect();
    run_all(&config.url, config.connect_timeout, statements).await
}

async fn run_all(url: &str, connect_timeout: Duration, statements: Vec<String>) -> Result<()> {
    use sqlx::Connection as _;
    let options =
        AnyConnectOptions::from_str(url).map_err(|error| Error::Config(error.to_string()))?;
    let mut conn = match connect_within(&options, connect_timeout).await {
        Some(connected) => connected.map_err(translate)?,
        None => {
            return Err(Error::Unavailable {
                message: format!("no answer from the database within {connect_timeout:?}"),
                source: None,
            })
        }
    };
    for statement in statements {
        conn.execute(statement.as_str()).await.map_err(translate)?;
    }
    let _ = conn.close().await;
    Ok(())
}

/// Connects once, directly, so that an unreachable server or bad credentials are reported with
/// their real cause (a pool would only say it timed out) and a hint at the fix.
pub(super) async fn probe(dialect: &Dialect, connection: &Connection) -> Result<()> {
    use sqlx::ConnectOptions;
    let attempt =
        tokio::time::timeout(connection.connect_timeout, connection.options.connect()).await;
    let failure = match attempt {
        Ok(Ok(conn)) => {
            let _ = sqlx::Connection::close(conn).await;
            return Ok(());
        }
        Ok(Err(error)) => error.to_string(),
        Err(_) => format!("no answer within {:?}", connection.connect_timeout),
    };
    let hint = match dialect.name {
        "postgres" if failure.contains("password") || failure.contains("authentication") || failure.contains("role") => {
            "check the user and password in the URL (postgres://USER:PASSWORD@HOST:PORT/DATABASE)"
        }
        "postgres" if failure.contains("does not exist") => {
            "create the database first (createdb NAME) or name an existing one in the URL"
        }
        "postgres" if failure.contains("certificate") || failure.contains("tls") || failure.contains("TLS") => {
            "check sslmode and sslrootcert in the URL: the server's certificate must verify against the root CA"
        }
        "postgres" => "check that PostgreSQL is running and reachable at the URL's host and port",
        "mysql" if failure.contains("Access denied") => {
            "check the user and password in the URL (mysql://USER:PASSWORD@HOST:PORT/DATABASE) and the user's grants on the database"
        }
        "mysql" if failure.contains("Unknown database") => {
            "create the database first (CREATE DATABASE name) or name an existing one in the URL"
        }
        "mysql" if failure.contains("certificate") || failure.contains("tls") || failure.contains("TLS") || failure.contains("SSL") => {
            "check ssl-mode and ssl-ca in the URL: the server's certificate must verify against the CA"
        }
        "mysql" => "check that MySQL/MariaDB is running and reachable at the URL's host and port",
        _ => "check that the directory exists and is writable",
    };
    Err(Error::Unavailable {
        message: format!("cannot open {} storage: {failure}; {hint}", dialect.name),
        source: None,
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::error::Error;

    /// A server that accepts TCP connections and never says a word (MySQL's server speaks
    /// first; a PostgreSQL server answers the startup message): what a database stuck before
    /// its handshake looks like to a client.
    async fn silent_server() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        (address, task)
    }

    /// Opening a store gives up after `connect_timeout` with `Unavailable`, whatever step it is
    /// at, instead of waiting for an answer for ever.
    async fn opening_gives_up_on_a_silent_server(url: String) {
        let started = Instant::now();
        let opened = tokio::time::timeout(Duration::from_secs(30), crate::open(&url)).await;
        let elapsed = started.elapsed();
        match opened {
            Err(_) => panic!("opening {url} still waits after {elapsed:?}"),
            Ok(Ok(_)) => panic!("a silent server was accepted"),
            Ok(Err(error)) => {
                assert!(matches!(error, Error::Unavailable { .. }), "{error:?}");
                assert!(error.to_string().contains("no answer"), "{error}");
            }
        }
        // One connect_timeout for the probe, and at most one more for the step before it.
        assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    }

    /// A refused connection is reported by `probe`, with its hint, not by the steps before it.
    #[tokio::test]
    async fn an_unreachable_server_is_reported_with_the_fix() {
        for (url, hint) in [
            (
                "mysql://root@127.0.0.1:1/x?connect_timeout=2",
                "check that MySQL/MariaDB is running",
            ),
            (
                "postgres://postgres@127.0.0.1:1/x?schema=x&connect_timeout=2",
                "check that PostgreSQL is running",
            ),
        ] {
            let error = match crate::open(url).await {
                Ok(_) => panic!("{url} opened"),
                Err(error) => error,
            };
            assert!(matches!(error, Error::Unavailable { .. }), "{error:?}");
            assert!(error.to_string().contains(hint), "{url}: {error}");
        }
    }

    #[tokio::test]
    async fn a_mysql_server_that_never_greets_fails_the_open_within_the_connect_timeout() {
        let (address, server) = silent_server().await;
        opening_gives_up_on_a_silent_server(format!(
            "mysql://root@{address}/rudder_silent?connect_timeout=1"
        ))
        .await;
        server.abort();
    }

    #[tokio::test]
    async fn a_postgres_server_that_never_answers_fails_the_open_within_the_connect_timeout() {
        let (address, server) = silent_server().await;
        opening_gives_up_on_a_silent_server(format!(
            "postgres://postgres@{address}/rudder?schema=rudder_silent&connect_timeout=1"
        ))
        .await;
        server.abort();
    }
}
