//! The storage conformance suite against the postgres driver, plus what only PostgreSQL has:
//! a server that drops its connections (a restart) while Rudder runs.
#![allow(clippy::unwrap_used)]

rudder_storage::conformance_tests!(rudder_storage::testing::postgres());

/// A database restart drops every connection: writes, reads and cross-store watches must carry
/// on once the database is back, without restarting Rudder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_recover_when_the_database_drops_their_connections() {
    use sqlx::Connection;

    let Some(harness) = rudder_storage::testing::postgres().await else {
        return;
    };
    let terminate = |url: String| -> futures::future::BoxFuture<'static, ()> {
        Box::pin(async move {
            let schema = url
                .split("schema=")
                .nth(1)
                .and_then(|rest| rest.split('&').next())
                .unwrap()
                .to_string();
            // What a restart does to clients: every backend serving these stores goes away.
            let base = url.split('?').next().unwrap();
            sqlx::any::install_default_drivers();
            let mut admin = sqlx::AnyConnection::connect(base).await.unwrap();
            let terminate = format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'rudder_{schema}'"
            );
            let killed = sqlx::query(&terminate).fetch_all(&mut admin).await.unwrap();
            assert!(
                killed.len() >= 2,
                "expected the stores' connections to be terminated"
            );
        })
    };
    rudder_storage::conformance::stores_recover_when_the_database_drops_their_connections(
        harness, terminate,
    )
    .await;
}

/// A server whose role may use its schema but not create schemas in the database (the usual
/// grant for an application role) opens an existing store; two servers opening one new schema
/// at once both start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_without_create_on_the_database_opens_an_existing_schema() {
    use sqlx::{Connection, Executor};

    let Some(harness) = rudder_storage::testing::postgres().await else {
        return;
    };
    let url = harness.url();
    // Two servers creating the schema at the same moment.
    let (first, second) = tokio::join!(rudder_storage::open(&url), rudder_storage::open(&url));
    let (first, second) = (first.unwrap(), second.unwrap());
    first.put(b"/p", b"1", 0).await.unwrap();
    first.close().await;
    second.close().await;

    let (base, query) = url.split_once('?').unwrap();
    let schema = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("schema="))
        .unwrap();
    let role = format!("{schema}_app");
    sqlx::any::install_default_drivers();
    let mut admin = sqlx::AnyConnection::connect(base).await.unwrap();
    for statement in [
        format!("DROP ROLE IF EXISTS {role}"),
        format!("CREATE ROLE {role} LOGIN"),
        format!("GRANT USAGE ON SCHEMA {schema} TO {role}"),
        format!("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}"),
    ] {
        admin.execute(statement.as_str()).await.unwrap();
    }
    let as_role = url.replacen("postgres@", &format!("{role}@"), 1);
    let opened = rudder_storage::open(&as_role).await;
    let result = match &opened {
        Ok(store) => store.get(b"/p", 0).await.map(|kv| kv.map(|kv| kv.value)),
        Err(error) => Err(rudder_storage::Error::InvalidArgument(error.to_string())),
    };
    if let Ok(store) = opened {
        store.close().await;
    }
    for statement in [
        format!("REASSIGN OWNED BY {role} TO postgres"),
        format!("DROP OWNED BY {role}"),
        format!("DROP ROLE IF EXISTS {role}"),
    ] {
        admin.execute(statement.as_str()).await.unwrap();
    }
    assert_eq!(result.unwrap(), Some(b"1".to_vec()));
    harness.cleanup().await;
}

/// Watches end with an error, instead of stalling silently, when the log cannot be read for
/// longer than the stall bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_end_with_an_error_when_the_log_stays_unreadable() {
    use futures::StreamExt;
    use rudder_storage::{KeyRange, WatchRequest};
    use sqlx::{Connection, Executor};
    use std::time::Duration;

    let Some(harness) = rudder_storage::testing::postgres().await else {
        return;
    };
    let url = format!("{}&watch_stall_timeout=2s", harness.url());
    let store = rudder_storage::open(&url).await.unwrap();
    let writer = harness.open().await;
    let mut watch = store
        .watch(WatchRequest::new(KeyRange::prefix("/st/")))
        .await
        .unwrap();
    let (base, query) = url.split_once('?').unwrap();
    let schema = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("schema="))
        .unwrap()
        .to_string();
    sqlx::any::install_default_drivers();
    let mut admin = sqlx::AnyConnection::connect(base).await.unwrap();
    // The writer commits a revision, then the log becomes unreadable for the watching store.
    writer.put(b"/elsewhere", b"1", 0).await.ok();
    let hide = format!("ALTER TABLE {schema}.rudder_log RENAME TO rudder_log_hidden");
    admin.execute(hide.as_str()).await.unwrap();
    let bump = format!("UPDATE {schema}.rudder_meta SET revision = revision + 1");
    admin.execute(bump.as_str()).await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(20), watch.next()).await;
    let show = format!("ALTER TABLE {schema}.rudder_log_hidden RENAME TO rudder_log");
    admin.execute(show.as_str()).await.unwrap();
    match ended {
        Ok(Some(Err(error))) => assert!(
            error.to_string().contains("log"),
            "the error says what failed: {error}"
        ),
        other => panic!("expected the watch to end with an error, got {other:?}"),
    }
    store.close().await;
    writer.close().await;
    harness.cleanup().await;
}
