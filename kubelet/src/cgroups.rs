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
