//! The cluster's ServiceAccount token key: ES256 over the P-256 key in `pki/sa.key`, its key id
//! (upstream's: the base64url SHA-256 of the public key's DER) and the JWK that
//! `/openid/v1/jwks` publishes.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header};
use rcgen::PublicKeyData;
use serde::Serialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Signs and verifies the cluster's tokens.
pub struct TokenSigner {
    encoding: EncodingKey,
    decoding: DecodingKey,
    kid: String,
    x: String,
    y: String,
}

impl TokenSigner {
    /// From the PKCS#8 PEM of a P-256 private key.
    pub fn from_pem(private_key_pem: &str) -> Result<Self, String> {
        let pair = rcgen::KeyPair::from_pem(private_key_pem)
            .map_err(|error| format!("the service-account key: {error}"))?;
        let raw = pair.public_key_raw();
        // An uncompressed P-256 point: 0x04, then x and y of 32 bytes each.
        if raw.len() != 65 || raw[0] != 0x04 {
            return Err("the service-account key is not a P-256 key".into());
        }
        let x = URL_SAFE_NO_PAD.encode(&raw[1..33]);
        let y = URL_SAFE_NO_PAD.encode(&raw[33..]);
        let encoding = EncodingKey::from_ec_pem(private_key_pem.as_bytes())
            .map_err(|error| format!("the service-account key: {error}"))?;
        let decoding = DecodingKey::from_ec_components(&x, &y)
            .map_err(|error| format!("the service-account key: {error}"))?;
        let kid = URL_SAFE_NO_PAD.encode(Sha256::digest(pair.subject_public_key_info()));
        Ok(Self {
            encoding,
            decoding,
            kid,
            x,
            y,
        })
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// A signed JWT of `claims`.
    pub fn sign(&self, claims: &impl Serialize) -> Result<String, String> {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).map_err(|error| error.to_string())
    }

    pub fn decoding_key(&self) -> &DecodingKey {
        &self.decoding
    }

    /// The public key as a JWK Set (`/openid/v1/jwks`).
    pub fn jwks(&self) -> Value {
        json!({"keys": [{
            "use": "sig",
            "kty": "EC",
            "kid": self.kid,
            "crv": "P-256",
            "alg": "ES256",
            "x": self.x,
            "y": self.y,
        }]})
    }
}
