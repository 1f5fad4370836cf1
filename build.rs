//! Compiles the protos with protox (a pure-Rust protobuf compiler, so no `protoc` is needed) and
//! generates prost messages plus tonic servers and clients. The encoded file descriptor set is
//! written next to the generated code for gRPC server reflection.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "limitmesh/v1/ratelimit.proto",
    "envoy/service/ratelimit/v3/rls.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);

    let mut compiler = protox::Compiler::new(["proto"])?;
    compiler.include_source_info(true).include_imports(true);
    compiler.open_files(PROTOS)?;
    std::fs::write(
        out_dir.join("limitmesh_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;

    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // One file declaring the package modules, so packages that refer to each other
        // (`super::super::...`) resolve without hand-written nesting.
        .include_file("limitmesh_protos.rs")
        .compile_fds(compiler.file_descriptor_set())?;

    // compile_fds does not know the source paths.
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
