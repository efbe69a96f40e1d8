//! A pod's volumes on the node, under `<root>/pods/<uid>/volumes/<name>`: emptyDir (a
//! directory, or a tmpfs for `medium: Memory` sized by `sizeLimit`), hostPath (with its type
//! checks), persistentVolumeClaim (the bound volume's directory, see `claims`), and the API-backed ones — configMap, secret, downwardAPI and projected (including
//! ServiceAccount tokens, requested for the pod and renewed at 80% of their lifetime) — written
//! the way upstream's atomic writer does: the files live in a timestamped directory that the
//! `..data` symlink points to, each top-level name is a symlink through `..data`, and an update
//! swaps `..data` in one rename, so a reader never sees half an update.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    Container, DownwardAPIVolumeFile, KeyToPath, Pod, ServiceAccount, Volume,
};
use kube::api::PostParams;
use kube::Api;

use super::env::{pod_field, resource_field, ConfigError, Sources};
use super::spec::{pod_name, pod_namespace, pod_uid};
use crate::runtime::api;

/// Files of one API-backed volume: relative path → (bytes, mode).
type Files = BTreeMap<String, (Vec<u8>, u32)>;

/// A token this pod's projected volumes hold, and when to renew it.
#[derive(Debug, Clone)]
struct HeldToken {
    token: String,
    renew_at: SystemTime,
}

/// The volumes of one pod.
#[derive(Debug)]
pub struct PodVolumes {
    dir: PathBuf,
    tokens: BTreeMap<String, HeldToken>,
    /// Memory-backed emptyDirs mounted here (unmounted on teardown).
    tmpfs: Vec<PathBuf>,
    /// The node directory behind each `persistentVolumeClaim` volume, once resolved.
    claims: BTreeMap<String, PathBuf>,
}

fn io(what: &Path) -> impl FnOnce(std::io::Error) -> ConfigError + '_ {
    move |e| ConfigError(format!("{}: {e}", what.display()))
}

fn default_mode(mode: Option<i32>) -> u32 {
    mode.and_then(|m| u32::try_from(m).ok()).unwrap_or(0o644)
}

impl PodVolumes {
    pub fn new(root: &Path, pod: &Pod) -> Self {
        Self {
            dir: root.join("pods").join(pod_uid(pod)),
            tokens: BTreeMap::new(),
            tmpfs: Vec::new(),
            claims: BTreeMap::new(),
        }
    }

    /// The pod's own directory (volumes, etc-hosts).
    pub fn pod_dir(&self) -> &Path {
        &self.dir
    }

    fn volume_dir(&self, name: &str) -> PathBuf {
        self.dir.join("volumes").join(name)
    }

    /// Sets up every volume, or brings API-backed ones up to date. A missing required source
    /// or a failed hostPath check is an error naming it (upstream's FailedMount).
    pub async fn sync(
        &mut self,
        pod: &Pod,
        sources: &mut Sources,
        client: &kube::Client,
        host_ip: &str,
        allocatable: &BTreeMap<String, String>,
    ) -> Result<(), ConfigError> {
        let volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        for volume in &volumes {
            let dir = self.volume_dir(&volume.name);
            if let Some(empty) = &volume.empty_dir {
                if dir.exists() {
                    continue;
                }
                std::fs::create_dir_all(&dir).map_err(io(&dir))?;
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
                    .map_err(io(&dir))?;
                if empty.medium.as_deref() == Some("Memory") {
                    let size = empty
                        .size_limit
                        .as_ref()
                        .map(|q| format!("size={}", rudder_facts::quantity::value(&q.0)));
                    nix::mount::mount(
                        Some("tmpfs"),
                        &dir,
                        Some("tmpfs"),
                        nix::mount::MsFlags::empty(),
                        size.as_deref(),
                    )
                    .map_err(|e| {
                        ConfigError(format!("mounting tmpfs at {}: {e}", dir.display()))
                    })?;
                    self.tmpfs.push(dir);
                }
                continue;
            }
            if let Some(host) = &volume.host_path {
                check_host_path(Path::new(&host.path), host.type_.as_deref().unwrap_or(""))?;
                continue;
            }
            if let Some(claim) = &volume.persistent_volume_claim {
                if !self.claims.contains_key(&volume.name) {
                    let path =
                        super::claims::directory(client, pod_namespace(pod), &claim.claim_name)
                            .await?;
                    self.claims.insert(volume.name.clone(), path);
                }
                continue;
            }
            let Some(files) = self
                .files_of(volume, pod, sources, client, host_ip, allocatable)
                .await?
            else {
                continue;
            };
            write_atomically(&dir, &files)?;
        }
        Ok(())
    }

