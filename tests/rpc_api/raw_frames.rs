//! `ShouldRateLimit` as raw bytes: requests encoded by hand from the field numbers of Envoy's
//! `rls.proto` and `ratelimit.proto` (so that they may carry what Envoy sends and a generated
//! client refuses to, such as header bytes that are not UTF-8), sent as one gRPC message on an
//! HTTP/2 stream of its own.

use crate::support::*;
use prost::Message;

const VARINT: u64 = 0;
const LEN: u64 = 2;

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn field_varint(field: u64, v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    varint(field << 3 | VARINT, &mut out);
    varint(v, &mut out);
    out
}

fn field_bytes(field: u64, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    varint(field << 3 | LEN, &mut out);
    varint(bytes.len() as u64, &mut out);
    out.extend_from_slice(bytes);
    out
}

/// A `RateLimitDescriptor` being written.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawDescriptor(Vec<u8>);

impl RawDescriptor {
    /// No entries yet.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// One more of `entries = 1`: `Entry { key = 1, value = 2 }`.
    pub(crate) fn entry(mut self, key: &[u8], value: &[u8]) -> Self {
        let entry = [field_bytes(1, key), field_bytes(2, value)].concat();
        self.0.extend(field_bytes(1, &entry));
        self
    }

    /// `limit = 2`: `RateLimitOverride { requests_per_unit = 1, unit = 2 }`.
    pub(crate) fn limit(mut self, requests_per_unit: u32, unit: u64) -> Self {
        let limit = [
            field_varint(1, u64::from(requests_per_unit)),
            field_varint(2, unit),
        ]
        .concat();
        self.0.extend(field_bytes(2, &limit));
        self
    }

    /// `hits_addend = 3`: `google.protobuf.UInt64Value { value = 1 }`.
    pub(crate) fn hits(mut self, hits: u64) -> Self {
        self.0.extend(field_bytes(3, &field_varint(1, hits)));
        self
    }
}

/// `RateLimitRequest { domain = 1, descriptors = 2 }`.
pub(crate) fn raw_request(domain: &[u8], descriptors: &[RawDescriptor]) -> Vec<u8> {
    let mut out = field_bytes(1, domain);
    for d in descriptors {
        out.extend(field_bytes(2, &d.0));
    }
    out
}

/// A `grpc-message` header's text: percent-encoded on the wire.
fn percent_decoded(text: &str) -> String {
    let mut out = Vec::new();
    let mut bytes = text.bytes();
    while let Some(b) = bytes.next() {
        let hex = |b: Option<u8>| b.and_then(|b| (b as char).to_digit(16));
        match b {
            b'%' => {
                let (hi, lo) = (hex(bytes.next()), hex(bytes.next()));
                out.push((hi.expect("hex digit") * 16 + lo.expect("hex digit")) as u8);
            }
            other => out.push(other),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Sends `message` (an encoded request) to ShouldRateLimit over a fresh HTTP/2 connection and
/// returns the decoded response, or the gRPC status code and message the call ended with.
pub(crate) async fn raw_call(
    addr: SocketAddr,
    message: &[u8],
) -> Result<RateLimitResponse, (String, String)> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, connection) = h2::client::handshake(tcp).await.unwrap();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = http::Request::post(format!(
        "http://{addr}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
    ))
    .header(http::header::CONTENT_TYPE, "application/grpc")
    .header(http::header::TE, "trailers")
    .body(())
    .unwrap();
    let mut sender = sender.ready().await.unwrap();
    let (response, mut stream) = sender.send_request(request, false).unwrap();
    // One gRPC message: not compressed, big-endian length, bytes.
    let mut frame = vec![0u8];
    frame.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(message);
    stream.send_data(bytes::Bytes::from(frame), true).unwrap();
    let response = tokio::time::timeout(TEST_TIMEOUT, response)
        .await
        .expect("answered in time")
        .unwrap();
    assert_eq!(response.status(), http::StatusCode::OK);
    let header = |map: &http::HeaderMap, name: &str| {
        map.get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    };
    // A call that fails at once answers with headers only.
    if let Some(status) = header(response.headers(), "grpc-status") {
        driver.abort();
        let message = header(response.headers(), "grpc-message").unwrap_or_default();
        return Err((status, percent_decoded(&message)));
    }
    let mut body = response.into_body();
    let mut data = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.unwrap().unwrap_or_default();
    driver.abort();
    let status = header(&trailers, "grpc-status").unwrap_or_default();
    if status != "0" {
        let message = header(&trailers, "grpc-message").unwrap_or_default();
        return Err((status, percent_decoded(&message)));
    }
    let length = u32::from_be_bytes(data[1..5].try_into().unwrap()) as usize;
    assert_eq!(data.len(), 5 + length, "one whole message");
    Ok(RateLimitResponse::decode(&data[5..]).unwrap())
}
