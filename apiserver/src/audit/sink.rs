//! Where audit events go: JSON lines in a file (or stdout for `-`), rotated as upstream's
//! `--audit-log-maxsize` (MB), `--audit-log-maxbackup` and `--audit-log-maxage` (days) say —
//! a full file is renamed `<name>-<UTC time>.<ext>` and a new one started; backups beyond the
//! count or the age are removed. Writes are serialized; a failed write is logged, never fatal.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// Rotation limits; zero means none.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rotation {
    pub max_size_mb: u64,
    pub max_backups: usize,
    pub max_age_days: u64,
}

enum Target {
    Stdout,
    File {
        path: PathBuf,
        file: File,
        size: u64,
    },
}

/// A log of audit events.
pub struct Sink {
    target: Mutex<Target>,
    rotation: Rotation,
}

fn open_append(path: &Path) -> io::Result<(File, u64)> {
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(path)?;
    let size = file.metadata()?.len();
    Ok((file, size))
}

/// `audit` and `.log` of `audit.log`.
fn stem_and_extension(path: &Path) -> (String, String) {
    let stem = path
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    let extension = path
        .extension()
        .map(|ext| format!(".{}", ext.to_string_lossy()))
        .unwrap_or_default();
    (stem, extension)
}

impl Sink {
    /// Appends to `path` (`-`: stdout), creating it 0600.
    pub fn open(path: &Path, rotation: Rotation) -> io::Result<Self> {
        let target = if path == Path::new("-") {
            Target::Stdout
        } else {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)?;
            }
            let (file, size) = open_append(path)?;
            Target::File {
                path: path.to_path_buf(),
                file,
                size,
            }
        };
        Ok(Self {
            target: Mutex::new(target),
            rotation,
        })
    }

    /// Writes one event (a JSON line).
    pub fn write(&self, line: &[u8]) {
        let mut target = match self.target.lock() {
            Ok(target) => target,
            Err(poisoned) => poisoned.into_inner(),
        };
        let written = match &mut *target {
            Target::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(line).and_then(|()| out.write_all(b"\n"))
            }
            Target::File { path, file, size } => {
                let limit = self.rotation.max_size_mb * 1024 * 1024;
                if limit > 0 && *size > 0 && *size + line.len() as u64 + 1 > limit {
                    match rotate(path, &self.rotation) {
                        Ok((fresh, fresh_size)) => {
                            *file = fresh;
                            *size = fresh_size;
                        }
                        Err(error) => tracing::warn!(%error, "rotating the audit log failed"),
                    }
                }
                let result = file.write_all(line).and_then(|()| file.write_all(b"\n"));
                if result.is_ok() {
                    *size += line.len() as u64 + 1;
                }
                result
            }
        };
        if let Err(error) = written {
            tracing::warn!(%error, "writing the audit log failed");
        }
    }
}

/// Renames the full log aside, prunes old backups, opens a new log.
fn rotate(path: &Path, rotation: &Rotation) -> io::Result<(File, u64)> {
    let (stem, extension) = stem_and_extension(path);
    let stamp = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H-%M-%S%.3f")
        .to_string();
    let backup = path.with_file_name(format!("{stem}-{stamp}{extension}"));
    std::fs::rename(path, &backup)?;
    prune(path, rotation)?;
    open_append(path)
}

/// Removes backups beyond the count and the age.
fn prune(path: &Path, rotation: &Rotation) -> io::Result<()> {
    let (stem, extension) = stem_and_extension(path);
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let prefix = format!("{stem}-");
    let mut backups: Vec<(String, PathBuf)> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            (name.starts_with(&prefix) && name.ends_with(&extension)).then(|| (name, entry.path()))
        })
        .collect();
    // The names carry the time: sorted, the newest come last.
    backups.sort();
    let mut doomed: Vec<PathBuf> = Vec::new();
    if rotation.max_backups > 0 && backups.len() > rotation.max_backups {
        let excess = backups.len() - rotation.max_backups;
        doomed.extend(backups.drain(..excess).map(|(_, path)| path));
    }
    if rotation.max_age_days > 0 {
        let oldest = SystemTime::now()
            .checked_sub(Duration::from_secs(rotation.max_age_days * 24 * 3600))
            .unwrap_or(SystemTime::UNIX_EPOCH);
        for (_, backup) in backups {
            let modified = std::fs::metadata(&backup).and_then(|meta| meta.modified());
            if modified.is_ok_and(|modified| modified < oldest) {
                doomed.push(backup);
            }
        }
    }
    for path in doomed {
        std::fs::remove_file(path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_log_is_rotated_and_old_backups_pruned() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.log");
        let sink = Sink::open(
            &path,
            Rotation {
                max_size_mb: 1,
                max_backups: 2,
                max_age_days: 0,
            },
        )
        .expect("opens");
        let line = vec![b'x'; 300 * 1024];
        for _ in 0..14 {
            sink.write(&line);
            // Backups are named by the millisecond: keep them apart.
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("read")
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(
            names.iter().all(|name| name.starts_with("audit")),
            "{names:?}"
        );
        assert!(std::fs::metadata(&path).expect("the log").len() <= 1024 * 1024);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path)
                .expect("the log")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
