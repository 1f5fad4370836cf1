#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| limitmesh::fuzz_targets::register_body(data));
