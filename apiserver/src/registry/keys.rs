//! Storage keys as upstream lays them out: `<prefix>/<namespace>/<name>` for namespaced
//! objects, `<prefix>/<name>` for cluster-scoped ones.

use crate::catalog::ResourceInfo;

/// The key of one object.
pub fn object_key(info: &ResourceInfo, namespace: Option<&str>, name: &str) -> Vec<u8> {
    match namespace.filter(|_| info.namespaced) {
        Some(namespace) => format!("{}/{namespace}/{name}", info.storage_prefix),
        None => format!("{}/{name}", info.storage_prefix),
    }
    .into_bytes()
}

/// The key prefix of a collection: one namespace's objects, or all of them.
pub fn collection_prefix(info: &ResourceInfo, namespace: Option<&str>) -> Vec<u8> {
    match namespace.filter(|_| info.namespaced) {
        Some(namespace) => format!("{}/{namespace}/", info.storage_prefix),
        None => format!("{}/", info.storage_prefix),
    }
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    #[test]
    fn keys_follow_upstreams_layout() {
        let pods = catalog::find("", "v1", "pods").expect("pods");
        assert_eq!(
            object_key(pods, Some("ns"), "p"),
            b"/registry/pods/ns/p".to_vec()
        );
        assert_eq!(collection_prefix(pods, None), b"/registry/pods/".to_vec());
        let nodes = catalog::find("", "v1", "nodes").expect("nodes");
        assert_eq!(
            object_key(nodes, None, "n1"),
            b"/registry/minions/n1".to_vec()
        );
    }
}
