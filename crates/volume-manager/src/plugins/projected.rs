//! The projected volume plugin, `kubernetes.io/projected` (PL-10): configMap, secret,
//! downwardAPI, serviceAccountToken, clusterTrustBundle (PL-17) and podCertificate (PL-21)
//! sources, merged into one volume; the last three read through the host's
//! [`Sources`](nodelet_sources::Sources), which answers for a source the agent did not build.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    ClusterTrustBundleProjection, ConfigMap, PodCertificateProjection, Secret, Volume,
    VolumeProjection,
};
use nodelet_atomic_writer::{FileProjection, Payload, WriteOutcome};
use nodelet_core::{ObjectRef, SourceRef};
use nodelet_sources::trust_bundle::source_ref;
use tokio::time::Instant;

use super::api::{ObjectVersion, SetUpOutcome, VolumePlugin};
use super::downward_api::collect_downward_api_data;
use super::host::{Medium, SetUpContext};
use super::payload::{config_map_payload, mode_bits, secret_payload};
use crate::SetUpError;

/// `kubernetes.io/projected`: several sources in one volume (tmpfs). Every pod of a real
/// cluster has one (`kube-api-access-*`: token, `kube-root-ca.crt`, namespace).
#[derive(Debug, Clone, Copy, Default)]
pub struct ProjectedPlugin;

/// The API default of `serviceAccountToken.expirationSeconds`.
const DEFAULT_TOKEN_EXPIRATION_SECONDS: i64 = 3600;

#[async_trait]
impl VolumePlugin for ProjectedPlugin {
    fn name(&self) -> &str {
        "kubernetes.io/projected"
    }

    fn can_support(&self, volume: &Volume) -> bool {
        volume.projected.is_some()
    }

    fn sources(&self, namespace: &str, volume: &Volume) -> Vec<SourceRef> {
        let sources = volume
            .projected
            .iter()
            .flat_map(|p| p.sources.iter().flatten());
        sources
            .filter_map(|s| {
                if let Some(cm) = &s.config_map {
                    let object = ObjectRef::config_map(namespace, cm.name.clone());
                    Some(SourceRef::Object(object))
                } else if let Some(secret) = &s.secret {
                    let object = ObjectRef::secret(namespace, secret.name.clone());
                    Some(SourceRef::Object(object))
                } else if let Some(ctb) = &s.cluster_trust_bundle {
                    source_ref(ctb)
                } else {
                    s.pod_certificate
                        .as_ref()
                        .map(|_| SourceRef::PodCertificate)
                }
            })
            .collect()
    }

    /// PL-10: sources in spec order, later ones overwriting earlier paths; errors of all
    /// sources are collected and fail the SetUp before the disk is touched.
    async fn set_up(&self, ctx: &SetUpContext<'_>) -> Result<SetUpOutcome, SetUpError> {
        let Some(projected) = ctx.volume.projected() else {
            return Err(SetUpError::Unsupported {
                what: "a volume without a projected source".into(),
            });
        };
        let default_mode = projected.default_mode.ok_or(SetUpError::NoDefaultMode)?;
        let mut collected = Collected::default();
        for (index, source) in projected.sources.iter().flatten().enumerate() {
            collect_source(ctx, index, source, default_mode, &mut collected).await;
        }
        if let Some(e) = SetUpError::aggregate(collected.errors) {
            return Err(e);
        }
        // The payload is built while the sources are read (a token request among them): only
        // the write waits for a slot.
        let _slot = ctx.host.write_slot().await;
        let outcome = ctx
            .host
            .project(ctx, Medium::Memory, collected.payload)
            .await?;
        Ok(SetUpOutcome {
            written: outcome == WriteOutcome::Written,
            objects: collected.objects,
            refresh_at: collected.refresh_at,
        })
    }
}

#[derive(Default)]
struct Collected {
    payload: Payload,
    errors: Vec<SetUpError>,
    objects: Vec<ObjectVersion>,
    refresh_at: Option<Instant>,
}