    async fn files_of(
        &mut self,
        volume: &Volume,
        pod: &Pod,
        sources: &mut Sources,
        client: &kube::Client,
        host_ip: &str,
        allocatable: &BTreeMap<String, String>,
    ) -> Result<Option<Files>, ConfigError> {
        let mut files = Files::new();
        if let Some(cm) = &volume.config_map {
            let data = sources.configmap(&cm.name).await?;
            let data = data.map(|d| d.into_iter().map(|(k, v)| (k, v.into_bytes())).collect());
            add_keyed(
                &mut files,
                "configmap",
                &cm.name,
                data,
                &cm.items,
                cm.optional,
                default_mode(cm.default_mode),
            )?;
        } else if let Some(secret) = &volume.secret {
            let name = secret.secret_name.clone().unwrap_or_default();
            let data = sources.secret_bytes(&name).await?;
            add_keyed(
                &mut files,
                "secret",
                &name,
                data,
                &secret.items,
                secret.optional,
                default_mode(secret.default_mode),
            )?;
        } else if let Some(downward) = &volume.downward_api {
            add_downward(
                &mut files,
                pod,
                downward.items.iter().flatten(),
                default_mode(downward.default_mode),
                host_ip,
                allocatable,
            )?;
        } else if let Some(projected) = &volume.projected {
            let mode = default_mode(projected.default_mode);
            for source in projected.sources.iter().flatten() {
                if let Some(cm) = &source.config_map {
                    let data = sources.configmap(&cm.name).await?;
                    let data =
                        data.map(|d| d.into_iter().map(|(k, v)| (k, v.into_bytes())).collect());
                    add_keyed(
                        &mut files,
                        "configmap",
                        &cm.name,
                        data,
                        &cm.items,
                        cm.optional,
                        mode,
                    )?;
                }
                if let Some(secret) = &source.secret {
                    let data = sources.secret_bytes(&secret.name).await?;
                    add_keyed(
                        &mut files,
                        "secret",
                        &secret.name,
                        data,
                        &secret.items,
                        secret.optional,
                        mode,
                    )?;
                }
                if let Some(downward) = &source.downward_api {
                    add_downward(
                        &mut files,
                        pod,
                        downward.items.iter().flatten(),
                        mode,
                        host_ip,
                        allocatable,
                    )?;
                }
                if let Some(token) = &source.service_account_token {
                    let key = format!("{}/{}", volume.name, token.path);
                    let audience = token.audience.clone().unwrap_or_default();
                    let seconds = token.expiration_seconds.unwrap_or(3600);
                    let value = self.token(&key, pod, client, &audience, seconds).await?;
                    files.insert(token.path.clone(), (value.into_bytes(), mode));
                }
            }
        } else {
            // Other volume kinds (CSI, ephemeral …) are not handled by this kubelet yet.
            return Ok(None);
        }
        Ok(Some(files))
    }

