//! Checks made before the agent starts, so that what is missing is named once, up front, rather
//! than as the same failure in every scenario: the rights of the `--kubeconfig` identity, and
//! that no other kubelet or agent runs as the node already.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::kubectl::Kubectl;

/// A right the suite's admin client needs, in every namespace (scenarios make their own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Right {
    pub(crate) verb: &'static str,
    /// API group, `""` for core.
    pub(crate) group: &'static str,
    pub(crate) resource: &'static str,
}

const fn right(verb: &'static str, group: &'static str, resource: &'static str) -> Right {
    Right {
        verb,
        group,
        resource,
    }
}

/// What the scenarios and the teardown do with the admin identity: namespaces and the objects in
/// them, the events the agent records, the agent's Node (deleted at teardown) and its Lease.
/// ClusterTrustBundles are left out: that scenario is skipped where the API is not served.
pub(crate) const ADMIN_RIGHTS: &[Right] = &[
    right("create", "", "namespaces"),
    right("delete", "", "namespaces"),
    right("create", "", "serviceaccounts"),
    right("get", "", "serviceaccounts"),
    right("create", "", "configmaps"),
    right("get", "", "configmaps"),
    right("update", "", "configmaps"),
    right("delete", "", "configmaps"),
    right("create", "", "secrets"),
    right("get", "", "secrets"),
    right("update", "", "secrets"),
    right("delete", "", "secrets"),
    right("create", "", "pods"),
    right("get", "", "pods"),
    right("list", "", "pods"),
    right("patch", "", "pods"),
    right("delete", "", "pods"),
    right("list", "", "events"),
    right("list", "events.k8s.io", "events"),
    right("get", "", "nodes"),
    right("delete", "", "nodes"),
    right("get", "coordination.k8s.io", "leases"),
];

/// `--existing-node` also creates the Node.
pub(crate) const EXISTING_NODE_RIGHTS: &[Right] = &[right("create", "", "nodes")];

/// A List of SelfSubjectAccessReviews, one per right, cluster-wide.
pub(crate) fn access_reviews(rights: &[Right]) -> Value {
    let items: Vec<Value> = rights
        .iter()
        .map(|r| {
            json!({
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": { "resourceAttributes": {
                    "verb": r.verb, "group": r.group, "resource": r.resource
                } }
            })
        })
        .collect();
    json!({ "apiVersion": "v1", "kind": "List", "items": items })
}

/// The reviews in what `kubectl create -o json` printed for [`access_reviews`]: one JSON object
/// per review (kubectl 1.36), or a List of them (other versions).
pub(crate) fn answers(text: &str) -> Result<Vec<Value>> {
    let mut items = Vec::new();
    for value in serde_json::Deserializer::from_str(text).into_iter::<Value>() {
        let value = value.context("parsing the SelfSubjectAccessReview answer")?;
        match value.get("items").and_then(Value::as_array) {
            Some(list) => items.extend(list.iter().cloned()),
            None => items.push(value),
        }
    }
    Ok(items)
}

/// The rights the answered reviews ([`answers`]) deny, as `verb resource[.group]`.
pub(crate) fn denied(rights: &[Right], items: &[Value]) -> Result<Vec<String>> {
    if items.len() != rights.len() {
        bail!(
            "{} SelfSubjectAccessReviews answered, {} asked",
            items.len(),
            rights.len()
        );
    }
    Ok(rights
        .iter()
        .zip(items)
        .filter(|(_, item)| item.pointer("/status/allowed") != Some(&Value::Bool(true)))
        .map(|(r, _)| {
            if r.group.is_empty() {
                format!("{} {}", r.verb, r.resource)
            } else {
                format!("{} {}.{}", r.verb, r.resource, r.group)
            }
        })
        .collect())
}

