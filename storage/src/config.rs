//! Storage URLs: which driver to open and its options.
//!
//! - `sqlite://PATH[?synchronous=full|normal]` (a relative PATH is relative to the working dir;
//!   `sqlite:///abs/path` is absolute; `full`, the default, syncs every commit to disk);
//! - `postgres://user:pass@host:port/db?sslmode=verify-full&sslrootcert=ca.pem&schema=NAME&max_connections=N&connect_timeout=SECS&statement_timeout=MS`
//!   (`postgresql://` too; every parameter sqlx understands is passed through);
//! - `mysql://user:pass@host:port/db?ssl-mode=VERIFY_IDENTITY&ssl-ca=ca.pem&max_connections=N&connect_timeout=SECS&poll_interval=25ms`
//!   (MySQL or MariaDB; every parameter sqlx understands is passed through);
//! - `etcd://host:port[,host:port…][/key-prefix][?connect_timeout=SECS]`;
//! - `spanner://projects/P/instances/I/databases/D[?emulator_host=HOST:PORT&poll_interval=50ms]`
//!   (Cloud Spanner; `emulator_host`, or `SPANNER_EMULATOR_HOST` as Google's clients read it,
//!   names an emulator).
//!
//! Every driver also takes `compact_interval` (like `5m`, `30s`, `0` for off; default 5m: each
//! interval, history older than one interval is compacted, as kube-apiserver does) and
//! `compact_retain` (revisions of history kept at least, whatever their age; default 0). The
//! SQL drivers take `watch_stall_timeout` (default 30s): how long their watch log may stay
//! unreadable before watches end with an error.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// A parsed storage URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageConfig {
    pub driver: DriverConfig,
    pub compaction: CompactionConfig,
    /// SQL drivers: how long the watch log may stay unreadable before watches end with an
    /// error (instead of stalling silently).
    pub watch_stall_timeout: Duration,
    /// How far this process's wall clock is taken to be ahead of the real one: zero, except in
    /// tests that simulate clock skew between servers (no URL parameter sets it). Nothing that
    /// must agree between servers — lease expiry above all — may depend on it.
    #[doc(hidden)]
    pub clock_offset: Duration,
}

/// The driver and its own options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriverConfig {
    Sqlite(SqliteConfig),
    Postgres(PostgresConfig),
    Mysql(MysqlConfig),
    Etcd(EtcdConfig),
    Spanner(SpannerConfig),
}

/// Background compaction, as kube-apiserver's: every `interval`, compact to the revision the
/// store had one interval earlier (so clients resuming a watch or a paged list have about one
/// interval of history), keeping at least `retain` revisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactionConfig {
    /// Zero turns background compaction off.
    pub interval: Duration,
    /// Revisions always kept, however old.
    pub retain: i64,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(300),
            retain: 0,
        }
    }
}

