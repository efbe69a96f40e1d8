//! Images without a registry: an OCI image-layout tar of a busybox-static root file system
//! (`/bin/busybox` and a symlink per applet, `/etc/passwd`, `/etc/group`, `/www/index.html`),
//! named with a fully qualified reference, for containerd to import. This is how the pause
//! image and the test images come to exist on machines that reach no registry.

use std::path::Path;

use serde_json::json;
use sha2::{Digest, Sha256};

/// Why an image could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("encoding the image: {0}")]
    Json(#[from] serde_json::Error),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.display().to_string(),
        source,
    }
}

fn digest(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

fn header(path: &str, kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut header = tar::Header::new_ustar();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    let _ = header.set_path(path);
    header.set_cksum();
    header
}

fn add_file(
    builder: &mut tar::Builder<Vec<u8>>,
    path: &str,
    mode: u32,
    bytes: &[u8],
) -> std::io::Result<()> {
    let mut header = header(path, tar::EntryType::Regular, mode, bytes.len() as u64);
    builder.append_data(&mut header, path, bytes)
}

fn add_dir(builder: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32) -> std::io::Result<()> {
    let mut header = header(path, tar::EntryType::Directory, mode, 0);
    builder.append_data(&mut header, path, std::io::empty())
}

/// The root file system layer (an uncompressed, reproducible tar).
fn layer(busybox: &Path, title: &str) -> Result<Vec<u8>, Error> {
    let binary = std::fs::read(busybox).map_err(io(busybox))?;
    let listed = std::process::Command::new(busybox)
        .arg("--list")
        .output()
        .map_err(io(busybox))?;
    let mut applets: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox")
        .map(str::to_owned)
        .collect();
    applets.sort();
    let mut builder = tar::Builder::new(Vec::new());
    let build = |builder: &mut tar::Builder<Vec<u8>>| -> std::io::Result<()> {
        for dir in ["bin/", "dev/", "etc/", "proc/", "root/", "sys/", "www/"] {
            add_dir(builder, dir, 0o755)?;
        }
        add_dir(builder, "tmp/", 0o1777)?;
        add_file(builder, "bin/busybox", 0o755, &binary)?;
        for applet in &applets {
            let path = format!("bin/{applet}");
            let mut header = header(&path, tar::EntryType::Symlink, 0o777, 0);
            builder.append_link(&mut header, &path, "busybox")?;
        }
        add_file(
            builder,
            "etc/passwd",
            0o644,
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
        )?;
        add_file(
            builder,
            "etc/group",
            0o644,
            b"root:x:0:\nnogroup:x:65534:\n",
        )?;
        add_file(
            builder,
            "www/index.html",
            0o644,
            format!("hello from {title}\n").as_bytes(),
        )?;
        Ok(())
    };
    build(&mut builder).map_err(io(busybox))?;
    builder.into_inner().map_err(io(busybox))
}

/// An OCI image-layout tar named `reference` (e.g. `localhost/pause:3.9`) with the given
/// entrypoint and command, from the static busybox at `busybox`.
pub fn busybox_image(
    busybox: &Path,
    reference: &str,
    entrypoint: Option<&[&str]>,
    cmd: Option<&[&str]>,
) -> Result<Vec<u8>, Error> {
    let layer = layer(busybox, reference)?;
    let layer_digest = digest(&layer);
    let config = serde_json::to_vec(&json!({
        "architecture": match std::env::consts::ARCH { "aarch64" => "arm64", "x86_64" => "amd64", other => other },
        "os": "linux",
        "config": {
            "Entrypoint": entrypoint,
            "Cmd": cmd,
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_digest}")]},
    }))?;
    let config_digest = digest(&config);
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": format!("sha256:{config_digest}"), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": format!("sha256:{layer_digest}"), "size": layer.len()}],
    }))?;
    let manifest_digest = digest(&manifest);
    let tag = reference.rsplit(':').next().unwrap_or("latest");
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": format!("sha256:{manifest_digest}"), "size": manifest.len(),
                       "annotations": {"io.containerd.image.name": reference,
                                       "org.opencontainers.image.ref.name": tag}}],
    }))?;
    let mut builder = tar::Builder::new(Vec::new());
    let build = |builder: &mut tar::Builder<Vec<u8>>| -> std::io::Result<()> {
        add_dir(builder, "blobs/", 0o755)?;
        add_dir(builder, "blobs/sha256/", 0o755)?;
        add_file(
            builder,
            &format!("blobs/sha256/{layer_digest}"),
            0o644,
            &layer,
        )?;
        add_file(
            builder,
            &format!("blobs/sha256/{config_digest}"),
            0o644,
            &config,
        )?;
        add_file(
            builder,
            &format!("blobs/sha256/{manifest_digest}"),
            0o644,
            &manifest,
        )?;
        add_file(builder, "index.json", 0o644, &index)?;
        add_file(
            builder,
            "oci-layout",
            0o644,
            br#"{"imageLayoutVersion":"1.0.0"}"#,
        )?;
        Ok(())
    };
    build(&mut builder).map_err(io(busybox))?;
    builder.into_inner().map_err(io(busybox))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_layout_names_its_blobs_by_digest() {
        let busybox = Path::new("/bin/busybox");
        if !busybox.exists() {
            // busybox-static is installed by scripts/test.sh; without it there is nothing to pack.
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "/bin/busybox is missing under CI=true"
            );
            return;
        }
        let tar = busybox_image(busybox, "localhost/test:1", None, Some(&["sh"])).expect("image");
        let mut archive = tar::Archive::new(tar.as_slice());
        let mut names = Vec::new();
        let mut index = String::new();
        for entry in archive.entries().expect("entries") {
            let mut entry = entry.expect("entry");
            let path = entry.path().expect("path").display().to_string();
            if path.starts_with("blobs/sha256/") && path.len() > 20 {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut entry, &mut bytes).expect("read");
                assert_eq!(format!("blobs/sha256/{}", digest(&bytes)), path);
            }
            if path == "index.json" {
                std::io::Read::read_to_string(&mut entry, &mut index).expect("read");
            }
            names.push(path);
        }
        assert!(names.contains(&"oci-layout".to_string()));
        assert!(
            index.contains("\"io.containerd.image.name\":\"localhost/test:1\""),
            "{index}"
        );
        // The same input gives the same bytes.
        assert_eq!(
            tar,
            busybox_image(busybox, "localhost/test:1", None, Some(&["sh"])).expect("image")
        );
    }
}
