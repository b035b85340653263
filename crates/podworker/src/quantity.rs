//! Kubernetes resource quantities (`500m`, `1Gi`, `2e3`) as exact nano-units, for
//! `resourceFieldRef` environment variables (spec PW-10).

/// A quantity in nano-units (`1` = 10⁻⁹), exact for every suffix the API accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Nanos(pub(crate) i128);

const NANO: i128 = 1_000_000_000;

/// Parses a quantity string; `None` if it is not one.
pub(crate) fn parse(s: &str) -> Option<Nanos> {
    let s = s.trim();
    let (sign, s) = match s.as_bytes().first()? {
        b'-' => (-1, &s[1..]),
        b'+' => (1, &s[1..]),
        _ => (1, s),
    };
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    if number.is_empty() || number == "." {
        return None;
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    // value = digits / 10^frac_len
    let digits: i128 = format!("{int_part}{frac_part}").parse().ok()?;
    let frac_len = u32::try_from(frac_part.len()).ok()?;
    // (numerator, denominator) of the suffix multiplier
    let (mul, div): (i128, i128) = match suffix {
        "" => (1, 1),
        "n" => (1, NANO),
        "u" => (1, 1_000_000),
        "m" => (1, 1_000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (NANO, 1),
        "T" => (1_000 * NANO, 1),
        "P" => (1_000_000 * NANO, 1),
        "E" => (NANO * NANO, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        exp if exp.starts_with(['e', 'E']) => {
            let e: i32 = exp[1..].parse().ok()?;
            if e >= 0 {
                (10i128.checked_pow(u32::try_from(e).ok()?)?, 1)
            } else {
                (1, 10i128.checked_pow(e.unsigned_abs())?)
            }
        }
        _ => return None,
    };
    let denominator = div.checked_mul(10i128.checked_pow(frac_len)?)?;
    let numerator = digits.checked_mul(mul)?.checked_mul(NANO)?;
    // Round up to a whole nano-unit, as the API server does for sub-nano values.
    let value =
        numerator.div_euclid(denominator) + i128::from(numerator.rem_euclid(denominator) != 0);
    Some(Nanos(sign * value))
}

impl Nanos {
    /// `ceil(self / divisor)`, the kubelet's conversion for resource env vars
    /// (`convertResourceCPUToString` and friends); `None` for a zero divisor.
    pub(crate) fn ceil_div(self, divisor: Nanos) -> Option<i128> {
        if divisor.0 == 0 {
            return None;
        }
        let q = self.0.div_euclid(divisor.0);
        Some(q + i128::from(self.0.rem_euclid(divisor.0) != 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_binary_and_exponent_suffixes_parse_exactly() {
        assert_eq!(parse("1"), Some(Nanos(NANO)));
        assert_eq!(parse("500m"), Some(Nanos(NANO / 2)));
        assert_eq!(parse("0.5"), Some(Nanos(NANO / 2)));
        assert_eq!(parse("1Ki"), Some(Nanos(1024 * NANO)));
        assert_eq!(parse("64Mi"), Some(Nanos(64 * (1 << 20) * NANO)));
        assert_eq!(parse("2e3"), Some(Nanos(2000 * NANO)));
        assert_eq!(parse("1k"), Some(Nanos(1000 * NANO)));
        assert_eq!(parse("-1"), Some(Nanos(-NANO)));
        assert_eq!(parse("1Ei"), Some(Nanos((1i128 << 60) * NANO)));
    }

    #[test]
    fn garbage_is_not_a_quantity() {
        assert_eq!(parse(""), None);
        assert_eq!(parse("abc"), None);
        assert_eq!(parse("1Xi"), None);
        assert_eq!(parse("."), None);
    }

    #[test]
    fn division_rounds_up_like_the_kubelet() {
        let cpu = parse("250m").unwrap_or(Nanos(0));
        assert_eq!(cpu.ceil_div(Nanos(NANO)), Some(1));
        assert_eq!(cpu.ceil_div(Nanos(NANO / 1000)), Some(250));
        let mem = parse("1Gi").unwrap_or(Nanos(0));
        assert_eq!(mem.ceil_div(parse("1Mi").unwrap_or(Nanos(1))), Some(1024));
        assert_eq!(mem.ceil_div(Nanos(0)), None);
    }
}
