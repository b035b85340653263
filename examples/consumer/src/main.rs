//! `nodelet-consumer-example NAMESPACE CONFIGMAP SECRET DIR`: keeps the two objects projected
//! into `DIR/configmap/` and `DIR/secret/` until Ctrl-C, using the cluster of the current
//! kubeconfig (or the in-cluster service account).

use anyhow::Context as _;
use nodelet_consumer_example::{Settings, run};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();

    let args: Vec<String> = std::env::args().skip(1).collect();
    let [namespace, config_map, secret, dir] = <[String; 4]>::try_from(args).map_err(|_| {
        anyhow::anyhow!("usage: nodelet-consumer-example NAMESPACE CONFIGMAP SECRET DIR")
    })?;
    let settings = Settings {
        namespace,
        config_map,
        secret,
        dir: dir.into(),
    };

    let client = kube::Client::try_default()
        .await
        .context("connecting to the cluster")?;
    run(client, settings, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
}
