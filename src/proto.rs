//! Generated protobuf messages, tonic servers and clients (see `build.rs`).
//!
//! Modules follow the proto packages: [`limitmesh::v1`] is limitmesh's own API;
//! `envoy::service::ratelimit::v3` and the packages it imports are a wire-compatible subset of
//! Envoy's rate limit service; [`envoy_raw`] is the request of that service as the server
//! decodes it. Only `rpc` converts between these and domain types.

/// The generated code, kept apart so that lint exceptions cover it and nothing else.
#[allow(
    clippy::all,
    clippy::pedantic,
    missing_docs,
    missing_debug_implementations
)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/limitmesh_protos.rs"));
}

pub use generated::*;

pub mod envoy_raw;

/// The encoded `FileDescriptorSet` of every proto above and its imports, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/limitmesh_descriptor.bin"));

#[cfg(test)]
mod envoy_wire_tests;
