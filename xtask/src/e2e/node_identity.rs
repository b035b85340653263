//! A `system:node:<name>` client identity for the agent, obtained the way a kubelet bootstraps
//! one: a CertificateSigningRequest for signer `kubernetes.io/kube-apiserver-client-kubelet`,
//! approved with the admin credentials, signed by the controller manager. Also: the node name a
//! given `--node-kubeconfig` stands for, so the agent never runs as one node while watching the
//! pods of another.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use nodelet_core::kubeconfig::{Credentials, Kubeconfig, KubeconfigSpec};
use rcgen::{CertificateParams, DnType, KeyPair};
use serde_json::{Value, json};

use super::kubectl::Kubectl;

/// How long to wait for the signer after approval. A cluster without a controller manager never
/// signs; the run then falls back to the admin identity and says so.
const SIGN_TIMEOUT: Duration = Duration::from_secs(30);

/// The signer whose certificates the API server maps to `system:node:<name>` users.
pub(crate) const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// A private key and a PEM certificate signing request for `system:node:<node>` in group
/// `system:nodes`.
pub(crate) struct NodeCsr {
    pub(crate) key_pem: String,
    pub(crate) csr_pem: String,
}

/// Generates a P-256 key and a CSR with the subject the Node authorizer expects.
pub(crate) fn node_csr(node: &str) -> Result<NodeCsr> {
    let key = KeyPair::generate().context("generating the node key")?;
    let mut params = CertificateParams::new(Vec::<String>::new()).context("CSR parameters")?;
    params
        .distinguished_name
        .push(DnType::CommonName, format!("system:node:{node}"));
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:nodes");
    let csr = params
        .serialize_request(&key)
        .context("signing the CSR")?
        .pem()
        .context("encoding the CSR")?;
    Ok(NodeCsr {
        key_pem: key.serialize_pem(),
        csr_pem: csr,
    })
}

/// The CertificateSigningRequest object for `csr`.
pub(crate) fn csr_object(name: &str, csr: &NodeCsr) -> Value {
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": { "name": name, "labels": { "app.kubernetes.io/created-by": "nodelet-e2e" } },
        "spec": {
            "request": B64.encode(csr.csr_pem.as_bytes()),
            "signerName": KUBELET_CLIENT_SIGNER,
            "usages": ["digital signature", "client auth"],
            "expirationSeconds": 86400
        }
    })
}

/// The node name when neither `--node-name` nor a node identity gives one.
pub(crate) const DEFAULT_NODE_NAME: &str = "nodelet-e2e";

/// The user `kubeconfig` authenticates as, asked of its API server (`kubectl auth whoami`, a
/// SelfSubjectReview), e.g. `system:node:dev-1`.
pub(crate) fn user_of(kubeconfig: &Path) -> Result<String> {
    let kubectl = Kubectl::new(kubeconfig, None)?;
    let user = kubectl
        .run(&[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ])
        .with_context(|| format!("asking the API server who {} is", kubeconfig.display()))?;
    let user = user.trim();
    if user.is_empty() {
        bail!("the API server named no user for {}", kubeconfig.display());
    }
    Ok(user.to_string())
}

/// The node name of a `system:node:<name>` user.
pub(crate) fn node_of_user(user: &str) -> Option<&str> {
    user.strip_prefix("system:node:").filter(|n| !n.is_empty())
}

/// The node name of the run: `--node-name` if given, else the name in the agent's
/// `system:node:<name>` identity (`identity`, from `--node-kubeconfig`), else
/// [`DEFAULT_NODE_NAME`].
///
/// # Errors
/// `--node-name` differs from the node of a `system:node:` identity: the Node authorizer would
/// refuse every request for the pods of `--node-name`, so the run must not start.
pub(crate) fn resolve_node_name(given: Option<&str>, identity: Option<&str>) -> Result<String> {
    match (given, identity.and_then(node_of_user)) {
        (Some(given), Some(node)) if given != node => bail!(
            "--node-name {given:?} does not match the identity of --node-kubeconfig, \
             {user:?} (node {node:?}): the Node authorizer would refuse the agent every pod of \
             node {given:?}; pass --node-name {node} or leave it out",
            user = identity.unwrap_or_default()
        ),
        (Some(given), _) => Ok(given.to_string()),
        (None, Some(node)) => Ok(node.to_string()),
        (None, None) => Ok(DEFAULT_NODE_NAME.to_string()),
    }
}

/// Requests, approves and collects a node client certificate, then writes a kubeconfig for it
/// next to `work_dir`. The CSR object is deleted afterwards in every case.
pub(crate) fn obtain(admin: &Kubectl, node: &str, work_dir: &Path) -> Result<PathBuf> {
    let csr = node_csr(node)?;
    let name = format!("nodelet-e2e-{node}-{}", std::process::id());
    let result = request_and_collect(admin, &name, &csr);
    if let Err(err) = admin.run(&["delete", "csr", &name, "--ignore-not-found"]) {
        eprintln!("e2e: could not delete CSR {name}: {err:#}");
    }
    let cert_pem = result?;
    let path = work_dir.join("node.kubeconfig");
    let config = node_kubeconfig(admin, node, &cert_pem, &csr.key_pem)?;
    nodelet_core::kubeconfig::write(&path, &config)?;
    Ok(path)
}

