//! A pod's host name and domain (the kubelet's `GeneratePodHostNameAndDomain`, with the API's
//! DNS name checks), the host name its kernel reports, and its managed `/etc/hosts`.

use k8s_openapi::api::core::v1::Pod;

use super::error::{FQDN_MAX_LEN, MountError};

/// The cluster domain of a pod's domain `<subdomain>.<namespace>.svc.cluster.local`.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";

/// Whether the pod gets the managed `/etc/hosts` (the kubelet's `shouldMountHostsFile`): it
/// has addresses, or is hostNetwork.
pub fn should_mount_hosts_file(pod: &Pod, host_ips: &[String]) -> bool {
    !host_ips.is_empty() || is_host_network(pod)
}

/// The kubelet's managed hosts file for `pod`, to be written (mode 0644) as the pod's
/// `etc-hosts`:
///
/// * not hostNetwork: the header `# Kubernetes-managed hosts file.`, the localhost and IPv6
///   lines, then per address `<ip>\t<hostname>.<domain>\t<hostname>`, or `<ip>\t<hostname>`
///   without a domain ([`pod_hostname`]). The addresses are the pod's IPs; nodelet's
///   processes share the node's network, so they are the node's. `node_hosts` is not used.
/// * hostNetwork: the header `# Kubernetes-managed hosts file (host network).` followed by
///   `node_hosts`, the node's `/etc/hosts`, unchanged. `host_ips` is not used.
///
/// Both end with the `hostAliases` section when the pod has aliases: an empty line,
/// `# Entries added by HostAliases.` and `<ip>\t<name>\t<name>...` per alias.
pub fn hosts_file_content(pod: &Pod, host_ips: &[String], node_hosts: &str) -> String {
    let aliases: Vec<(&str, Vec<&str>)> = pod
        .spec
        .iter()
        .flat_map(|s| s.host_aliases.iter().flatten())
        .map(|a| {
            let names = a.hostnames.iter().flatten().map(String::as_str).collect();
            (a.ip.as_str(), names)
        })
        .collect();
    let mut out = if is_host_network(pod) {
        format!("# Kubernetes-managed hosts file (host network).\n{node_hosts}")
    } else {
        let (hostname, domain) = pod_hostname(pod);
        managed_hosts(host_ips, &hostname, &domain)
    };
    if !aliases.is_empty() {
        out.push_str("\n# Entries added by HostAliases.\n");
        for (ip, names) in aliases {
            out.push_str(&format!("{ip}\t{}\n", names.join("\t")));
        }
    }
    out
}

/// The pod's host name and domain (the kubelet's `GeneratePodHostNameAndDomain`, with the
/// `HostnameOverride` gate on, its v1.36 default):
/// 1. `spec.hostnameOverride`, when set, is the host name, without a domain;
/// 2. else `spec.hostname` if set, else the pod's name;
/// 3. longer than 63 characters: truncated to 63, then trailing `-` and `.` trimmed;
/// 4. the domain is `<subdomain>.<namespace>.svc.cluster.local` when `spec.subdomain` is
///    set, else empty ([`DEFAULT_CLUSTER_DOMAIN`]).
///
/// The kubelet refuses names that are not DNS labels (the override: a DNS subdomain);
/// [`make_mounts`](super::make_mounts) fails such a pod's containers with its texts.
pub fn pod_hostname(pod: &Pod) -> (String, String) {
    let generated = generate_hostname(pod, DEFAULT_CLUSTER_DOMAIN);
    (generated.hostname, generated.domain)
}

/// The host name a container's kernel reports (its UTS namespace's): the node's for a
/// hostNetwork pod (the kubelet sets none in its sandbox); else [`pod_hostname`], or
/// `<hostname>.<domain>` when `setHostnameAsFQDN` is true and there is a domain (the
/// kubelet's `GetNodenameForKernel`).
///
/// # Errors
/// The invalid names of [`make_mounts`](super::make_mounts) (0); [`MountError::FqdnTooLong`]
/// when the FQDN is longer than 64 characters.
pub fn kernel_hostname(pod: &Pod, node_hostname: &str) -> Result<String, MountError> {
    if is_host_network(pod) {
        return Ok(node_hostname.to_owned());
    }
    let generated = generate_hostname(pod, DEFAULT_CLUSTER_DOMAIN);
    if let Some(invalid) = generated.invalid {
        return Err(invalid);
    }
    let as_fqdn = pod
        .spec
        .as_ref()
        .and_then(|s| s.set_hostname_as_fqdn)
        .unwrap_or(false);
    if !as_fqdn || generated.domain.is_empty() {
        return Ok(generated.hostname);
    }
    let fqdn = format!("{}.{}", generated.hostname, generated.domain);
    if fqdn.len() > FQDN_MAX_LEN {
        return Err(MountError::FqdnTooLong { fqdn });
    }
    Ok(fqdn)
}

