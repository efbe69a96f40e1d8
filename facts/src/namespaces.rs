//! The namespaces a cluster always has.

/// Namespaces every cluster has and that cannot be deleted (kube-apiserver's own list).
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Whether `namespace` is one of the [`SYSTEM_NAMESPACES`].
pub fn is_system_namespace(namespace: &str) -> bool {
    SYSTEM_NAMESPACES.contains(&namespace)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_four_system_namespaces_and_no_others() {
        assert!(super::is_system_namespace("kube-node-lease"));
        assert!(!super::is_system_namespace("kube-flannel"));
    }
}
