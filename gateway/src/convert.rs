//! Conversions between etcd's protobuf messages and the storage interface's types.

use etcd_client::proto::{
    PbCompare, PbDeleteRequest, PbDeleteResponse, PbEvent, PbKeyValue, PbPutRequest, PbPutResponse,
    PbRangeRequest, PbRangeResponse, PbResponseOp, PbTargetUnion, PbTxnOpRequest, PbTxnOpResponse,
    PbTxnRequest, PbTxnResponse,
};
use rudder_storage as storage;
use tonic::Status;

use crate::status::{EMPTY_KEY, LEASE_PROVIDED, TOO_MANY_OPS, VALUE_PROVIDED};

/// etcd's `--max-txn-ops` default.
pub const MAX_TXN_OPS: usize = 128;

pub fn kv(kv: &storage::KeyValue) -> PbKeyValue {
    PbKeyValue {
        key: kv.key.clone(),
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        value: kv.value.clone(),
        lease: kv.lease,
    }
}

pub fn event(event: &storage::Event) -> PbEvent {
    PbEvent {
        r#type: match event.kind {
            storage::EventKind::Put => 0,
            storage::EventKind::Delete => 1,
        },
        kv: Some(kv(&event.kv)),
        prev_kv: event.prev_kv.as_ref().map(kv),
    }
}

/// A watch's key range from etcd's `(key, range_end)`: as etcd's watch server, an empty key
/// means `"\0"` (the smallest key), and a range end of `"\0"` every key from `key` on. A key at
/// or past its range end is refused (`Err` with etcd's reason) when the watch is created.
pub fn watch_range(key: &[u8], range_end: &[u8]) -> Result<storage::KeyRange, &'static str> {
    let start = if key.is_empty() {
        vec![0]
    } else {
        key.to_vec()
    };
    if range_end.is_empty() {
        return Ok(storage::KeyRange::key(start));
    }
    if range_end == [0] {
        return Ok(storage::KeyRange::from_key(start));
    }
    if start.as_slice() >= range_end {
        return Err("mvcc: watcher range is empty");
    }
    Ok(storage::KeyRange::between(start, range_end.to_vec()))
}

/// A key range from etcd's `(key, range_end)`.
pub fn key_range(key: &[u8], range_end: &[u8]) -> Result<storage::KeyRange, Status> {
    if key.is_empty() {
        return Err(Status::invalid_argument(EMPTY_KEY));
    }
    Ok(storage::KeyRange::between(key.to_vec(), range_end.to_vec()))
}

/// The part of a range request the storage interface serves; sorting, revision filters and
/// the final limit are applied afterwards by [`crate::kv`], in etcd's order: with a sort order
/// or a revision filter everything is read, then sorted and cut; with a sort target other
/// than the key (and no order) `limit + 1` keys are read in key order, then sorted by the
/// target, then cut; otherwise `limit` keys are read, which is the answer.
pub fn range_request(request: &PbRangeRequest) -> Result<storage::RangeRequest, Status> {
    let read_everything = request.sort_order != 0
        || request.min_mod_revision != 0
        || request.max_mod_revision != 0
        || request.min_create_revision != 0
        || request.max_create_revision != 0;
    Ok(storage::RangeRequest {
        range: key_range(&request.key, &request.range_end)?,
        revision: request.revision,
        // In key order the store's page is the answer, and it tells whether there are more
        // keys itself. (Asking it for one key more than the client did cost a count of the
        // rest of the range on every page of a list: the store keeps the count for the page
        // after the one it returned, and the client's next page started one key earlier.)
        limit: if read_everything || request.limit <= 0 {
            0
        } else if request.sort_target != 0 {
            request.limit.saturating_add(1)
        } else {
            request.limit
        },
        keys_only: request.keys_only,
        count_only: request.count_only,
    })
}

pub fn put_request(request: &PbPutRequest) -> Result<storage::PutRequest, Status> {
    if request.key.is_empty() {
        return Err(Status::invalid_argument(EMPTY_KEY));
    }
    // As etcd: a flag to keep the current value (or lease) contradicts giving one.
    if request.ignore_value && !request.value.is_empty() {
        return Err(Status::invalid_argument(VALUE_PROVIDED));
    }
    if request.ignore_lease && request.lease != 0 {
        return Err(Status::invalid_argument(LEASE_PROVIDED));
    }
    Ok(storage::PutRequest {
        key: request.key.clone(),
        value: request.value.clone(),
        lease: request.lease,
        prev_kv: request.prev_kv,
        ignore_value: request.ignore_value,
        ignore_lease: request.ignore_lease,
    })
}

pub fn delete_request(request: &PbDeleteRequest) -> Result<storage::DeleteRangeRequest, Status> {
    Ok(storage::DeleteRangeRequest {
        range: key_range(&request.key, &request.range_end)?,
        prev_kv: request.prev_kv,
    })
}

