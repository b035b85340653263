//! The run's report: a table of scenarios for people, the same as JSON for machines.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

/// One scenario's result.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct ScenarioReport {
    pub(crate) name: String,
    pub(crate) passed: bool,
    /// The failure, when it failed.
    pub(crate) error: Option<String>,
    /// Why it checked nothing (the cluster lacks what it needs), when it was skipped; `passed`
    /// is then true, and the table says `skip`.
    pub(crate) skipped: Option<String>,
    /// Wall time of the scenario, in milliseconds.
    pub(crate) duration_ms: f64,
    /// Propagation latency (API write → file visible) of each update the scenario made.
    pub(crate) latency: Option<LatencySummary>,
}

/// Median and max of a scenario's propagation latencies.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct LatencySummary {
    pub(crate) samples: usize,
    pub(crate) median_ms: f64,
    pub(crate) max_ms: f64,
}

impl LatencySummary {
    /// `None` for a scenario that measured nothing.
    pub(crate) fn of(samples: &[Duration]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let mid = ms.len() / 2;
        let median = if ms.len().is_multiple_of(2) {
            (ms[mid - 1] + ms[mid]) / 2.0
        } else {
            ms[mid]
        };
        Some(LatencySummary {
            samples: ms.len(),
            median_ms: median,
            max_ms: ms[ms.len() - 1],
        })
    }
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    /// `kind`, `kubeconfig` or `embedded`.
    pub(crate) mode: String,
    /// The identity the agent ran as, e.g. `system:node:nodelet-e2e` or `admin`.
    pub(crate) agent_identity: String,
    /// Why the agent did not run with a node identity, when it did not.
    pub(crate) identity_note: Option<String>,
    pub(crate) scenarios: Vec<ScenarioReport>,
}

impl Report {
    pub(crate) fn failed(&self) -> usize {
        self.scenarios.iter().filter(|s| !s.passed).count()
    }

    fn skipped(&self) -> usize {
        self.scenarios
            .iter()
            .filter(|s| s.skipped.is_some())
            .count()
    }

    /// The human-readable table.
    pub(crate) fn table(&self) -> String {
        let width = self
            .scenarios
            .iter()
            .map(|s| s.name.len())
            .max()
            .unwrap_or(8)
            .max(8);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "mode: {}   agent identity: {}",
            self.mode, self.agent_identity
        );
        if let Some(note) = &self.identity_note {
            let _ = writeln!(out, "note: {note}");
        }
        let _ = writeln!(
            out,
            "{:<width$}  {:<6}  {:>9}  {:>26}",
            "scenario", "result", "time", "propagation median / max"
        );
        for s in &self.scenarios {
            let latency = match &s.latency {
                Some(l) => format!(
                    "{:.1} ms / {:.1} ms (n={})",
                    l.median_ms, l.max_ms, l.samples
                ),
                None => "-".to_string(),
            };
            let _ = writeln!(
                out,
                "{:<width$}  {:<6}  {:>7.0}ms  {:>26}",
                s.name,
                match (s.passed, &s.skipped) {
                    (false, _) => "FAIL",
                    (true, Some(_)) => "skip",
                    (true, None) => "pass",
                },
                s.duration_ms,
                latency
            );
            if let Some(err) = &s.error {
                let _ = writeln!(out, "{:<width$}    └─ {err}", "");
            }
            if let Some(reason) = &s.skipped {
                let _ = writeln!(out, "{:<width$}    └─ skipped: {reason}", "");
            }
        }
        let _ = write!(
            out,
            "{} scenarios, {} passed, ",
            self.scenarios.len(),
            self.scenarios.len() - self.failed() - self.skipped(),
        );
        if self.skipped() > 0 {
            let _ = write!(out, "{} skipped, ", self.skipped());
        }
        let _ = write!(out, "{} failed", self.failed());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn latency_summary_takes_the_median_and_the_max() {
        let odd = LatencySummary::of(&[ms(30), ms(10), ms(20)]).unwrap();
        assert_eq!((odd.samples, odd.median_ms, odd.max_ms), (3, 20.0, 30.0));
        let even = LatencySummary::of(&[ms(40), ms(10), ms(20), ms(30)]).unwrap();
        assert_eq!((even.median_ms, even.max_ms), (25.0, 40.0));
        assert_eq!(LatencySummary::of(&[]), None);
    }

    #[test]
    fn the_table_marks_failures_and_counts_them() {
        let report = Report {
            mode: "embedded".into(),
            agent_identity: "admin".into(),
            identity_note: Some("no node identity".into()),
            scenarios: vec![
                ScenarioReport {
                    name: "configmap-volume".into(),
                    passed: true,
                    error: None,
                    skipped: None,
                    duration_ms: 120.0,
                    latency: LatencySummary::of(&[ms(12), ms(14)]),
                },
                ScenarioReport {
                    name: "secret-env".into(),
                    passed: false,
                    error: Some("file x never appeared".into()),
                    skipped: None,
                    duration_ms: 3000.0,
                    latency: None,
                },
            ],
        };
        let table = report.table();
        assert!(table.contains("configmap-volume  pass"), "{table}");
        assert!(table.contains("13.0 ms / 14.0 ms (n=2)"), "{table}");
        assert!(table.contains("secret-env        FAIL"), "{table}");
        assert!(table.contains("└─ file x never appeared"), "{table}");
        assert!(
            table.ends_with("2 scenarios, 1 passed, 1 failed"),
            "{table}"
        );
        assert!(table.contains("note: no node identity"));
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["scenarios"][1]["passed"], false);
        assert_eq!(json["scenarios"][0]["latency"]["max_ms"], 14.0);
    }

    #[test]
    fn a_skipped_scenario_is_counted_apart_from_the_passed_ones_with_its_reason() {
        let scenario = |name: &str, skipped: Option<&str>| ScenarioReport {
            name: name.into(),
            passed: true,
            error: None,
            skipped: skipped.map(Into::into),
            duration_ms: 10.0,
            latency: None,
        };
        let report = Report {
            mode: "kubeconfig".into(),
            agent_identity: "system:node:n1".into(),
            identity_note: None,
            scenarios: vec![
                scenario("configmap-volume", None),
                scenario("cluster-trust-bundle", Some("no ClusterTrustBundle API")),
            ],
        };
        let table = report.table();
        assert!(table.contains("cluster-trust-bundle  skip"), "{table}");
        assert!(
            table.contains("└─ skipped: no ClusterTrustBundle API"),
            "{table}"
        );
        assert!(
            table.ends_with("2 scenarios, 1 passed, 1 skipped, 0 failed"),
            "{table}"
        );
        assert_eq!(report.failed(), 0);
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["scenarios"][1]["skipped"], "no ClusterTrustBundle API");
    }
}
