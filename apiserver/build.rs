//! Compiles the vendored Kubernetes `generated.proto` files into one descriptor set for the
//! protobuf transcoder (`src/protobuf`), with protox (pure Rust, no `protoc`).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let root = manifest.join("proto");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect(&root, &mut files)?;
    files.sort();
    let mut compiler = protox::Compiler::new([&root])?;
    compiler.include_source_info(false).include_imports(true);
    for file in &files {
        compiler.open_file(file)?;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("k8s_descriptors.bin");
    std::fs::write(out, compiler.encode_file_descriptor_set())?;
    Ok(())
}

fn collect(dir: &std::path::Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
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
