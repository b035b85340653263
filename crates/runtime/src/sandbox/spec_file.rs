//! Reading the [`LaunchSpec`] file both the init and the exec helper start from.

use std::fs;
use std::path::Path;

use super::error::SandboxError;
use crate::spec::LaunchSpec;

/// The [`LaunchSpec`] in the JSON file `path`.
pub(super) fn load_spec(path: &Path) -> Result<LaunchSpec, SandboxError> {
    let path = path.to_path_buf();
    match fs::read(&path) {
        Ok(text) => serde_json::from_slice(&text).map_err(|e| SandboxError::ParseSpec(path, e)),
        Err(err) => Err(SandboxError::ReadSpec(path, err)),
    }
}
