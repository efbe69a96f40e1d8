//! Compiles the vendored `.proto` files with protox (pure Rust, no `protoc`):
//!
//! - the Kubernetes `generated.proto` files into one descriptor set for the protobuf
//!   transcoder (`src/protobuf`);
//! - the KMS v2 files (the plugin's gRPC API and the `EncryptedObject` stored after the
//!   `k8s:enc:kms:v2:` prefix) into Rust types and a tonic client and server
//!   (`src/values/encryption/kms`).

use std::path::{Path, PathBuf};

/// The KMS v2 files, relative to `proto/`; they are not API types and stay out of the
/// transcoder's descriptor set.
const KMS_PROTOS: &[&str] = &[
    "k8s.io/kms/apis/v2/api.proto",
    "k8s.io/apiserver/pkg/storage/value/encrypt/envelope/kmsv2/v2/api.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let root = manifest.join("proto");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    println!("cargo:rerun-if-changed={}", root.display());

    let kms: Vec<PathBuf> = KMS_PROTOS.iter().map(|file| root.join(file)).collect();
    let mut files = Vec::new();
    collect(&root, &mut files)?;
    files.retain(|file| !kms.contains(file));
    files.sort();
    let mut compiler = protox::Compiler::new([&root])?;
    compiler.include_source_info(false).include_imports(true);
    for file in &files {
        compiler.open_file(file)?;
    }
    std::fs::write(
        out.join("k8s_descriptors.bin"),
        compiler.encode_file_descriptor_set(),
    )?;

    let descriptors = protox::compile(&kms, [&root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Sorted annotations: the stored EncryptedObject's bytes do not depend on hashing.
        .btree_map(".")
        .out_dir(&out)
        .compile_fds(descriptors)?;
    Ok(())
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "proto") {
            files.push(path);
        }
    }
    Ok(())
}
