//! [`delete_node`]: the node removed from the cluster (`nodelet reset --delete-node`): first
//! its Lease (`kube-node-lease/<node>`), then its Node, each on its own (a refusal of one does
//! not stop the other).
//!
//! Under the Node authorizer a node identity (`system:node:<node>`) may delete its own Lease
//! but not its Node: the authorizer allows a node only to create, update and patch Node
//! objects, and the `system:node` role that might add more is bound to no one by default.
//! That 403 is reported with the API server's message and what to do instead (`kubectl
//! delete node` as an admin); admin credentials delete both. The only request of this crate
//! a node identity may be refused: it is made with the credentials the caller gives.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::DeleteParams;

/// The namespace of node Leases.
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// One API object of the node and what [`delete_node`] did with it.
#[derive(Debug)]
#[non_exhaustive]
pub struct NodeObject {
    /// `Lease kube-node-lease/<node>` or `Node <node>`.
    pub what: String,
    /// What happened.
    pub outcome: Deletion,
}

/// What happened to one of the node's API objects.
#[derive(Debug)]
pub enum Deletion {
    /// Deleted.
    Deleted,
    /// Exists and would be deleted (`dry_run`).
    WouldDelete,
    /// Not there (already deleted).
    NotFound,
    /// The API server refused (403): its message, and for the Node what to do instead.
    Forbidden(String),
    /// Any other failure.
    Failed(String),
}

impl Deletion {
    /// Whether the object is not deleted although it may exist (a refusal or a failure).
    pub fn is_failure(&self) -> bool {
        matches!(self, Deletion::Forbidden(_) | Deletion::Failed(_))
    }
}

/// Deletes the Lease, then the Node, of `node` through `client` (module docs); with `dry_run`
/// only reads them. Never stops at a failure: each object's outcome is returned.
pub async fn delete_node(client: kube::Client, node: &str, dry_run: bool) -> Vec<NodeObject> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), NODE_LEASE_NAMESPACE);
    let nodes: Api<Node> = Api::all(client);
    let lease = NodeObject {
        what: format!("Lease {NODE_LEASE_NAMESPACE}/{node}"),
        outcome: delete_one(&leases, node, dry_run, None).await,
    };
    let hint = format!(
        "a node identity may not delete its own Node (the Node authorizer lets a node only \
         create, update and patch it); delete it with admin credentials: kubectl delete node {node}"
    );
    let node_object = NodeObject {
        what: format!("Node {node}"),
        outcome: delete_one(&nodes, node, dry_run, Some(&hint)).await,
    };
    vec![lease, node_object]
}

async fn delete_one<K>(api: &Api<K>, name: &str, dry_run: bool, hint: Option<&str>) -> Deletion
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    let result = if dry_run {
        api.get(name).await.map(|_| Deletion::WouldDelete)
    } else {
        api.delete(name, &DeleteParams::default())
            .await
            .map(|_| Deletion::Deleted)
    };
    match result {
        Ok(done) => done,
        Err(kube::Error::Api(status)) if status.code == 404 => Deletion::NotFound,
        Err(kube::Error::Api(status)) if status.code == 403 => Deletion::Forbidden(match hint {
            Some(hint) => format!("{}; {hint}", status.message),
            None => status.message.clone(),
        }),
        Err(error) => Deletion::Failed(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use kube::api::PostParams;

    use super::*;

    fn outcomes(objects: &[NodeObject]) -> Vec<(String, String)> {
        objects
            .iter()
            .map(|o| (o.what.clone(), format!("{:?}", o.outcome)))
            .collect()
    }

    #[tokio::test]
    async fn the_lease_then_the_node_are_deleted_a_dry_run_only_reads_and_gone_is_not_found() {
        let server = nodelet_apiserver::ApiServer::start(nodelet_apiserver::Config::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let client = server.client();
        let mut node = Node::default();
        node.metadata.name = Some("n1".into());
        let mut lease = Lease::default();
        lease.metadata.name = Some("n1".into());
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        Api::<Lease>::namespaced(client.clone(), NODE_LEASE_NAMESPACE)
            .create(&PostParams::default(), &lease)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let names = ["Lease kube-node-lease/n1".to_owned(), "Node n1".to_owned()];

        let dry = delete_node(client.clone(), "n1", true).await;
        assert_eq!(
            outcomes(&dry),
            names
                .iter()
                .map(|n| (n.clone(), "WouldDelete".to_owned()))
                .collect::<Vec<_>>()
        );
        let done = delete_node(client.clone(), "n1", false).await;
        assert_eq!(
            outcomes(&done),
            names
                .iter()
                .map(|n| (n.clone(), "Deleted".to_owned()))
                .collect::<Vec<_>>()
        );
        assert!(!done.iter().any(|o| o.outcome.is_failure()));
        let again = delete_node(client, "n1", false).await;
        assert_eq!(
            outcomes(&again),
            names
                .iter()
                .map(|n| (n.clone(), "NotFound".to_owned()))
                .collect::<Vec<_>>()
        );
    }
}