/// The default for [`StorageConfig::watch_stall_timeout`].
pub const DEFAULT_WATCH_STALL_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqliteConfig {
    pub path: PathBuf,
    /// `PRAGMA synchronous`: `FULL` (the default: every commit is on disk before it is
    /// acknowledged, so a power loss never takes back a revision a client has seen) or
    /// `NORMAL` (as k3s/kine: durable across process crashes, but a power loss may lose the
    /// last commits — and their revisions be handed out again).
    pub synchronous_full: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostgresConfig {
    /// The URL handed to sqlx, without Rudder's own parameters.
    pub url: String,
    /// Keep Rudder's tables in this schema (created if missing) instead of `public`.
    pub schema: Option<String>,
    pub max_connections: u32,
    pub connect_timeout: Duration,
    /// `statement_timeout` set on every connection, in milliseconds.
    pub statement_timeout_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MysqlConfig {
    /// The URL handed to sqlx, without Rudder's own parameters.
    pub url: String,
    /// The database the URL names (created when missing, if the user may).
    pub database: String,
    /// The URL without its database, to create the database.
    pub server_url: String,
    pub max_connections: u32,
    pub connect_timeout: Duration,
    /// How often the watch poller reads the log for other servers' commits (MySQL has no
    /// NOTIFY; this server's own commits wake it at once).
    pub poll_interval: Duration,
}

/// The default for [`MysqlConfig::poll_interval`].
pub const DEFAULT_MYSQL_POLL_INTERVAL: Duration = Duration::from_millis(25);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdConfig {
    pub endpoints: Vec<String>,
    /// Prepended to every key, so several stores can share one etcd.
    pub prefix: Vec<u8>,
    pub connect_timeout: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpannerConfig {
    /// `projects/P/instances/I/databases/D`.
    pub database: String,
    /// `host:port` of a Cloud Spanner emulator; `None` means Google's service.
    pub emulator_host: Option<String>,
    /// How often the watch poller reads the log for other servers' commits (this server's own
    /// commits wake it at once).
    pub poll_interval: Duration,
    pub connect_timeout: Duration,
}

/// The default for [`SpannerConfig::poll_interval`].
pub const DEFAULT_SPANNER_POLL_INTERVAL: Duration = Duration::from_millis(50);

impl StorageConfig {
    /// Parses a storage URL; the error names what is wrong and what a good URL looks like.
    pub fn parse(url: &str) -> Result<Self> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            Error::Config(format!(
                "storage URL {url:?} has no scheme: use sqlite://PATH, postgres://USER@HOST/DB, mysql://USER@HOST/DB, etcd://HOST:PORT or spanner://projects/P/instances/I/databases/D"
            ))
        })?;
        let (body, query) = match rest.split_once('?') {
            Some((body, query)) => (body, query),
            None => (rest, ""),
        };
        let mut params = Params::parse(query)?;
        let compaction = CompactionConfig {
            interval: match params.take("compact_interval") {
                Some(text) => parse_duration(&text)?,
                None => CompactionConfig::default().interval,
            },
            retain: match params.take("compact_retain") {
                Some(text) => parse_number("compact_retain", &text)?,
                None => CompactionConfig::default().retain,
            },
        };
        let watch_stall_timeout = match params.take("watch_stall_timeout") {
            Some(_) if scheme == "etcd" => return Err(Error::Config(
                "watch_stall_timeout is an option of the SQL drivers; etcd's watches are etcd's"
                    .into(),
            )),
            Some(text) => parse_duration(&text)?,
            None => DEFAULT_WATCH_STALL_TIMEOUT,
        };
        let driver = match scheme {
            "sqlite" => DriverConfig::Sqlite(sqlite(body, &mut params)?),
            "postgres" | "postgresql" => DriverConfig::Postgres(postgres(scheme, body, &mut params)?),
            "mysql" => DriverConfig::Mysql(mysql(body, &mut params)?),
            "etcd" => DriverConfig::Etcd(etcd(body, &mut params)?),
            "spanner" => DriverConfig::Spanner(spanner(body, &mut params)?),
            other => {
                return Err(Error::Config(format!(
                    "unknown storage scheme {other:?} in {url:?}: use sqlite://, postgres://, mysql://, etcd:// or spanner://"
                )))
            }
        };
        if let DriverConfig::Etcd(_) | DriverConfig::Sqlite(_) | DriverConfig::Spanner(_) = driver {
            params.reject_rest(scheme)?;
        }
        Ok(Self {
            driver,
            compaction,
            watch_stall_timeout,
            clock_offset: Duration::ZERO,
        })
    }
}

fn sqlite(body: &str, params: &mut Params) -> Result<SqliteConfig> {
    if body.is_empty() {
        return Err(Error::Config(
            "sqlite:// URL has no path: use sqlite://relative/state.db or sqlite:///absolute/state.db".into(),
        ));
    }
    let synchronous_full = match params.take("synchronous").as_deref() {
        Some("normal") | Some("NORMAL") => false,
        None | Some("full") | Some("FULL") => true,
        Some(other) => {
            return Err(Error::Config(format!(
                "sqlite synchronous={other:?} is not supported: use normal or full"
            )))
        }
    };
    Ok(SqliteConfig {
        path: PathBuf::from(body),
        synchronous_full,
    })
}