    /// A token for the pod's ServiceAccount, bound to the pod, renewed at 80% of its life.
    async fn token(
        &mut self,
        key: &str,
        pod: &Pod,
        client: &kube::Client,
        audience: &str,
        seconds: i64,
    ) -> Result<String, ConfigError> {
        if let Some(held) = self.tokens.get(key) {
            if SystemTime::now() < held.renew_at {
                return Ok(held.token.clone());
            }
        }
        let account = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), pod_namespace(pod));
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: if audience.is_empty() {
                    Vec::new()
                } else {
                    vec![audience.to_owned()]
                },
                expiration_seconds: Some(seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(pod_name(pod).to_owned()),
                    uid: Some(pod_uid(pod).to_owned()),
                }),
            },
            ..Default::default()
        };
        let reply = accounts
            .create_token_request(&account, &PostParams::default(), &request)
            .await
            .map_err(|e| {
                ConfigError(format!(
                    "requesting a token for serviceaccount {account:?}: {e}"
                ))
            })?;
        let status = reply
            .status
            .ok_or_else(|| ConfigError("the token request returned no token".into()))?;
        let lifetime = Duration::from_secs(u64::try_from(seconds).unwrap_or(3600));
        self.tokens.insert(
            key.to_owned(),
            HeldToken {
                token: status.token.clone(),
                renew_at: SystemTime::now() + lifetime.mul_f64(0.8),
            },
        );
        Ok(status.token)
    }

    /// The CRI mounts of `container`: its volumeMounts (with subPath), `/etc/hosts` unless the
    /// pod shares the node's network, and its termination-message file.
    pub fn mounts(&self, pod: &Pod, container: &Container) -> Result<Vec<api::Mount>, ConfigError> {
        let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
        let mut mounts = Vec::new();
        for mount in container.volume_mounts.iter().flatten() {
            let volume = volumes
                .and_then(|v| v.iter().find(|v| v.name == mount.name))
                .ok_or_else(|| ConfigError(format!("volume {:?} is not declared", mount.name)))?;
            let mut host = match (&volume.host_path, self.claims.get(&volume.name)) {
                (Some(host), _) => PathBuf::from(&host.path),
                (None, Some(claimed)) => claimed.clone(),
                (None, None) => self.volume_dir(&volume.name),
            };
            let claim_read_only = volume
                .persistent_volume_claim
                .as_ref()
                .and_then(|c| c.read_only)
                .unwrap_or(false);
            if let Some(sub) = mount.sub_path.as_deref().filter(|s| !s.is_empty()) {
                if Path::new(sub)
                    .components()
                    .any(|c| matches!(c, std::path::Component::ParentDir))
                {
                    return Err(ConfigError(format!(
                        "subPath {sub:?} must not contain '..'"
                    )));
                }
                host = host.join(sub);
                if !host.exists() {
                    std::fs::create_dir_all(&host).map_err(io(&host))?;
                }
            }
            mounts.push(api::Mount {
                container_path: mount.mount_path.clone(),
                host_path: host.display().to_string(),
                readonly: mount.read_only.unwrap_or(false) || claim_read_only,
                ..Default::default()
            });
        }
        let hosts = self.dir.join("etc-hosts");
        if hosts.exists()
            && !container
                .volume_mounts
                .iter()
                .flatten()
                .any(|m| m.mount_path == "/etc/hosts")
        {
            mounts.push(api::Mount {
                container_path: "/etc/hosts".into(),
                host_path: hosts.display().to_string(),
                ..Default::default()
            });
        }
        let message = self.termination_log(&container.name);
        if let Some(parent) = message.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&message, b"").map_err(io(&message))?;
        mounts.push(api::Mount {
            container_path: container
                .termination_message_path
                .clone()
                .unwrap_or_else(|| "/dev/termination-log".into()),
            host_path: message.display().to_string(),
            ..Default::default()
        });
        Ok(mounts)
    }

    /// The file a container's termination message goes to.
    pub fn termination_log(&self, container: &str) -> PathBuf {
        self.dir
            .join("containers")
            .join(container)
            .join("termination-log")
    }

    /// Writes the pod's `/etc/hosts`: localhost, and its own IP under its hostname.
    pub fn write_hosts(&self, pod: &Pod, ip: &str) -> Result<(), ConfigError> {
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        let spec = pod.spec.as_ref();
        let hostname = spec
            .and_then(|s| s.hostname.clone())
            .unwrap_or_else(|| pod_name(pod).to_owned());
        let mut text = String::from(
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
        );
        if !ip.is_empty() {
            let fqdn = spec
                .and_then(|s| s.subdomain.as_ref())
                .map(|sub| {
                    format!(
                        "\t{hostname}.{sub}.{}.svc.cluster.local",
                        pod_namespace(pod)
                    )
                })
                .unwrap_or_default();
            text.push_str(&format!("{ip}\t{hostname}{fqdn}\n"));
        }
        for alias in spec
            .and_then(|s| s.host_aliases.as_ref())
            .into_iter()
            .flatten()
        {
            text.push_str(&format!(
                "{}\t{}\n",
                alias.ip,
                alias.hostnames.clone().unwrap_or_default().join("\t")
            ));
        }
        let path = self.dir.join("etc-hosts");
        std::fs::write(&path, text).map_err(io(&path))
    }

    /// Unmounts and removes everything of the pod's.
    pub fn tear_down(&mut self) {
        for dir in self.tmpfs.drain(..) {
            if let Err(error) = nix::mount::umount(&dir) {
                tracing::warn!(dir = %dir.display(), %error, "unmounting a memory-backed emptyDir");
            }
        }
        if let Err(error) = std::fs::remove_dir_all(&self.dir) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %self.dir.display(), %error, "removing a pod's directory");
            }
        }
    }
}

