//! One reflector on Services and one on EndpointSlices for the proxy and the DNS server
//! alike, with a generation counter that moves on every change so each can rebuild its view
//! when it is ready to (coalescing a burst of events into one rebuild).

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use tokio::sync::watch as channel;
use tokio_util::sync::CancellationToken;

/// The watched Services and EndpointSlices.
#[derive(Clone)]
pub struct Watched {
    pub services: Store<Service>,
    pub slices: Store<EndpointSlice>,
    /// Moves on every event once both stores have listed.
    pub changes: channel::Receiver<u64>,
    /// Turns true once both stores hold their first full list. (A store's own
    /// `wait_until_ready` wakes only one of several waiters, so they wait on this instead.)
    pub listed: channel::Receiver<bool>,
}

impl Watched {
    /// A view of two stores whose writers are fed elsewhere (tests feed them by hand).
    pub fn new(
        services: Store<Service>,
        slices: Store<EndpointSlice>,
        changes: channel::Receiver<u64>,
    ) -> Self {
        Self {
            listed: listed(&services, &slices),
            services,
            slices,
            changes,
        }
    }

    /// Waits until both stores hold their first full list.
    pub async fn ready(&self) {
        let mut listed = self.listed.clone();
        let _ = listed.wait_for(|listed| *listed).await;
    }
}

/// Starts the two reflectors; they stop with `shutdown`.
pub fn watch(client: Client, shutdown: CancellationToken) -> Watched {
    let (tx, rx) = channel::channel(0u64);
    let services = reflect::<Service>(Api::all(client.clone()), tx.clone(), shutdown.clone());
    let slices = reflect::<EndpointSlice>(Api::all(client), tx, shutdown);
    Watched::new(services, slices, rx)
}

/// A flag raised once both stores have listed, by the one task that waits for them.
fn listed(services: &Store<Service>, slices: &Store<EndpointSlice>) -> channel::Receiver<bool> {
    let (tx, rx) = channel::channel(false);
    let (services, slices) = (services.clone(), slices.clone());
    tokio::spawn(async move {
        if services.wait_until_ready().await.is_ok() && slices.wait_until_ready().await.is_ok() {
            let _ = tx.send(true);
        }
    });
    rx
}

fn reflect<K>(api: Api<K>, changes: channel::Sender<u64>, shutdown: CancellationToken) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer);
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                event = stream.next() => match event {
                    Some(Ok(_)) => {
                        changes.send_modify(|generation| *generation += 1);
                    }
                    Some(Err(error)) => {
                        tracing::debug!(%error, "service networking watch");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    None => return,
                },
            }
        }
    });
    reader
}

#[cfg(test)]
mod tests {
    use kube::runtime::watcher::Event;

    use super::*;

    #[tokio::test]
    async fn every_waiter_learns_that_the_stores_listed() {
        let (services, mut services_writer) = reflector::store::<Service>();
        let (slices, mut slices_writer) = reflector::store::<EndpointSlice>();
        let (_tx, rx) = channel::channel(0u64);
        let watched = Watched::new(services, slices, rx);
        // The proxy and the DNS server wait at the same time.
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let watched = watched.clone();
                tokio::spawn(async move { watched.ready().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        services_writer.apply_watcher_event(&Event::Init);
        services_writer.apply_watcher_event(&Event::InitDone);
        slices_writer.apply_watcher_event(&Event::Init);
        slices_writer.apply_watcher_event(&Event::InitDone);
        for waiter in waiters {
            tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("every waiter is woken")
                .expect("the waiter's task");
        }
    }
}
