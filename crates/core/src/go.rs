//! Go's spellings, as Kubernetes components print and parse them: architecture names
//! ([`arch`]), durations ([`parse_duration`], [`parse_duration_nanos`], [`format_duration`])
//! and `%q` quoting ([`quote`]). One home, so the agent, its API server stand-in and the
//! downward API agree.

use std::fmt::Write as _;
use std::time::Duration;

/// Go's `GOARCH` for the architecture this program was built for (`amd64`, `arm64`,
/// `ppc64le`, …), as the Node's `kubernetes.io/arch` label, its `nodeInfo.architecture`, a
/// User-Agent and `/version`'s `platform` spell it.
pub fn arch() -> &'static str {
    arch_of(std::env::consts::ARCH, cfg!(target_endian = "little"))
}

/// [`arch`] for Rust's `target_arch` name and byte order.
fn arch_of(rust: &'static str, little_endian: bool) -> &'static str {
    match (rust, little_endian) {
        ("x86_64", _) => "amd64",
        ("x86", _) => "386",
        ("aarch64", _) => "arm64",
        ("powerpc64", true) => "ppc64le",
        ("powerpc64", false) => "ppc64",
        ("loongarch64", _) => "loong64",
        ("mips64", true) => "mips64le",
        ("mips", true) => "mipsle",
        (other, _) => other,
    }
}

/// Parses Go's duration syntax into signed nanoseconds: `1h2m3.5s`, `300ms`, `-1.5h`, `0`;
/// units `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`. `None` for anything else (a bare number other
/// than `0` included, as Go's `time.ParseDuration`) or for a value outside `i64`.
pub fn parse_duration_nanos(text: &str) -> Option<i64> {
    let text = text.trim();
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&n| n > 0)?;
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 6e10,
            "h" => 3.6e12,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[unit_len..];
    }
    if !total.is_finite() || total > i64::MAX as f64 {
        return None;
    }
    #[allow(clippy::cast_possible_truncation)]
    let nanos = total.round() as i64;
    Some(if negative { -nanos } else { nanos })
}

/// [`parse_duration_nanos`] for durations that cannot be negative: `None` for a negative one.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let nanos = parse_duration_nanos(text)?;
    u64::try_from(nanos).ok().map(Duration::from_nanos)
}

/// Go's `time.Duration.String()` for whole and fractional seconds and above (`1h2m3s`,
/// `1.5s`, `-2m0s`, `0s`); below a second Go switches to `ms`/`µs`/`ns`, which is spelled
/// here as a fraction of a second (`0.5s`), a form [`parse_duration_nanos`] reads back.
pub fn format_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    let (h, rem) = (n / 3_600_000_000_000, n % 3_600_000_000_000);
    let (m, rem) = (rem / 60_000_000_000, rem % 60_000_000_000);
    let (s, frac) = (rem / 1_000_000_000, rem % 1_000_000_000);
    let mut out = sign.to_string();
    if h > 0 {
        let _ = write!(out, "{h}h");
    }
    if h > 0 || m > 0 {
        let _ = write!(out, "{m}m");
    }
    if frac == 0 {
        let _ = write!(out, "{s}s");
    } else {
        let f = format!("{frac:09}");
        let _ = write!(out, "{s}.{}s", f.trim_end_matches('0'));
    }
    out
}

/// [`format_duration`] of a `Duration` (the kubelet's back-off
/// messages: `10s`, `5m0s`).
pub fn format(d: std::time::Duration) -> String {
    format_duration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Go's `%q` for a string: double quotes, backslash escapes for quotes, backslashes and
/// control characters; printable Unicode is kept.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architectures_get_go_names_ppc64le_included() {
        assert_eq!(arch_of("x86_64", true), "amd64");
        assert_eq!(arch_of("aarch64", true), "arm64");
        assert_eq!(arch_of("powerpc64", true), "ppc64le");
        assert_eq!(arch_of("powerpc64", false), "ppc64");
        assert_eq!(arch_of("s390x", false), "s390x");
        assert_eq!(arch_of("riscv64", true), "riscv64");
    }

    #[test]
    fn go_durations_parse_as_go_parses_them() {
        let ok = |s: &str| parse_duration_nanos(s);
        assert_eq!(ok("0"), Some(0));
        assert_eq!(ok("1m0s"), Some(60_000_000_000));
        assert_eq!(ok("1h30m"), Some(5_400_000_000_000));
        assert_eq!(ok("1.5s"), Some(1_500_000_000));
        assert_eq!(ok("500ms"), Some(500_000_000));
        assert_eq!(ok("2µs"), Some(2_000));
        assert_eq!(ok("-1.5h"), Some(-5_400_000_000_000));
        for bad in ["", "5", "1x", "s", "1m-2s", "9999999999h"] {
            assert_eq!(ok(bad), None, "{bad}");
        }
        assert_eq!(parse_duration("-1s"), None);
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
    }

    #[test]
    fn durations_print_as_go_prints_them_and_read_back() {
        for (nanos, text) in [
            (0, "0s"),
            (3_723_000_000_000, "1h2m3s"),
            (1_500_000_000, "1.5s"),
            (-120_000_000_000, "-2m0s"),
        ] {
            assert_eq!(format_duration(nanos), text);
            assert_eq!(parse_duration_nanos(text), Some(nanos));
        }
    }

    #[test]
    fn quote_escapes_like_go_percent_q() {
        assert_eq!(quote("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\n\\x01é\"");
        assert_eq!(quote("\u{7f}\u{85}ü"), "\"\\x7f\\u0085ü\"");
    }
}
