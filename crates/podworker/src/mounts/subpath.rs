//! A volume mount's subPath (steps 2 and 3 of `make_mounts`): `subPathExpr` expanded, the
//! path checked, created inside its volume when missing, and resolved with the kubelet's
//! `SafeMakeDir` and `PrepareSafeSubpath` checks.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::VolumeMount;

use super::error::{MountAt, MountError, SubPathError};
use crate::env::ContainerEnv;
use crate::expand::expand;

/// (2) The mount's subPath, `subPathExpr` expanded; `None` when there is none.
pub(super) fn sub_path(
    m: &VolumeMount,
    env: &ContainerEnv,
    at: &MountAt<'_>,
) -> Result<Option<OsString>, MountError> {
    let raw = match m.sub_path_expr.as_deref().filter(|e| !e.is_empty()) {
        Some(expr) => {
            let missing = RefCell::new(BTreeSet::new());
            let expanded = expand(expr.as_bytes(), |name| match env.get(name) {
                Some(value) if !value.is_empty() => Some(value.to_vec()),
                _ => {
                    missing.borrow_mut().insert(name.to_owned());
                    Some(Vec::new())
                }
            });
            let missing = missing.into_inner();
            if !missing.is_empty() {
                let (container, volume) = at.names();
                let missing = missing.into_iter().collect();
                return Err(MountError::SubPathExprMissingValue {
                    container,
                    volume,
                    missing,
                });
            }
            expanded
        }
        None => m.sub_path.clone().unwrap_or_default().into_bytes(),
    };
    if raw.is_empty() {
        return Ok(None);
    }
    let (container, volume) = at.names();
    let sub_path = String::from_utf8_lossy(&raw).into_owned();
    if raw.starts_with(b"/") {
        return Err(MountError::SubPathAbsolute {
            container,
            volume,
            sub_path,
        });
    }
    if raw.split(|b| *b == b'/').any(|part| part == b"..") {
        return Err(MountError::SubPathBacksteps {
            container,
            volume,
            sub_path,
        });
    }
    Ok(Some(OsString::from_vec(raw)))
}

/// (3) Creates a missing subPath, then resolves and checks it; returns the host path.
pub(super) fn prepare_sub_path(
    volume_path: &Path,
    sub_path: &Path,
    at: &MountAt<'_>,
) -> Result<PathBuf, MountError> {
    let path = volume_path.join(sub_path);
    // An error other than "missing" is the kubelet's cue to leave the path alone.
    if let Ok(false) = path.try_exists() {
        let mode = match fs::metadata(volume_path) {
            Ok(meta) => meta.permissions().mode() & 0o7777,
            Err(e) => {
                let (container, volume) = at.names();
                let path = volume_path.to_path_buf();
                let source = Arc::new(e);
                return Err(MountError::VolumeMode {
                    container,
                    volume,
                    path,
                    source,
                });
            }
        };
        if let Err(source) = safe_make_dir(sub_path, volume_path, mode) {
            let (container, volume) = at.names();
            return Err(MountError::CreateSubPath {
                container,
                volume,
                path,
                source: Box::new(source),
            });
        }
    }
    resolve_within(&path, volume_path).map_err(|source| {
        let (container, volume) = at.names();
        MountError::PrepareSubPath {
            container,
            volume,
            path,
            source: Box::new(source),
        }
    })
}

/// The kubelet's `PrepareSafeSubpath` checks: `path` resolved must lie within `volume_path`
/// resolved, with no symlink below it.
pub(crate) fn resolve_within(path: &Path, volume_path: &Path) -> Result<PathBuf, SubPathError> {
    let real_volume = canonicalize(volume_path)?;
    let real_path = canonicalize(path)?;
    if !real_path.starts_with(&real_volume) {
        return Err(SubPathError::NotWithinVolume {
            path: real_path,
            volume_path: real_volume,
        });
    }
    check_no_symlinks(&real_path, &real_volume)?;
    Ok(real_path)
}

/// The kubelet's `SafeMakeDir`: creates `base/sub_path` and its missing parents with `mode`,
/// never outside `base` (resolved).
fn safe_make_dir(sub_path: &Path, base: &Path, mode: u32) -> Result<(), SubPathError> {
    let real_base = canonicalize(base)?;
    let parts: Vec<&OsStr> = sub_path
        .components()
        .filter_map(|c| match c {
            Component::Normal(part) => Some(part),
            _ => None,
        })
        .collect();
    let full: PathBuf = parts.iter().fold(real_base.clone(), |p, c| p.join(c));
    match fs::metadata(&full) {
        Ok(meta) if meta.is_dir() => return Ok(()),
        Ok(_) => return Err(SubPathError::NotADirectory { path: full }),
        Err(_) => {}
    }
    // The longest existing prefix (symlinks followed) and the directories to create.
    let mut existing = real_base.clone();
    let mut to_create: &[&OsStr] = &[];
    for (i, part) in parts.iter().enumerate() {
        let next = existing.join(part);
        match fs::metadata(&next) {
            Ok(_) => existing = next,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                to_create = &parts[i..];
                break;
            }
            Err(e) => return Err(open_error(next, e)),
        }
    }
    let mut current = canonicalize(&existing)?;
    if !current.starts_with(&real_base) {
        return Err(SubPathError::OutsideBase {
            path: current,
            base: real_base,
        });
    }
    check_no_symlinks(&current, &real_base)?;
    for part in to_create {
        current.push(part);
        let created = fs::DirBuilder::new().mode(mode).create(&current);
        // mkdir's mode was narrowed by the umask.
        let chmod = || fs::set_permissions(&current, fs::Permissions::from_mode(mode));
        if let Err(e) = created.and_then(|()| chmod()) {
            return Err(SubPathError::CreateDir {
                path: current,
                source: Arc::new(e),
            });
        }
        let meta = fs::symlink_metadata(&current).map_err(|e| open_error(current.clone(), e))?;
        if !meta.is_dir() {
            return Err(SubPathError::SymlinkFound { path: current });
        }
    }
    Ok(())
}

/// `base` and every component of `path` below it exist and none is a symlink.
fn check_no_symlinks(path: &Path, base: &Path) -> Result<(), SubPathError> {
    let below = path
        .strip_prefix(base)
        .map_err(|_| SubPathError::OutsideBase {
            path: path.to_path_buf(),
            base: base.to_path_buf(),
        })?;
    let mut current = base.to_path_buf();
    let check = |p: &Path| match fs::symlink_metadata(p) {
        Ok(meta) if meta.file_type().is_symlink() => Err(SubPathError::SymlinkFound {
            path: p.to_path_buf(),
        }),
        Ok(_) => Ok(()),
        Err(e) => Err(open_error(p.to_path_buf(), e)),
    };
    check(&current)?;
    for part in below.components() {
        current.push(part);
        check(&current)?;
    }
    Ok(())
}

fn open_error(path: PathBuf, e: io::Error) -> SubPathError {
    SubPathError::Open {
        path,
        source: Arc::new(e),
    }
}

fn canonicalize(path: &Path) -> Result<PathBuf, SubPathError> {
    fs::canonicalize(path).map_err(|e| SubPathError::ResolveSymlinks {
        path: path.to_path_buf(),
        source: Arc::new(e),
    })
}
