//! Authentication of kubelet API requests, as the kubelet's delegating authenticator does it
//! with `--client-ca-file`, webhook token authentication and anonymous requests disabled (as
//! kubeadm configures kubelets):
//!
//! 1. A client certificate whose chain verifies against the client CA for client use: the
//!    user is the subject's common name (a certificate without one authenticates no one), the
//!    groups its organizations, the UID its `1.3.6.1.4.1.57683.2` attribute (at most one), and
//!    `authentication.kubernetes.io/credential-id` is `X509SHA256=<hex of the certificate's
//!    SHA-256>`.
//! 2. Else an `Authorization: Bearer <token>` header: a `TokenReview` (authentication.k8s.io/v1,
//!    no audiences) created with the node's client; its answer, authenticated or not, is kept
//!    for the webhook cache TTL (the kubelet's `authentication.webhook.cacheTTL`, 2 min),
//!    failed reviews not at all. Tokens are kept by their SHA-256, never as they are.
//! 3. Else the request is not authenticated (`401 Unauthorized`).
//!
//! Every authenticated user is also in `system:authenticated`. A certificate that does not
//! verify does not end the request: it goes on to step 2, as in the kubelet.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, header};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::api::{Api, PostParams};
use rustls::pki_types::CertificateDer;
use rustls::server::danger::ClientCertVerifier;
use tracing::{debug, warn};
use x509_parser::oid_registry::Oid;
use x509_parser::prelude::{FromDer as _, X509Certificate, X509Name};

use super::cache::TtlCache;
use super::tls::{Peer, verify_client};

/// The group of every authenticated user.
pub(super) const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// The key of a certificate's credential ID in a user's `extra`.
const CREDENTIAL_ID_KEY: &str = "authentication.kubernetes.io/credential-id";

/// Who made a request: what the kubelet sends in a `SubjectAccessReview`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct UserInfo {
    pub(super) name: String,
    pub(super) uid: String,
    pub(super) groups: Vec<String>,
    pub(super) extra: BTreeMap<String, Vec<String>>,
}

/// Tells who made a request (module docs).
pub(super) struct Authenticator {
    client: kube::Client,
    client_ca: Option<Arc<dyn ClientCertVerifier>>,
    /// Token reviews by the SHA-256 of the token: the user, or `None` for "not authenticated".
    tokens: TtlCache<[u8; 32], Option<UserInfo>>,
    ttl: Duration,
}

impl Authenticator {
    /// Verifies certificates with `client_ca` (none accepted without), reviews tokens with
    /// `client` and keeps the answers for `ttl`.
    pub(super) fn new(
        client: kube::Client,
        client_ca: Option<Arc<dyn ClientCertVerifier>>,
        ttl: Duration,
    ) -> Self {
        Self {
            client,
            client_ca,
            tokens: TtlCache::new(),
            ttl,
        }
    }

    /// The user of a request from `peer` with `headers`; `None` when unauthenticated.
    pub(super) async fn authenticate(&self, peer: &Peer, headers: &HeaderMap) -> Option<UserInfo> {
        // (1)
        if let Some(verifier) = &self.client_ca {
            let user = verify_client(verifier.as_ref(), peer)
                .map_err(|e| e.to_string())
                .and_then(|cert| cert.map_or(Ok(None), user_from_certificate));
            match user {
                Ok(Some(user)) => return Some(authenticated(user)),
                Ok(None) => {}
                Err(error) => debug!(peer = %peer.addr, %error, "client certificate not accepted"),
            }
        }
        // (2)
        let token = bearer_token(headers)?;
        match self.review(token).await {
            Ok(user) => user.map(authenticated),
            Err(error) => {
                warn!(peer = %peer.addr, error = %error, "token review failed");
                None
            }
        }
    }

