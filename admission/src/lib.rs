//! rudder-admission: the admission chain (mutating, then validating) and its built-in plugins.
//!
//! Not built yet. Plugins are registered explicitly by the binary; the chain stops at the first
//! error. It knows Kubernetes objects (k8s-openapi types) but nothing of storage or HTTP.
