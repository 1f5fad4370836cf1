//! The limitmesh node binary.

fn main() {
    println!(
        "limitmesh {}: the sidecar server is not built yet; the core library is \
         (see README.md).",
        env!("CARGO_PKG_VERSION")
    );
}