/// `max_connections` and `connect_timeout`, as the PostgreSQL and MySQL URLs take them.
fn pool_params(driver: &str, params: &mut Params) -> Result<(u32, Duration)> {
    let max_connections = match params.take("max_connections") {
        Some(text) => parse_number("max_connections", &text)?,
        None => 10,
    };
    if max_connections < 1 {
        return Err(Error::Config(format!(
            "{driver} max_connections must be at least 1"
        )));
    }
    let connect_timeout = match params.take("connect_timeout") {
        Some(text) => Duration::from_secs(parse_number("connect_timeout", &text)?),
        None => Duration::from_secs(10),
    };
    Ok((max_connections, connect_timeout))
}

/// The URL sqlx gets: the body and every parameter Rudder did not take.
fn passed_through(scheme: &str, body: &str, params: &Params) -> String {
    let rest = params.remaining();
    if rest.is_empty() {
        format!("{scheme}://{body}")
    } else {
        format!("{scheme}://{body}?{rest}")
    }
}

fn mysql(body: &str, params: &mut Params) -> Result<MysqlConfig> {
    let (authority, database) = body.split_once('/').unwrap_or((body, ""));
    if database.is_empty() {
        return Err(Error::Config(
            "mysql:// URL names no database: use mysql://USER:PASSWORD@HOST:PORT/DATABASE".into(),
        ));
    }
    let (max_connections, connect_timeout) = pool_params("mysql", params)?;
    let poll_interval = match params.take("poll_interval") {
        Some(text) => parse_duration(&text)?,
        None => DEFAULT_MYSQL_POLL_INTERVAL,
    };
    if poll_interval.is_zero() {
        return Err(Error::Config(
            "mysql poll_interval must be more than 0 (e.g. 25ms)".into(),
        ));
    }
    Ok(MysqlConfig {
        url: passed_through("mysql", body, params),
        database: database.to_string(),
        server_url: passed_through("mysql", &format!("{authority}/"), params),
        max_connections,
        connect_timeout,
        poll_interval,
    })
}

fn postgres(scheme: &str, body: &str, params: &mut Params) -> Result<PostgresConfig> {
    let schema = params.take("schema");
    if let Some(schema) = &schema {
        let valid = !schema.is_empty()
            && schema.len() <= 48
            && schema
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && !schema.starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            return Err(Error::Config(format!(
                "postgres schema {schema:?} is not valid: use up to 48 lowercase letters, digits and underscores, not starting with a digit"
            )));
        }
    }
    let (max_connections, connect_timeout) = pool_params("postgres", params)?;
    let statement_timeout_ms = match params.take("statement_timeout") {
        Some(text) => Some(parse_number("statement_timeout", &text)?),
        None => None,
    };
    Ok(PostgresConfig {
        url: passed_through(scheme, body, params),
        schema,
        max_connections,
        connect_timeout,
        statement_timeout_ms,
    })
}

fn etcd(body: &str, params: &mut Params) -> Result<EtcdConfig> {
    let (hosts, prefix) = match body.split_once('/') {
        Some((hosts, prefix)) => (hosts, prefix),
        None => (body, ""),
    };
    let endpoints: Vec<String> = hosts
        .split(',')
        .filter(|host| !host.is_empty())
        .map(|host| format!("http://{host}"))
        .collect();
    if endpoints.is_empty() {
        return Err(Error::Config(
            "etcd:// URL has no endpoint: use etcd://HOST:PORT[,HOST:PORT…]".into(),
        ));
    }
    let prefix = if prefix.is_empty() {
        Vec::new()
    } else {
        format!("/{prefix}").into_bytes()
    };
    let connect_timeout = match params.take("connect_timeout") {
        Some(text) => Duration::from_secs(parse_number("connect_timeout", &text)?),
        None => Duration::from_secs(10),
    };
    Ok(EtcdConfig {
        endpoints,
        prefix,
        connect_timeout,
    })
}