pub(super) fn check_host_path(path: &Path, kind: &str) -> Result<(), ConfigError> {
    let fail = |what: &str| {
        Err(ConfigError(format!(
            "hostPath type check failed: {} is not a {what}",
            path.display()
        )))
    };
    match kind {
        "DirectoryOrCreate" => {
            if !path.exists() {
                std::fs::create_dir_all(path).map_err(io(path))?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
                    .map_err(io(path))?;
            }
            Ok(())
        }
        "FileOrCreate" => {
            if !path.exists() {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(io(parent))?;
                }
                std::fs::write(path, b"").map_err(io(path))?;
            }
            Ok(())
        }
        "Directory" if !path.is_dir() => fail("directory"),
        "File" if !path.is_file() => fail("file"),
        "Socket" | "CharDevice" | "BlockDevice" if !path.exists() => fail(kind),
        _ => Ok(()),
    }
}

fn add_keyed(
    files: &mut Files,
    kind: &str,
    name: &str,
    data: Option<BTreeMap<String, Vec<u8>>>,
    items: &Option<Vec<KeyToPath>>,
    optional: Option<bool>,
    mode: u32,
) -> Result<(), ConfigError> {
    let Some(data) = data else {
        return if optional.unwrap_or(false) {
            Ok(())
        } else {
            Err(ConfigError(format!("{kind} \"{name}\" not found")))
        };
    };
    match items {
        Some(items) if !items.is_empty() => {
            for item in items {
                match data.get(&item.key) {
                    Some(bytes) => {
                        let item_mode = item
                            .mode
                            .and_then(|m| u32::try_from(m).ok())
                            .unwrap_or(mode);
                        files.insert(item.path.clone(), (bytes.clone(), item_mode));
                    }
                    None if optional.unwrap_or(false) => {}
                    None => {
                        return Err(ConfigError(format!(
                            "configmap references non-existent config key: {}",
                            item.key
                        )))
                    }
                }
            }
        }
        _ => {
            for (key, bytes) in data {
                files.insert(key, (bytes, mode));
            }
        }
    }
    Ok(())
}

fn add_downward<'a>(
    files: &mut Files,
    pod: &Pod,
    items: impl Iterator<Item = &'a DownwardAPIVolumeFile>,
    mode: u32,
    host_ip: &str,
    allocatable: &BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    for item in items {
        let value = if let Some(field) = &item.field_ref {
            pod_field(pod, &field.field_path, host_ip)
        } else if let Some(resource) = &item.resource_field_ref {
            let container = pod.spec.as_ref().and_then(|s| {
                s.containers
                    .iter()
                    .find(|c| Some(c.name.as_str()) == resource.container_name.as_deref())
            });
            container.and_then(|c| {
                resource_field(
                    c,
                    &resource.resource,
                    resource.divisor.as_ref().map(|d| d.0.as_str()),
                    allocatable,
                )
            })
        } else {
            None
        };
        let item_mode = item
            .mode
            .and_then(|m| u32::try_from(m).ok())
            .unwrap_or(mode);
        files.insert(
            item.path.clone(),
            (value.unwrap_or_default().into_bytes(), item_mode),
        );
    }
    Ok(())
}

