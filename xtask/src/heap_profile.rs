//! `cargo xtask heap-profile PROFILE --watches N [--baseline PROFILE --baseline-watches M]`:
//! where the agent's heap goes, from a `dhat-heap.json` written by a `dhat-heap` build.
//!
//! Each allocation site (a dhat program point: bytes live at the global peak `gb`, at the end
//! `eb`, and the stack `fs`) is given to the category of the innermost frame that names a
//! crate the table knows ([`CATEGORIES`]): an `h2` frame above a `hyper` frame above an
//! object-manager frame is HTTP/2's. Sites with no known frame are `other`. Bytes are divided
//! by the number of watched objects; with a baseline profile of the same workload at fewer
//! objects, the difference divided by the difference of watches is the marginal cost of one
//! more watched object.
//!
//! ```text
//! SCALE_RUNS=h2-1000 SCALE_AGENT_BIN=<dhat build> NODELET_DHAT_FILE=/tmp/1000.json \
//!     cargo bench -p nodelet --bench scale
//! cargo xtask heap-profile /tmp/1000.json --watches 1000 --baseline /tmp/100.json --baseline-watches 100
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use serde::Deserialize;

const USAGE: &str = "\
usage: cargo xtask heap-profile PROFILE --watches N [--baseline PROFILE --baseline-watches M]
                                [--sites K]

Reads a dhat-heap.json written by the agent built with `--features dhat-heap` and prints, per
category (HTTP/2, hyper, TLS, kube, object-manager, ...), the bytes live at the global peak and
at the end, per watched object (N watches). With a baseline profile of the same workload at M
watches: the marginal bytes per watched object. --sites K: the K largest allocation sites of
each category at the end (default 3).
";

/// Categories by crate name, checked on each frame from the allocation point outwards; the
/// first frame that names one of these crates decides. Order within the table does not matter:
/// a frame names its crates left to right and the leftmost known one wins.
const CATEGORIES: &[(&str, &[&str], &str)] = &[
    (
        "HTTP/2 (h2)",
        &["h2"],
        "streams, flow control, HPACK, frame buffers",
    ),
    (
        "hyper",
        &["hyper", "hyper_util"],
        "connection tasks, body channels, request/response heads",
    ),
    (
        "TLS (rustls)",
        &[
            "rustls",
            "tokio_rustls",
            "ring",
            "rustls_pki_types",
            "webpki",
        ],
        "TLS sessions, record buffers",
    ),
    (
        "kube client/runtime",
        &["kube_client", "kube_runtime", "kube_core", "kube"],
        "request building, response bodies",
    ),
    (
        "object-manager",
        &["nodelet_object_manager"],
        "reflectors, stores, watch decoder",
    ),
    (
        "transport",
        &["nodelet_transport"],
        "connection pool, shards, counters",
    ),
    (
        "volume-manager",
        &["nodelet_volume_manager"],
        "desired/actual state, payloads",
    ),
    ("podworker", &["nodelet_podworker"], "pod workers, env"),
    (
        "atomic-writer",
        &["nodelet_atomic_writer"],
        "file projection",
    ),
    (
        "objects (serde_json, k8s-openapi)",
        &["serde_json", "serde", "serde_core", "k8s_openapi"],
        "decoded objects and their copies",
    ),
    (
        "tokio",
        &["tokio", "tokio_util", "tokio_stream"],
        "task cells, timers, channels",
    ),
    (
        "tracing",
        &["tracing", "tracing_core", "tracing_subscriber"],
        "spans, subscriber",
    ),
    (
        "agent (nodelet)",
        &["nodelet", "nodelet_core"],
        "pod watch, status, events, metrics",
    ),
];

/// Sites with no frame of a known crate.
const OTHER: &str = "other";