fn spanner(body: &str, params: &mut Params) -> Result<SpannerConfig> {
    let parts: Vec<&str> = body.split('/').collect();
    let valid = parts.len() == 6
        && parts[0] == "projects"
        && parts[2] == "instances"
        && parts[4] == "databases"
        && [parts[1], parts[3], parts[5]].iter().all(|id| {
            !id.is_empty()
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        });
    if !valid {
        return Err(Error::Config(format!(
            "spanner:// URL {body:?} does not name a database: use spanner://projects/PROJECT/instances/INSTANCE/databases/DATABASE"
        )));
    }
    let emulator_host = params
        .take("emulator_host")
        .or_else(|| std::env::var("SPANNER_EMULATOR_HOST").ok())
        .filter(|host| !host.is_empty());
    let poll_interval = match params.take("poll_interval") {
        Some(text) => parse_duration(&text)?,
        None => DEFAULT_SPANNER_POLL_INTERVAL,
    };
    if poll_interval.is_zero() {
        return Err(Error::Config(
            "spanner poll_interval must be more than 0 (e.g. 50ms)".into(),
        ));
    }
    let connect_timeout = match params.take("connect_timeout") {
        Some(text) => Duration::from_secs(parse_number("connect_timeout", &text)?),
        None => Duration::from_secs(10),
    };
    Ok(SpannerConfig {
        database: body.to_string(),
        emulator_host,
        poll_interval,
        connect_timeout,
    })
}

/// Query parameters, taken one by one; what no one takes is passed on (postgres) or rejected.
struct Params(Vec<(String, String)>);

impl Params {
    fn parse(query: &str) -> Result<Self> {
        let mut pairs = Vec::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            pairs.push((key.to_string(), value.to_string()));
        }
        Ok(Self(pairs))
    }

    fn take(&mut self, key: &str) -> Option<String> {
        let index = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(index).1)
    }

    fn remaining(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&")
    }

    fn reject_rest(&self, scheme: &str) -> Result<()> {
        match self.0.first() {
            None => Ok(()),
            Some((key, _)) => Err(Error::Config(format!(
                "unknown {scheme}:// URL parameter {key:?}"
            ))),
        }
    }
}

fn parse_number<T: std::str::FromStr>(name: &str, text: &str) -> Result<T> {
    text.parse().map_err(|_| {
        Error::Config(format!(
            "URL parameter {name}={text:?} is not a valid number"
        ))
    })
}

/// `90`, `90s`, `500ms`, `5m`, `1h`; a bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let bad = || {
        Error::Config(format!(
            "duration {text:?} is not valid: use e.g. 500ms, 30s, 5m or 1h"
        ))
    };
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| bad())?;
    let millis = match unit {
        "ms" => number,
        "" | "s" => number * 1000,
        "m" => number * 60_000,
        "h" => number * 3_600_000,
        _ => return Err(bad()),
    };
    Ok(Duration::from_millis(millis))
}

