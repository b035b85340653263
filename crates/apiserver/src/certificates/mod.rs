//! `certificates.k8s.io/v1beta1`: the validation rules of ClusterTrustBundles
//! (`trust_bundle.rs`) and PodCertificateRequests (`pod_request.rs`, `pod_status.rs`) with
//! upstream's texts, and
//! what both share: PEM scanning, signer names, and the subject keys a pod may ask for.

pub(crate) mod keys;
pub(crate) mod pod_request;
pub(crate) mod pod_status;
pub(crate) mod trust_bundle;

use crate::objects::validation::{dns1123_label, dns1123_subdomain};
use crate::status::FieldError;

/// One PEM block as Go's `encoding/pem` decodes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PemBlock {
    /// The word after `BEGIN`, e.g. `CERTIFICATE`.
    pub(crate) label: String,
    /// Whether `Key: value` header lines follow the `BEGIN` line.
    pub(crate) has_headers: bool,
    /// The decoded body.
    pub(crate) der: Vec<u8>,
}

/// The PEM blocks of `text`, in order. As Go's `pem.Decode` in a loop: text outside blocks is
/// skipped, and so is a block that does not end or whose body is not base64.
pub(crate) fn pem_blocks(text: &str) -> Vec<PemBlock> {
    use base64::Engine as _;
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = find_begin(rest) {
        let after = &rest[at + "-----BEGIN ".len()..];
        rest = after;
        let (line, body) = after.split_once('\n').unwrap_or((after, ""));
        let Some(label) = line.trim_end().strip_suffix("-----") else {
            continue;
        };
        let end = format!("-----END {label}-----");
        let Some(end_at) = body.find(&end) else {
            continue;
        };
        let mut lines = body[..end_at].lines().peekable();
        let mut has_headers = false;
        while lines.peek().is_some_and(|l| l.contains(':')) {
            has_headers = true;
            lines.next();
        }
        let b64: String = lines
            .flat_map(str::chars)
            .filter(|c| !c.is_whitespace())
            .collect();
        let Ok(der) = base64::engine::general_purpose::STANDARD.decode(b64) else {
            continue;
        };
        out.push(PemBlock {
            label: label.to_string(),
            has_headers,
            der,
        });
        rest = &body[end_at + end.len()..];
    }
    out
}

/// Where the next `-----BEGIN ` at the start of a line is.
fn find_begin(s: &str) -> Option<usize> {
    const BEGIN: &str = "-----BEGIN ";
    if s.starts_with(BEGIN) {
        return Some(0);
    }
    s.find(&format!("\n{BEGIN}")).map(|i| i + 1)
}

/// Whether the signer name is one reserved by the Kubernetes project (`kubernetes.io` or a
/// subdomain of it before the `/`).
pub(crate) fn is_kubernetes_signer(signer: &str) -> bool {
    let host = signer.split('/').next().unwrap_or("");
    host == "kubernetes.io" || host.ends_with(".kubernetes.io")
}

/// `ValidateSignerName`: `example.com/signer-name`, a domain of DNS labels with at least one
/// dot, a path of DNS subdomains separated by dots, at most 571 characters.
pub(crate) fn signer_name(field: &str, signer: &str) -> Vec<FieldError> {
    const MAX_DOMAIN: usize = 253;
    const MAX_SIGNER: usize = MAX_DOMAIN + 253 + 63 + 1 + 1;
    let mut errs = Vec::new();
    if signer.is_empty() {
        errs.push(FieldError::required(field, ""));
        return errs;
    }
    let segments: Vec<&str> = signer.split('/').collect();
    let [domain, path] = segments.as_slice() else {
        errs.push(FieldError::invalid(
            field,
            signer,
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        ));
        return errs;
    };
    if domain.len() > MAX_DOMAIN {
        errs.push(FieldError::too_long(field, MAX_DOMAIN));
    }
    let labels: Vec<&str> = domain.split('.').collect();
    for label in &labels {
        let msgs = dns1123_label(label);
        if !msgs.is_empty() {
            for m in msgs {
                errs.push(FieldError::invalid(
                    field,
                    domain,
                    format!("validating label {label:?}: {m}"),
                ));
            }
            break;
        }
    }
    if labels.len() < 2 {
        errs.push(FieldError::invalid(
            field,
            domain,
            "should be a domain with at least two segments separated by dots",
        ));
    }
    for label in path.split('.') {
        let msgs = dns1123_subdomain(label);
        if !msgs.is_empty() {
            for m in msgs {
                errs.push(FieldError::invalid(
                    field,
                    path,
                    format!("validating label {label:?}: {m}"),
                ));
            }
            break;
        }
    }
    if signer.len() > MAX_SIGNER {
        errs.push(FieldError::too_long(field, MAX_SIGNER));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_blocks_skip_text_between_blocks_and_report_headers() {
        let text = "junk\n-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\nmore\n\
                    -----BEGIN X-----\nProc-Type: 4,ENCRYPTED\n\nBAU=\n-----END X-----\n\
                    -----BEGIN BROKEN-----\n!!\n-----END BROKEN-----\n";
        let blocks = pem_blocks(text);
        assert_eq!(blocks.len(), 2);
        assert_eq!(
            (
                blocks[0].label.as_str(),
                blocks[0].has_headers,
                blocks[0].der.clone()
            ),
            ("CERTIFICATE", false, vec![1, 2, 3])
        );
        assert_eq!(
            (blocks[1].label.as_str(), blocks[1].has_headers),
            ("X", true)
        );
    }

    #[test]
    fn signer_names_need_a_dotted_domain_and_one_slash() {
        assert!(signer_name("f", "example.com/foo").is_empty());
        assert_eq!(
            signer_name("f", "example.com").remove(0).to_string(),
            "f: Invalid value: \"example.com\": must be a fully qualified domain and path of the form 'example.com/signer-name'"
        );
        assert_eq!(
            signer_name("f", "example/foo").remove(0).to_string(),
            "f: Invalid value: \"example\": should be a domain with at least two segments separated by dots"
        );
        assert_eq!(
            signer_name("f", "").remove(0).to_string(),
            "f: Required value"
        );
        assert!(is_kubernetes_signer("kubernetes.io/x"));
        assert!(is_kubernetes_signer("a.kubernetes.io/x"));
        assert!(!is_kubernetes_signer("notkubernetes.io/x"));
    }
}
