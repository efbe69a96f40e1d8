//! `rudder storage check`: open a store (applying migrations) and print its status.

use anyhow::Result;

/// Opens `url`, prints the store's status and closes it.
pub async fn run(url: &str) -> Result<()> {
    let store = rudder_storage::open(url).await?;
    let status = store.status().await;
    store.close().await;
    let status = status?;
    println!("driver:           {}", status.driver);
    println!("server:           {}", status.server_version);
    println!("revision:         {}", status.revision);
    println!("compact revision: {}", status.compact_revision);
    println!("database size:    {} bytes", status.db_size_bytes);
    println!("status:           ok");
    Ok(())
}