/// Runs the task with its arguments.
pub(crate) fn main(args: Vec<String>) -> anyhow::Result<()> {
    let mut profile = None;
    let mut watches = None;
    let mut baseline = None;
    let mut baseline_watches = None;
    let mut sites = 3;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--watches" => watches = Some(number(args.next(), "--watches")?),
            "--baseline" => {
                baseline = Some(PathBuf::from(
                    args.next().context("--baseline needs a profile")?,
                ));
            }
            "--baseline-watches" => {
                baseline_watches = Some(number(args.next(), "--baseline-watches")?);
            }
            "--sites" => sites = number(args.next(), "--sites")?,
            "-h" | "--help" => {
                print!("{USAGE}");
                return Ok(());
            }
            other if other.starts_with('-') => bail!("unknown option `{other}`\n\n{USAGE}"),
            path if profile.is_none() => profile = Some(PathBuf::from(path)),
            extra => bail!("one profile only; `{extra}` is a second\n\n{USAGE}"),
        }
    }
    let profile = profile.context(format!("no profile given\n\n{USAGE}"))?;
    let watches = watches.context("--watches N: the number of watched objects")?;
    let main = read(&profile)?;
    let base = match (baseline, baseline_watches) {
        (Some(path), Some(n)) if n < watches => Some((read(&path)?, n)),
        (Some(_), Some(n)) => bail!("--baseline-watches {n} must be below --watches {watches}"),
        (Some(_), None) => bail!("--baseline needs --baseline-watches M"),
        (None, Some(_)) => bail!("--baseline-watches needs --baseline PROFILE"),
        (None, None) => None,
    };
    print!(
        "{}",
        report(&main, watches, base.as_ref().map(|(b, n)| (b, *n)), sites)
    );
    Ok(())
}

fn number(arg: Option<String>, option: &str) -> anyhow::Result<usize> {
    let arg = arg.context(format!("{option} needs a number"))?;
    arg.parse()
        .with_context(|| format!("{option} {arg}: not a number"))
}

fn read(path: &std::path::Path) -> anyhow::Result<Breakdown> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let profile: Profile = serde_json::from_slice(&text)
        .with_context(|| format!("{}: not a dhat JSON profile", path.display()))?;
    if profile.mode != "rust-heap" {
        bail!(
            "{}: mode {:?}, not a heap profile (rust-heap)",
            path.display(),
            profile.mode
        );
    }
    Ok(Breakdown::of(&profile))
}

/// The parts of a dhat JSON profile (`dhatFileVersion` 2) this task reads.
#[derive(Debug, Deserialize)]
struct Profile {
    mode: String,
    /// Program points: one per distinct allocation stack.
    pps: Vec<ProgramPoint>,
    /// Frame strings, `"0xADDR: function (file:line:col)"`; `fs` indexes them.
    ftbl: Vec<String>,
}

/// One allocation site. Bytes and blocks: `t` in total, `g` live at the global peak, `e` live
/// at the end (when the profiler dropped).
#[derive(Debug, Deserialize)]
struct ProgramPoint {
    tb: u64,
    gb: u64,
    gbk: u64,
    eb: u64,
    ebk: u64,
    /// Frames, innermost (the allocation) first.
    fs: Vec<usize>,
}

/// Bytes and blocks live at the global peak and at the end.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Live {
    peak_bytes: u64,
    peak_blocks: u64,
    end_bytes: u64,
    end_blocks: u64,
}

impl Live {
    fn add(&mut self, pp: &ProgramPoint) {
        self.peak_bytes += pp.gb;
        self.peak_blocks += pp.gbk;
        self.end_bytes += pp.eb;
        self.end_blocks += pp.ebk;
    }
}

/// A profile's live bytes by category, and its largest sites at the end.
#[derive(Debug, Default)]
struct Breakdown {
    by_category: BTreeMap<&'static str, Live>,
    total: Live,
    allocated_total: u64,
    /// Per category: (bytes at the end, deciding frame, its caller in another crate).
    sites: BTreeMap<&'static str, Vec<(u64, String, String)>>,
}

impl Breakdown {
    fn of(profile: &Profile) -> Self {
        let mut b = Breakdown::default();
        for pp in &profile.pps {
            let frames: Vec<&str> = pp
                .fs
                .iter()
                .map(|&i| profile.ftbl.get(i).map_or("", |f| function(f)))
                .collect();
            let (category, at) = categorize(&frames);
            b.by_category.entry(category).or_default().add(pp);
            b.total.add(pp);
            b.allocated_total += pp.tb;
            if pp.eb > 0 {
                let site = at.map_or_else(
                    || unclaimed_site(&frames).to_owned(),
                    |i| frames[i].to_owned(),
                );
                let caller = at
                    .and_then(|i| caller(&frames, i))
                    .map_or_else(String::new, str::to_owned);
                b.sites
                    .entry(category)
                    .or_default()
                    .push((pp.eb, site, caller));
            }
        }
        for sites in b.sites.values_mut() {
            sites.sort_by_key(|s| std::cmp::Reverse(s.0));
        }
        b
    }
}