impl Collected {
    fn merge(&mut self, sub: Payload) {
        for (path, file) in sub.iter() {
            self.payload.insert(path, file.clone());
        }
    }

    fn object(&mut self, object: ObjectRef, rv: Option<String>) {
        self.objects.push(ObjectVersion {
            object,
            resource_version: rv,
        });
    }
}

async fn collect_source(
    ctx: &SetUpContext<'_>,
    index: usize,
    source: &VolumeProjection,
    default_mode: i32,
    out: &mut Collected,
) {
    let namespace = ctx.pod.metadata.namespace.as_deref().unwrap_or_default();
    if let Some(cm) = &source.config_map {
        let optional = cm.optional.unwrap_or(false);
        let object = match ctx.host.configmaps().get(namespace, &cm.name).await {
            Ok(o) => Some(o),
            Err(e) if e.is_not_found() && optional => None,
            Err(e) => return out.errors.push(e.into()),
        };
        let empty = ConfigMap::default();
        let rv = object
            .as_ref()
            .and_then(|o| o.metadata.resource_version.clone());
        out.object(ObjectRef::config_map(namespace, cm.name.clone()), rv);
        let target = object.as_deref().unwrap_or(&empty);
        match config_map_payload(cm.items.as_deref(), target, Some(default_mode), optional) {
            Ok(sub) => out.merge(sub),
            Err(e) => out.errors.push(e),
        }
    } else if let Some(secret) = &source.secret {
        let optional = secret.optional.unwrap_or(false);
        let object = match ctx.host.secrets().get(namespace, &secret.name).await {
            Ok(o) => Some(o),
            Err(e) if e.is_not_found() && optional => None,
            Err(e) => return out.errors.push(e.into()),
        };
        let empty = Secret::default();
        let rv = object
            .as_ref()
            .and_then(|o| o.metadata.resource_version.clone());
        out.object(ObjectRef::secret(namespace, secret.name.clone()), rv);
        let target = object.as_deref().unwrap_or(&empty);
        match secret_payload(
            secret.items.as_deref(),
            target,
            Some(default_mode),
            optional,
        ) {
            Ok(sub) => out.merge(sub),
            Err(e) => out.errors.push(e),
        }
    } else if let Some(downward) = &source.downward_api {
        let items = downward.items.as_deref().unwrap_or_default();
        let allocatable = ctx.host.node_allocatable();
        match collect_downward_api_data(items, ctx.pod, allocatable, Some(default_mode)) {
            Ok(sub) => out.merge(sub),
            Err(e) => out.errors.push(e),
        }
    } else if let Some(token) = &source.service_account_token {
        let service_account = ctx
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.as_deref())
            .unwrap_or("default");
        let audience = token.audience.as_deref().filter(|a| !a.is_empty());
        let expiration = token
            .expiration_seconds
            .unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS);
        let fetched = ctx
            .host
            .sources()
            .token(ctx.pod, service_account, audience, expiration)
            .await;
        let (token_value, refresh_at) = match fetched {
            Ok(t) => t,
            Err(e) => return out.errors.push(e.into()),
        };
        let file = owned_file(ctx, token_value.token.into_bytes(), default_mode);
        out.payload.insert(token.path.clone(), file);
        out.refresh_at = Some(out.refresh_at.map_or(refresh_at, |r| r.min(refresh_at)));
    } else if let Some(ctb) = &source.cluster_trust_bundle {
        collect_trust_bundle(ctx, ctb, default_mode, out).await;
    } else if let Some(certificate) = &source.pod_certificate {
        collect_pod_certificate(ctx, index, certificate, default_mode, out).await;
    }
}

