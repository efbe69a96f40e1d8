//! Tokens whose signature has been checked. An ES256 verification costs more than the rest of
//! a typical request (a controller sends its token with each of thousands of requests), and a
//! valid signature stays valid, so each token's claims are kept once verified. Everything
//! that can change — expiry, the account, the pod or secret it is bound to — is still checked
//! on every request. Tokens are held by a salted SHA-256 digest, never as themselves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

/// Verified tokens kept at most; the memory is forgotten at once when full.
const CAPACITY: usize = 4096;

pub struct Verified<T> {
    salt: [u8; 16],
    tokens: Mutex<HashMap<[u8; 32], Arc<T>>>,
}

impl<T> Verified<T> {
    pub fn new() -> Self {
        Self {
            salt: *uuid::Uuid::new_v4().as_bytes(),
            tokens: Mutex::new(HashMap::new()),
        }
    }

    fn digest(&self, token: &str) -> [u8; 32] {
        let mut hash = Sha256::new();
        hash.update(self.salt);
        hash.update(token.as_bytes());
        hash.finalize().into()
    }

    /// The claims of `token` if its signature was verified before.
    pub fn get(&self, token: &str) -> Option<Arc<T>> {
        let digest = self.digest(token);
        self.lock().get(&digest).cloned()
    }

    /// Remembers that `token`'s signature holds, with its `claims`.
    pub fn insert(&self, token: &str, claims: T) -> Arc<T> {
        let digest = self.digest(token);
        let claims = Arc::new(claims);
        let mut tokens = self.lock();
        if tokens.len() >= CAPACITY {
            tokens.clear();
        }
        tokens.insert(digest, claims.clone());
        claims
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Arc<T>>> {
        self.tokens
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_remembered_by_digest_and_forgotten_when_full() {
        let verified = Verified::new();
        assert!(verified.get("a").is_none());
        verified.insert("a", 1);
        assert_eq!(verified.get("a").as_deref(), Some(&1));
        assert!(verified.get("b").is_none());
        for i in 0..CAPACITY {
            verified.insert(&format!("t{i}"), 2);
        }
        assert!(verified.lock().len() <= CAPACITY);
        // Two caches salt differently: the same token has different digests.
        assert_ne!(Verified::<u8>::new().digest("a"), verified.digest("a"));
    }
}
