//! [`FeatureGates`]: the Kubernetes feature gates nodelet follows, with the defaults of a
//! v1.36 kubelet, set from a KubeletConfiguration's `featureGates` map.

use std::collections::BTreeMap;
use std::fmt;

/// A feature gate nodelet follows. Its name is the kubelet's gate name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Feature {
    /// `ClusterTrustBundle` (beta, off by default): ClusterTrustBundle objects may be read.
    ClusterTrustBundle,
    /// `ClusterTrustBundleProjection` (beta, off by default): the `clusterTrustBundle`
    /// projected volume source. Needs [`Feature::ClusterTrustBundle`] too.
    ClusterTrustBundleProjection,
    /// `PodCertificateRequest` (beta, off by default): the `podCertificate` projected volume
    /// source.
    PodCertificateRequest,
    /// `EnvFiles` (beta, on by default since 1.35): `env[].valueFrom.fileKeyRef`.
    EnvFiles,
    /// `PodLevelResources` (beta, on by default since 1.34): pod-level limits as the fallback
    /// of a container's `resourceFieldRef`.
    PodLevelResources,
}

impl Feature {
    /// Every gate nodelet follows.
    pub const ALL: [Feature; 5] = [
        Feature::ClusterTrustBundle,
        Feature::ClusterTrustBundleProjection,
        Feature::PodCertificateRequest,
        Feature::EnvFiles,
        Feature::PodLevelResources,
    ];

    /// The gate's name as the kubelet spells it.
    pub fn name(self) -> &'static str {
        match self {
            Feature::ClusterTrustBundle => "ClusterTrustBundle",
            Feature::ClusterTrustBundleProjection => "ClusterTrustBundleProjection",
            Feature::PodCertificateRequest => "PodCertificateRequest",
            Feature::EnvFiles => "EnvFiles",
            Feature::PodLevelResources => "PodLevelResources",
        }
    }

    /// The v1.36 kubelet's default.
    pub fn default_enabled(self) -> bool {
        matches!(self, Feature::EnvFiles | Feature::PodLevelResources)
    }

    /// The gates this one needs on when it is on (the kubelet refuses to start otherwise):
    /// `ClusterTrustBundleProjection` needs `ClusterTrustBundle`.
    pub fn depends_on(self) -> &'static [Feature] {
        match self {
            Feature::ClusterTrustBundleProjection => &[Feature::ClusterTrustBundle],
            _ => &[],
        }
    }

    /// The gate called `name`, if nodelet follows it.
    pub fn from_name(name: &str) -> Option<Feature> {
        Feature::ALL.into_iter().find(|f| f.name() == name)
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The feature gates of one node: each gate nodelet follows, on or off.
///
/// A KubeletConfiguration may name any of the kubelet's gates; the ones nodelet does not
/// follow are kept in [`FeatureGates::ignored`] so the agent can say so once, instead of
/// refusing a configuration file a real kubelet accepts.
///
/// ```
/// use nodelet_core::{Feature, FeatureGates};
///
/// let gates = FeatureGates::from_map([
///     ("ClusterTrustBundle".to_string(), true),
///     ("ClusterTrustBundleProjection".to_string(), true),
///     ("GracefulNodeShutdown".to_string(), true),
/// ]);
/// assert!(gates.enabled(Feature::ClusterTrustBundleProjection));
/// assert!(gates.enabled(Feature::EnvFiles)); // on by default
/// assert!(!gates.enabled(Feature::PodCertificateRequest));
/// assert_eq!(gates.ignored(), ["GracefulNodeShutdown"]);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct FeatureGates {
    set: BTreeMap<Feature, bool>,
    ignored: Vec<String>,
}

impl Default for FeatureGates {
    /// Every gate at its v1.36 default.
    fn default() -> Self {
        Self {
            set: BTreeMap::new(),
            ignored: Vec::new(),
        }
    }
}