/// PL-21: the pod's credential for source `index` (the sources answer when the agent did not
/// build a pod certificate manager). `credentialBundlePath` gets the key then the chain,
/// `keyPath` the key, `certificateChainPath` the chain; 0600 with fsUser or fsGroup, as tokens.
async fn collect_pod_certificate(
    ctx: &SetUpContext<'_>,
    index: usize,
    source: &PodCertificateProjection,
    default_mode: i32,
    out: &mut Collected,
) {
    let bundle = match ctx
        .host
        .sources()
        .pod_certificate(ctx.pod, ctx.volume.name(), index, source)
        .await
    {
        Ok(b) => b,
        Err(e) => return out.errors.push(e.into()),
    };
    let file = |data: Vec<u8>| owned_file(ctx, data, default_mode);
    let key = bundle.private_key.as_bytes();
    if let Some(path) = source
        .credential_bundle_path
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        out.payload
            .insert(path, file([key, bundle.chain.as_slice()].concat()));
    }
    if let Some(path) = source.key_path.as_deref().filter(|p| !p.is_empty()) {
        out.payload.insert(path, file(key.to_vec()));
    }
    if let Some(path) = source
        .certificate_chain_path
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        out.payload.insert(path, file(bundle.chain.clone()));
    }
    let at = bundle.refresh_at;
    out.refresh_at = Some(out.refresh_at.map_or(at, |r| r.min(at)));
}

/// PL-17: the trust anchors a `clusterTrustBundle` source asks for, at its `path` (the sources
/// answer when the agent did not build a trust bundle manager).
async fn collect_trust_bundle(
    ctx: &SetUpContext<'_>,
    source: &ClusterTrustBundleProjection,
    default_mode: i32,
    out: &mut Collected,
) {
    match ctx.host.sources().trust_anchors(source).await {
        Ok(anchors) => {
            let file = owned_file(ctx, anchors.to_vec(), default_mode);
            out.payload.insert(source.path.clone(), file);
        }
        Err(e) => out.errors.push(e.into()),
    }
}

/// A token, trust-bundle or credential file: 0600 when the pod has an fsUser or fsGroup (fsGroup then adds
/// group read: 0640), else the volume's `defaultMode`; owned by the fsUser if any.
fn owned_file(ctx: &SetUpContext<'_>, data: Vec<u8>, default_mode: i32) -> FileProjection {
    let mode = if ctx.fs_user.is_some() || ctx.fs_group.is_some() {
        0o600
    } else {
        mode_bits(default_mode)
    };
    let file = FileProjection::new(data, mode);
    match ctx.fs_user {
        Some(uid) => file.with_fs_user(uid),
        None => file,
    }
}

#[cfg(test)]
mod tests {
    //! `TestCollectDataWithSecret` / `WithConfigMap` / token cases (PL-10, PL-16).
    use std::path::Path;
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Pod;
    use nodelet_object_manager::source::FakeSource;
    use nodelet_object_manager::{ConfigMapManager, ManagerConfig, SecretManager, Strategy};
    use nodelet_testutil::{ConfigMapBuilder, PodBuilder, SecretBuilder};
    use serde_json::json;

    use super::*;

    use crate::plugins::host::VolumeHost;
    use nodelet_core::NodeAllocatable;
    use nodelet_sources::pod_certificate::{FakePodCertificateSource, PodCertificateManager};
    use nodelet_sources::token::FakeTokenSource;
    use nodelet_sources::{Sources, TokenManager};

    fn host() -> VolumeHost {
        host_with(Sources::new(TokenManager::new(Arc::new(
            FakeTokenSource::new(),
        ))))
    }

    fn host_with(sources: Sources) -> VolumeHost {
        let mut mc = ManagerConfig::default();
        mc.strategy = Strategy::Get;
        let cms = FakeSource::<ConfigMap>::new();
        cms.apply(
            "ns",
            ConfigMapBuilder::new("", "cm")
                .data("a", "1")
                .data("b", "2")
                .build(),
        );
        let secrets = FakeSource::<Secret>::new();
        secrets.apply("ns", SecretBuilder::new("", "s").data("x", "x").build());
        VolumeHost::new(
            "/nonexistent".into(),
            ConfigMapManager::with_sources(Arc::new(cms), None, mc.clone()).unwrap(),
            SecretManager::with_sources(Arc::new(secrets), None, mc).unwrap(),
            sources,
            false,
            false,
            NodeAllocatable::detect(Path::new("/")),
        )
    }