    async fn review(&self, token: &str) -> Result<Option<UserInfo>, kube::Error> {
        let key = sha256(token.as_bytes());
        if let Some(answer) = self.tokens.get(&key) {
            return Ok(answer);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let status = reviewed.status.unwrap_or_default();
        let answer = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => Some(UserInfo {
                name: user.username.unwrap_or_default(),
                uid: user.uid.unwrap_or_default(),
                groups: user.groups.unwrap_or_default(),
                extra: user.extra.unwrap_or_default(),
            }),
            _ => {
                if let Some(error) = status.error.filter(|e| !e.is_empty()) {
                    debug!(%error, "token not authenticated");
                }
                None
            }
        };
        self.tokens.insert(key, answer.clone(), self.ttl);
        Ok(answer)
    }
}

/// The token of an `Authorization: Bearer <token>` header, as the kubelet reads it: the
/// header trimmed, the scheme in any case, the token up to the next space; an empty token is
/// none.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The user a verified certificate names (module docs, step 1); `None` without a common name.
///
/// # Errors
/// The certificate cannot be parsed, or its UID attribute is repeated, empty or not a string
/// (the kubelet's texts).
fn user_from_certificate(der: &CertificateDer<'_>) -> Result<Option<UserInfo>, String> {
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| e.to_string())?;
    let mut id = String::from("X509SHA256=");
    for byte in sha256(der) {
        let _ = write!(id, "{byte:02x}");
    }
    user_from_subject(cert.subject(), id)
}

/// The user `subject` names, with the certificate's credential ID `id`.
fn user_from_subject(subject: &X509Name<'_>, id: String) -> Result<Option<UserInfo>, String> {
    // As Go's `pkix.Name`: the last common name counts.
    let Some(name) = subject
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok())
        .last()
        .filter(|cn| !cn.is_empty())
    else {
        return Ok(None);
    };
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .map(str::to_owned)
        .collect();
    let uid_oid = Oid::from(&[1, 3, 6, 1, 4, 1, 57683, 2]).map_err(|e| format!("{e:?}"))?;
    let uids = subject
        .iter_by_oid(&uid_oid)
        .map(|attribute| attribute.as_str().map(str::to_owned))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "unable to parse UID into a string".to_owned())?;
    let uid = match uids.as_slice() {
        [] => String::new(),
        [uid] if uid.is_empty() => return Err("UID cannot be an empty string".to_owned()),
        [uid] => uid.clone(),
        many => {
            return Err(format!(
                "expected 1 UID, but found multiple: [{}]",
                many.join(" ")
            ));
        }
    };
    Ok(Some(UserInfo {
        name: name.to_owned(),
        uid,
        groups,
        extra: BTreeMap::from([(CREDENTIAL_ID_KEY.to_owned(), vec![id])]),
    }))
}

