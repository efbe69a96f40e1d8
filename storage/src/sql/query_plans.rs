//! What the servers' planners make of the engine's key reads, on Rudder's own connections.
//!
//! Each key read has an index made for it (`rudder_log_key_revision`: key, then revision), and
//! a page of a list must walk it in key order and stop at the page's end. The planners did not
//! always see it that way:
//! - PostgreSQL, on a log that had just grown and had no statistics yet (autovacuum analyzes a
//!   minute or more later), took a key range for a handful of rows and fetched the whole rest
//!   of the range through a bitmap (or a sequential scan), then sorted it for the first 500:
//!   ~8 ms a page of a 10k-key list instead of ~0.3 ms, and a whole list grew with the square
//!   of its length.
//! - MariaDB preferred the `(deleted, revision)` index, `deleted = 0` being an equality: every
//!   live row of the table, then a filesort, for a page or for a single key.
//!
//! - MariaDB materialized the one-statement snapshot read (the counters' row, then the page, as
//!   a union of derived tables) in temporary tables, which hold the BLOB values and so are
//!   written to disk: four files created and removed for every get, which held gets to a
//!   quarter of etcd's rate.
//!
//! These tests hold each plan to the key index, before and after the server has statistics,
//! and MySQL's reads to no temporary table on disk.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use sqlx::any::AnyRow;
use sqlx::AnyConnection;
use sqlx::{Column, Row};

use super::dialect::{latest_rows, Dialect, MYSQL, POSTGRES};
use super::SqlStore;
use crate::config::{DriverConfig, StorageConfig};
use crate::interface::Storage;
use crate::testing::Harness;

/// Keys the tests write: enough for a wrong plan to differ from the right one.
const KEYS: usize = 3000;

/// Opens `harness`'s store and writes [`KEYS`] keys of 1 KiB, every tenth one deleted and
/// every fifth one updated (so the log holds superseded rows and tombstones too).
async fn store_with_keys(harness: &dyn Harness) -> Arc<SqlStore> {
    let config = StorageConfig::parse(&harness.url()).unwrap();
    let store = match &config.driver {
        DriverConfig::Postgres(postgres) => SqlStore::open_postgres(postgres, &config).await,
        DriverConfig::Mysql(mysql) => SqlStore::open_mysql(mysql, &config).await,
        _ => panic!("not a server driver: {}", harness.url()),
    }
    .unwrap();
    use futures::StreamExt;
    let value = vec![b'v'; 1024];
    let writes = futures::stream::iter(0..KEYS).map(|i| {
        let (store, value) = (&store, &value);
        async move {
            let key = format!("/plans/k{i:06}");
            store.create(key.as_bytes(), value, 0).await.unwrap();
            if i % 5 == 0 {
                store.put(key.as_bytes(), value, 0).await.unwrap();
            }
            if i % 10 == 0 {
                store.delete(key.as_bytes(), None).await.unwrap();
            }
        }
    });
    writes.buffer_unordered(16).collect::<Vec<()>>().await;
    store
}

