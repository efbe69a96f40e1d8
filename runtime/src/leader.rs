//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's rules and timings, so
//! that of several controller-managers on one cluster exactly one works at a time.
//!
//! A candidate tries every `retry_period` to take the Lease: it may when nobody holds it, when
//! it holds it already, or when the holder has not renewed it for `lease_duration` — measured on
//! the candidate's own clock from when it last saw the record change, never from the times
//! written in it, so clock skew between servers does not matter. Every write is a
//! compare-and-swap on the Lease's resourceVersion. The leader renews every `retry_period`; if
//! it has not managed to for `renew_deadline`, it stops working before anyone else may take
//! over (`renew_deadline` < `lease_duration`).
//!
//! ```text
//!   Candidate ──acquired──▶ Leading ──renewal failing for renew_deadline──▶ Candidate
//!       ▲                      │ (work is cancelled first)
//!       └──── shutdown ────────┴──▶ Stopped (the Lease is released: another takes over at once)
//! ```

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// upstream's timings (kube-controller-manager and kube-scheduler defaults).
#[derive(Clone, Debug)]
pub struct Timings {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Which Lease to hold, as whom.
#[derive(Clone, Debug)]
pub struct Election {
    pub namespace: String,
    pub name: String,
    /// This candidate's identity (upstream: hostname plus a unique suffix).
    pub identity: String,
    pub timings: Timings,
}

/// Where a candidate stands; see the module's diagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Trying to take the Lease.
    Candidate,
    /// Holding it: the work runs.
    Leading,
    /// Shut down.
    Stopped,
}

/// The last Lease record seen, and when (on this candidate's clock) it last changed.
#[derive(Clone, Debug)]
struct Observed {
    holder: Option<String>,
    renew_time: Option<MicroTime>,
    at: Instant,
}

/// What to do about the Lease now.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    /// Another candidate holds a live lease.
    Wait,
    /// Write ourselves in as holder (`transition`: the holder changes).
    Take { transition: bool },
}

/// The rules: take a lease that is free, ours, or not renewed for a whole lease duration.
fn decide(identity: &str, observed: &Observed, lease_duration: Duration, now: Instant) -> Decision {
    match observed.holder.as_deref() {
        None | Some("") => Decision::Take { transition: true },
        Some(holder) if holder == identity => Decision::Take { transition: false },
        Some(_) if now >= observed.at + lease_duration => Decision::Take { transition: true },
        Some(_) => Decision::Wait,
    }
}

/// Runs elections on `api` for `election`.
pub struct Elector {
    api: Api<Lease>,
    election: Election,
    observed: Option<Observed>,
}

impl Elector {
    pub fn new(client: kube::Client, election: Election) -> Self {
        let api = Api::namespaced(client, &election.namespace);
        Self {
            api,
            election,
            observed: None,
        }
    }

