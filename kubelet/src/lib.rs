//! rudder-kubelet: the node agent (`rudder agent`).
//!
//! Not built yet. It will register its Node, renew its Lease, and run pods through containerd's
//! CRI over a unix socket. It is a client of the apiserver and never touches storage.
