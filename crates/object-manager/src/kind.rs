//! The two kinds a manager can serve, ConfigMap and Secret, and what differs between them.

use std::fmt;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Resource;
use nodelet_core::AdmittedPod;
use serde::de::DeserializeOwned;

use crate::ObjectKind;
use crate::refs::{referenced_config_map_names, referenced_secret_names};

mod sealed {
    pub trait Sealed {}
    impl Sealed for k8s_openapi::api::core::v1::ConfigMap {}
    impl Sealed for k8s_openapi::api::core::v1::Secret {}
}

/// A kind a [`Manager`](crate::Manager) serves: [`ConfigMap`] or [`Secret`] (sealed).
pub trait ManagedObject:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + fmt::Debug
    + Send
    + Sync
    + 'static
    + sealed::Sealed
    + crate::kept::Keep
{
    /// The singular group-resource the watch store names in its errors: `configmap`, `secret`.
    const SINGULAR: &'static str;
    /// The plural resource the API server names in its errors: `configmaps`, `secrets`.
    const PLURAL: &'static str;
    /// The kind the manager's [`ObjectRef`](crate::ObjectRef)s carry.
    const KIND: ObjectKind;

    /// `immutable: true`: the object can never change, only be deleted (OM-18 step 6).
    fn is_immutable(&self) -> bool;

    /// Names of objects of this kind `pod` references (OM-3 / OM-4).
    fn referenced_names(pod: &AdmittedPod) -> Vec<String>;
}

impl ManagedObject for ConfigMap {
    const SINGULAR: &'static str = "configmap";
    const PLURAL: &'static str = "configmaps";
    const KIND: ObjectKind = ObjectKind::ConfigMap;

    fn is_immutable(&self) -> bool {
        self.immutable == Some(true)
    }

    fn referenced_names(pod: &AdmittedPod) -> Vec<String> {
        referenced_config_map_names(pod)
    }
}

impl ManagedObject for Secret {
    const SINGULAR: &'static str = "secret";
    const PLURAL: &'static str = "secrets";
    const KIND: ObjectKind = ObjectKind::Secret;

    fn is_immutable(&self) -> bool {
        self.immutable == Some(true)
    }

    fn referenced_names(pod: &AdmittedPod) -> Vec<String> {
        referenced_secret_names(pod)
    }
}
