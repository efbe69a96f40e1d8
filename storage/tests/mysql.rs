//! The storage conformance suite against the MySQL/MariaDB driver.
#![allow(clippy::unwrap_used)]

rudder_storage::conformance_tests!(rudder_storage::testing::mysql());

/// The server drops every connection of the stores (what a restart or a failover does to
/// clients): writes and a watch on another store carry on, without restarting Rudder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_recover_when_the_server_drops_their_connections() {
    use sqlx::{Connection, Row};

    let Some(harness) = rudder_storage::testing::mysql().await else {
        return;
    };
    let kill = |url: String| -> futures::future::BoxFuture<'static, ()> {
        Box::pin(async move {
            let database = url
                .split('?')
                .next()
                .and_then(|base| base.rsplit('/').next())
                .unwrap()
                .to_string();
            sqlx::any::install_default_drivers();
            let admin_url = std::env::var(rudder_storage::testing::MYSQL_ENV).unwrap();
            let mut admin = sqlx::AnyConnection::connect(&admin_url).await.unwrap();
            let sessions = sqlx::query(
                "SELECT CAST(id AS SIGNED) FROM information_schema.processlist \
                 WHERE db = ? AND id <> CONNECTION_ID()",
            )
            .bind(database.clone())
            .fetch_all(&mut admin)
            .await
            .unwrap();
            assert!(
                sessions.len() >= 2,
                "expected the stores' connections to {database}"
            );
            for session in sessions {
                let id: i64 = session.try_get(0).unwrap();
                // A connection may close by itself meanwhile.
                let _ = sqlx::query(&format!("KILL CONNECTION {id}"))
                    .execute(&mut admin)
                    .await;
            }
        })
    };
    rudder_storage::conformance::stores_recover_when_the_database_drops_their_connections(
        harness, kill,
    )
    .await;
}

/// Errors name the problem: a server that refuses the user is `Unavailable` with MySQL's
/// message and the fix, not a pool timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_user_is_reported_with_the_fix() {
    let Some(harness) = rudder_storage::testing::mysql().await else {
        return;
    };
    let url = harness.url();
    let (scheme_user, rest) = url.split_once('@').unwrap();
    let user = scheme_user.trim_start_matches("mysql://");
    let user = user.split(':').next().unwrap();
    let wrong = format!("mysql://{user}:certainly-not-the-password@{rest}");
    let error = match rudder_storage::open(&wrong).await {
        Ok(store) => {
            store.close().await;
            panic!("a wrong password was accepted")
        }
        Err(error) => error,
    };
    assert!(
        matches!(error, rudder_storage::Error::Unavailable { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains("Access denied"), "{message}");
    assert!(message.contains("check the user and password"), "{message}");
    harness.cleanup().await;
}
