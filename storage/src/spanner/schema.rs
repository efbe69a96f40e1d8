//! Connecting to Cloud Spanner (or its emulator) and making sure Rudder's tables exist.
//!
//! The tables are the SQL engine's (`docs/storage-spanner.md`): the log keyed by
//! `(key, revision)` — Spanner spreads keys over splits by primary key, so the log is keyed
//! by the etcd key, not by the ever-growing revision — with a secondary index on `(revision,
//! sub)` for the watch poller and one on `lease` for revocation; one meta row holding the
//! revision counter; and the leases. On the emulator the instance and the database are created
//! when missing; on Google's service the database must exist (create it with `gcloud spanner
//! databases create`), and the tables are created by the first server that opens it.

use std::time::Duration;

use gcloud_gax::conn::Environment;
use gcloud_gax::grpc::Code;
use gcloud_googleapis::spanner::admin::database::v1::{
    CreateDatabaseRequest, DatabaseDialect, GetDatabaseDdlRequest, UpdateDatabaseDdlRequest,
};
use gcloud_googleapis::spanner::admin::instance::v1::{CreateInstanceRequest, Instance};
use gcloud_spanner::admin::client::Client as AdminClient;
use gcloud_spanner::admin::AdminClientConfig;
use gcloud_spanner::client::{ChannelConfig, Client, ClientConfig, Error as SpannerError};
use gcloud_spanner::key::Key;
use gcloud_spanner::session::SessionConfig;
use gcloud_spanner::statement::Statement;

use super::{client_error, status_error};
use crate::config::SpannerConfig;
use crate::error::{Error, Result};

/// Rudder's tables. Keys are at most `MAX_KEY_BYTES` (2 KiB); Spanner's key limit is 8 KiB.
const TABLES: [&str; 5] = [
    "CREATE TABLE rudder_log (
        key BYTES(4096) NOT NULL,
        revision INT64 NOT NULL,
        sub INT64 NOT NULL,
        value BYTES(MAX) NOT NULL,
        create_revision INT64 NOT NULL,
        prev_revision INT64 NOT NULL,
        version INT64 NOT NULL,
        lease INT64 NOT NULL,
        deleted BOOL NOT NULL,
        next_revision INT64 NOT NULL
    ) PRIMARY KEY (key, revision)",
    "CREATE INDEX rudder_log_by_revision ON rudder_log (revision, sub)",
    "CREATE INDEX rudder_log_by_lease ON rudder_log (lease, next_revision)",
    "CREATE TABLE rudder_meta (
        id INT64 NOT NULL,
        revision INT64 NOT NULL,
        compact_revision INT64 NOT NULL,
        purged_revision INT64 NOT NULL
    ) PRIMARY KEY (id)",
    "CREATE TABLE rudder_lease (
        id INT64 NOT NULL,
        ttl INT64 NOT NULL,
        expires_at_ms INT64 NOT NULL
    ) PRIMARY KEY (id)",
];

fn environment(config: &SpannerConfig) -> Result<Environment> {
    match &config.emulator_host {
        Some(host) => Ok(Environment::Emulator(host.clone())),
        None => Err(Error::Config(format!(
            "spanner://{}: this build of Rudder reaches Cloud Spanner through its emulator only; \
             set emulator_host=HOST:PORT in the URL or SPANNER_EMULATOR_HOST",
            config.database
        ))),
    }
}

/// The database's instance (`projects/P/instances/I`) and id.
fn split(database: &str) -> (&str, &str) {
    match database.rsplit_once("/databases/") {
        Some((instance, id)) => (instance, id),
        None => (database, ""),
    }
}

/// Creates the instance and database on an emulator when missing, and Rudder's tables when
/// the database has none; two servers starting together both succeed.
pub(super) async fn ensure(config: &SpannerConfig) -> Result<()> {
    let admin = AdminClient::new(AdminClientConfig {
        environment: environment(config)?,
        timeout: Duration::from_secs(30),
        connect_timeout: config.connect_timeout,
        ..AdminClientConfig::default()
    })
    .await
    .map_err(|error| {
        Error::unavailable(
            format!("cannot reach Cloud Spanner for {}", config.database),
            error,
        )
    })?;
    let (instance, database_id) = split(&config.database);
    if config.emulator_host.is_some() {
        ensure_instance(&admin, instance).await?;
    }
    let ddl = admin
        .database()
        .get_database_ddl(
            GetDatabaseDdlRequest {
                database: config.database.clone(),
            },
            None,
        )
        .await;
    let statements = match ddl {
        Ok(response) => response.into_inner().statements,
        Err(status) if status.code() == Code::NotFound => {
            let created = admin
                .database()
                .create_database(
                    CreateDatabaseRequest {
                        parent: instance.to_string(),
                        create_statement: format!("CREATE DATABASE `{database_id}`"),
                        extra_statements: TABLES.iter().map(|s| s.to_string()).collect(),
                        encryption_config: None,
                        database_dialect: DatabaseDialect::GoogleStandardSql.into(),
                        proto_descriptors: vec![],
                    },
                    None,
                )
                .await;
            match created {
                Ok(mut operation) => {
                    operation.wait(None).await.map_err(|status| {
                        status_error("creating the Spanner database failed", status)
                    })?;
                }
                // Another server created it first.
                Err(status) if status.code() == Code::AlreadyExists => {}
                Err(status) => {
                    return Err(status_error("creating the Spanner database failed", status))
                }
            }
            return wait_for_tables(&admin, config).await;
        }
        Err(status) => {
            return Err(status_error(
                "reading the Spanner database's schema failed",
                status,
            ))
        }
    };
    if statements
        .iter()
        .any(|statement| statement.contains("rudder_meta"))
    {
        return Ok(());
    }
    let updated = admin
        .database()
        .update_database_ddl(
            UpdateDatabaseDdlRequest {
                database: config.database.clone(),
                statements: TABLES.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            },
            None,
        )
        .await;
    match updated {
        Ok(mut operation) => operation.wait(None).await.map(|_| ()).or_else(|status| {
            // Another server created the tables meanwhile.
            if status.message().contains("Duplicate name") {
                Ok(())
            } else {
                Err(status_error("creating Rudder's tables failed", status))
            }
        }),
        Err(status) if status.message().contains("Duplicate name") => Ok(()),
        Err(status) => Err(status_error("creating Rudder's tables failed", status)),
    }
}

