//! `rudder storage check-history`: records concurrent histories (get, put, compare-and-swap,
//! delete, list, and a watch) against a store and checks them for linearizability and the
//! watch guarantees (`docs/linearizability.md`). It writes only under a prefix of its own,
//! which it deletes afterwards, so it can run against a store in use.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use rudder_storage::linearizability::{check, record, Workload};
use rudder_storage::{DeleteRangeRequest, KeyRange, Storage, TxnOp, TxnRequest};

#[derive(clap::Args)]
pub struct CheckHistoryArgs {
    /// The store: sqlite://PATH, postgres://…, mysql://…, spanner://… or etcd://HOST:PORT (Rudder's etcd
    /// gateway included).
    #[arg(long, env = "RUDDER_STORAGE")]
    storage: String,
    /// Concurrent clients.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Operations per client and round.
    #[arg(long, default_value_t = 200)]
    operations: usize,
    /// Keys the clients share (fewer keys: more contention).
    #[arg(long, default_value_t = 4)]
    keys: usize,
    /// Histories to record and check, one after another.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Open the store twice and split the clients between the two, as two servers would.
    #[arg(long)]
    two_servers: bool,
}

pub async fn run(args: CheckHistoryArgs) -> Result<()> {
    let mut stores: Vec<Arc<dyn Storage>> = vec![rudder_storage::open(&args.storage).await?];
    if args.two_servers {
        stores.push(rudder_storage::open(&args.storage).await?);
    }
    let result = rounds(&stores, &args).await;
    for store in stores {
        store.close().await;
    }
    let anomalies = result?;
    if anomalies > 0 {
        bail!("{anomalies} anomalies or undecided keys: the history is not shown linearizable");
    }
    println!("linearizable: every round");
    Ok(())
}

async fn rounds(stores: &[Arc<dyn Storage>], args: &CheckHistoryArgs) -> Result<usize> {
    let mut anomalies = 0;
    for round in 1..=args.rounds {
        let prefix = format!("/rudder-check-history/{:016x}/", rand::random::<u64>());
        let mut workload = Workload::new(prefix.as_bytes(), args.clients, args.operations);
        workload.keys = args.keys.max(1);
        let started = Instant::now();
        let history = record(stores, &workload).await;
        let recorded = started.elapsed();
        if let Some(store) = stores.first() {
            store
                .txn(TxnRequest {
                    success: vec![TxnOp::DeleteRange(DeleteRangeRequest {
                        range: KeyRange::prefix(prefix.as_bytes()),
                        prev_kv: false,
                    })],
                    ..TxnRequest::default()
                })
                .await?;
        }
        let history = history?;
        let started = Instant::now();
        let report = check(&history);
        print!(
            "round {round} (seed {}): recorded in {:.2} s, checked in {:.2} s: {report}",
            workload.seed,
            recorded.as_secs_f64(),
            started.elapsed().as_secs_f64(),
        );
        anomalies += report.anomalies.len() + report.inconclusive.len();
    }
    Ok(anomalies)
}