/// What `..data` currently holds, to skip rewriting unchanged content.
fn current(dir: &Path, files: &Files) -> bool {
    let data = dir.join("..data");
    if !data.exists() {
        return false;
    }
    let mut count = 0;
    for (path, (bytes, _)) in files {
        match std::fs::read(data.join(path)) {
            Ok(on_disk) if &on_disk == bytes => count += 1,
            _ => return false,
        }
    }
    // A removed key means the content changed too.
    let listed = std::fs::read_dir(&data)
        .map(|entries| entries.count())
        .unwrap_or(0);
    let top_level: std::collections::BTreeSet<&str> =
        files.keys().filter_map(|p| p.split('/').next()).collect();
    count == files.len() && listed == top_level.len()
}

/// Writes `files` under `dir` with upstream's `..data` symlink swap.
fn write_atomically(dir: &Path, files: &Files) -> Result<(), ConfigError> {
    if current(dir, files) {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let version = format!("..{stamp}");
    let target = dir.join(&version);
    std::fs::create_dir_all(&target).map_err(io(&target))?;
    for (path, (bytes, mode)) in files {
        if Path::new(path)
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(ConfigError(format!("invalid path {path:?} in a volume")));
        }
        let file = target.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&file, bytes).map_err(io(&file))?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(*mode))
            .map_err(io(&file))?;
    }
    let tmp_link = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp_link);
    std::os::unix::fs::symlink(&version, &tmp_link).map_err(io(&tmp_link))?;
    let old = std::fs::read_link(dir.join("..data")).ok();
    std::fs::rename(&tmp_link, dir.join("..data")).map_err(io(dir))?;
    let top_level: std::collections::BTreeSet<String> = files
        .keys()
        .filter_map(|p| p.split('/').next().map(str::to_owned))
        .collect();
    for name in &top_level {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(name), &link).map_err(io(&link))?;
        }
    }
    // Names no longer in the volume go; so does the previous version.
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with("..") && !top_level.contains(&name) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    if let Some(old) = old {
        if old != Path::new(&version) {
            let _ = std::fs::remove_dir_all(dir.join(old));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(entries: &[(&str, &str)]) -> Files {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), (v.as_bytes().to_vec(), 0o644)))
            .collect()
    }

    #[test]
    fn atomic_writes_swap_data_and_drop_removed_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let volume = dir.path().join("v");
        write_atomically(&volume, &files(&[("a", "1"), ("b", "2")])).expect("write");
        assert_eq!(std::fs::read_to_string(volume.join("a")).expect("a"), "1");
        let first = std::fs::read_link(volume.join("..data")).expect("link");
        // Unchanged content is not rewritten.
        write_atomically(&volume, &files(&[("a", "1"), ("b", "2")])).expect("write");
        assert_eq!(
            std::fs::read_link(volume.join("..data")).expect("link"),
            first
        );
        write_atomically(&volume, &files(&[("a", "3")])).expect("update");
        assert_eq!(std::fs::read_to_string(volume.join("a")).expect("a"), "3");
        assert!(!volume.join("b").exists());
        assert!(!volume.join(&first).exists(), "the old version is removed");
    }

    #[test]
    fn missing_sources_fail_unless_optional() {
        let mut out = Files::new();
        assert_eq!(
            add_keyed(&mut out, "configmap", "cfg", None, &None, None, 0o644),
            Err(ConfigError("configmap \"cfg\" not found".into()))
        );
        assert_eq!(
            add_keyed(&mut out, "configmap", "cfg", None, &None, Some(true), 0o644),
            Ok(())
        );
    }
}
