//! Lease expiry for the SQL drivers: a loop that revokes leases expired by the database's
//! clock (never this process's, so servers with skewed clocks agree), and warns when the two
//! clocks drift apart.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::SqlStore;

/// Revokes expired leases (by the database's clock), a few times a second; now and then
/// compares this process's clock with the database's and warns when they drift apart.
pub(super) async fn expire_leases(store: std::sync::Weak<SqlStore>, shutdown: CancellationToken) {
    let mut checks = 0u64;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        let Some(store) = store.upgrade() else { return };
        if checks.is_multiple_of(240) {
            warn_about_clock_skew(&store).await;
        }
        checks += 1;
        let expired = match store.reader.ids(store.reader.dialect.expired_leases).await {
            Ok(expired) => expired,
            Err(error) => {
                tracing::warn!(%error, "listing expired leases failed");
                continue;
            }
        };
        store.jobs.revoke_expired(expired).await;
    }
}

/// Leases follow the database's clock whatever this server's says, but certificates and tokens
/// follow this server's: say so when the two disagree by more than two seconds.
async fn warn_about_clock_skew(store: &SqlStore) {
    let before = store.clock.now_ms();
    let Ok(database) = store.reader.database_now_ms().await else {
        return;
    };
    let after = store.clock.now_ms();
    let skew_ms = database - (before + after) / 2;
    if skew_ms.abs() > 2000 + (after - before) {
        tracing::warn!(
            skew_ms,
            "this server's clock and the database's differ; leases use the database's, \
             certificates and tokens this server's: synchronise the clocks (NTP)"
        );
    }
}
