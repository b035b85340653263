//! The service-account token signer: an ES256 key generated at start, signing and verifying
//! the JWTs TokenRequest issues (format in `token_request.rs`), and the OIDC discovery
//! documents (`/.well-known/openid-configuration`, `/openid/v1/jwks`).

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _};
use serde_json::{Value, json};

use crate::error::Error;
use crate::status::ApiError;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The service-account token signing key of one server.
pub(crate) struct Signer {
    key: EcdsaKeyPair,
    kid: String,
    issuer: String,
    rng: SystemRandom,
}

impl Signer {
    /// Generates a P-256 key.
    pub(crate) fn generate(issuer: &str) -> Result<Signer, Error> {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).map_err(|e| Error::Keygen {
            what: "service account signing key",
            source: e.to_string().into(),
        })?;
        let key =
            EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).map_err(|e| Error::Keygen {
                what: "service account signing key",
                source: e.to_string().into(),
            })?;
        let kid =
            b64(ring::digest::digest(&ring::digest::SHA256, key.public_key().as_ref()).as_ref());
        Ok(Signer {
            key,
            kid,
            issuer: issuer.to_string(),
            rng,
        })
    }

    /// Signs `claims` as a compact JWS.
    pub(crate) fn sign(&self, claims: &Value) -> Result<String, ApiError> {
        let header = json!({"alg": "ES256", "kid": self.kid});
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let sig = self.key.sign(&self.rng, input.as_bytes()).map_err(|_| {
            ApiError::new(
                500,
                "InternalError",
                "Internal error occurred: failed to sign token",
            )
        })?;
        Ok(format!("{input}.{}", b64(sig.as_ref())))
    }

    /// The claims of a token this signer issued for `issuer`, if its signature is valid, it is
    /// within its lifetime and its audience includes one of `audiences` (for a request: this
    /// server's API audience, the issuer), with the audiences the token and `audiences` share.
    pub(crate) fn verify_for(
        &self,
        token: &str,
        issuer: &str,
        audiences: &[String],
    ) -> Option<(Value, Vec<String>)> {
        let mut parts = token.split('.');
        let (h, c, s) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let dec = |p: &str| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(p)
                .ok()
        };
        let header: Value = serde_json::from_slice(&dec(h)?).ok()?;
        if header.get("alg")? != "ES256" || header.get("kid")? != self.kid.as_str() {
            return None;
        }
        signature::UnparsedPublicKey::new(
            &signature::ECDSA_P256_SHA256_FIXED,
            self.key.public_key().as_ref(),
        )
        .verify(format!("{h}.{c}").as_bytes(), &dec(s)?)
        .ok()?;
        let claims: Value = serde_json::from_slice(&dec(c)?).ok()?;
        let now = chrono::Utc::now().timestamp();
        let num = |k: &str| claims.get(k).and_then(Value::as_i64);
        let token_auds: Vec<&str> = match claims.get("aud")? {
            Value::String(a) => vec![a.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let shared: Vec<String> = audiences
            .iter()
            .filter(|a| token_auds.contains(&a.as_str()))
            .cloned()
            .collect();
        (claims.get("iss")? == issuer
            && !shared.is_empty()
            && num("exp")? > now
            && num("nbf").unwrap_or(0) <= now)
            .then_some((claims, shared))
    }

    /// `/openid/v1/jwks`.
    pub(crate) fn jwks(&self) -> Value {
        let point = self.key.public_key().as_ref();
        // Uncompressed point: 0x04 || X (32 bytes) || Y (32 bytes).
        let (x, y) = point
            .get(1..)
            .unwrap_or_default()
            .split_at(32.min(point.len().saturating_sub(1)));
        json!({"keys": [{"use": "sig", "kty": "EC", "crv": "P-256", "kid": self.kid, "alg": "ES256", "x": b64(x), "y": b64(y)}]})
    }

    /// `/.well-known/openid-configuration`.
    pub(crate) fn openid_configuration(&self) -> Value {
        json!({
            "issuer": self.issuer,
            "jwks_uri": format!("{}/openid/v1/jwks", self.issuer),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Signer {
        fn verify(&self, token: &str, issuer: &str) -> Option<Value> {
            self.verify_for(token, issuer, &[issuer.to_string()])
                .map(|(claims, _)| claims)
        }
    }

    #[test]
    fn a_token_verifies_for_the_audiences_it_shares_with_those_asked() {
        let s = Signer::generate("https://iss").unwrap();
        let exp = chrono::Utc::now().timestamp() + 600;
        let t = s
            .sign(&json!({"iss": "https://iss", "aud": ["a", "b"], "exp": exp}))
            .unwrap();
        let asked = ["b".to_string(), "c".to_string()];
        let (_, shared) = s.verify_for(&t, "https://iss", &asked).unwrap();
        assert_eq!(shared, ["b"]);
        assert!(s.verify_for(&t, "https://iss", &["c".into()]).is_none());
        assert!(s.verify(&t, "https://iss").is_none());
    }

    #[test]
    fn a_signed_token_verifies_and_a_tampered_one_does_not() {
        let s = Signer::generate("https://iss").unwrap();
        let exp = chrono::Utc::now().timestamp() + 600;
        let t = s
            .sign(&json!({"iss": "https://iss", "aud": ["https://iss"], "exp": exp, "sub": "x"}))
            .unwrap();
        assert_eq!(s.verify(&t, "https://iss").unwrap()["sub"], "x");
        assert!(s.verify(&t, "https://other").is_none());
        let mut bad = t.clone();
        bad.insert(bad.len() / 2, 'A');
        assert!(s.verify(&bad, "https://iss").is_none());
        let other = Signer::generate("https://iss").unwrap();
        assert!(other.verify(&t, "https://iss").is_none());
    }

    #[test]
    fn an_expired_token_does_not_verify() {
        let s = Signer::generate("i").unwrap();
        let t = s.sign(&json!({"iss": "i", "aud": "i", "exp": 1})).unwrap();
        assert!(s.verify(&t, "i").is_none());
    }
}