/// The content of a host name file (`/etc/hostname`): the name and a newline.
pub fn hostname_file_content(hostname: &str) -> String {
    format!("{hostname}\n")
}

/// A host name's limit (64 bytes with the terminating NUL); also a DNS label's.
const HOSTNAME_MAX_LEN: usize = 63;

/// A DNS subdomain's limit.
const SUBDOMAIN_MAX_LEN: usize = 253;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";

/// A pod's host name and domain, and the first reason the kubelet would refuse them.
pub(super) struct Generated {
    hostname: String,
    domain: String,
    pub(super) invalid: Option<MountError>,
}

pub(super) fn generate_hostname(pod: &Pod, cluster_domain: &str) -> Generated {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let mut invalid = None;
    let mut flag = |error: MountError| {
        invalid.get_or_insert(error);
    };
    // (1)
    if let Some(hostname) = spec.and_then(|s| s.hostname_override.as_deref()) {
        let reasons = dns1123_subdomain_errors(hostname);
        if !reasons.is_empty() {
            flag(MountError::InvalidHostnameOverride {
                hostname: hostname.to_owned(),
                reasons,
            });
        }
        let hostname = truncate_hostname(pod_name, hostname).unwrap_or_else(|(t, e)| {
            flag(e);
            t
        });
        return Generated {
            hostname,
            domain: String::new(),
            invalid,
        };
    }
    // (2)
    let mut hostname = pod_name;
    if let Some(h) = spec
        .and_then(|s| s.hostname.as_deref())
        .filter(|h| !h.is_empty())
    {
        let reasons = dns1123_label_errors(h);
        if !reasons.is_empty() {
            flag(MountError::InvalidHostname {
                hostname: h.to_owned(),
                reasons,
            });
        }
        hostname = h;
    }
    // (3)
    let hostname = truncate_hostname(pod_name, hostname).unwrap_or_else(|(t, e)| {
        flag(e);
        t
    });
    // (4)
    let mut domain = String::new();
    if let Some(sub) = spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty())
    {
        let reasons = dns1123_label_errors(sub);
        if !reasons.is_empty() {
            flag(MountError::InvalidSubdomain {
                subdomain: sub.to_owned(),
                reasons,
            });
        }
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        domain = format!("{sub}.{namespace}.svc.{cluster_domain}");
    }
    Generated {
        hostname,
        domain,
        invalid,
    }
}

/// At most 63 characters, no trailing `-` or `.` after truncation. Err: the cut name (kept
/// for a pod the kubelet would refuse) and the error.
fn truncate_hostname(pod_name: &str, hostname: &str) -> Result<String, (String, MountError)> {
    if hostname.len() <= HOSTNAME_MAX_LEN {
        return Ok(hostname.to_owned());
    }
    let mut end = HOSTNAME_MAX_LEN;
    while !hostname.is_char_boundary(end) {
        end -= 1;
    }
    let cut = &hostname[..end];
    let trimmed = cut.trim_end_matches(['-', '.']);
    if trimmed.is_empty() {
        let error = MountError::HostnameTruncation {
            pod: pod_name.to_owned(),
            hostname: hostname.to_owned(),
        };
        return Err((cut.to_owned(), error));
    }
    Ok(trimmed.to_owned())
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn is_dns1123_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    let allowed = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
    bytes.first().is_some_and(|b| *b != b'-')
        && bytes.last().is_some_and(|b| *b != b'-')
        && bytes.iter().all(allowed)
}

fn is_dns1123_subdomain(value: &str) -> bool {
    value.split('.').all(is_dns1123_label)
}

