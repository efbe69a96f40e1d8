//! `persistentVolumeClaim` volumes: the claim, the volume it is bound to, and the directory
//! on this node that volume is (`hostPath`, created for `DirectoryOrCreate`; or `local`,
//! which must exist). A claim that is missing or not bound yet is an error that names it,
//! and the pod waits with a `FailedMount` event until it is bound.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::Api;

use super::env::ConfigError;
use super::volumes::check_host_path;

/// The directory on this node behind the claim `namespace`/`name`.
pub async fn directory(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<PathBuf, ConfigError> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let claim = claims
        .get_opt(name)
        .await
        .map_err(|e| ConfigError(format!("reading persistentvolumeclaim \"{name}\": {e}")))?
        .ok_or_else(|| ConfigError(format!("persistentvolumeclaim \"{name}\" not found")))?;
    let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    let Some(volume_name) = rudder_facts::volumes::claim_volume(&claim).filter(|_| bound) else {
        return Err(ConfigError(format!(
            "persistentvolumeclaim \"{name}\" is not bound"
        )));
    };
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let volume = volumes
        .get(volume_name)
        .await
        .map_err(|e| ConfigError(format!("reading persistentvolume \"{volume_name}\": {e}")))?;
    let spec = volume.spec.unwrap_or_default();
    if let Some(host) = spec.host_path {
        let path = PathBuf::from(&host.path);
        check_host_path(&path, host.type_.as_deref().unwrap_or(""))?;
        return Ok(path);
    }
    if let Some(local) = spec.local {
        let path = PathBuf::from(&local.path);
        if !path.exists() {
            return Err(ConfigError(format!(
                "local volume \"{volume_name}\": {} does not exist",
                path.display()
            )));
        }
        return Ok(path);
    }
    Err(ConfigError(format!(
        "persistentvolume \"{volume_name}\" is neither hostPath nor local: this kubelet cannot mount it"
    )))
}
