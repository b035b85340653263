//! Keeps one ConfigMap and one Secret projected into a directory, the way a kubelet keeps a
//! pod's configMap and secret volumes current, using only nodelet's published crates.
//!
//! [`run`] registers a pod that references both objects with a Watch-strategy
//! [`ConfigMapManager`] and [`SecretManager`], writes each object once, then rewrites it after
//! every change notification. Each object has a directory of its own, owned by one
//! [`AtomicWriter`]:
//!
//! ```text
//! <dir>/configmap/<key>   one file per data / binaryData key, mode 0644
//! <dir>/secret/<key>      one file per data key, mode 0600
//! ```
//!
//! A missing object is projected as an empty directory until it is created. Secret values
//! are never logged: only key counts.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Pod, PodSpec, Secret, SecretVolumeSource, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nodelet_atomic_writer::{AtomicWriter, FileProjection, Payload, WriteOutcome, WriterConfig};
use nodelet_core::{AdmittedPod, ObjectKind};
use nodelet_object_manager::{ConfigMapManager, ManagerConfig, SecretManager, Strategy};
use tokio::sync::broadcast::error::RecvError;

/// What to project and where.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Namespace of both objects.
    pub namespace: String,
    /// Name of the ConfigMap.
    pub config_map: String,
    /// Name of the Secret.
    pub secret: String,
    /// Directory that receives `configmap/` and `secret/`.
    pub dir: PathBuf,
}

/// Projects the two objects until `shutdown` resolves.
///
/// # Errors
/// If a manager cannot start, a directory cannot be written, or an object cannot be read for
/// another reason than its absence.
pub async fn run(
    client: kube::Client,
    settings: Settings,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let config = ManagerConfig::new(Strategy::Watch);
    let config_maps = ConfigMapManager::new(client.clone(), config.clone())?;
    let secrets = SecretManager::new(client, config)?;

    // The pod both managers count references for; they watch what it names.
    let pod = AdmittedPod::new(consumer_pod(&settings)).context("admitting the consumer pod")?;
    let mut changes = config_maps.subscribe();
    let mut secret_changes = secrets.subscribe();
    config_maps.register_pod(&pod);
    secrets.register_pod(&pod);

    let mut config_map_writer = writer(&settings.dir.join("configmap"))?;
    let mut secret_writer = writer(&settings.dir.join("secret"))?;
    project_config_map(&config_maps, &settings, &mut config_map_writer).await?;
    project_secret(&secrets, &settings, &mut secret_writer).await?;

    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            change = changes.recv() => match change {
                Ok(r) if r.kind == ObjectKind::ConfigMap && r.name == settings.config_map => {
                    project_config_map(&config_maps, &settings, &mut config_map_writer).await?;
                }
                Ok(_) => {}
                // Missed notifications: read the object again.
                Err(RecvError::Lagged(_)) => {
                    project_config_map(&config_maps, &settings, &mut config_map_writer).await?;
                }
                Err(RecvError::Closed) => break,
            },
            change = secret_changes.recv() => match change {
                Ok(r) if r.kind == ObjectKind::Secret && r.name == settings.secret => {
                    project_secret(&secrets, &settings, &mut secret_writer).await?;
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => {
                    project_secret(&secrets, &settings, &mut secret_writer).await?;
                }
                Err(RecvError::Closed) => break,
            },
        }
    }

    config_maps.unregister_pod(pod.uid());
    secrets.unregister_pod(pod.uid());
    Ok(())
}

/// A pod with one configMap and one secret volume naming the two objects.
fn consumer_pod(settings: &Settings) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("nodelet-consumer".into()),
            namespace: Some(settings.namespace.clone()),
            uid: Some("nodelet-consumer".into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            volumes: Some(vec![
                Volume {
                    name: "config".into(),
                    config_map: Some(ConfigMapVolumeSource {
                        name: settings.config_map.clone(),
                        ..ConfigMapVolumeSource::default()
                    }),
                    ..Volume::default()
                },
                Volume {
                    name: "secret".into(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(settings.secret.clone()),
                        ..SecretVolumeSource::default()
                    }),
                    ..Volume::default()
                },
            ]),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

fn writer(dir: &Path) -> anyhow::Result<AtomicWriter> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    AtomicWriter::new(dir, WriterConfig::default())
        .with_context(|| format!("opening {}", dir.display()))
}

async fn project_config_map(
    manager: &ConfigMapManager,
    settings: &Settings,
    writer: &mut AtomicWriter,
) -> anyhow::Result<()> {
    let object = match manager.get(&settings.namespace, &settings.config_map).await {
        Ok(object) => Some(object),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e).context("reading the ConfigMap"),
    };
    let payload = object
        .as_deref()
        .map(config_map_payload)
        .unwrap_or_default();
    write(writer, &payload, "ConfigMap", &settings.config_map)
}

async fn project_secret(
    manager: &SecretManager,
    settings: &Settings,
    writer: &mut AtomicWriter,
) -> anyhow::Result<()> {
    let object = match manager.get(&settings.namespace, &settings.secret).await {
        Ok(object) => Some(object),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e).context("reading the Secret"),
    };
    let payload = object.as_deref().map(secret_payload).unwrap_or_default();
    write(writer, &payload, "Secret", &settings.secret)
}

fn config_map_payload(object: &ConfigMap) -> Payload {
    let mut payload = Payload::new();
    for (key, value) in object.data.iter().flatten() {
        payload.insert(key, FileProjection::new(value.as_bytes().to_vec(), 0o644));
    }
    for (key, value) in object.binary_data.iter().flatten() {
        payload.insert(key, FileProjection::new(value.0.clone(), 0o644));
    }
    payload
}

fn secret_payload(object: &Secret) -> Payload {
    let mut payload = Payload::new();
    for (key, value) in object.data.iter().flatten() {
        payload.insert(key, FileProjection::new(value.0.clone(), 0o600));
    }
    payload
}

/// Writes `payload`, logging the object and its key count (never the values).
fn write(
    writer: &mut AtomicWriter,
    payload: &Payload,
    kind: &'static str,
    name: &str,
) -> anyhow::Result<()> {
    let outcome = writer
        .write(payload, None)
        .with_context(|| format!("projecting {kind} {name}"))?;
    if outcome == WriteOutcome::Written {
        tracing::info!(kind, name, keys = payload.len(), "projected");
    }
    Ok(())
}