/// The function part of a frame string: `"0x1f: h2::x::y (src/z.rs:1:2)"` → `"h2::x::y"`.
fn function(frame: &str) -> &str {
    let name = match frame.split_once(": ") {
        Some((addr, rest)) if addr.starts_with("0x") => rest,
        _ => frame,
    };
    match name.rfind(" (") {
        Some(i) if name.ends_with(')') => &name[..i],
        _ => name,
    }
}

/// The crates a function name mentions, left to right: each identifier that is followed by
/// `::` and is not itself after `::` (`<hyper::proto::h2::X as core::Y>` → hyper, core).
fn crates(function: &str) -> Vec<&str> {
    let bytes = function.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !ident(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && ident(bytes[i]) {
            i += 1;
        }
        let after_path = start >= 1 && bytes[start - 1] == b':';
        if !after_path && function[i..].starts_with("::") {
            out.push(&function[start..i]);
        }
    }
    out
}

/// The category of the first frame naming a known crate, and that frame's index.
fn categorize(frames: &[&str]) -> (&'static str, Option<usize>) {
    for (i, frame) in frames.iter().enumerate() {
        if let Some(category) = crates(frame).into_iter().find_map(category_of) {
            return (category, Some(i));
        }
    }
    (OTHER, None)
}

fn category_of(krate: &str) -> Option<&'static str> {
    CATEGORIES
        .iter()
        .find(|(_, crates, _)| crates.contains(&krate))
        .map(|(name, _, _)| *name)
}

/// Who asked for the memory of the site decided at frame `at`: the first frame outwards that
/// names a nodelet crate in another category than frame `at`'s, else the first frame of any
/// other known category (wrappers such as tracing's `Instrumented` are skipped when a nodelet
/// frame follows).
fn caller<'a>(frames: &[&'a str], at: usize) -> Option<&'a str> {
    let own = crates(frames[at]).into_iter().find_map(category_of);
    let other = |f: &&str| {
        let c = crates(f).into_iter().find_map(category_of);
        c.is_some() && c != own
    };
    let outer = &frames[at + 1..];
    outer
        .iter()
        .copied()
        .filter(other)
        .find(|f| crates(f).iter().any(|k| k.starts_with("nodelet")))
        .or_else(|| outer.iter().copied().find(other))
}

/// What to show for a site no known crate claims: its innermost frame outside the standard
/// library, else its innermost frame.
fn unclaimed_site<'a>(frames: &[&'a str]) -> &'a str {
    let std_only = |f: &&str| {
        crates(f)
            .iter()
            .all(|k| matches!(*k, "alloc" | "core" | "std"))
    };
    frames
        .iter()
        .copied()
        .find(|f| !std_only(f))
        .or_else(|| frames.first().copied())
        .unwrap_or("")
}

fn kib(bytes: f64) -> String {
    format!("{:.1}", bytes / 1024.0)
}

