//! The Lease service: grant, revoke, the keep-alive stream, time-to-live and the lease list,
//! with etcd's answers for unknown leases (keep-alive TTL 0, time-to-live TTL -1).

use std::pin::Pin;

use etcd_client::proto::{
    PbLeaseGrantRequest, PbLeaseGrantResponse, PbLeaseKeepAliveRequest, PbLeaseKeepAliveResponse,
    PbLeaseLeasesRequest, PbLeaseLeasesResponse, PbLeaseRevokeRequest, PbLeaseRevokeResponse,
    PbLeaseService, PbLeaseStatus, PbLeaseTimeToLiveRequest, PbLeaseTimeToLiveResponse,
};
use futures::Stream;
use rudder_storage::Error;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::status::from_storage;
use crate::Gateway;

/// etcd's largest lease TTL (`MaxLeaseTTL`, 9 000 000 000 seconds).
const MAX_LEASE_TTL: i64 = 9_000_000_000;

#[tonic::async_trait]
impl PbLeaseService for Gateway {
    async fn lease_grant(
        &self,
        request: Request<PbLeaseGrantRequest>,
    ) -> Result<Response<PbLeaseGrantResponse>, Status> {
        let request = request.into_inner();
        if request.ttl > MAX_LEASE_TTL {
            return Err(Status::out_of_range("etcdserver: too large lease TTL"));
        }
        let lease = self
            .store
            .lease_grant(request.ttl.max(1), request.id)
            .await
            .map_err(from_storage)?;
        let revision = self.current_revision().await?;
        Ok(Response::new(PbLeaseGrantResponse {
            header: self.header(revision),
            id: lease.id,
            ttl: lease.ttl,
            error: String::new(),
        }))
    }

    async fn lease_revoke(
        &self,
        request: Request<PbLeaseRevokeRequest>,
    ) -> Result<Response<PbLeaseRevokeResponse>, Status> {
        self.store
            .lease_revoke(request.into_inner().id)
            .await
            .map_err(from_storage)?;
        let revision = self.current_revision().await?;
        Ok(Response::new(PbLeaseRevokeResponse {
            header: self.header(revision),
        }))
    }

    type LeaseKeepAliveStream =
        Pin<Box<dyn Stream<Item = Result<PbLeaseKeepAliveResponse, Status>> + Send>>;

    async fn lease_keep_alive(
        &self,
        request: Request<Streaming<PbLeaseKeepAliveRequest>>,
    ) -> Result<Response<Self::LeaseKeepAliveStream>, Status> {
        let mut inbound = request.into_inner();
        let (sender, receiver) = tokio::sync::mpsc::channel(16);
        let gateway = self.clone();
        tokio::spawn(async move {
            while let Ok(Some(keep_alive)) = inbound.message().await {
                let id = keep_alive.id;
                let answer = match gateway.store.lease_keep_alive(id).await {
                    Ok(ttl) => Ok(ttl),
                    Err(Error::LeaseNotFound(_)) => Ok(0),
                    Err(error) => Err(from_storage(error)),
                };
                let response = match answer {
                    Ok(ttl) => match gateway.current_revision().await {
                        Ok(revision) => Ok(PbLeaseKeepAliveResponse {
                            header: gateway.header(revision),
                            id,
                            ttl,
                        }),
                        Err(status) => Err(status),
                    },
                    Err(status) => Err(status),
                };
                let failed = response.is_err();
                if sender.send(response).await.is_err() || failed {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }

    async fn lease_time_to_live(
        &self,
        request: Request<PbLeaseTimeToLiveRequest>,
    ) -> Result<Response<PbLeaseTimeToLiveResponse>, Status> {
        let request = request.into_inner();
        let revision = self.current_revision().await?;
        let response = match self
            .store
            .lease_time_to_live(request.id, request.keys)
            .await
        {
            Ok(info) => PbLeaseTimeToLiveResponse {
                header: self.header(revision),
                id: request.id,
                ttl: info.ttl,
                granted_ttl: info.granted_ttl,
                keys: info.keys,
            },
            Err(Error::LeaseNotFound(_)) => PbLeaseTimeToLiveResponse {
                header: self.header(revision),
                id: request.id,
                ttl: -1,
                granted_ttl: 0,
                keys: Vec::new(),
            },
            Err(error) => return Err(from_storage(error)),
        };
        Ok(Response::new(response))
    }

    async fn lease_leases(
        &self,
        _: Request<PbLeaseLeasesRequest>,
    ) -> Result<Response<PbLeaseLeasesResponse>, Status> {
        let ids = self.store.lease_list().await.map_err(from_storage)?;
        let revision = self.current_revision().await?;
        Ok(Response::new(PbLeaseLeasesResponse {
            header: self.header(revision),
            leases: ids.into_iter().map(|id| PbLeaseStatus { id }).collect(),
        }))
    }
}
