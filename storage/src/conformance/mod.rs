//! The conformance suite: the same cases, run against every driver.
//!
//! A driver's test file runs the whole suite in one line:
//!
//! ```text
//! rudder_storage::conformance_tests!(rudder_storage::testing::sqlite());
//! ```
//!
//! Each case gets a fresh, isolated backend from a [`Harness`](crate::testing::Harness). The
//! checklist follows the upstream apiserver storage suite at the KV level (see
//! `shared/docs/storage-semantics.md` §4) plus Rudder's own promises: 64 concurrent writers
//! without an error, two stores on one database seeing each other's writes, and a randomized
//! concurrent history checked against a sequential model.
//!
//! Revisions are asserted relative to the store's revision when the case starts, so the suite
//! holds on a shared etcd as on a fresh SQL database.

mod compaction;
mod durability;
mod history;
mod kv;
mod lease;
mod reconnect;
mod support;
mod watch;

pub use compaction::*;
pub use durability::*;
pub use history::*;
pub use kv::*;
pub use lease::*;
pub use reconnect::*;
pub use watch::*;

/// Expands to one `#[tokio::test]` per conformance case, each with a fresh backend from the
/// given harness expression (an `Option<Box<dyn Harness>>` future; `None` skips).
#[macro_export]
macro_rules! conformance_tests {
    ($harness:expr) => {
        $crate::conformance_tests!(@cases $harness;
            create_fails_when_the_key_exists,
            get_reads_past_revisions_and_refuses_future_ones,
            range_honours_limit_count_keys_only_and_count_only,
            paged_reads_count_the_rest_of_the_range_at_their_revision,
            range_orders_keys_by_bytes,
            update_is_compare_and_swap_returning_the_current_kv,
            delete_is_compare_and_swap_returning_the_current_kv,
            delete_then_recreate_resets_create_revision_and_version,
            revisions_are_monotonic_and_gapless_across_keys,
            txn_evaluates_compares_and_runs_one_branch,
            txn_rejects_a_branch_that_writes_one_key_twice,
            txn_rejects_a_key_written_twice_across_nesting_levels,
            compaction_makes_older_reads_fail,
            background_compaction_keeps_the_configured_retention,
            background_compaction_keeps_the_last_interval_of_history,
            compaction_never_brings_a_deleted_key_back,
            live_watches_see_every_event_or_an_error_when_compaction_overtakes_them,
            count_only_reads_are_exact_or_compacted_while_compaction_runs,
            watch_from_now_sees_only_later_writes,
            watch_from_a_past_revision_replays_history,
            watch_from_a_compacted_revision_fails,
            watch_delivers_prev_kv_and_delete_revisions,
            watch_order_matches_commit_order_under_concurrent_writers,
            watch_progress_requests_report_a_revision_with_everything_delivered,
            progress_reports_never_overtake_events_under_load,
            many_watchers_are_not_held_up_by_one_that_never_reads,
            a_watcher_behind_a_burst_catches_up_instead_of_failing,
            a_watcher_that_stops_reading_gets_every_event_when_it_resumes,
            a_batch_revision_promises_every_event_up_to_it,
            a_watch_on_another_server_sees_every_event_or_compacted,
            lease_expiry_deletes_keys_with_watch_events,
            lease_keep_alive_time_to_live_list_and_revoke,
            put_with_an_unknown_lease_fails,
            lease_expiry_follows_one_clock_for_every_server,
            status_reports_revisions_size_and_driver,
            data_survives_a_restart,
            sixty_four_concurrent_writers_never_fail,
            two_stores_on_one_backend_see_each_others_writes,
            randomized_concurrent_history_matches_a_sequential_model
        );
    };
    (@cases $harness:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let Some(harness) = $harness.await else { return };
                // A watchdog: a case that hangs fails under its own name instead of holding
                // the whole run (every case finishes in seconds).
                let ran = tokio::time::timeout(
                    std::time::Duration::from_secs(180),
                    $crate::conformance::$case(&*harness),
                )
                .await;
                assert!(
                    ran.is_ok(),
                    "conformance case {} did not finish within 180 s",
                    stringify!($case)
                );
                harness.cleanup().await;
            }
        )*
    };
}
