//! [`NodeAllocatable`]: the node's allocatable resources, the value of a `resourceFieldRef`
//! limit a container does not set (PL-13), and what the agent reports as the Node's
//! `status.allocatable`.

use std::fs;
use std::path::Path;

/// The node's allocatable resources (`Default`: zero of each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeAllocatable {
    /// CPU in millicores.
    pub cpu_millis: i64,
    /// Memory in bytes.
    pub memory_bytes: i64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage_bytes: i64,
}

impl NodeAllocatable {
    /// The machine's CPUs, `MemTotal` from `/proc/meminfo` and the size of the filesystem
    /// holding `root_dir` (zero where unknown).
    pub fn detect(root_dir: &Path) -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let memory_kib = fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<i64>().ok())
            })
            .unwrap_or(0);
        let storage = nix::sys::statvfs::statvfs(root_dir)
            .map(|s| {
                i64::try_from(u128::from(s.blocks()) * u128::from(s.fragment_size()))
                    .unwrap_or(i64::MAX)
            })
            .unwrap_or(0);
        Self {
            cpu_millis: i64::try_from(cpus).unwrap_or(1) * 1000,
            memory_bytes: memory_kib.saturating_mul(1024),
            ephemeral_storage_bytes: storage,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_finds_at_least_one_cpu_and_the_root_filesystem() {
        let found = NodeAllocatable::detect(Path::new("/"));
        assert!(found.cpu_millis >= 1000, "{found:?}");
        assert!(found.ephemeral_storage_bytes > 0, "{found:?}");
        let missing = NodeAllocatable::detect(Path::new("/does/not/exist/at/all"));
        assert_eq!(missing.ephemeral_storage_bytes, 0);
    }
}