/// `user` in `system:authenticated` (the kubelet's `AuthenticatedGroupAdder`).
fn authenticated(mut user: UserInfo) -> UserInfo {
    let marked = user
        .groups
        .iter()
        .any(|g| g == AUTHENTICATED_GROUP || g == "system:unauthenticated");
    if user.name != "system:anonymous" && !marked {
        user.groups.push(AUTHENTICATED_GROUP.to_owned());
    }
    user
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(authorization: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(authorization).unwrap(),
        );
        headers
    }

    /// A DER `Name` with one attribute (OID arcs, UTF8String value) per RDN, in order.
    fn name(attributes: &[(&[u64], &str)]) -> Vec<u8> {
        fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
            let mut out = vec![tag];
            match u8::try_from(content.len()) {
                Ok(n) if n < 128 => out.push(n),
                _ => {
                    let n = u16::try_from(content.len()).unwrap();
                    out.push(0x82);
                    out.extend_from_slice(&n.to_be_bytes());
                }
            }
            out.extend_from_slice(content);
            out
        }
        let oid = |arcs: &[u64]| {
            let mut out = vec![u8::try_from(arcs[0] * 40 + arcs[1]).unwrap()];
            for &arc in &arcs[2..] {
                let mut digits = vec![u8::try_from(arc & 0x7f).unwrap()];
                let mut rest = arc >> 7;
                while rest > 0 {
                    digits.push(u8::try_from(rest & 0x7f).unwrap() | 0x80);
                    rest >>= 7;
                }
                out.extend(digits.iter().rev());
            }
            out
        };
        let rdns: Vec<u8> = attributes
            .iter()
            .flat_map(|(arcs, value)| {
                let pair = [tlv(0x06, &oid(arcs)), tlv(0x0c, value.as_bytes())].concat();
                tlv(0x31, &tlv(0x30, &pair))
            })
            .collect();
        tlv(0x30, &rdns)
    }

    const CN: &[u64] = &[2, 5, 4, 3];
    const O: &[u64] = &[2, 5, 4, 10];
    const UID: &[u64] = &[1, 3, 6, 1, 4, 1, 57683, 2];

    fn user(attributes: &[(&[u64], &str)]) -> Result<Option<UserInfo>, String> {
        let der = name(attributes);
        let (_, subject) = X509Name::from_der(&der).unwrap();
        user_from_subject(&subject, "X509SHA256=00".to_owned())
    }

    #[test]
    fn a_bearer_token_is_read_as_the_kubelet_reads_it() {
        assert_eq!(bearer_token(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("  bearer abc  ")), Some("abc"));
        assert_eq!(bearer_token(&headers("BEARER abc extra")), Some("abc"));
        assert_eq!(bearer_token(&headers("Bearer  abc")), None);
        assert_eq!(bearer_token(&headers("Bearer")), None);
        assert_eq!(bearer_token(&headers("Basic abc")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }

    #[test]
    fn a_certificate_names_the_user_by_its_last_common_name_and_groups_by_organizations() {
        let user = user(&[
            (O, "system:masters"),
            (O, "ops"),
            (CN, "first"),
            (CN, "alice"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, ["system:masters", "ops"]);
        assert_eq!(user.uid, "");
        assert_eq!(user.extra[CREDENTIAL_ID_KEY], ["X509SHA256=00"]);
    }

    #[test]
    fn a_certificate_uid_attribute_is_the_users_uid_and_must_be_single_and_non_empty() {
        assert_eq!(
            user(&[(CN, "bob"), (UID, "u-1")]).unwrap().unwrap().uid,
            "u-1"
        );
        assert_eq!(
            user(&[(CN, "bob"), (UID, "")]).unwrap_err(),
            "UID cannot be an empty string"
        );
        assert_eq!(
            user(&[(CN, "bob"), (UID, "u-1"), (UID, "u-2")]).unwrap_err(),
            "expected 1 UID, but found multiple: [u-1 u-2]"
        );
    }

    #[test]
    fn a_certificate_without_a_common_name_authenticates_no_one() {
        assert_eq!(user(&[(O, "system:masters")]).unwrap(), None);
        assert_eq!(user(&[(CN, "")]).unwrap(), None);
    }

    #[test]
    fn a_certificates_credential_id_is_the_sha256_of_its_der() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "carol");
        let der = params.self_signed(&key).unwrap().der().clone();
        let user = user_from_certificate(&der).unwrap().unwrap();
        assert_eq!(user.name, "carol");
        let digest = ring::digest::digest(&ring::digest::SHA256, &der);
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(user.extra[CREDENTIAL_ID_KEY], [format!("X509SHA256={hex}")]);
    }

    #[test]
    fn authenticated_users_are_in_system_authenticated_once() {
        let user = |groups: &[&str]| UserInfo {
            name: "alice".into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..UserInfo::default()
        };
        assert_eq!(
            authenticated(user(&["ops"])).groups,
            ["ops", AUTHENTICATED_GROUP]
        );
        assert_eq!(
            authenticated(user(&[AUTHENTICATED_GROUP])).groups,
            [AUTHENTICATED_GROUP]
        );
    }
}