fn request_and_collect(admin: &Kubectl, name: &str, csr: &NodeCsr) -> Result<String> {
    admin
        .run_with_input(&["create", "-f", "-"], &csr_object(name, csr).to_string())
        .context("creating the node CertificateSigningRequest")?;
    admin
        .run(&["certificate", "approve", name])
        .context("approving the node CertificateSigningRequest")?;
    let deadline = Instant::now() + SIGN_TIMEOUT;
    while Instant::now() < deadline {
        let issued = admin.run(&["get", "csr", name, "-o", "jsonpath={.status.certificate}"])?;
        if !issued.trim().is_empty() {
            let pem = B64
                .decode(issued.trim())
                .context("decoding the issued certificate")?;
            return String::from_utf8(pem).context("the issued certificate is not PEM text");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    bail!(
        "CSR {name} was approved but not signed within {}s (no controller manager running the \
         {KUBELET_CLIENT_SIGNER} signer?)",
        SIGN_TIMEOUT.as_secs()
    )
}

/// A kubeconfig with the admin context's cluster (server, CA) and the node's client certificate.
fn node_kubeconfig(
    admin: &Kubectl,
    node: &str,
    cert_pem: &str,
    key_pem: &str,
) -> Result<Kubeconfig> {
    let view: Value = serde_json::from_str(&admin.run(&[
        "config",
        "view",
        "--raw",
        "--minify",
        "--flatten",
        "-o",
        "json",
    ])?)
    .context("parsing `kubectl config view` output")?;
    let cluster = view
        .pointer("/clusters/0/cluster")
        .cloned()
        .ok_or_else(|| {
            anyhow!(
                "the admin kubeconfig has no cluster for context {}",
                admin.context
            )
        })?;
    let user = format!("system:node:{node}");
    let server = cluster
        .get("server")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut config = KubeconfigSpec {
        name: "e2e",
        server: &server,
        ca_pem: None,
        user: &user,
        credentials: Credentials::ClientCertificate { cert_pem, key_pem },
        namespace: None,
    }
    .build();
    // The admin context's cluster as it is (CA data, TLS server name, proxy...).
    config.clusters[0].cluster =
        Some(serde_json::from_value(cluster).context("reading the admin kubeconfig's cluster")?);
    config.contexts[0].name = "node".into();
    config.current_context = Some("node".into());
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csr_names_the_node_user_and_group() {
        let csr = node_csr("dev-1").unwrap();
        assert!(
            csr.csr_pem
                .starts_with("-----BEGIN CERTIFICATE REQUEST-----")
        );
        assert!(csr.key_pem.contains("PRIVATE KEY"));
        // The subject's names appear verbatim (UTF8String / PrintableString) in the DER.
        let der = B64
            .decode(
                csr.csr_pem
                    .lines()
                    .filter(|l| !l.starts_with("-----"))
                    .collect::<String>(),
            )
            .unwrap();
        let contains = |needle: &[u8]| der.windows(needle.len()).any(|w| w == needle);
        assert!(contains(b"system:node:dev-1"));
        assert!(contains(b"system:nodes"));
    }

    #[test]
    fn the_csr_object_asks_the_kubelet_client_signer_for_client_auth() {
        let csr = node_csr("n1").unwrap();
        let obj = csr_object("x", &csr);
        assert_eq!(obj["spec"]["signerName"], KUBELET_CLIENT_SIGNER);
        assert_eq!(
            obj["spec"]["usages"],
            json!(["digital signature", "client auth"])
        );
        let request = B64
            .decode(obj["spec"]["request"].as_str().unwrap())
            .unwrap();
        assert_eq!(String::from_utf8(request).unwrap(), csr.csr_pem);
    }

    #[test]
    fn without_node_name_the_node_identity_names_the_node() {
        assert_eq!(
            resolve_node_name(None, Some("system:node:dev-node-1")).unwrap(),
            "dev-node-1"
        );
    }

    #[test]
    fn a_node_name_matching_the_identity_is_accepted() {
        assert_eq!(
            resolve_node_name(Some("dev-node-1"), Some("system:node:dev-node-1")).unwrap(),
            "dev-node-1"
        );
    }

    #[test]
    fn a_node_name_differing_from_the_identity_is_refused_naming_both() {
        let err = resolve_node_name(Some("nodelet-e2e"), Some("system:node:dev-node-1"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"nodelet-e2e\""), "{err}");
        assert!(err.contains("\"dev-node-1\""), "{err}");
        assert!(err.contains("system:node:dev-node-1"), "{err}");
    }

    #[test]
    fn other_identities_leave_the_name_to_the_flag_or_the_default() {
        assert_eq!(
            resolve_node_name(None, Some("kubernetes-admin")).unwrap(),
            DEFAULT_NODE_NAME
        );
        assert_eq!(resolve_node_name(None, None).unwrap(), DEFAULT_NODE_NAME);
        assert_eq!(
            resolve_node_name(Some("n1"), Some("system:admin")).unwrap(),
            "n1"
        );
        assert_eq!(node_of_user("system:node:"), None);
    }
}