/// The Markdown report: one row per category, largest at the end first.
fn report(
    main: &Breakdown,
    watches: usize,
    base: Option<(&Breakdown, usize)>,
    sites: usize,
) -> String {
    let n = watches as f64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{watches} watched objects: {:.1} MiB live at the global peak, {:.1} MiB at the end; {:.1} MiB allocated in all\n",
        main.total.peak_bytes as f64 / 1048576.0,
        main.total.end_bytes as f64 / 1048576.0,
        main.allocated_total as f64 / 1048576.0,
    );
    let mut header = "| category | KiB at peak | per watch | KiB at end | per watch |".to_owned();
    let mut rule = "|---|---:|---:|---:|---:|".to_owned();
    if let Some((_, m)) = base {
        let _ = write!(
            header,
            " marginal per watch ({m} → {watches}), end | what it is |"
        );
        rule.push_str("---:|---|");
    } else {
        header.push_str(" what it is |");
        rule.push_str("---|");
    }
    let _ = writeln!(out, "{header}\n{rule}");
    let mut rows: Vec<(&'static str, Live)> =
        main.by_category.iter().map(|(k, v)| (*k, *v)).collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1.end_bytes));
    rows.push(("total", main.total));
    for (category, live) in rows {
        let what = CATEGORIES
            .iter()
            .find(|(name, _, _)| *name == category)
            .map_or("", |(_, _, what)| *what);
        let mut row = format!(
            "| {category} | {} | {:.0} B | {} | {:.0} B |",
            kib(live.peak_bytes as f64),
            live.peak_bytes as f64 / n,
            kib(live.end_bytes as f64),
            live.end_bytes as f64 / n,
        );
        if let Some((b, m)) = base {
            let before = if category == "total" {
                b.total
            } else {
                b.by_category.get(category).copied().unwrap_or_default()
            };
            let marginal = (live.end_bytes as f64 - before.end_bytes as f64) / (watches - m) as f64;
            let _ = write!(row, " {marginal:.0} B |");
        }
        let _ = writeln!(row, " {what} |");
        out.push_str(&row);
    }
    if sites > 0 {
        let _ = writeln!(
            out,
            "\nLargest sites at the end (bytes, frame, asked for by):"
        );
        let mut categories: Vec<_> = main.sites.iter().collect();
        categories.sort_by_key(|(c, _)| std::cmp::Reverse(main.by_category[*c].end_bytes));
        for (category, list) in categories {
            let _ = writeln!(out, "{category}:");
            for (bytes, site, caller) in list.iter().take(sites) {
                let _ = writeln!(out, "  {bytes:>10}  {site}  <- {caller}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Five sites: HTTP/2 under hyper under the object manager; a task cell spawned by the
    /// object manager; an object decoded by serde_json; a hyper frame that mentions h2 only
    /// inside its own path; an allocation with no known crate.
    const FIXTURE: &str = r#"{
      "dhatFileVersion": 2, "mode": "rust-heap", "verb": "Allocated", "bklt": true,
      "bkacc": false, "tu": "µs", "Mtu": "s", "tuth": 10, "cmd": "nodelet", "pid": 1,
      "tg": 100, "te": 200,
      "pps": [
        {"tb": 9000, "tbk": 9, "tl": 1, "mb": 4000, "mbk": 4, "gb": 4000, "gbk": 4, "eb": 3000, "ebk": 3, "fs": [1, 2, 3, 4]},
        {"tb": 2000, "tbk": 2, "tl": 1, "mb": 2000, "mbk": 2, "gb": 2000, "gbk": 2, "eb": 2000, "ebk": 2, "fs": [1, 5, 6]},
        {"tb": 5000, "tbk": 5, "tl": 1, "mb": 5000, "mbk": 5, "gb": 5000, "gbk": 5, "eb": 0, "ebk": 0, "fs": [1, 7, 8, 6]},
        {"tb": 100, "tbk": 1, "tl": 1, "mb": 100, "mbk": 1, "gb": 100, "gbk": 1, "eb": 100, "ebk": 1, "fs": [9]},
        {"tb": 50, "tbk": 1, "tl": 1, "mb": 50, "mbk": 1, "gb": 0, "gbk": 0, "eb": 50, "ebk": 1, "fs": [1, 10]}
      ],
      "ftbl": [
        "[root]",
        "0x10: alloc::raw_vec::RawVecInner<A>::reserve::do_reserve_and_handle (alloc/src/raw_vec.rs:1:1)",
        "0x11: bytes::bytes_mut::BytesMut::reserve_inner (bytes/src/bytes_mut.rs:1:1)",
        "0x12: h2::codec::framed_read::FramedRead<T>::decode_frame (h2/src/codec/framed_read.rs:1:1)",
        "0x13: <hyper::proto::h2::client::ClientTask<B,E,T> as core::future::future::Future>::poll (hyper/src/proto/h2/client.rs:1:1)",
        "0x14: tokio::runtime::task::core::Cell<T,S>::new (tokio/src/runtime/task/core.rs:1:1)",
        "0x15: nodelet_object_manager::watch::WatchManager<K>::start (crates/object-manager/src/watch.rs:1:1)",
        "0x16: <serde_json::de::Deserializer<R>>::parse_str (serde_json/src/de.rs:1:1)",
        "0x17: nodelet_object_manager::source::lines::decode (crates/object-manager/src/source/lines.rs:1:1)",
        "0x18: <hyper::proto::h2::ping::Ponger as core::clone::Clone>::clone (hyper/src/proto/h2/ping.rs:1:1)",
        "0x19: std::thread::local::LocalKey<T>::with (std/src/thread/local.rs:1:1)"
      ]
    }"#;

    fn fixture() -> Breakdown {
        let profile: Profile =
            serde_json::from_str(FIXTURE).unwrap_or_else(|e| panic!("fixture: {e}"));
        Breakdown::of(&profile)
    }

    #[test]
    fn each_site_goes_to_the_innermost_frame_of_a_known_crate() {
        let b = fixture();
        let live = |c: &str| b.by_category.get(c).copied().unwrap_or_default();
        assert_eq!(live("HTTP/2 (h2)").end_bytes, 3000);
        assert_eq!(live("HTTP/2 (h2)").peak_bytes, 4000);
        assert_eq!(live("tokio").end_bytes, 2000);
        assert_eq!(live("objects (serde_json, k8s-openapi)").peak_bytes, 5000);
        assert_eq!(live("objects (serde_json, k8s-openapi)").end_bytes, 0);
        assert_eq!(
            live("hyper").end_bytes,
            100,
            "h2 inside hyper's own path is hyper's"
        );
        assert_eq!(live(OTHER).end_bytes, 50);
        assert_eq!(
            live("object-manager"),
            Live::default(),
            "every site is claimed lower"
        );
        assert_eq!(b.total.end_bytes, 5150);
        assert_eq!(b.total.peak_bytes, 11100);
        assert_eq!(b.total.end_blocks, 7);
        assert_eq!(b.allocated_total, 16150);
    }

    #[test]
    fn a_site_names_who_asked_for_it_in_another_category() {
        let b = fixture();
        let (bytes, site, caller) = &b.sites["tokio"][0];
        assert_eq!(*bytes, 2000);
        assert_eq!(site, "tokio::runtime::task::core::Cell<T,S>::new");
        assert_eq!(
            caller,
            "nodelet_object_manager::watch::WatchManager<K>::start"
        );
        assert_eq!(
            b.sites["HTTP/2 (h2)"][0].2.split("::").next(),
            Some("<hyper")
        );
    }

    #[test]
    fn crates_are_path_roots_only() {
        assert_eq!(
            crates("<hyper::proto::h2::client::ClientTask<B,E,T> as core::future::Future>::poll"),
            ["hyper", "core"]
        );
        assert_eq!(crates("h2::proto::streams::Recv::recv_data"), ["h2"]);
        assert_eq!(
            crates("tokio::runtime::task::core::Cell<T,S>::new"),
            ["tokio"]
        );
        assert_eq!(function("0x1: a::b (x.rs:1:2)"), "a::b");
        assert_eq!(function("[root]"), "[root]");
    }

    #[test]
    fn the_report_gives_bytes_per_watch_and_the_marginal_cost() {
        let b = fixture();
        let text = report(&b, 10, Some((&Breakdown::default(), 5)), 1);
        // HTTP/2: 3000 bytes at the end over 10 watches; from an empty baseline at 5, 600 more
        // per watch.
        let row = text
            .lines()
            .find(|l| l.starts_with("| HTTP/2 (h2) |"))
            .unwrap_or_else(|| panic!("no HTTP/2 row in\n{text}"));
        assert_eq!(
            row,
            "| HTTP/2 (h2) | 3.9 | 400 B | 2.9 | 300 B | 600 B | streams, flow control, HPACK, frame buffers |"
        );
        assert!(
            text.contains("| total | 10.8 | 1110 B | 5.0 | 515 B | 1030 B |  |"),
            "{text}"
        );
    }
}