/// Fails, naming every right `admin` lacks in all namespaces, unless it has them all.
pub(crate) fn check_admin_rights(admin: &Kubectl, existing_node: bool) -> Result<()> {
    let mut rights = ADMIN_RIGHTS.to_vec();
    if existing_node {
        rights.extend_from_slice(EXISTING_NODE_RIGHTS);
    }
    let answer = admin
        .run_with_input(
            &["create", "-o", "json", "-f", "-"],
            &access_reviews(&rights).to_string(),
        )
        .context("asking the API server what the --kubeconfig identity may do")?;
    let denied = denied(&rights, &answers(&answer)?)?;
    if denied.is_empty() {
        return Ok(());
    }
    let user =
        super::node_identity::user_of(&admin.kubeconfig).unwrap_or_else(|_| "its user".to_string());
    bail!(
        "the --kubeconfig identity ({user}, context {}) may not, in every namespace: {}. The \
         suite creates a namespace per scenario and the objects and pods in it, reads events, \
         and deletes the agent's Node at teardown: give it cluster-admin (a kind or kubeadm \
         admin.conf has it), or a ClusterRole with these rights",
        admin.context,
        denied.join(", ")
    )
}

/// How long to watch an existing Node's Lease for a renewal by someone else: longer than the
/// kubelet's renew interval (10 s, a quarter of the 40 s lease).
const LEASE_WATCH: Duration = Duration::from_secs(12);

/// Fails when another kubelet or agent runs as `node`: its Lease is renewed while this run
/// watches it (a Lease merely left by a stopped agent is not renewed). Two agents of one node
/// would both sync its pods and overwrite each other's status.
pub(crate) fn check_node_not_in_use(admin: &Kubectl, node: &str) -> Result<()> {
    let renewed = || -> Result<Option<(String, String)>> {
        let out = admin.run(&[
            "get",
            "lease",
            node,
            "-n",
            "kube-node-lease",
            "--ignore-not-found",
            "-o",
            "json",
        ])?;
        if out.trim().is_empty() {
            return Ok(None);
        }
        let lease: Value = serde_json::from_str(&out).context("parsing the node's Lease")?;
        let field = |name: &str| {
            lease
                .pointer(&format!("/spec/{name}"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        Ok(Some((field("renewTime"), field("holderIdentity"))))
    };
    let Some((first, _)) = renewed()? else {
        return Ok(());
    };
    eprintln!(
        "e2e: node {node} exists with a Lease: checking for {}s that no other agent renews it",
        LEASE_WATCH.as_secs()
    );
    let deadline = Instant::now() + LEASE_WATCH;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        if let Some((now, holder)) = renewed()?
            && now != first
        {
            bail!(
                "node {node} is in use: its Lease kube-node-lease/{node} (holder {holder:?}) \
                 was renewed at {first} and again at {now} while this run watched it, so a \
                 kubelet or nodelet runs as {node}. Stop it first, or run as another node \
                 (--node-name, with a --node-kubeconfig of that node)"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_right_becomes_one_cluster_wide_review() {
        let reviews = access_reviews(ADMIN_RIGHTS);
        let items = reviews["items"].as_array().unwrap();
        assert_eq!(items.len(), ADMIN_RIGHTS.len());
        let events = ADMIN_RIGHTS
            .iter()
            .position(|r| r.group == "events.k8s.io")
            .unwrap();
        assert_eq!(
            items[events]["spec"]["resourceAttributes"],
            json!({"verb": "list", "group": "events.k8s.io", "resource": "events"})
        );
        assert!(
            items
                .iter()
                .all(|i| i["spec"]["resourceAttributes"].get("namespace").is_none())
        );
    }

    #[test]
    fn the_denied_rights_are_named_with_their_group() {
        let rights = [
            right("create", "", "namespaces"),
            right("list", "events.k8s.io", "events"),
            right("get", "", "pods"),
        ];
        let want = vec!["create namespaces", "list events.events.k8s.io"];
        // kubectl 1.36 prints one object per review; others a List.
        let stream = r#"{"status": {"allowed": false}}
{"status": {"allowed": false, "reason": "no"}}
{"status": {"allowed": true}}"#;
        assert_eq!(denied(&rights, &answers(stream).unwrap()).unwrap(), want);
        let list = json!({"kind": "List", "items": [
            {"status": {"allowed": false}},
            {"status": {"allowed": false, "reason": "no"}},
            {"status": {"allowed": true}}
        ]});
        let items = answers(&list.to_string()).unwrap();
        assert_eq!(denied(&rights, &items).unwrap(), want);
    }

    #[test]
    fn an_answer_that_does_not_match_the_question_is_an_error() {
        let rights = [right("get", "", "pods")];
        assert!(denied(&rights, &[]).is_err());
        assert!(answers("{\"status\": ").is_err());
    }
}
