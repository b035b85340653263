//! `$(VAR)` expansion of `env[].value`, with `$$` escapes (spec PW-10).

/// Expands `$(NAME)` references in `input` with `lookup`; `$$` becomes `$`.
///
/// The kubelet's rules, byte for byte:
/// 1. `$$` is an escaped `$` and produces one `$`.
/// 2. `$(NAME)` is replaced by `lookup(NAME)`; when `lookup` answers `None` the reference stays
///    literally `$(NAME)` (also for `$()`).
/// 3. `$(` without a closing `)` stays literal, as does `$` followed by any other byte or at
///    the end of the input.
///
/// A `$` followed by a multi-byte character keeps that character whole: bytes are copied
/// verbatim, so valid UTF-8 stays valid (kubelets before 1.36 mangled the character; 1.36
/// preserves it, as here).
pub(crate) fn expand(input: &[u8], lookup: impl Fn(&str) -> Option<Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut cursor = 0;
    while cursor < input.len() {
        let byte = input[cursor];
        if byte != b'$' || cursor + 1 >= input.len() {
            out.push(byte);
            cursor += 1;
            continue;
        }
        let rest = &input[cursor + 1..];
        match rest[0] {
            // (1) escaped operator
            b'$' => {
                out.push(b'$');
                cursor += 2;
            }
            // (2) a reference, if closed
            b'(' => match rest.iter().position(|&b| b == b')') {
                Some(close) => {
                    let name_bytes = &rest[1..close];
                    let name = String::from_utf8_lossy(name_bytes);
                    match lookup(&name) {
                        Some(value) => out.extend_from_slice(&value),
                        None => {
                            out.extend_from_slice(b"$(");
                            out.extend_from_slice(name_bytes);
                            out.push(b')');
                        }
                    }
                    cursor += close + 2;
                }
                // (3) incomplete reference: keep `$(` and go on after it
                None => {
                    out.extend_from_slice(b"$(");
                    cursor += 2;
                }
            },
            // (3) a `$` that starts nothing
            other => {
                out.push(b'$');
                out.push(other);
                cursor += 2;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    fn run(input: &str) -> String {
        let vars: HashMap<&str, &str> = [("VAR_A", "A"), ("VAR_B", "B"), ("EMPTY", "")]
            .into_iter()
            .collect();
        let out = expand(input.as_bytes(), |n| {
            vars.get(n).map(|v| v.as_bytes().to_vec())
        });
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn pw10_references_expand_and_unknown_ones_stay_literal() {
        assert_eq!(run("$(VAR_A)"), "A");
        assert_eq!(run("x-$(VAR_A)-$(VAR_B)-y"), "x-A-B-y");
        assert_eq!(run("$(EMPTY)"), "");
        assert_eq!(run("$(UNKNOWN)"), "$(UNKNOWN)");
        assert_eq!(run("$()"), "$()");
    }

    #[test]
    fn pw10_double_dollar_escapes_a_reference() {
        assert_eq!(run("$$(VAR_A)"), "$(VAR_A)");
        assert_eq!(run("$$$(VAR_A)"), "$A");
        assert_eq!(run("$$$$"), "$$");
        assert_eq!(run("a$$b"), "a$b");
    }

    #[test]
    fn pw10_lone_and_unclosed_operators_stay_literal() {
        assert_eq!(run("$"), "$");
        assert_eq!(run("abc$"), "abc$");
        assert_eq!(run("$VAR_A"), "$VAR_A");
        assert_eq!(run("$(VAR_A"), "$(VAR_A");
        assert_eq!(run("$($(VAR_A)"), "$($(VAR_A)");
        assert_eq!(run("x$(y"), "x$(y");
    }

    #[test]
    fn expansion_copies_non_ascii_bytes_verbatim() {
        assert_eq!(run("é$é"), "é$é");
        assert_eq!(run("$(VAR_A)ü"), "Aü");
    }

    proptest! {
        #[test]
        fn input_without_a_dollar_is_returned_unchanged(s in "[^$]*") {
            prop_assert_eq!(run(&s), s);
        }

        #[test]
        fn escaping_every_dollar_round_trips(s in ".*") {
            let escaped = s.replace('$', "$$");
            prop_assert_eq!(run(&escaped), s);
        }
    }
}
