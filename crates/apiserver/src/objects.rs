//! What an object must be and becomes as it is written: typed decoding, YAML input,
//! defaulting, validation, per-resource strategies (the ephemeral-containers subresource's
//! included), strategic merge patch, selectors, and Services as the real registry keeps them.

pub(crate) mod defaults;
pub(crate) mod ephemeral;
pub(crate) mod selectors;
pub(crate) mod services;
pub(crate) mod strategic;
pub(crate) mod strategy;
pub(crate) mod typed;
pub(crate) mod validation;
pub(crate) mod yaml;
