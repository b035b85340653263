//! A latency broken into its phases, so a tail names its cause: each sample is the times at
//! which it passed a fixed list of milestones (from its start), and a phase is the time between
//! two milestones in a row. A milestone seen before the one ahead of it (a watch event that
//! overtakes the write's answer) is counted as reached together with it: the phases of a
//! sample always add up to its total.
//!
//! Also where the agent's atomic writer left its times on disk: a volume's files carry the time
//! they were written (`mtime`), and its `..data` symlink the time of the switch that made them
//! visible (`ctime`: `rename(2)` of `..data_tmp` over it on an update, `symlink(2)` on a first
//! write), both after the agent's own clock, which is the bench's. The kernel stamps them
//! from its coarse clock (a tick, 1–4 ms) unless the time was read since its last change, so
//! the written → swapped phase (the writer's `fsync`s) is exact only to a tick: a switch within
//! the tick of the write counts as zero.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::percentile;

/// Samples over the milestones `names[1..]` (`names[0]` names the start).
pub(crate) struct Phases {
    names: &'static [&'static str],
    samples: Vec<Vec<Duration>>,
    labels: Vec<String>,
}

impl Phases {
    /// No samples yet; `names`: the start, then each milestone in order.
    pub(crate) fn new(names: &'static [&'static str]) -> Phases {
        Phases {
            names,
            samples: Vec::new(),
            labels: Vec::new(),
        }
    }

    /// One sample, named `label`: the time of each milestone from the start, in
    /// `names[1..]`'s order.
    pub(crate) fn push(&mut self, label: String, at: &[Duration]) {
        self.labels.push(label);
        let mut last = Duration::ZERO;
        let phases = at
            .iter()
            .map(|t| {
                let end = (*t).max(last);
                let phase = end - last;
                last = end;
                phase
            })
            .collect();
        self.samples.push(phases);
    }

    /// How many samples.
    pub(crate) fn len(&self) -> usize {
        self.samples.len()
    }

    fn total(sample: &[Duration]) -> Duration {
        sample.iter().sum()
    }

    /// `phase p50 / p99 / max` for each phase, `; `-separated.
    pub(crate) fn each(&self) -> String {
        (0..self.names.len() - 1)
            .map(|i| {
                let mut v: Vec<Duration> = self.samples.iter().map(|s| s[i]).collect();
                v.sort();
                format!(
                    "{} → {}: p50 {:.1?}, p99 {:.1?}, max {:.1?}",
                    self.names[i],
                    self.names[i + 1],
                    percentile(&v, 0.5),
                    percentile(&v, 0.99),
                    v.last().copied().unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The tail: the samples whose total is at least the p99 total, each phase's share of
    /// their time, and the phase that holds most of it (where the p99 is).
    pub(crate) fn tail(&self) -> String {
        let mut totals: Vec<Duration> = self.samples.iter().map(|s| Self::total(s)).collect();
        totals.sort();
        let p99 = percentile(&totals, 0.99);
        let tail: Vec<&Vec<Duration>> = self
            .samples
            .iter()
            .filter(|s| Self::total(s) >= p99)
            .collect();
        let all: Duration = tail.iter().map(|s| Self::total(s)).sum();
        if tail.is_empty() || all.is_zero() {
            return "no samples".to_owned();
        }
        let shares: Vec<(usize, Duration)> = (0..self.names.len() - 1)
            .map(|i| (i, tail.iter().map(|s| s[i]).sum()))
            .collect();
        let (top, _) = shares
            .iter()
            .max_by_key(|(_, d)| *d)
            .copied()
            .unwrap_or_default();
        let each = shares
            .iter()
            .map(|(i, d)| {
                format!(
                    "{} → {} {:.0} % (mean {:.1?})",
                    self.names[*i],
                    self.names[*i + 1],
                    100.0 * d.as_secs_f64() / all.as_secs_f64(),
                    *d / tail.len() as u32
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "the {} samples at or over the p99 ({p99:.1?}): {each}; the p99 is in {} → {}",
            tail.len(),
            self.names[top],
            self.names[top + 1]
        )
    }

    /// The `n` slowest samples, each with its phases.
    pub(crate) fn slowest(&self, n: usize) -> String {
        let mut by_total: Vec<(&String, &Vec<Duration>)> =
            self.labels.iter().zip(&self.samples).collect();
        by_total.sort_by_key(|(_, s)| std::cmp::Reverse(Self::total(s)));
        by_total
            .iter()
            .take(n)
            .map(|(label, s)| {
                let parts: Vec<String> = s.iter().map(|d| format!("{d:.1?}")).collect();
                format!("{label} {:.1?} ({})", Self::total(s), parts.join(" + "))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// When the atomic writer wrote `file` (a volume's visible name, followed to its data
/// directory) and when it switched `..data` beside it, from `since`; `None` for what cannot be
/// read.
pub(crate) fn written_swapped(
    file: &Path,
    since: SystemTime,
) -> (Option<Duration>, Option<Duration>) {
    let from = |t: SystemTime| t.duration_since(since).unwrap_or_default();
    let written = std::fs::metadata(file)
        .and_then(|m| m.modified())
        .ok()
        .map(from);
    let swapped = file
        .parent()
        .and_then(|dir| std::fs::symlink_metadata(dir.join("..data")).ok())
        .and_then(|m| {
            let nanos = u32::try_from(m.ctime_nsec()).ok()?;
            let secs = u64::try_from(m.ctime()).ok()?;
            Some(SystemTime::UNIX_EPOCH + Duration::new(secs, nanos))
        })
        .map(from);
    (written, swapped)
}
