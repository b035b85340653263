//! The kubelet's ConfigMap/Secret managers (work in progress).
