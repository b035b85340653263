//! An in-cluster client: lists the ConfigMaps of its pod's namespace with kube-rs's in-cluster
//! configuration, as any program running in a pod connects to its cluster.
//!
//! kube-rs reads `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` (the service
//! variables the node gives every container) and the service account's token, CA and
//! namespace under `/var/run/secrets/kubernetes.io/serviceaccount` (the `kube-api-access-*`
//! volume). Run it as a pod on a nodelet node with `--runtime process`, its image mapped to
//! this program (`cargo build --example in-cluster`; `target/debug/examples/in-cluster`):
//!
//! ```yaml
//! images:
//!   - image: "example.com/in-cluster:*"
//!     entrypoint: ["/path/to/target/debug/examples/in-cluster"]
//! ```
//!
//! It prints `configmap <name>` per ConfigMap and exits 0, or the error and exits 1.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Err(error) = list().await {
        eprintln!("in-cluster client failed: {error}");
        std::process::exit(1);
    }
}

async fn list() -> Result<(), Box<dyn std::error::Error>> {
    let config = kube::Config::incluster()?;
    println!("api server {}", config.cluster_url);
    let namespace = config.default_namespace.clone();
    let client = kube::Client::try_from(config)?;
    let configmaps = Api::<ConfigMap>::namespaced(client, &namespace)
        .list(&ListParams::default())
        .await?;
    for cm in configmaps {
        println!("configmap {}", cm.metadata.name.unwrap_or_default());
    }
    Ok(())
}
