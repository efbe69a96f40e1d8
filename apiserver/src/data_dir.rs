//! Keeping the data dir private: it holds the cluster CA key, the admin credentials and (with
//! the embedded store) every Secret, so it is created `0700`, and the SQLite database is
//! created `0600` before the driver opens it — SQLite gives its `-wal` and `-shm` files the
//! database file's mode. A data dir or database left readable by an earlier version is
//! tightened at start.

use std::fs::{self, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The data dir's mode.
pub const DIR_MODE: u32 = 0o700;
/// The mode of the database files.
pub const FILE_MODE: u32 = 0o600;

/// Creates the data dir `0700`, or tightens an existing one that holds Rudder's files (its
/// `pki/` or `state.db`) and is open to other users.
pub fn prepare(dir: &Path) -> io::Result<()> {
    if !dir.exists() {
        return fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir);
    }
    let ours = dir.join("pki").exists() || dir.join("state.db").exists() || is_empty(dir)?;
    let mode = fs::metadata(dir)?.permissions().mode();
    if ours && mode & 0o077 != 0 {
        tracing::info!(dir = %dir.display(), "making the data dir private (0700)");
        fs::set_permissions(dir, Permissions::from_mode(DIR_MODE))?;
    }
    Ok(())
}

fn is_empty(dir: &Path) -> io::Result<bool> {
    Ok(fs::read_dir(dir)?.next().is_none())
}

/// For a `sqlite://` storage URL: creates the database file `0600` if missing, and tightens
/// it and its `-wal`/`-shm` files if they are open to other users. Other URLs: nothing.
pub fn protect_sqlite_files(storage_url: &str) -> io::Result<()> {
    let Ok(config) = rudder_storage::config::StorageConfig::parse(storage_url) else {
        // The driver reports a bad URL with a better message.
        return Ok(());
    };
    let rudder_storage::config::DriverConfig::Sqlite(sqlite) = config.driver else {
        return Ok(());
    };
    let path = sqlite.path;
    if let Some(parent) = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    {
        if !parent.exists() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(parent)?;
        }
    }
    if !path.exists() {
        // An empty file is an empty SQLite database.
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&path)
        {
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error),
        }
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.clone().into_os_string();
        file.push(suffix);
        let file = Path::new(&file);
        if let Ok(metadata) = fs::metadata(file) {
            if metadata.permissions().mode() & 0o077 != 0 {
                fs::set_permissions(file, Permissions::from_mode(FILE_MODE))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).expect("exists").permissions().mode() & 0o777
    }

    #[test]
    fn a_new_data_dir_and_database_are_private() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("data");
        prepare(&dir).expect("created");
        assert_eq!(mode(&dir), DIR_MODE);
        let db = dir.join("state.db");
        protect_sqlite_files(&format!("sqlite://{}", db.display())).expect("created");
        assert_eq!(mode(&db), FILE_MODE);
    }

    #[test]
    fn readable_files_left_by_an_older_version_are_tightened() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("data");
        fs::create_dir(&dir).expect("dir");
        fs::set_permissions(&dir, Permissions::from_mode(0o755)).expect("chmod");
        let db = dir.join("state.db");
        let wal = dir.join("state.db-wal");
        for file in [&db, &wal] {
            fs::write(file, b"").expect("file");
            fs::set_permissions(file, Permissions::from_mode(0o644)).expect("chmod");
        }
        prepare(&dir).expect("tightened");
        protect_sqlite_files(&format!("sqlite://{}", db.display())).expect("tightened");
        assert_eq!(mode(&dir), DIR_MODE);
        assert_eq!(mode(&db), FILE_MODE);
        assert_eq!(mode(&wal), FILE_MODE);
    }
}
