//! [`ImageTable`]: which local program stands for which container image, and the Kubernetes
//! rules that merge an image's entrypoint and default arguments with a container's `command`
//! and `args` ([`ImageEntry::command_line`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use nodelet_core::runtime::ContainerLaunch;
use serde::{Deserialize, Serialize};

/// One entry of the image table (the agent's config file, key `images`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageEntry {
    /// A glob over image references: `*` matches any run of characters, `?` one character.
    /// It is matched against the reference as the pod spells it (`busybox:1.36`) and against
    /// its normalized form (`docker.io/library/busybox:1.36`).
    pub image: String,
    /// The program that stands for the image's entrypoint (an absolute path or a name looked
    /// up in the container's `PATH`); none when the image has no entrypoint and only its
    /// default arguments (or the container's `command`) say what runs.
    #[serde(default)]
    pub entrypoint: Vec<String>,
    /// The image's default arguments (its `CMD`).
    #[serde(default)]
    pub args: Vec<String>,
    /// Directories prepended to the container's `PATH`.
    #[serde(default)]
    pub path: Vec<PathBuf>,
    /// The image's default user (numeric); 0 (root) when unset, as for most images.
    #[serde(default)]
    pub user: Option<u32>,
    /// The image's default group; 0 when unset.
    #[serde(default)]
    pub group: Option<u32>,
    /// The image's working directory; `/` when unset.
    #[serde(default)]
    pub working_dir: Option<PathBuf>,
    /// Files (or directories) the image has at fixed paths that the host may lack: path in
    /// the container → host path, each bound read-only into the container before its volumes
    /// (a program an image's users call by its absolute path, like busybox's `/bin/sysctl`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<PathBuf, PathBuf>,
}

/// The image table: the first entry whose pattern matches an image wins.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ImageTable {
    entries: Vec<ImageEntry>,
}

impl ImageTable {
    /// A table of `entries`, matched in order.
    pub fn new(entries: Vec<ImageEntry>) -> Self {
        Self { entries }
    }

    /// The entries, in order.
    pub fn entries(&self) -> &[ImageEntry] {
        &self.entries
    }

    /// The first entry matching `image` (as written, or normalized).
    pub fn find(&self, image: &str) -> Option<&ImageEntry> {
        let normalized = normalize(image);
        self.entries
            .iter()
            .find(|e| glob_match(&e.image, image) || glob_match(&e.image, &normalized))
    }
}

impl ImageEntry {
    /// The program and its arguments, by Kubernetes' rules:
    /// 1. neither `command` nor `args`: the entrypoint with the default arguments;
    /// 2. `args` only: the entrypoint with `args`;
    /// 3. `command` only: `command` (the default arguments are dropped);
    /// 4. both: `command` with `args`.
    ///
    /// `None` when the result is empty (nothing to run).
    pub fn command_line(&self, launch: &ContainerLaunch) -> Option<(String, Vec<String>)> {
        let mut argv: Vec<String> = if launch.has_command {
            launch.command.clone()
        } else {
            self.entrypoint.clone()
        };
        if launch.has_args {
            argv.extend(launch.args.iter().cloned());
        } else if !launch.has_command {
            argv.extend(self.args.iter().cloned());
        }
        if argv.is_empty() {
            return None;
        }
        let program = argv.remove(0);
        Some((program, argv))
    }
}

/// `busybox` → `docker.io/library/busybox:latest`; `registry.k8s.io/e2e-test-images/agnhost:2.53`
/// stays as it is.
pub fn normalize(image: &str) -> String {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let first = name.split('/').next().unwrap_or_default();
    let has_registry =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut full = if has_registry {
        name.to_owned()
    } else if name.contains('/') {
        format!("docker.io/{name}")
    } else {
        format!("docker.io/library/{name}")
    };
    let last = full.rsplit('/').next().unwrap_or_default();
    if digest.is_none() && !last.contains(':') {
        full.push_str(":latest");
    }
    if let Some(d) = digest {
        full.push('@');
        full.push_str(d);
    }
    full
}

/// `*` matches any run of characters (`/` included), `?` exactly one; everything else
/// matches itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(entrypoint: &[&str], args: &[&str]) -> ImageEntry {
        ImageEntry {
            image: "*".into(),
            entrypoint: entrypoint.iter().map(|s| (*s).to_owned()).collect(),
            args: args.iter().map(|s| (*s).to_owned()).collect(),
            path: Vec::new(),
            user: None,
            group: None,
            working_dir: None,
            files: Default::default(),
        }
    }

    fn launch(command: Option<&[&str]>, args: Option<&[&str]>) -> ContainerLaunch {
        let v = |s: &[&str]| s.iter().map(|s| (*s).to_owned()).collect();
        ContainerLaunch {
            command: command.map(v).unwrap_or_default(),
            args: args.map(v).unwrap_or_default(),
            has_command: command.is_some(),
            has_args: args.is_some(),
            ..ContainerLaunch::default()
        }
    }

    #[test]
    fn command_and_args_follow_the_kubernetes_rules() {
        let e = entry(&["/bin/ep"], &["default"]);
        let line = |c, a| e.command_line(&launch(c, a));
        assert_eq!(
            line(None, None),
            Some(("/bin/ep".into(), vec!["default".into()]))
        );
        assert_eq!(
            line(None, Some(&["x"])),
            Some(("/bin/ep".into(), vec!["x".into()]))
        );
        assert_eq!(
            line(Some(&["sh", "-c"]), None),
            Some(("sh".into(), vec!["-c".into()]))
        );
        assert_eq!(
            line(Some(&["sh"]), Some(&["-c", "true"])),
            Some(("sh".into(), vec!["-c".into(), "true".into()]))
        );
        let bare = entry(&[], &[]);
        assert_eq!(bare.command_line(&launch(None, None)), None);
        assert_eq!(
            entry(&[], &["sh"]).command_line(&launch(None, None)),
            Some(("sh".into(), vec![]))
        );
    }

    #[test]
    fn globs_match_the_written_and_the_normalized_reference() {
        let table = ImageTable::new(vec![
            ImageEntry {
                image: "docker.io/library/busybox:*".into(),
                ..entry(&["/bin/busybox"], &[])
            },
            ImageEntry {
                image: "*/agnhost:2.?*".into(),
                ..entry(&["/usr/local/bin/agnhost"], &[])
            },
        ]);
        assert!(table.find("busybox").is_some());
        assert!(table.find("busybox:1.36").is_some());
        assert!(
            table
                .find("registry.k8s.io/e2e-test-images/agnhost:2.53")
                .is_some()
        );
        assert!(table.find("nginx").is_none());
        assert!(glob_match("a*b*c", "aXXbYc"));
        assert!(!glob_match("a*b", "ac"));
        assert!(glob_match("*", ""));
    }

    #[test]
    fn references_are_normalized_as_docker_does() {
        assert_eq!(normalize("busybox"), "docker.io/library/busybox:latest");
        assert_eq!(normalize("me/app:1"), "docker.io/me/app:1");
        assert_eq!(normalize("localhost:5000/app"), "localhost:5000/app:latest");
        assert_eq!(normalize("quay.io/x/y@sha256:ab"), "quay.io/x/y@sha256:ab");
    }
}