/// A storage URL without its password, for logs and error messages
/// (`postgres://u:secret@h/db` → `postgres://u:***@h/db`); anything else is returned as is.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redact_hides_only_the_password() {
        assert_eq!(
            super::redact("postgres://u:secret@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(super::redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(super::redact("sqlite://x.db"), "sqlite://x.db");
        assert_eq!(super::redact("--flag"), "--flag");
    }

    use super::*;

    #[test]
    fn spanner_urls_name_a_database_and_an_emulator() {
        let config = StorageConfig::parse(
            "spanner://projects/p1/instances/i-1/databases/rudder_db?emulator_host=127.0.0.1:9010&poll_interval=20ms",
        )
        .unwrap();
        assert_eq!(
            config.driver,
            DriverConfig::Spanner(SpannerConfig {
                database: "projects/p1/instances/i-1/databases/rudder_db".into(),
                emulator_host: Some("127.0.0.1:9010".into()),
                poll_interval: Duration::from_millis(20),
                connect_timeout: Duration::from_secs(10),
            })
        );
        for bad in [
            "spanner://projects/p/instances/i",
            "spanner://projects/p/instances/i/databases/",
            "spanner://project/p/instances/i/databases/d",
            "spanner://projects/p/instances/i/databases/d/x",
        ] {
            let error = StorageConfig::parse(bad).unwrap_err().to_string();
            assert!(
                error.contains("projects/PROJECT/instances/INSTANCE/databases/DATABASE"),
                "{bad}: {error}"
            );
        }
        let error = StorageConfig::parse("spanner://projects/p/instances/i/databases/d?bogus=1")
            .unwrap_err()
            .to_string();
        assert!(error.contains("bogus"), "{error}");
    }

    #[test]
    fn sqlite_urls_take_relative_and_absolute_paths() {
        let config = StorageConfig::parse("sqlite:///var/lib/rudder/state.db").unwrap();
        assert_eq!(
            config.driver,
            DriverConfig::Sqlite(SqliteConfig {
                path: "/var/lib/rudder/state.db".into(),
                synchronous_full: true
            }),
            "the embedded default syncs every commit"
        );
        let config =
            StorageConfig::parse("sqlite://data/state.db?synchronous=normal&compact_interval=0")
                .unwrap();
        assert_eq!(
            config.driver,
            DriverConfig::Sqlite(SqliteConfig {
                path: "data/state.db".into(),
                synchronous_full: false
            })
        );
        assert_eq!(config.compaction.interval, Duration::ZERO);
    }

    #[test]
    fn postgres_urls_keep_sqlx_parameters_and_take_rudders_own() {
        let config = StorageConfig::parse(
            "postgres://u:p@db:5432/k8s?sslmode=verify-full&schema=one&max_connections=4&statement_timeout=5000&compact_retain=50",
        )
        .unwrap();
        let DriverConfig::Postgres(pg) = config.driver else {
            panic!("not postgres")
        };
        assert_eq!(pg.url, "postgres://u:p@db:5432/k8s?sslmode=verify-full");
        assert_eq!(pg.schema.as_deref(), Some("one"));
        assert_eq!(pg.max_connections, 4);
        assert_eq!(pg.statement_timeout_ms, Some(5000));
        assert_eq!(config.compaction.retain, 50);
    }

    #[test]
    fn mysql_urls_keep_sqlx_parameters_and_take_rudders_own() {
        let config = StorageConfig::parse(
            "mysql://u:p@db:3306/k8s?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem&max_connections=4&connect_timeout=3&poll_interval=40ms&compact_retain=7",
        )
        .unwrap();
        let DriverConfig::Mysql(mysql) = config.driver else {
            panic!("not mysql")
        };
        assert_eq!(
            mysql.url,
            "mysql://u:p@db:3306/k8s?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem"
        );
        assert_eq!(mysql.database, "k8s");
        assert_eq!(
            mysql.server_url,
            "mysql://u:p@db:3306/?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem"
        );
        assert_eq!(mysql.max_connections, 4);
        assert_eq!(mysql.connect_timeout, Duration::from_secs(3));
        assert_eq!(mysql.poll_interval, Duration::from_millis(40));
        assert_eq!(config.compaction.retain, 7);
        let DriverConfig::Mysql(defaults) =
            StorageConfig::parse("mysql://u@db/k8s").unwrap().driver
        else {
            panic!("not mysql")
        };
        assert_eq!(defaults.poll_interval, DEFAULT_MYSQL_POLL_INTERVAL);
        assert_eq!(defaults.max_connections, 10);
    }

    #[test]
    fn etcd_urls_take_several_endpoints_and_a_prefix() {
        let config = StorageConfig::parse("etcd://a:2379,b:2379/tenant1").unwrap();
        let DriverConfig::Etcd(etcd) = config.driver else {
            panic!("not etcd")
        };
        assert_eq!(etcd.endpoints, vec!["http://a:2379", "http://b:2379"]);
        assert_eq!(etcd.prefix, b"/tenant1".to_vec());
    }

    #[test]
    fn bad_urls_say_what_to_write_instead() {
        for (url, needle) in [
            ("state.db", "no scheme"),
            ("mysqlx://x", "unknown storage scheme"),
            ("mysql://root@h:3306", "names no database"),
            ("mysql://root@h/db?poll_interval=0", "more than 0"),
            ("sqlite://", "no path"),
            ("etcd://", "no endpoint"),
            ("postgres://h/db?schema=Bad-Name", "not valid"),
            ("sqlite://x.db?bogus=1", "unknown sqlite:// URL parameter"),
            ("sqlite://x.db?compact_interval=5y", "duration"),
            ("etcd://h:2379?watch_stall_timeout=5s", "SQL drivers"),
        ] {
            let error = StorageConfig::parse(url).unwrap_err().to_string();
            assert!(error.contains(needle), "{url}: {error}");
        }
    }
}