impl FeatureGates {
    /// Gates from a `featureGates` map (name → on/off); names nodelet does not follow are
    /// recorded in [`FeatureGates::ignored`].
    pub fn from_map(map: impl IntoIterator<Item = (String, bool)>) -> Self {
        let mut gates = Self::default();
        for (name, on) in map {
            match Feature::from_name(&name) {
                Some(feature) => {
                    gates.set.insert(feature, on);
                }
                None => gates.ignored.push(name),
            }
        }
        gates.ignored.sort();
        gates.ignored.dedup();
        gates
    }

    /// Turns `feature` on or off.
    pub fn set(&mut self, feature: Feature, on: bool) -> &mut Self {
        self.set.insert(feature, on);
        self
    }

    /// Whether `feature` is on (its default unless set).
    pub fn enabled(&self, feature: Feature) -> bool {
        self.set
            .get(&feature)
            .copied()
            .unwrap_or_else(|| feature.default_enabled())
    }

    /// Gates that are on while a gate they depend on is off, each with those gates (the
    /// kubelet's start-up check: `X is enabled, but depends on features that are disabled:
    /// [Y]`). Empty for a consistent set.
    pub fn unmet_dependencies(&self) -> Vec<(Feature, Vec<Feature>)> {
        Feature::ALL
            .into_iter()
            .filter(|f| self.enabled(*f))
            .filter_map(|f| {
                let off: Vec<Feature> = f
                    .depends_on()
                    .iter()
                    .copied()
                    .filter(|d| !self.enabled(*d))
                    .collect();
                (!off.is_empty()).then_some((f, off))
            })
            .collect()
    }

    /// Gate names the configuration set that nodelet does not follow, sorted.
    pub fn ignored(&self) -> &[String] {
        &self.ignored
    }
}

impl fmt::Debug for FeatureGates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for feature in Feature::ALL {
            map.entry(&feature.name(), &self.enabled(feature));
        }
        map.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_v1_36_kubelets() {
        let gates = FeatureGates::default();
        assert!(gates.enabled(Feature::EnvFiles));
        assert!(gates.enabled(Feature::PodLevelResources));
        assert!(!gates.enabled(Feature::ClusterTrustBundle));
        assert!(!gates.enabled(Feature::ClusterTrustBundleProjection));
        assert!(!gates.enabled(Feature::PodCertificateRequest));
    }

    #[test]
    fn a_map_sets_known_gates_and_records_the_others() {
        let gates = FeatureGates::from_map([
            ("EnvFiles".to_string(), false),
            ("PodCertificateRequest".to_string(), true),
            ("SomeOtherGate".to_string(), true),
            ("SomeOtherGate".to_string(), false),
        ]);
        assert!(!gates.enabled(Feature::EnvFiles));
        assert!(gates.enabled(Feature::PodCertificateRequest));
        assert_eq!(gates.ignored(), ["SomeOtherGate"]);
        assert_eq!(
            format!("{gates:?}"),
            "{\"ClusterTrustBundle\": false, \"ClusterTrustBundleProjection\": false, \
             \"PodCertificateRequest\": true, \"EnvFiles\": false, \"PodLevelResources\": true}"
        );
    }

    #[test]
    fn the_projection_gate_needs_the_cluster_trust_bundle_gate() {
        let mut gates = FeatureGates::default();
        assert!(gates.unmet_dependencies().is_empty());
        gates.set(Feature::ClusterTrustBundleProjection, true);
        assert_eq!(
            gates.unmet_dependencies(),
            [(
                Feature::ClusterTrustBundleProjection,
                vec![Feature::ClusterTrustBundle]
            )]
        );
        gates.set(Feature::ClusterTrustBundle, true);
        assert!(gates.unmet_dependencies().is_empty());
    }

    #[test]
    fn names_round_trip() {
        for f in Feature::ALL {
            assert_eq!(Feature::from_name(f.name()), Some(f));
        }
        assert_eq!(Feature::from_name("clusterTrustBundle"), None);
    }
}
