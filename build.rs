//! Compiles the protos with protox (a pure-Rust protobuf compiler, so no `protoc` is needed) and
//! generates prost messages plus tonic servers and clients. The encoded file descriptor set is
//! written next to the generated code for gRPC server reflection.
//!
//! Envoy's rate limit service is served from a server generated apart (`tonic_build::manual`):
//! it decodes `ShouldRateLimit` requests into `crate::proto::envoy_raw`, which reads the
//! domain and the descriptor entries as bytes. Envoy sends header bytes as they are, and a
//! `string` field that is not UTF-8 would fail the whole call in prost's decoder. The
//! generated messages of Envoy's protos stay as they are, for clients, responses and
//! reflection.

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

    let should_rate_limit = tonic_build::manual::Method::builder()
        .name("should_rate_limit")
        .route_name("ShouldRateLimit")
        .input_type("crate::proto::envoy_raw::RawRateLimitRequest")
        .output_type("crate::proto::envoy::service::ratelimit::v3::RateLimitResponse")
        .codec_path("tonic_prost::ProstCodec")
        .build();
    let service = tonic_build::manual::Service::builder()
        .name("RateLimitService")
        .package("envoy.service.ratelimit.v3")
        .method(should_rate_limit)
        .build();
    // Written to `envoy.service.ratelimit.v3.RateLimitService.rs`.
    tonic_build::manual::Builder::new()
        .build_client(false)
        .compile(&[service]);

    // compile_fds does not know the source paths.
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