/// The API's `IsDNS1123Label` messages.
fn dns1123_label_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > HOSTNAME_MAX_LEN {
        errors.push(format!(
            "must be no more than {HOSTNAME_MAX_LEN} characters"
        ));
    }
    if !is_dns1123_label(value) {
        if is_dns1123_subdomain(value) {
            errors.push("must not contain dots".to_owned());
        } else {
            errors.push(format!(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters \
                 or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  \
                 or '123-abc', regex used for validation is '{DNS1123_LABEL_FMT}')"
            ));
        }
    }
    errors
}

/// The API's `IsDNS1123Subdomain` messages.
fn dns1123_subdomain_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > SUBDOMAIN_MAX_LEN {
        errors.push(format!(
            "must be no more than {SUBDOMAIN_MAX_LEN} characters"
        ));
    }
    if !is_dns1123_subdomain(value) {
        errors.push(format!(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
             '-' or '.', and must start and end with an alphanumeric character (e.g. \
             'example.com', regex used for validation is \
             '{DNS1123_LABEL_FMT}(\\.{DNS1123_LABEL_FMT})*')"
        ));
    }
    errors
}

/// The managed hosts file up to the aliases.
fn managed_hosts(host_ips: &[String], hostname: &str, domain: &str) -> String {
    let mut out = String::from(
        "# Kubernetes-managed hosts file.\n\
         127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\n\
         fe00::1\tip6-allnodes\n\
         fe00::2\tip6-allrouters\n",
    );
    for ip in host_ips {
        if domain.is_empty() {
            out.push_str(&format!("{ip}\t{hostname}\n"));
        } else {
            out.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n"));
        }
    }
    out
}

