//! Maintenance (Status, Alarm, Snapshot) and Cluster (MemberList): the gateway presents itself
//! as a one-member cluster. Operations that only make sense for a raft member are refused
//! plainly. Snapshot streams a Rudder snapshot (`rudder_storage::copy::snapshot`, the file
//! `rudder storage snapshot save` writes), not a bbolt database: `etcdctl snapshot save` keeps
//! it, and `rudder storage snapshot restore` loads it into any driver.

use std::pin::Pin;

use etcd_client::proto::*;
use futures::Stream;
use tonic::{Request, Response, Status};

use rudder_storage::copy::snapshot;
use tokio::io::AsyncReadExt;

use crate::status::{from_storage, unsupported};
use crate::{Gateway, REPORTED_ETCD_VERSION};

/// Bytes per Snapshot message (etcd sends 32 KiB; larger chunks mean fewer messages).
const SNAPSHOT_CHUNK: usize = 1024 * 1024;

#[tonic::async_trait]
impl PbMaintenanceService for Gateway {
    async fn alarm(&self, _: Request<PbAlarmRequest>) -> Result<Response<PbAlarmResponse>, Status> {
        let revision = self.current_revision().await?;
        Ok(Response::new(PbAlarmResponse {
            header: self.header(revision),
            alarms: Vec::new(),
        }))
    }

    async fn status(
        &self,
        _: Request<PbStatusRequest>,
    ) -> Result<Response<PbStatusResponse>, Status> {
        let status = self.store.status().await.map_err(from_storage)?;
        let index = status.revision.max(0) as u64;
        Ok(Response::new(PbStatusResponse {
            header: self.header(status.revision),
            version: REPORTED_ETCD_VERSION.into(),
            db_size: status.db_size_bytes,
            leader: self.identity.member_id,
            raft_index: index,
            raft_term: 2,
            raft_applied_index: index,
            errors: Vec::new(),
            db_size_in_use: status.db_size_bytes,
            is_learner: false,
            storage_version: String::new(),
            db_size_quota: 0,
            downgrade_info: None,
        }))
    }

    async fn defragment(
        &self,
        _: Request<PbDefragmentRequest>,
    ) -> Result<Response<PbDefragmentResponse>, Status> {
        Err(unsupported("Defragment"))
    }

    async fn hash(&self, _: Request<PbHashRequest>) -> Result<Response<PbHashResponse>, Status> {
        Err(unsupported("Hash"))
    }

    async fn hash_kv(
        &self,
        _: Request<PbHashKvRequest>,
    ) -> Result<Response<PbHashKvResponse>, Status> {
        Err(unsupported("HashKV"))
    }

    type SnapshotStream = Pin<Box<dyn Stream<Item = Result<PbSnapshotResponse, Status>> + Send>>;

    async fn snapshot(
        &self,
        _: Request<PbSnapshotRequest>,
    ) -> Result<Response<Self::SnapshotStream>, Status> {
        let dir = tempfile::tempdir().map_err(|error| {
            Status::internal(format!("snapshot: a temporary directory: {error}"))
        })?;
        let path = dir.path().join("snapshot");
        let saved = snapshot::save(self.store.as_ref(), &path, true, &mut |_| {})
            .await
            .map_err(from_storage)?;
        let header = self.header(saved.header.plan.revision);
        let file = tokio::fs::File::open(&path)
            .await
            .map_err(|error| Status::internal(format!("snapshot: {error}")))?;
        let total = file
            .metadata()
            .await
            .map_err(|error| Status::internal(format!("snapshot: {error}")))?
            .len();
        let chunks = futures::stream::unfold(
            (file, total, header, Some(dir)),
            |(mut file, remaining, header, dir)| async move {
                if remaining == 0 {
                    // The temporary directory goes once the last chunk is out.
                    drop(dir);
                    return None;
                }
                let mut blob = vec![0u8; SNAPSHOT_CHUNK.min(remaining as usize)];
                if let Err(error) = file.read_exact(&mut blob).await {
                    let error = Status::internal(format!("snapshot: {error}"));
                    return Some((Err(error), (file, 0, header, dir)));
                }
                let remaining = remaining - blob.len() as u64;
                let response = PbSnapshotResponse {
                    header,
                    remaining_bytes: remaining,
                    blob,
                    version: REPORTED_ETCD_VERSION.into(),
                };
                Some((Ok(response), (file, remaining, header, dir)))
            },
        );
        Ok(Response::new(Box::pin(chunks)))
    }

    async fn move_leader(
        &self,
        _: Request<PbMoveLeaderRequest>,
    ) -> Result<Response<PbMoveLeaderResponse>, Status> {
        Err(unsupported("MoveLeader"))
    }

    async fn downgrade(
        &self,
        _: Request<PbDowngradeRequest>,
    ) -> Result<Response<PbDowngradeResponse>, Status> {
        Err(unsupported("Downgrade"))
    }
}

#[tonic::async_trait]
impl PbClusterService for Gateway {
    async fn member_add(
        &self,
        _: Request<PbMemberAddRequest>,
    ) -> Result<Response<PbMemberAddResponse>, Status> {
        Err(unsupported(
            "MemberAdd (run more Rudder processes on the same database instead)",
        ))
    }

    async fn member_remove(
        &self,
        _: Request<PbMemberRemoveRequest>,
    ) -> Result<Response<PbMemberRemoveResponse>, Status> {
        Err(unsupported("MemberRemove"))
    }

    async fn member_update(
        &self,
        _: Request<PbMemberUpdateRequest>,
    ) -> Result<Response<PbMemberUpdateResponse>, Status> {
        Err(unsupported("MemberUpdate"))
    }

    async fn member_list(
        &self,
        _: Request<PbMemberListRequest>,
    ) -> Result<Response<PbMemberListResponse>, Status> {
        let revision = self.current_revision().await?;
        Ok(Response::new(PbMemberListResponse {
            header: self.header(revision),
            members: vec![PbMember {
                id: self.identity.member_id,
                name: self.identity.name.clone(),
                peer_ur_ls: vec![self.identity.client_url.clone()],
                client_ur_ls: vec![self.identity.client_url.clone()],
                is_learner: false,
            }],
        }))
    }

    async fn member_promote(
        &self,
        _: Request<PbMemberPromoteRequest>,
    ) -> Result<Response<PbMemberPromoteResponse>, Status> {
        Err(unsupported("MemberPromote"))
    }
}
