//! rudder-controllers: the controller-manager (Deployment, ReplicaSet, Job, garbage collector, …).
//!
//! Not built yet. Every controller will be a kube-runtime `Controller` against Rudder's own API,
//! with leader election through `coordination.k8s.io/v1` Leases. It never touches storage.
