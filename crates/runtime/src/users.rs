//! The user a container's process runs as: `runAsUser`, `runAsGroup`, `supplementalGroups`,
//! `fsGroup` and `runAsNonRoot` as the kubelet applies them, and nodelet's rule that a
//! container runs as root only when the agent allows it ([`Identity::resolve`]).

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::error::StartError;
use crate::images::ImageEntry;

/// The user, group and supplementary groups of one container's process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The user ID.
    pub uid: u32,
    /// The primary group ID.
    pub gid: u32,
    /// Supplementary groups (`supplementalGroups`, then `fsGroup`), without duplicates.
    pub groups: Vec<u32>,
}

impl Identity {
    /// The identity of `container` of `pod` running `image`:
    /// 1. the user is the container's `runAsUser`, else the pod's, else the image's (root
    ///    when the image table names none);
    /// 2. the group is `runAsGroup` (container, then pod), else the image's, else 0;
    /// 3. supplementary groups: the pod's `supplementalGroups`, then its `fsGroup`;
    /// 4. `runAsNonRoot` (container, then pod) refuses uid 0 with the kubelet's texts;
    /// 5. uid 0 is refused unless `allow_root` (the agent's `--allow-root-containers`).
    ///
    /// # Errors
    /// [`StartError::Config`] with the kubelet's `runAsNonRoot` text or nodelet's root text.
    pub fn resolve(
        pod: &Pod,
        container: &Container,
        image: &ImageEntry,
        allow_root: bool,
    ) -> Result<Self, StartError> {
        let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
        let sc = container.security_context.as_ref();
        let non_negative = |v: i64| u32::try_from(v).ok();
        // (1)
        let run_as_user = sc
            .and_then(|s| s.run_as_user)
            .or_else(|| pod_sc.and_then(|s| s.run_as_user));
        let uid = match run_as_user {
            Some(u) => non_negative(u).ok_or_else(|| StartError::Config {
                message: format!("runAsUser {u} is not a valid user ID"),
            })?,
            None => image.user.unwrap_or(0),
        };
        // (2)
        let run_as_group = sc
            .and_then(|s| s.run_as_group)
            .or_else(|| pod_sc.and_then(|s| s.run_as_group));
        let gid = match run_as_group {
            Some(g) => non_negative(g).ok_or_else(|| StartError::Config {
                message: format!("runAsGroup {g} is not a valid group ID"),
            })?,
            None => image.group.unwrap_or(0),
        };
        // (3)
        let mut groups: Vec<u32> = Vec::new();
        let extra = pod_sc
            .and_then(|s| s.supplemental_groups.clone())
            .unwrap_or_default()
            .into_iter()
            .chain(pod_sc.and_then(|s| s.fs_group));
        for g in extra {
            let g = non_negative(g).ok_or_else(|| StartError::Config {
                message: format!("supplemental group {g} is not a valid group ID"),
            })?;
            if g != gid && !groups.contains(&g) {
                groups.push(g);
            }
        }
        // (4)
        let non_root = sc
            .and_then(|s| s.run_as_non_root)
            .or_else(|| pod_sc.and_then(|s| s.run_as_non_root))
            .unwrap_or(false);
        let pod_name = format_pod(pod);
        if non_root && uid == 0 {
            let message = if run_as_user.is_some() {
                format!(
                    "container's runAsUser breaks non-root policy (pod: {pod_name:?}, container: {})",
                    container.name
                )
            } else {
                format!(
                    "container has runAsNonRoot and image will run as root (pod: {pod_name:?}, container: {})",
                    container.name
                )
            };
            return Err(StartError::Config { message });
        }
        // (5)
        if uid == 0 && !allow_root {
            return Err(StartError::Config {
                message: format!(
                    "container {} of pod {} would run as root (uid 0); nodelet runs containers \
                     as root only when the agent is started with --allow-root-containers: set \
                     runAsUser or start the agent with that flag",
                    container.name,
                    namespaced(pod)
                ),
            });
        }
        Ok(Self { uid, gid, groups })
    }
}

/// `name_namespace(uid)`, the kubelet's `format.Pod`.
pub fn format_pod(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    )
}

/// `namespace/name`.
pub(crate) fn namespaced(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use nodelet_testutil::PodBuilder;
    use serde_json::json;

    use super::*;

    fn image(user: Option<u32>) -> ImageEntry {
        ImageEntry {
            image: "*".into(),
            entrypoint: vec![],
            args: vec![],
            path: vec![],
            user,
            group: None,
            working_dir: None,
            files: Default::default(),
        }
    }

    fn pod(pod_sc: serde_json::Value, sc: serde_json::Value) -> (Pod, Container) {
        let p = PodBuilder::new("ns", "p")
            .uid("u1")
            .container(json!({"name": "c", "image": "i", "securityContext": sc}))
            .spec(json!({"securityContext": pod_sc}))
            .build();
        let c = p
            .spec
            .as_ref()
            .map(|s| s.containers[0].clone())
            .unwrap_or_default();
        (p, c)
    }

    #[test]
    fn the_container_user_wins_over_the_pods_and_fs_group_is_a_supplementary_group() {
        let (p, c) = pod(
            json!({"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000, "supplementalGroups": [4000, 2000]}),
            json!({"runAsUser": 1001}),
        );
        let id = Identity::resolve(&p, &c, &image(None), false);
        assert_eq!(
            id.ok(),
            Some(Identity {
                uid: 1001,
                gid: 3000,
                groups: vec![4000, 2000]
            })
        );
    }

    #[test]
    fn root_needs_the_agents_permission() {
        let (p, c) = pod(json!({}), json!({}));
        let err = Identity::resolve(&p, &c, &image(None), false).err();
        let text = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("container c of pod ns/p"), "{text}");
        assert!(text.contains("--allow-root-containers"), "{text}");
        assert_eq!(
            Identity::resolve(&p, &c, &image(None), true)
                .ok()
                .map(|i| i.uid),
            Some(0)
        );
    }

    #[test]
    fn run_as_non_root_refuses_root_with_the_kubelets_texts() {
        let (p, c) = pod(json!({"runAsNonRoot": true}), json!({}));
        let text = Identity::resolve(&p, &c, &image(None), true)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(
            text,
            "container has runAsNonRoot and image will run as root (pod: \"p_ns(u1)\", container: c)"
        );
        let (p, c) = pod(json!({"runAsNonRoot": true}), json!({"runAsUser": 0}));
        let text = Identity::resolve(&p, &c, &image(Some(5)), true)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(
            text,
            "container's runAsUser breaks non-root policy (pod: \"p_ns(u1)\", container: c)"
        );
        let (p, c) = pod(json!({"runAsNonRoot": true}), json!({}));
        assert_eq!(
            Identity::resolve(&p, &c, &image(Some(65534)), false)
                .ok()
                .map(|i| i.uid),
            Some(65534)
        );
    }
}
