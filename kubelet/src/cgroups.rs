//! Pod cgroups on cgroupfs (v1): containerd creates a pod's parent directory under every
//! hierarchy but never removes it, so the agent does once the pod's sandbox is gone.

const ROOT: &str = "/sys/fs/cgroup";

/// Removes the cgroup `parent` (e.g. `/rudder-kubepods/besteffort/pod<uid>`) from every
/// hierarchy where it exists and is empty. An empty `parent` does nothing.
pub fn remove(parent: &str) {
    let relative = parent.trim_start_matches('/');
    if relative.is_empty() {
        return;
    }
    let Ok(hierarchies) = std::fs::read_dir(ROOT) else {
        return;
    };
    for hierarchy in hierarchies.flatten() {
        let dir = hierarchy.path().join(relative);
        if dir.is_dir() {
            if let Err(error) = std::fs::remove_dir(&dir) {
                tracing::debug!(dir = %dir.display(), %error, "removing a pod cgroup");
            }
        }
    }
}

/// How many processes the cgroup `parent` holds (`pids.current`, cgroup v1's pids hierarchy
/// or the unified one), if it exists.
pub fn process_count(parent: &str) -> Option<u64> {
    process_count_under(std::path::Path::new(ROOT), parent)
}

fn process_count_under(root: &std::path::Path, parent: &str) -> Option<u64> {
    let relative = parent.trim_start_matches('/');
    if relative.is_empty() {
        return None;
    }
    ["pids", ""].iter().find_map(|hierarchy| {
        let file = root.join(hierarchy).join(relative).join("pids.current");
        std::fs::read_to_string(file).ok()?.trim().parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pods_process_count_comes_from_its_pids_cgroup() {
        let root = tempfile::tempdir().unwrap();
        let v1 = root.path().join("pids/rudder-kubepods/besteffort/podu1");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(v1.join("pids.current"), "7\n").unwrap();
        let v2 = root.path().join("rudder-kubepods/podu2");
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(v2.join("pids.current"), "3\n").unwrap();
        let count = |parent| process_count_under(root.path(), parent);
        assert_eq!(count("/rudder-kubepods/besteffort/podu1"), Some(7));
        assert_eq!(count("/rudder-kubepods/podu2"), Some(3));
        assert_eq!(count("/rudder-kubepods/podu3"), None);
        assert_eq!(count(""), None);
    }
}
