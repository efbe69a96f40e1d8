//! rudder-runtime: what every component that is a client of the API shares — the
//! controller-manager, the scheduler and (later) the kubelet.
//!
//! [`informers`] keeps one watch per resource type for all of a process's loops, [`leader`]
//! holds a `coordination.k8s.io/v1` Lease so that of several processes exactly one works, and
//! [`events`] records `events.k8s.io/v1` Events, and [`metrics_server`] serves a process's
//! metrics. Nothing here knows the apiserver or storage.

pub mod events;
pub mod informers;
pub mod leader;
pub mod metrics_server;
