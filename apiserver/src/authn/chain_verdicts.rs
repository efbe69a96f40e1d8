//! What the authenticator concluded about a client certificate chain, remembered for the
//! chain's later requests. Checking that a chain is a proxy's or chains to the cluster CA
//! verifies its signatures (an ECDSA verification and an x509 parse, ~6% of the apiserver's
//! CPU when a scheduler binds a thousand pods a second); a client sends the same chain on
//! every request of its connections, so the verdict is kept, keyed by the chain's bytes, for
//! at most [`VERDICT_TTL`] and never past the leaf's `notAfter` (a certificate that expires
//! mid-connection stops authenticating, as when it is checked each time). The map is bounded:
//! when [`MAX_CHAINS`] different chains are remembered it is emptied and starts again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use rustls_pki_types::CertificateDer;

use super::UserInfo;

/// How long a verdict is trusted before the chain is verified again.
pub const VERDICT_TTL: Duration = Duration::from_secs(60);
/// How many chains are remembered at most.
pub const MAX_CHAINS: usize = 4096;

/// One chain's verdict.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// The chain is an allowed authenticating proxy's.
    pub proxy: bool,
    /// The user the chain names (`None`: none; `Err`: why it does not authenticate).
    pub user: Result<Option<UserInfo>, String>,
}

struct Remembered {
    verdict: Verdict,
    until: Instant,
}

/// The remembered verdicts (shared by clones of the authenticator).
#[derive(Default)]
pub struct ChainVerdicts {
    chains: Mutex<HashMap<Vec<CertificateDer<'static>>, Remembered>>,
}

impl ChainVerdicts {
    /// The verdict on `chain`: the remembered one while it holds, else `judge(chain)`, which
    /// is then remembered until the earlier of [`VERDICT_TTL`] and the leaf's expiry.
    pub fn get_or_judge(
        &self,
        chain: &[CertificateDer<'static>],
        judge: impl FnOnce(&[CertificateDer<'static>]) -> Verdict,
    ) -> Verdict {
        let now = Instant::now();
        if let Some(found) = self.lock().get(chain) {
            if now < found.until {
                return found.verdict.clone();
            }
        }
        let verdict = judge(chain);
        let until = now + VERDICT_TTL.min(time_left(chain));
        let mut chains = self.lock();
        if chains.len() >= MAX_CHAINS {
            chains.clear();
        }
        chains.insert(
            chain.to_vec(),
            Remembered {
                verdict: verdict.clone(),
                until,
            },
        );
        verdict
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<CertificateDer<'static>>, Remembered>> {
        self.chains
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl std::fmt::Debug for ChainVerdicts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainVerdicts")
            .field("chains", &self.lock().len())
            .finish()
    }
}

/// How long the leaf stays valid; zero when it cannot be parsed or has expired (then the
/// verdict is not reused).
fn time_left(chain: &[CertificateDer<'static>]) -> Duration {
    let Some(leaf) = chain.first() else {
        return Duration::ZERO;
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(leaf) else {
        return Duration::ZERO;
    };
    let not_after = cert.validity().not_after.timestamp();
    let Ok(now) = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH) else {
        return Duration::ZERO;
    };
    u64::try_from(not_after)
        .ok()
        .and_then(|end| end.checked_sub(now.as_secs()))
        .map_or(Duration::ZERO, Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, KeyPair};

    /// A self-signed leaf that expires `offset_secs` from now (negative: in the past).
    fn leaf(offset_secs: i64) -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["x".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let lifetime = now + offset_secs - params.not_before.unix_timestamp();
        params.not_after = params.not_before + Duration::from_secs(lifetime as u64);
        params.self_signed(&key).unwrap().der().clone()
    }

    fn verdict(name: &str) -> Verdict {
        Verdict {
            proxy: false,
            user: Ok(Some(UserInfo {
                name: name.into(),
                ..UserInfo::default()
            })),
        }
    }

    fn name(verdict: &Verdict) -> String {
        verdict.user.clone().unwrap().unwrap().name
    }

    #[test]
    fn a_chain_is_judged_once_while_it_holds() {
        let verdicts = ChainVerdicts::default();
        let chain = [leaf(86_400)];
        let mut judged = 0;
        for _ in 0..3 {
            let got = verdicts.get_or_judge(&chain, |_| {
                judged += 1;
                verdict("jane")
            });
            assert_eq!(name(&got), "jane");
        }
        assert_eq!(judged, 1);
        // Another chain has its own verdict.
        let other = [leaf(86_400)];
        let got = verdicts.get_or_judge(&other, |_| verdict("joe"));
        assert_eq!(name(&got), "joe");
    }

    #[test]
    fn an_expired_or_unparseable_leaf_is_judged_every_time() {
        let verdicts = ChainVerdicts::default();
        let expired = [leaf(-3_600)];
        let garbage = [CertificateDer::from(vec![1u8, 2, 3])];
        for chain in [&expired[..], &garbage[..]] {
            let mut judged = 0;
            for _ in 0..2 {
                verdicts.get_or_judge(chain, |_| {
                    judged += 1;
                    verdict("jane")
                });
            }
            assert_eq!(judged, 2);
        }
    }

    #[test]
    fn the_leafs_expiry_bounds_the_verdict() {
        let soon = [leaf(5)];
        assert!(time_left(&soon) <= Duration::from_secs(5));
        assert!(time_left(&soon) >= Duration::from_secs(3));
        let later = [leaf(86_400)];
        assert!(time_left(&later) > VERDICT_TTL);
    }

    #[test]
    fn the_map_stays_bounded() {
        let verdicts = ChainVerdicts::default();
        let chain = leaf(86_400);
        for i in 0..(MAX_CHAINS + 10) {
            // Distinct keys without generating thousands of certificates: an intermediate
            // that differs per chain.
            let key = [
                chain.clone(),
                CertificateDer::from(i.to_be_bytes().to_vec()),
            ];
            verdicts.get_or_judge(&key, |_| verdict("jane"));
        }
        assert!(verdicts.lock().len() <= MAX_CHAINS);
    }
}