    /// Pod `ns/p` of service account `sa` with the one volume `volume`.
    fn pod(volume: serde_json::Value) -> Pod {
        PodBuilder::new("ns", "p")
            .uid("u")
            .service_account("sa")
            .volume(volume)
            .build()
    }

    async fn collect(
        host: &VolumeHost,
        pod: &Pod,
        fs_group: Option<u32>,
        fs_user: Option<u32>,
    ) -> Collected {
        let admitted = nodelet_core::AdmittedPod::new(pod.clone()).unwrap();
        let volume = &admitted.volumes()[0];
        let ctx = SetUpContext {
            pod: &admitted,
            volume,
            dir: Path::new("/nonexistent"),
            remount: false,
            fs_group,
            fs_user,
            host,
        };
        let projected = volume.projected().unwrap();
        let mut out = Collected::default();
        for (i, s) in projected.sources.iter().flatten().enumerate() {
            collect_source(&ctx, i, s, projected.default_mode.unwrap(), &mut out).await;
        }
        out
    }

    fn listing(c: &Collected) -> Vec<(String, String, u32)> {
        c.payload
            .iter()
            .map(|(k, f)| {
                (
                    k.to_owned(),
                    String::from_utf8_lossy(&f.data).into(),
                    f.mode,
                )
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_write_slots_payloads_are_built_and_written_at_once() {
        use super::super::host::WRITE_SLOTS;
        let host = host();
        let mut held = Vec::new();
        for _ in 0..WRITE_SLOTS {
            held.push(host.write_slot().await);
        }
        let wait = std::time::Duration::from_secs(1);
        assert!(
            tokio::time::timeout(wait, host.write_slot()).await.is_err(),
            "one slot more waits"
        );
        held.pop();
        tokio::time::timeout(wait, host.write_slot())
            .await
            .expect("a slot given back is taken");
    }

    #[tokio::test]
    async fn config_map_and_secret_sources_use_the_volume_default_mode_and_item_modes() {
        let host = host();
        let p = pod(
            json!({"name": "v", "projected": {"defaultMode": 0o600, "sources": [
            {"configMap": {"name": "cm", "items": [{"key": "a", "path": "dir/a", "mode": 0o400}]}},
            {"secret": {"name": "s"}}]}}),
        );
        let c = collect(&host, &p, None, None).await;
        assert!(c.errors.is_empty());
        assert_eq!(
            listing(&c),
            [
                ("dir/a".into(), "1".into(), 0o400),
                ("x".into(), "x".into(), 0o600)
            ]
        );
        assert_eq!(c.objects.len(), 2);
    }

    #[tokio::test]
    async fn missing_optional_sources_are_empty_and_missing_keys_are_recorded_errors() {
        let host = host();
        let p = pod(
            json!({"name": "v", "projected": {"defaultMode": 0o644, "sources": [
            {"configMap": {"name": "nope", "optional": true}},
            {"secret": {"name": "s", "items": [{"key": "zzz", "path": "z"}]}},
            {"configMap": {"name": "cm", "items": [{"key": "b", "path": "b"}]}}]}}),
        );
        let c = collect(&host, &p, None, None).await;
        assert_eq!(listing(&c), [("b".into(), "2".into(), 0o644)]);
        let errors: Vec<String> = c.errors.iter().map(ToString::to_string).collect();
        assert_eq!(errors, ["references non-existent secret key: zzz"]);
    }

    #[tokio::test]
    async fn a_token_uses_the_default_mode_without_fs_group_and_0600_with_it() {
        let host = host();
        let p = pod(
            json!({"name": "v", "projected": {"defaultMode": 0o644, "sources": [
            {"serviceAccountToken": {"path": "token", "audience": "aud"}}]}}),
        );
        let plain = collect(&host, &p, None, None).await;
        let file = plain.payload.get("token").unwrap();
        assert_eq!((file.mode, file.fs_user), (0o644, None));
        assert_eq!(String::from_utf8_lossy(&file.data), "token-1-sa-p-aud");
        assert!(plain.refresh_at.is_some());

        let grouped = collect(&host, &p, Some(1234), Some(1000)).await;
        let file = grouped.payload.get("token").unwrap();
        assert_eq!((file.mode, file.fs_user), (0o600, Some(1000)));
        // The cached token is reused until its refresh time.
        assert_eq!(String::from_utf8_lossy(&file.data), "token-1-sa-p-aud");
    }

    fn certificate_host(fake: &FakePodCertificateSource) -> VolumeHost {
        let certificates = PodCertificateManager::new(
            Arc::new(fake.clone()),
            Arc::new(nodelet_core::events::NoEvents),
            std::time::Duration::ZERO,
        );
        let tokens = TokenManager::new(Arc::new(FakeTokenSource::new()));
        host_with(Sources::new(tokens).with_pod_certificates(certificates))
    }

    fn certificate_pod() -> Pod {
        pod(
            json!({"name": "v", "projected": {"defaultMode": 0o644, "sources": [
            {"configMap": {"name": "cm", "items": [{"key": "a", "path": "a"}]}},
            {"podCertificate": {"signerName": "example.com/s", "keyType": "ED25519",
                "credentialBundlePath": "bundle.pem", "keyPath": "key.pem",
                "certificateChainPath": "chain.pem"}}]}}),
        )
    }

    // PL-21: with the gate off (no pod certificate manager) the source stays unsupported.
    #[tokio::test]
    async fn a_pod_certificate_is_unsupported_without_the_gate() {
        let c = collect(&host(), &certificate_pod(), None, None).await;
        let errors: Vec<String> = c.errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            ["a podCertificate projection is not supported by nodelet"]
        );
    }

    // PL-21: not issued yet → an error (the pod waits); issued → the bundle is the key then the
    // chain, the key and the chain alone, with the default mode, or 0600 with fsGroup.
    #[tokio::test]
    async fn an_issued_pod_certificate_is_projected_as_bundle_key_and_chain() {
        let fake = FakePodCertificateSource::new("n");
        let host = certificate_host(&fake);
        let p = certificate_pod();
        let waiting = collect(&host, &p, None, None).await;
        let errors: Vec<String> = waiting.errors.iter().map(ToString::to_string).collect();
        assert_eq!(errors, ["credential bundle is not issued yet"]);
        let created = fake.created();
        assert_eq!(created.len(), 1);
        assert_eq!(created[0].spec.pod_uid, "u");

        let chain = "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n";
        let now = std::time::SystemTime::now();
        let hour = std::time::Duration::from_secs(3600);
        fake.issue(
            "ns",
            &fake.last_name().unwrap(),
            chain,
            now + hour,
            now + 2 * hour,
        );
        let c = collect(&host, &p, None, None).await;
        assert!(c.errors.is_empty());
        let key = String::from_utf8(c.payload.get("key.pem").unwrap().data.clone()).unwrap();
        assert!(key.starts_with("-----BEGIN PRIVATE KEY-----\n"));
        let files = listing(&c);
        assert_eq!(
            files,
            [
                ("a".into(), "1".into(), 0o644),
                ("bundle.pem".into(), format!("{key}{chain}"), 0o644),
                ("chain.pem".into(), chain.into(), 0o644),
                ("key.pem".into(), key.clone(), 0o644),
            ]
        );
        assert!(c.refresh_at.is_some());

        let grouped = collect(&host, &p, Some(1234), None).await;
        let modes: Vec<u32> = grouped.payload.iter().map(|(_, f)| f.mode).collect();
        assert_eq!(modes, [0o644, 0o600, 0o600, 0o600]);
        assert_eq!(fake.created().len(), 1, "the issued credential is reused");
    }
}
