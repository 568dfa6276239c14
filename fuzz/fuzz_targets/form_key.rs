//! `events::decode_form_key` on arbitrary text: decoded or refused, never a panic; and a
//! decoded key, form-encoded as S3 encodes keys in notifications, decodes back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tidemark::events::decode_form_key;

/// S3's encoding of a key in a notification: space as `+`, everything but unreserved
/// characters and `/` percent-encoded.
fn form_encode(key: &str) -> String {
    let mut out = String::new();
    for b in key.bytes() {
        match b {
            b' ' => out.push('+'),
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(key) = decode_form_key(raw) {
        assert_eq!(
            decode_form_key(&form_encode(&key)).ok().as_deref(),
            Some(key.as_str())
        );
    }
    // Every key round-trips, whatever it holds.
    assert_eq!(
        decode_form_key(&form_encode(raw)).ok().as_deref(),
        Some(raw)
    );
});