/// A value bound to a statement under `EXPLAIN`.
enum Bind {
    Bytes(&'static [u8]),
    Int(i64),
}

/// Runs `sql` with `binds` on `conn`.
async fn fetch(conn: &mut AnyConnection, sql: &str, binds: &[Bind]) -> Vec<AnyRow> {
    let mut query = sqlx::query(sql);
    for bind in binds {
        query = match bind {
            Bind::Bytes(bytes) => query.bind(bytes.to_vec()),
            Bind::Int(int) => query.bind(*int),
        };
    }
    query.fetch_all(conn).await.unwrap()
}

/// The plan of `sql` with `binds`, on a connection of the store's read pool, one line per
/// plan row (MySQL's rows as `column=value` pairs).
async fn plan(store: &SqlStore, sql: &str, binds: &[Bind]) -> String {
    let mut conn = store.reader.pool.acquire().await.unwrap();
    let rows = fetch(&mut conn, &format!("EXPLAIN {sql}"), binds).await;
    rows.iter().map(plan_row).collect::<Vec<_>>().join("\n")
}

fn plan_row(row: &AnyRow) -> String {
    row.columns()
        .iter()
        .map(|column| {
            let i = column.ordinal();
            let value = row
                .try_get::<Option<String>, _>(i)
                .map(|text| text.unwrap_or_default())
                .or_else(|_| row.try_get::<i64, _>(i).map(|n| n.to_string()))
                .unwrap_or_else(|_| "?".into());
            if row.columns().len() == 1 {
                value
            } else {
                format!("{}={value}", column.name())
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `plan` reads the log (`l`) through the key index without sorting what it read.
fn walks_the_key_index(dialect: &Dialect, plan: &str) -> bool {
    match dialect.name {
        "postgres" => {
            plan.contains("Index Scan using rudder_log_key_revision")
                || plan.contains("Index Only Scan using rudder_log_key_revision")
        }
        _ => plan
            .lines()
            .filter(|line| line.contains(" table=l "))
            .all(|line| line.contains(" key=rudder_log_key_revision ")),
    }
}

fn sorts(plan: &str) -> bool {
    plan.contains("Sort") || plan.contains("filesort") || plan.contains("Bitmap")
}

/// Every key read the engine makes, with binds for a store written by [`store_with_keys`]:
/// (what it is, statement, binds, whether its result is in key order).
fn key_reads(dialect: &'static Dialect) -> Vec<(&'static str, String, Vec<Bind>, bool)> {
    use Bind::*;
    let page = |end: &'static [u8]| vec![Bytes(b"/plans/k001000"), Bytes(end), Int(0), Int(501)];
    vec![
        (
            "a page of a bounded list",
            dialect.range_snapshot_bounded.into(),
            page(b"/plans0"),
            true,
        ),
        (
            "a page of an unbounded list",
            dialect.range_snapshot_unbounded.into(),
            page(b"\0"),
            true,
        ),
        (
            "a single key",
            dialect.range_snapshot_bounded.into(),
            vec![
                Bytes(b"/plans/k001001"),
                Bytes(b"/plans/k001001\0"),
                Int(0),
                Int(2),
            ],
            true,
        ),
        (
            "a count",
            dialect.count_snapshot_bounded.into(),
            vec![Bytes(b"/plans/k001000"), Bytes(b"/plans0"), Int(0)],
            false,
        ),
        (
            "a write's latest rows",
            latest_rows(dialect, 2),
            vec![Bytes(b"/plans/k001001"), Bytes(b"/plans/k002002")],
            false,
        ),
    ]
}

/// How many temporary tables on disk running `sql` with `binds` made MySQL create.
async fn disk_temporary_tables(store: &SqlStore, sql: &str, binds: &[Bind]) -> i64 {
    async fn created_so_far(conn: &mut AnyConnection) -> i64 {
        let rows = fetch(
            conn,
            "SHOW SESSION STATUS LIKE 'Created_tmp_disk_tables'",
            &[],
        )
        .await;
        rows[0].try_get::<String, _>(1).unwrap().parse().unwrap()
    }
    let mut conn = store.reader.pool.acquire().await.unwrap();
    let before = created_so_far(&mut conn).await;
    fetch(&mut conn, sql, binds).await;
    created_so_far(&mut conn).await - before
}

async fn key_reads_walk_the_key_index(harness: Box<dyn Harness>, dialect: &'static Dialect) {
    let store = store_with_keys(&*harness).await;
    for statistics in ["none yet", "analyzed"] {
        if statistics == "analyzed" {
            sqlx::query(if dialect.name == "postgres" {
                "ANALYZE rudder_log"
            } else {
                "ANALYZE TABLE rudder_log"
            })
            .execute(&store.reader.pool)
            .await
            .unwrap();
        }
        for (read, sql, binds, ordered) in key_reads(dialect) {
            let plan = plan(&store, &sql, &binds).await;
            assert!(
                walks_the_key_index(dialect, &plan),
                "{} ({statistics} statistics): {read} does not walk the key index:\n{plan}",
                dialect.name
            );
            assert!(
                !ordered || !sorts(&plan),
                "{} ({statistics} statistics): {read} reads more than it returns and sorts it:\n{plan}",
                dialect.name
            );
            if dialect.name == "mysql" {
                let on_disk = disk_temporary_tables(&store, &sql, &binds).await;
                assert_eq!(
                    on_disk, 0,
                    "{read} made MySQL write {on_disk} temporary tables to disk"
                );
            }
        }
    }
    store.close().await;
    harness.cleanup().await;
}

#[tokio::test]
async fn postgres_key_reads_walk_the_key_index() {
    if let Some(harness) = crate::testing::postgres().await {
        key_reads_walk_the_key_index(harness, &POSTGRES).await;
    }
}

#[tokio::test]
async fn mysql_key_reads_walk_the_key_index() {
    if let Some(harness) = crate::testing::mysql().await {
        key_reads_walk_the_key_index(harness, &MYSQL).await;
    }
}
