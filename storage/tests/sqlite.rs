//! The storage conformance suite against the sqlite driver.

rudder_storage::conformance_tests!(rudder_storage::testing::sqlite());

/// The database holds every Secret: a new one is readable by its owner only.
#[tokio::test]
async fn a_new_database_file_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("state.db");
    let store = rudder_storage::open(&format!("sqlite://{}", path.display()))
        .await
        .expect("open");
    store.put(b"/k", b"v", 0).await.expect("put");
    for suffix in ["", "-wal"] {
        let mut file = path.clone().into_os_string();
        file.push(suffix);
        let mode = std::fs::metadata(&file)
            .expect("the file exists")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file:?}");
    }
    store.close().await;
}
