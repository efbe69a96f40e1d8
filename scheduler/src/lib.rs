//! rudder-scheduler: assigns pods to nodes.
//!
//! Not built yet. It will be a client of the apiserver through kube-rs: an
//! active/backoff/unschedulable queue, a node cache with assumed pods, filter and score plugins,
//! and binding through `pods/binding`. It never touches storage.
