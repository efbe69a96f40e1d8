//! The KV service: Range (with sorting and revision filters done here, as etcd does them after
//! reading), Put, DeleteRange, Txn and Compact.

use etcd_client::proto::{
    PbCompactionRequest, PbCompactionResponse, PbDeleteRequest, PbDeleteResponse, PbKvService,
    PbPutRequest, PbPutResponse, PbRangeRequest, PbRangeResponse, PbRangeStreamResponse,
    PbTxnRequest, PbTxnResponse,
};
use prost::Message;
use rudder_storage as storage;
use tonic::{Request, Response, Status};

use crate::convert;
use crate::status::{from_storage, unsupported, TOO_LARGE};
use crate::{Gateway, MAX_GRPC_MESSAGE_BYTES, MAX_REQUEST_BYTES};

/// Applies etcd's post-read steps to a range result: revision filters, sorting, the limit.
pub(crate) fn finish_range(
    response: &storage::RangeResponse,
    request: &PbRangeRequest,
) -> PbRangeResponse {
    let mut kvs: Vec<&storage::KeyValue> = response.kvs.iter().collect();
    let keep = |kv: &&storage::KeyValue| {
        (request.min_mod_revision == 0 || kv.mod_revision >= request.min_mod_revision)
            && (request.max_mod_revision == 0 || kv.mod_revision <= request.max_mod_revision)
            && (request.min_create_revision == 0
                || kv.create_revision >= request.min_create_revision)
            && (request.max_create_revision == 0
                || kv.create_revision <= request.max_create_revision)
    };
    kvs.retain(keep);
    // Results come in key order; etcd sorts ascending by default only for another target.
    let order = if request.sort_order == 0 && request.sort_target != 0 {
        1
    } else {
        request.sort_order
    };
    if order != 0 {
        kvs.sort_by(|a, b| {
            let ordering = match request.sort_target {
                1 => a.version.cmp(&b.version),
                2 => a.create_revision.cmp(&b.create_revision),
                3 => a.mod_revision.cmp(&b.mod_revision),
                4 => a.value.cmp(&b.value),
                _ => a.key.cmp(&b.key),
            };
            if order == 2 {
                ordering.reverse()
            } else {
                ordering
            }
        });
    }
    // A read of everything (sorted or filtered here) holds more keys than the limit.
    let mut more = response.more;
    if request.limit > 0 && kvs.len() > request.limit as usize {
        kvs.truncate(request.limit as usize);
        more = true;
    }
    PbRangeResponse {
        header: None,
        kvs: kvs.into_iter().map(convert::kv).collect(),
        more,
        count: response.count,
    }
}

/// etcd's two size limits: past the gRPC limit (request limit + 512 KiB) the transport refuses
/// the message; past the request limit the server does.
fn check_size(message: &impl Message) -> Result<(), Status> {
    let size = message.encoded_len();
    if size > MAX_GRPC_MESSAGE_BYTES {
        return Err(Status::resource_exhausted(format!(
            "grpc: received message larger than max ({size} vs. {MAX_GRPC_MESSAGE_BYTES})"
        )));
    }
    if size > MAX_REQUEST_BYTES {
        return Err(Status::invalid_argument(TOO_LARGE));
    }
    Ok(())
}

#[tonic::async_trait]
impl PbKvService for Gateway {
    async fn range(
        &self,
        request: Request<PbRangeRequest>,
    ) -> Result<Response<PbRangeResponse>, Status> {
        let request = request.into_inner();
        let response = self
            .store
            .range(convert::range_request(&request)?)
            .await
            .map_err(from_storage)?;
        let mut answer = finish_range(&response, &request);
        answer.header = self.header(response.revision);
        Ok(Response::new(answer))
    }

    type RangeStreamStream = futures::stream::Empty<Result<PbRangeStreamResponse, Status>>;

    async fn range_stream(
        &self,
        _: Request<PbRangeRequest>,
    ) -> Result<Response<Self::RangeStreamStream>, Status> {
        // etcd < 3.7 has no RangeStream either; clients fall back to paginated Range.
        Err(unsupported("RangeStream"))
    }

    async fn put(&self, request: Request<PbPutRequest>) -> Result<Response<PbPutResponse>, Status> {
        let request = request.into_inner();
        check_size(&request)?;
        let txn = storage::TxnRequest {
            success: vec![storage::TxnOp::Put(convert::put_request(&request)?)],
            ..storage::TxnRequest::default()
        };
        let response = self.store.txn(txn).await.map_err(from_storage)?;
        let prev_kv = match response.responses.first() {
            Some(storage::TxnOpResponse::Put(put)) => put.prev_kv.as_ref().map(convert::kv),
            _ => None,
        };
        Ok(Response::new(PbPutResponse {
            header: self.header(response.revision),
            prev_kv,
        }))
    }

    async fn delete_range(
        &self,
        request: Request<PbDeleteRequest>,
    ) -> Result<Response<PbDeleteResponse>, Status> {
        let request = request.into_inner();
        let txn = storage::TxnRequest {
            success: vec![storage::TxnOp::DeleteRange(convert::delete_request(
                &request,
            )?)],
            ..storage::TxnRequest::default()
        };
        let response = self.store.txn(txn).await.map_err(from_storage)?;
        let (deleted, prev_kvs) = match response.responses.first() {
            Some(storage::TxnOpResponse::DeleteRange(delete)) => (
                delete.deleted,
                delete.prev_kvs.iter().map(convert::kv).collect(),
            ),
            _ => (0, Vec::new()),
        };
        Ok(Response::new(PbDeleteResponse {
            header: self.header(response.revision),
            deleted,
            prev_kvs,
        }))
    }

    async fn txn(&self, request: Request<PbTxnRequest>) -> Result<Response<PbTxnResponse>, Status> {
        let request = request.into_inner();
        check_size(&request)?;
        let response = self
            .store
            .txn(convert::txn_request(&request)?)
            .await
            .map_err(from_storage)?;
        let revision = response.revision;
        Ok(Response::new(convert::txn_response(
            &response,
            &request,
            self.header(revision),
            revision,
        )))
    }

    async fn compact(
        &self,
        request: Request<PbCompactionRequest>,
    ) -> Result<Response<PbCompactionResponse>, Status> {
        let request = request.into_inner();
        self.store
            .compact(request.revision)
            .await
            .map_err(from_storage)?;
        let revision = self.current_revision().await?;
        Ok(Response::new(PbCompactionResponse {
            header: self.header(revision),
        }))
    }
}
