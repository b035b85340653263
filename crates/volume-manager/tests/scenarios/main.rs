//! Scenario tests: the volume manager against `nodelet-apiserver` over real HTTP, with the real
//! kube client, object managers and token requests — the path production takes.

// The test bed: API server, managers, temporary root directory, waiting helpers.
mod support;

// First mounts: layout, modes, mappings, binary data, optional objects and keys, missing
// objects and keys, projected and downwardAPI volumes, fsGroup, nested mountpoints,
// unsupported volumes (PL-1 … PL-13, E2E-1 … E2E-14).
mod mount;

// Live updates: content changes, keys added/removed, optional objects created/deleted,
// immutable objects, one object in several volumes and pods (UP-1 … UP-4, E2E-9/11/12/18).
mod update;

// Pod removal, agent restart and adoption, the snapshot (VM-13, PL-14, PL-15).
mod lifecycle;

// Service account tokens through the TokenRequest API and their refresh (PL-10).
mod token;

// Failures during remounts never empty a live volume (upstream #113242, VM-10).
mod outage;

// The clusterTrustBundle projected source as a node reads it: by name, by signer and
// selector, updates, missing and optional bundles, modes, no API, gates off (PL-17, PL-20).
mod trust_bundle;
// The podCertificate projected source as a node requests it, answered by the stand-in's test
// signer: waiting for issuance, key then chain, modes, denial, gate off (PL-21, PL-22).
mod pod_certificate;