    /// Runs `work` whenever this candidate leads, until `shutdown`. `work` is given a token
    /// that is cancelled when leadership is lost (or on shutdown); it must return soon after.
    pub async fn run<F, Fut>(mut self, shutdown: CancellationToken, mut work: F)
    where
        F: FnMut(CancellationToken) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let retry = self.election.timings.retry_period;
        loop {
            // Candidate: try until the lease is ours.
            loop {
                if shutdown.is_cancelled() {
                    return;
                }
                match self.try_acquire_or_renew().await {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(error) => {
                        tracing::debug!(%error, lease = %self.election.name, "taking the lease failed")
                    }
                }
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(retry) => {}
                }
            }
            tracing::info!(lease = %self.election.name, identity = %self.election.identity, "became the leader");
            let leading = shutdown.child_token();
            let task = tokio::spawn(work(leading.clone()));
            let mut renewed = Instant::now();
            let lost = loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break false,
                    _ = tokio::time::sleep(retry) => {}
                }
                match self.try_acquire_or_renew().await {
                    Ok(true) => renewed = Instant::now(),
                    Ok(false) => break true,
                    Err(error) => {
                        tracing::warn!(%error, lease = %self.election.name, "renewing the lease failed")
                    }
                }
                if renewed.elapsed() >= self.election.timings.renew_deadline {
                    break true;
                }
            };
            leading.cancel();
            let _ = task.await;
            if lost {
                tracing::warn!(lease = %self.election.name, "lost the lease; stopped working and standing again");
                continue;
            }
            self.release().await;
            return;
        }
    }

    /// One attempt: `Ok(true)` when this candidate holds the lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> kube::Result<bool> {
        let now = Instant::now();
        let current = self.api.get_opt(&self.election.name).await?;
        let Some(mut lease) = current else {
            let lease = self.record(None, true);
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(&created, now);
                    Ok(true)
                }
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(error) => Err(error),
            };
        };
        self.observe(&lease, now);
        let Some(observed) = self.observed.clone() else {
            return Ok(false);
        };
        let Decision::Take { transition } = decide(
            &self.election.identity,
            &observed,
            self.election.timings.lease_duration,
            now,
        ) else {
            return Ok(false);
        };
        let previous = lease.spec.take();
        lease.spec = self.record(previous.as_ref(), transition).spec;
        match self
            .api
            .replace(&self.election.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.observe(&written, now);
                Ok(true)
            }
            // Someone else wrote first: decide again next time.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Remembers the record; its observation time moves only when holder or renewal changed.
    fn observe(&mut self, lease: &Lease, now: Instant) {
        let spec = lease.spec.as_ref();
        let holder = spec.and_then(|s| s.holder_identity.clone());
        let renew_time = spec.and_then(|s| s.renew_time.clone());
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|seen| seen.holder != holder || seen.renew_time != renew_time);
        if changed {
            self.observed = Some(Observed {
                holder,
                renew_time,
                at: now,
            });
        }
    }

    /// The Lease with this candidate as holder, renewed now.
    fn record(&self, previous: Option<&LeaseSpec>, transition: bool) -> Lease {
        let now = MicroTime(Timestamp::now());
        let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
        let acquired = match previous {
            Some(previous) if !transition => previous.acquire_time.clone(),
            _ => Some(now.clone()),
        };
        Lease {
            metadata: ObjectMeta {
                name: Some(self.election.name.clone()),
                namespace: Some(self.election.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.election.identity.clone()),
                lease_duration_seconds: Some(
                    i32::try_from(self.election.timings.lease_duration.as_secs()).unwrap_or(15),
                ),
                acquire_time: acquired,
                renew_time: Some(now),
                lease_transitions: Some(if transition && previous.is_some() {
                    transitions + 1
                } else {
                    transitions
                }),
                ..LeaseSpec::default()
            }),
        }
    }

    /// Gives the lease up on a clean shutdown, so another candidate need not wait it out.
    async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.election.name).await else {
            return;
        };
        let ours = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(self.election.identity.as_str());
        if !ours {
            return;
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
        }
        if let Err(error) = self
            .api
            .replace(&self.election.name, &PostParams::default(), &lease)
            .await
        {
            tracing::debug!(%error, "releasing the lease failed; it will expire");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(holder: Option<&str>, at: Instant) -> Observed {
        Observed {
            holder: holder.map(str::to_string),
            renew_time: None,
            at,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_is_taken_when_free_ours_or_not_renewed_for_a_lease_duration() {
        let duration = Duration::from_secs(15);
        let seen = Instant::now();
        assert_eq!(
            decide("me", &observed(None, seen), duration, seen),
            Decision::Take { transition: true }
        );
        assert_eq!(
            decide("me", &observed(Some("me"), seen), duration, seen),
            Decision::Take { transition: false }
        );
        assert_eq!(
            decide("me", &observed(Some("other"), seen), duration, seen),
            Decision::Wait
        );
        tokio::time::advance(Duration::from_secs(14)).await;
        assert_eq!(
            decide(
                "me",
                &observed(Some("other"), seen),
                duration,
                Instant::now()
            ),
            Decision::Wait,
            "14 s after the record last changed, the holder still has it"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            decide(
                "me",
                &observed(Some("other"), seen),
                duration,
                Instant::now()
            ),
            Decision::Take { transition: true }
        );
    }
}