fn compare(compare: &PbCompare) -> Result<storage::Compare, Status> {
    let op = match compare.result {
        0 => storage::CompareOp::Equal,
        1 => storage::CompareOp::Greater,
        2 => storage::CompareOp::Less,
        3 => storage::CompareOp::NotEqual,
        other => {
            return Err(Status::invalid_argument(format!(
                "etcdserver: unknown compare result {other}"
            )))
        }
    };
    let target = match (compare.target, &compare.target_union) {
        (0, Some(PbTargetUnion::Version(v))) => storage::CompareTarget::Version(*v),
        (1, Some(PbTargetUnion::CreateRevision(r))) => storage::CompareTarget::CreateRevision(*r),
        (2, Some(PbTargetUnion::ModRevision(r))) => storage::CompareTarget::ModRevision(*r),
        (3, Some(PbTargetUnion::Value(v))) => storage::CompareTarget::Value(v.clone()),
        (4, Some(PbTargetUnion::Lease(l))) => storage::CompareTarget::Lease(*l),
        // proto3 leaves a zero target value unset.
        (0, None) => storage::CompareTarget::Version(0),
        (1, None) => storage::CompareTarget::CreateRevision(0),
        (2, None) => storage::CompareTarget::ModRevision(0),
        (3, None) => storage::CompareTarget::Value(Vec::new()),
        (4, None) => storage::CompareTarget::Lease(0),
        (target, _) => {
            return Err(Status::invalid_argument(format!(
                "etcdserver: unknown compare target {target}"
            )))
        }
    };
    Ok(storage::Compare {
        range: key_range(&compare.key, &compare.range_end)?,
        op,
        target,
    })
}

fn count_ops(request: &PbTxnRequest) -> usize {
    request.success.len().max(request.failure.len())
}

/// A storage transaction from etcd's, nested transactions included.
pub fn txn_request(request: &PbTxnRequest) -> Result<storage::TxnRequest, Status> {
    if count_ops(request) > MAX_TXN_OPS || request.compare.len() > MAX_TXN_OPS {
        return Err(Status::invalid_argument(TOO_MANY_OPS));
    }
    let ops = |ops: &[etcd_client::proto::PbTxnRequestOp]| -> Result<Vec<storage::TxnOp>, Status> {
        ops.iter()
            .map(|op| match &op.request {
                Some(PbTxnOpRequest::RequestRange(range)) => {
                    Ok(storage::TxnOp::Range(range_request(range)?))
                }
                Some(PbTxnOpRequest::RequestPut(put)) => Ok(storage::TxnOp::Put(put_request(put)?)),
                Some(PbTxnOpRequest::RequestDeleteRange(delete)) => {
                    Ok(storage::TxnOp::DeleteRange(delete_request(delete)?))
                }
                Some(PbTxnOpRequest::RequestTxn(nested)) => {
                    Ok(storage::TxnOp::Txn(txn_request(nested)?))
                }
                None => Err(Status::invalid_argument(
                    "etcdserver: empty operation in txn request",
                )),
            })
            .collect()
    };
    Ok(storage::TxnRequest {
        compare: request
            .compare
            .iter()
            .map(compare)
            .collect::<Result<_, _>>()?,
        success: ops(&request.success)?,
        failure: ops(&request.failure)?,
    })
}

/// A header carrying only a revision, as etcd puts on the responses inside a transaction.
fn inner_header(revision: i64) -> Option<etcd_client::proto::PbResponseHeader> {
    Some(etcd_client::proto::PbResponseHeader {
        revision,
        ..Default::default()
    })
}

pub fn range_response(response: &storage::RangeResponse) -> PbRangeResponse {
    PbRangeResponse {
        header: inner_header(response.revision),
        kvs: response.kvs.iter().map(kv).collect(),
        more: response.more,
        count: response.count,
    }
}

/// etcd's transaction response. `header` is the outer response's; as in etcd, a write's response
/// carries only the transaction's `revision`, a read's the revision it read at, and a nested
/// transaction's header is empty.
pub fn txn_response(
    response: &storage::TxnResponse,
    request: &PbTxnRequest,
    header: Option<etcd_client::proto::PbResponseHeader>,
    revision: i64,
) -> PbTxnResponse {
    let branch = if response.succeeded {
        &request.success
    } else {
        &request.failure
    };
    let responses = response
        .responses
        .iter()
        .zip(branch)
        .map(|(op, requested)| PbResponseOp {
            response: Some(match (op, &requested.request) {
                (
                    storage::TxnOpResponse::Range(range),
                    Some(PbTxnOpRequest::RequestRange(asked)),
                ) => {
                    let mut finished = crate::kv::finish_range(range, asked);
                    // A read reports the revision it saw: the transaction's own only after a write.
                    finished.header = inner_header(range.revision);
                    PbTxnOpResponse::ResponseRange(finished)
                }
                (storage::TxnOpResponse::Range(range), _) => {
                    let mut converted = range_response(range);
                    converted.header = inner_header(range.revision);
                    PbTxnOpResponse::ResponseRange(converted)
                }
                (storage::TxnOpResponse::Put(put), _) => {
                    PbTxnOpResponse::ResponsePut(PbPutResponse {
                        header: inner_header(revision),
                        prev_kv: put.prev_kv.as_ref().map(kv),
                    })
                }
                (storage::TxnOpResponse::DeleteRange(delete), _) => {
                    PbTxnOpResponse::ResponseDeleteRange(PbDeleteResponse {
                        header: inner_header(revision),
                        deleted: delete.deleted,
                        prev_kvs: delete.prev_kvs.iter().map(kv).collect(),
                    })
                }
                (storage::TxnOpResponse::Txn(nested), Some(PbTxnOpRequest::RequestTxn(asked))) => {
                    PbTxnOpResponse::ResponseTxn(txn_response(
                        nested,
                        asked,
                        inner_header(0),
                        revision,
                    ))
                }
                (storage::TxnOpResponse::Txn(nested), _) => PbTxnOpResponse::ResponseTxn(
                    txn_response(nested, &PbTxnRequest::default(), inner_header(0), revision),
                ),
            }),
        })
        .collect();
    PbTxnResponse {
        header,
        succeeded: response.succeeded,
        responses,
    }
}
