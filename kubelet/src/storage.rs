//! The node's local-path volumes: the directory they live under (`<data-dir>/storage`,
//! announced on the Node as `rudder.dev/local-path-base` so the controller-manager's
//! provisioner puts this node's volumes there), and a sweep that removes the directories of
//! volumes that are gone (a claim of a `Delete` class deleted: the binder deletes the
//! PersistentVolume, and this removes its data).
//!
//! Only directories the provisioner names — `pvc-<uid>_<namespace>_<claim>` directly under
//! the base — are ever removed, and only when the API answers 404 for their volume
//! `pvc-<uid>` (the Node authorizer lets a kubelet read its own local volumes and learn
//! that a volume does not exist); any other answer keeps the directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::Api;
use tokio_util::sync::CancellationToken;

/// How often the base directory is swept.
pub const SWEEP_PERIOD: Duration = Duration::from_secs(10);

/// Where this node keeps local-path volumes: `<data-dir>/storage`, made absolute.
pub fn base(data_dir: &Path) -> PathBuf {
    let dir = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    dir.join("storage")
}

/// The volume a provisioned directory belongs to (`pvc-<uid>` of `pvc-<uid>_<ns>_<name>`).
pub fn volume_of(directory: &str) -> Option<&str> {
    let (volume, rest) = directory.split_once('_')?;
    (volume.len() > "pvc-".len() && volume.starts_with("pvc-") && rest.contains('_'))
        .then_some(volume)
}

/// Sweeps `base` every [`SWEEP_PERIOD`] until `shutdown`.
pub async fn sweep_until(client: kube::Client, base: PathBuf, shutdown: CancellationToken) {
    loop {
        sweep(&client, &base).await;
        tokio::select! {
            () = tokio::time::sleep(SWEEP_PERIOD) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Removes the directories under `base` whose volume the API says is gone.
pub async fn sweep(client: &kube::Client, base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(volume) = volume_of(&name) else {
            continue;
        };
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        match volumes.get(volume).await {
            Err(kube::Error::Api(status)) if status.code == 404 => {
                let path = entry.path();
                match std::fs::remove_dir_all(&path) {
                    Ok(()) => {
                        tracing::info!(dir = %path.display(), volume, "removed the directory of a deleted volume")
                    }
                    Err(error) => {
                        tracing::warn!(dir = %path.display(), %error, "removing a deleted volume's directory")
                    }
                }
            }
            Ok(_) => {}
            Err(error) => tracing::debug!(volume, %error, "checking a local volume"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_provisioned_directories_name_a_volume() {
        assert_eq!(volume_of("pvc-1234_default_data"), Some("pvc-1234"));
        assert_eq!(
            volume_of("pvc-1234_ns_name_with_underscores"),
            Some("pvc-1234")
        );
        assert_eq!(volume_of("pvc-_default_data"), None);
        assert_eq!(volume_of("pvc-1234"), None);
        assert_eq!(volume_of("pvc-1234_default"), None);
        assert_eq!(volume_of("data_default_x"), None);
        assert!(base(Path::new("rel")).is_absolute());
        assert!(base(Path::new("/var/lib/rudder")).ends_with("storage"));
    }
}