/// Waits until a database another server may be creating has Rudder's tables.
async fn wait_for_tables(admin: &AdminClient, config: &SpannerConfig) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let ddl = admin
            .database()
            .get_database_ddl(
                GetDatabaseDdlRequest {
                    database: config.database.clone(),
                },
                None,
            )
            .await;
        if let Ok(response) = ddl {
            if response
                .into_inner()
                .statements
                .iter()
                .any(|statement| statement.contains("rudder_lease"))
            {
                return Ok(());
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Unavailable {
                message: format!("{} has no Rudder tables after 30 s", config.database),
                source: None,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn ensure_instance(admin: &AdminClient, instance: &str) -> Result<()> {
    let Some((project, instance_id)) = instance.split_once("/instances/") else {
        return Err(Error::Config(format!(
            "{instance:?} is not an instance name"
        )));
    };
    let created = admin
        .instance()
        .create_instance(
            CreateInstanceRequest {
                parent: project.to_string(),
                instance_id: instance_id.to_string(),
                instance: Some(Instance {
                    name: instance.to_string(),
                    config: format!("{project}/instanceConfigs/emulator-config"),
                    display_name: instance_id.to_string(),
                    node_count: 1,
                    ..Default::default()
                }),
            },
            None,
        )
        .await;
    match created {
        Ok(mut operation) => {
            operation
                .wait(None)
                .await
                .map_err(|status| status_error("creating the Spanner instance failed", status))?;
            Ok(())
        }
        Err(status) if status.code() == Code::AlreadyExists => Ok(()),
        Err(status) => Err(status_error("creating the Spanner instance failed", status)),
    }
}

/// A data client for the database, with its meta row in place.
pub(super) async fn connect(config: &SpannerConfig) -> Result<Client> {
    let mut session_config = SessionConfig::default();
    session_config.min_opened = 4;
    session_config.max_opened = 100;
    let client = Client::new(
        config.database.clone(),
        ClientConfig {
            environment: environment(config)?,
            channel_config: ChannelConfig {
                num_channels: 2,
                connect_timeout: config.connect_timeout,
                ..ChannelConfig::default()
            },
            session_config,
            ..ClientConfig::default()
        },
    )
    .await
    .map_err(|error| {
        Error::unavailable(
            format!("cannot open Spanner database {}", config.database),
            error,
        )
    })?;
    // The meta row, once: an insert that another server may have made first. A restart finds
    // it with a read, which no other server's read-write transaction can abort (on the
    // emulator, one killed mid-transaction holds the database's only one for a while).
    let mut snapshot = client
        .single()
        .await
        .map_err(|error| client_error("reading Rudder's meta row failed", error))?;
    let found = snapshot
        .read_row("rudder_meta", &["id"], Key::new(&1_i64))
        .await
        .map_err(|status| status_error("reading Rudder's meta row failed", status))?;
    if found.is_some() {
        return Ok(client);
    }
    let insert = Statement::new(
        "INSERT INTO rudder_meta (id, revision, compact_revision, purged_revision) \
         SELECT 1, 1, 0, 0 FROM UNNEST([1]) WHERE NOT EXISTS (SELECT 1 FROM rudder_meta WHERE id = 1)",
    );
    let result = client
        .read_write_transaction(|tx| {
            let insert = insert.clone();
            Box::pin(async move {
                tx.update(insert)
                    .await
                    .map(|_| ())
                    .map_err(SpannerError::from)
            })
        })
        .await;
    match result {
        Ok(_) => Ok(client),
        Err(SpannerError::GRPC(status)) if status.code() == Code::AlreadyExists => Ok(client),
        Err(error) => Err(client_error("creating Rudder's meta row failed", error)),
    }
}

/// Drops the database a URL names (for benchmarks and tests that make throw-away stores).
pub(super) async fn drop_database(config: &SpannerConfig) -> Result<()> {
    let admin = AdminClient::new(AdminClientConfig {
        environment: environment(config)?,
        ..AdminClientConfig::default()
    })
    .await
    .map_err(|error| Error::unavailable("cannot reach Cloud Spanner", error))?;
    let dropped = admin
        .database()
        .drop_database(
            gcloud_googleapis::spanner::admin::database::v1::DropDatabaseRequest {
                database: config.database.clone(),
            },
            None,
        )
        .await;
    match dropped {
        Ok(_) => Ok(()),
        Err(status) if status.code() == Code::NotFound => Ok(()),
        Err(status) => Err(status_error("dropping the Spanner database failed", status)),
    }
}