fn is_host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use nodelet_core::AdmittedPod;
    use serde_json::json;

    use super::*;

    fn pod(spec: serde_json::Value) -> AdmittedPod {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"namespace": "ns", "name": "web", "uid": "u1"},
            "spec": spec,
        }))
        .unwrap();
        AdmittedPod::new(pod).unwrap()
    }

    #[test]
    fn a_pod_gets_etc_hosts_when_it_has_addresses_or_the_host_network() {
        let plain = pod(json!({"containers": []}));
        let host = pod(json!({"containers": [], "hostNetwork": true}));
        assert!(!should_mount_hosts_file(&plain, &[]));
        assert!(should_mount_hosts_file(&plain, &["10.0.0.1".into()]));
        assert!(should_mount_hosts_file(&host, &[]));
    }

    const MANAGED: &str = "# Kubernetes-managed hosts file.\n\
        127.0.0.1\tlocalhost\n\
        ::1\tlocalhost ip6-localhost ip6-loopback\n\
        fe00::0\tip6-localnet\n\
        fe00::0\tip6-mcastprefix\n\
        fe00::1\tip6-allnodes\n\
        fe00::2\tip6-allrouters\n";

    #[test]
    fn the_managed_hosts_file_matches_the_kubelet_tests() {
        let one = ["123.45.67.89".to_owned()];
        assert_eq!(
            managed_hosts(&one, "podFoo", ""),
            format!("{MANAGED}123.45.67.89\tpodFoo\n")
        );
        let two = ["203.0.113.1".to_owned(), "fd00::6".to_owned()];
        assert_eq!(
            managed_hosts(&two, "podFoo", "domainFoo"),
            format!(
                "{MANAGED}203.0.113.1\tpodFoo.domainFoo\tpodFoo\n\
                 fd00::6\tpodFoo.domainFoo\tpodFoo\n"
            )
        );
    }

    #[test]
    fn the_hosts_file_of_a_plain_pod_names_it_at_each_address() {
        let pod = pod(json!({"containers": []}));
        let content = hosts_file_content(&pod, &["10.0.0.1".into()], "ignored");
        assert_eq!(content, format!("{MANAGED}10.0.0.1\tweb\n"));
    }

    #[test]
    fn the_hosts_file_of_a_pod_with_hostname_and_subdomain_has_its_fqdn() {
        let pod = pod(json!({"containers": [], "hostname": "db-0", "subdomain": "db"}));
        let content = hosts_file_content(&pod, &["10.0.0.1".into()], "");
        assert_eq!(
            content,
            format!("{MANAGED}10.0.0.1\tdb-0.db.ns.svc.cluster.local\tdb-0\n")
        );
    }

    #[test]
    fn the_hosts_file_ends_with_the_host_aliases() {
        let pod = pod(json!({"containers": [], "hostAliases": [
            {"ip": "123.45.67.89", "hostnames": ["foo", "bar", "baz"]},
            {"ip": "456.78.90.123", "hostnames": ["park", "doo", "boo"]},
        ]}));
        let content = hosts_file_content(&pod, &["203.0.113.1".into()], "");
        assert_eq!(
            content,
            format!(
                "{MANAGED}203.0.113.1\tweb\n\
                 \n\
                 # Entries added by HostAliases.\n\
                 123.45.67.89\tfoo\tbar\tbaz\n\
                 456.78.90.123\tpark\tdoo\tboo\n"
            )
        );
    }

    #[test]
    fn the_hosts_file_of_a_host_network_pod_is_the_node_file_under_its_own_header() {
        let node = "# hosts file for testing.\n127.0.0.1\tlocalhost\n123.45.67.89\tsome.domain\n";
        let pod = pod(
            json!({"containers": [], "hostNetwork": true, "hostAliases": [
                {"ip": "123.45.67.89", "hostnames": ["foo", "bar", "baz"]},
            ]}),
        );
        let content = hosts_file_content(&pod, &["10.0.0.1".into()], node);
        assert_eq!(
            content,
            format!(
                "# Kubernetes-managed hosts file (host network).\n{node}\
                 \n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\tbaz\n"
            )
        );
    }

    #[test]
    fn the_pod_hostname_follows_the_kubelet_rules() {
        let cases = [
            (json!({}), ("web", "")),
            (json!({"hostname": "custom"}), ("custom", "")),
            (
                json!({"subdomain": "sub"}),
                ("web", "sub.ns.svc.cluster.local"),
            ),
            (
                json!({"hostname": "custom", "subdomain": "sub"}),
                ("custom", "sub.ns.svc.cluster.local"),
            ),
            (
                json!({"hostname": "custom", "subdomain": "sub", "hostnameOverride": "o.v"}),
                ("o.v", ""),
            ),
        ];
        for (mut spec, (hostname, domain)) in cases {
            spec["containers"] = json!([]);
            let names = pod_hostname(&pod(spec));
            assert_eq!(names, (hostname.to_owned(), domain.to_owned()));
        }
        assert_eq!(hostname_file_content("web"), "web\n");
    }

    #[test]
    fn a_long_hostname_is_truncated_and_trimmed() {
        let cases = [
            (
                "1234567.1234567.1234567.1234567.1234567.1234567.1234567.1234567.1234567.",
                "1234567.1234567.1234567.1234567.1234567.1234567.1234567.1234567",
            ),
            (
                "1234567.1234567.1234567.1234567.1234567.1234567.1234567.123456-1234567.",
                "1234567.1234567.1234567.1234567.1234567.1234567.1234567.123456",
            ),
        ];
        for (long, short) in cases {
            let mut raw: Pod = (**pod(json!({"containers": []})).pod()).clone();
            raw.metadata.name = Some(long.to_owned());
            assert_eq!(pod_hostname(&raw).0, short);
        }
    }

    #[test]
    fn the_kernel_hostname_is_the_fqdn_only_when_asked_and_short_enough() {
        let spec = |extra: serde_json::Value| {
            let mut spec = json!({"containers": [], "subdomain": "s"});
            spec.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            pod(spec)
        };
        let fqdn = spec(json!({"setHostnameAsFQDN": true}));
        assert_eq!(
            kernel_hostname(&fqdn, "node").unwrap(),
            "web.s.ns.svc.cluster.local"
        );
        assert_eq!(kernel_hostname(&spec(json!({})), "node").unwrap(), "web");
        let host = spec(json!({"hostNetwork": true, "setHostnameAsFQDN": true}));
        assert_eq!(kernel_hostname(&host, "node").unwrap(), "node");
        let long = spec(json!({"setHostnameAsFQDN": true, "hostname": "a".repeat(42)}));
        assert_eq!(
            kernel_hostname(&long, "node").unwrap_err().to_string(),
            format!(
                "failed to construct FQDN from pod hostname and cluster domain, FQDN \
                 {}.s.ns.svc.cluster.local is too long (64 characters is the max, 65 characters \
                 requested)",
                "a".repeat(42)
            )
        );
    }
}
