//! The gRPC services end to end: a server on 127.0.0.1 (an ephemeral port) called through the
//! generated clients. Time is a manual clock, so windows move only when a test says so. Every
//! test stops its server.

mod bad_input;
mod envoy;
mod own_api;
mod per_descriptor;
mod raw_frames;
mod service;
mod support;
