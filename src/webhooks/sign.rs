//! Standard Webhooks signatures: `webhook-signature: v1,<base64 of HMAC-SHA256
//! over "<webhook-id>.<webhook-timestamp>.<body>">`, keyed with the secret's
//! base64-decoded bytes (what follows `whsec_`). No I/O.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The `webhook-signature` value of one attempt.
pub fn signature(key: &[u8], id: &str, timestamp: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let sig = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    format!("v1,{sig}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Standard Webhooks specification's published test vector: a receiver
    /// using any of its libraries verifies what tasklift signs.
    #[test]
    fn signs_as_the_standard_webhooks_test_vector() {
        let key = base64::engine::general_purpose::STANDARD
            .decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .unwrap();
        assert_eq!(
            signature(
                &key,
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1614265330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn another_id_timestamp_or_body_is_another_signature() {
        let key = [7u8; 24];
        let base = signature(&key, "msg_1", 1, b"{}");
        assert_ne!(base, signature(&key, "msg_2", 1, b"{}"));
        assert_ne!(base, signature(&key, "msg_1", 2, b"{}"));
        assert_ne!(base, signature(&key, "msg_1", 1, b"{ }"));
    }
}
