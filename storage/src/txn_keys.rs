//! etcd's rule that a transaction writes each key at most once: checked across every nesting
//! level and both branches of every transaction, before anything runs, so every driver refuses
//! the same transactions etcd refuses ("duplicate key given in txn request").
//!
//! Within one branch, a key may not be put twice, nor put and deleted. A nested transaction's
//! puts and deletes count as its parent branch's, with one allowance: a key put in both the
//! success and the failure branch of one nested transaction is fine, since only one runs.

use crate::error::{Error, Result};
use crate::types::{KeyRange, TxnOp, TxnRequest};

/// What a branch writes, nested transactions included.
#[derive(Default)]
struct Writes<'r> {
    puts: Vec<&'r [u8]>,
    deletes: Vec<&'r KeyRange>,
}

impl Writes<'_> {
    fn deletes_cover(&self, key: &[u8]) -> bool {
        self.deletes.iter().any(|range| range.contains(key))
    }
}

fn duplicate() -> Error {
    Error::InvalidArgument("duplicate key given in txn request".into())
}

/// Refuses a transaction that would write one key twice in any branch that could run.
pub fn check_duplicate_keys(request: &TxnRequest) -> Result<()> {
    branch_writes(&request.success)?;
    branch_writes(&request.failure)?;
    Ok(())
}

fn branch_writes(ops: &[TxnOp]) -> Result<Writes<'_>> {
    let mut writes = Writes::default();
    // This level's deletes first: a nested put inside one of them is a duplicate.
    for op in ops {
        if let TxnOp::DeleteRange(delete) = op {
            writes.deletes.push(&delete.range);
        }
    }
    for op in ops {
        let TxnOp::Txn(nested) = op else { continue };
        let then = branch_writes(&nested.success)?;
        let otherwise = branch_writes(&nested.failure)?;
        for key in &then.puts {
            if writes.puts.contains(key) || writes.deletes_cover(key) {
                return Err(duplicate());
            }
            writes.puts.push(key);
        }
        for key in &otherwise.puts {
            let in_this_nested = then.puts.contains(key);
            if (writes.puts.contains(key) && !in_this_nested) || writes.deletes_cover(key) {
                return Err(duplicate());
            }
            if !in_this_nested {
                writes.puts.push(key);
            }
        }
        writes.deletes.extend(then.deletes);
        writes.deletes.extend(otherwise.deletes);
    }
    for op in ops {
        let TxnOp::Put(put) = op else { continue };
        if writes.puts.contains(&put.key.as_slice()) || writes.deletes_cover(&put.key) {
            return Err(duplicate());
        }
        writes.puts.push(&put.key);
    }
    Ok(writes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{DeleteRangeRequest, PutRequest};

    fn put(key: &str) -> TxnOp {
        TxnOp::Put(PutRequest::new(key, "v"))
    }
    fn delete(range: KeyRange) -> TxnOp {
        TxnOp::DeleteRange(DeleteRangeRequest {
            range,
            prev_kv: false,
        })
    }
    fn nested(success: Vec<TxnOp>, failure: Vec<TxnOp>) -> TxnOp {
        TxnOp::Txn(TxnRequest {
            compare: vec![],
            success,
            failure,
        })
    }
    fn check(success: Vec<TxnOp>) -> Result<()> {
        check_duplicate_keys(&TxnRequest {
            compare: vec![],
            success,
            failure: vec![],
        })
    }

    #[test]
    fn one_key_written_twice_at_any_depth_is_refused() {
        assert!(check(vec![put("a"), put("a")]).is_err());
        assert!(check(vec![put("a"), delete(KeyRange::key("a"))]).is_err());
        assert!(check(vec![put("a"), nested(vec![put("a")], vec![])]).is_err());
        assert!(check(vec![
            delete(KeyRange::prefix("")),
            nested(vec![put("a")], vec![])
        ])
        .is_err());
        assert!(check(vec![
            nested(vec![delete(KeyRange::key("a"))], vec![]),
            put("a")
        ])
        .is_err());
        assert!(check(vec![
            nested(vec![put("a")], vec![]),
            nested(vec![], vec![put("a")])
        ])
        .is_err());
        assert!(check(vec![
            put("a"),
            nested(vec![nested(vec![put("a")], vec![])], vec![])
        ])
        .is_err());
    }

    #[test]
    fn what_etcd_allows_passes() {
        assert!(check(vec![put("a"), put("b"), delete(KeyRange::key("c"))]).is_ok());
        assert!(check(vec![delete(KeyRange::key("a")), delete(KeyRange::key("a"))]).is_ok());
        assert!(check(vec![nested(vec![put("a")], vec![put("a")])]).is_ok());
        assert!(check(vec![put("a"), nested(vec![put("b")], vec![put("c")])]).is_ok());
    }
}
