//! PEM handling of trust bundles (PL-18): every PEM block of the selected bundles is decoded,
//! blocks with the same DER bytes are kept once, the set is put in an order random per
//! process, and each block is written out again as a `CERTIFICATE` block.

use std::collections::BTreeSet;
use std::hash::BuildHasher;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// The DER bytes of every PEM block in `text`, in order. Like Go's `pem.Decode` in a loop:
/// text around blocks is ignored, a block whose body is not base64 is skipped, and the
/// block's type and headers do not matter.
pub(crate) fn decode_blocks(text: &str) -> Vec<Vec<u8>> {
    const BEGIN: &str = "-----BEGIN ";
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let after_begin = &rest[start + BEGIN.len()..];
        // (1) The type line: `-----BEGIN <type>-----` up to the end of the line.
        let Some(line_end) = after_begin.find('\n') else {
            break;
        };
        let type_line = after_begin[..line_end].trim_end_matches('\r');
        let Some(kind) = type_line.strip_suffix("-----") else {
            rest = after_begin;
            continue;
        };
        let body_start = &after_begin[line_end + 1..];
        // (2) The matching end line.
        let end_marker = format!("-----END {kind}-----");
        let Some(end) = body_start.find(&end_marker) else {
            rest = after_begin;
            continue;
        };
        let body = &body_start[..end];
        rest = &body_start[end + end_marker.len()..];
        // (3) Headers (`Key: value` lines up to a blank line) are skipped; the rest is
        // base64 with any whitespace.
        let payload = strip_headers(body);
        let compact: String = payload.chars().filter(|c| !c.is_whitespace()).collect();
        if let Ok(der) = STANDARD.decode(compact.as_bytes()) {
            out.push(der);
        }
    }
    out
}

/// The body without its RFC 1421 headers, if it has any.
fn strip_headers(body: &str) -> &str {
    let first = body.lines().next().unwrap_or_default();
    if !first.contains(':') {
        return body;
    }
    match body.find("\n\n").or_else(|| body.find("\r\n\r\n")) {
        Some(i) => &body[i..],
        None => body,
    }
}

/// The trust anchors of `bundles` (their `trustBundle` texts): decoded, one per distinct DER,
/// ordered by a hash keyed with `order` (random per process, the same for every call with the
/// same `order`), each encoded as a `CERTIFICATE` block. No blocks: empty output.
pub(crate) fn normalize<'a>(
    bundles: impl IntoIterator<Item = &'a str>,
    order: &impl BuildHasher,
) -> Vec<u8> {
    let distinct: BTreeSet<Vec<u8>> = bundles.into_iter().flat_map(decode_blocks).collect();
    let mut anchors: Vec<Vec<u8>> = distinct.into_iter().collect();
    anchors.sort_by_cached_key(|der| order.hash_one(der));
    let mut out = Vec::new();
    for der in &anchors {
        encode_certificate(der, &mut out);
    }
    out
}

/// One `CERTIFICATE` block, 64 base64 characters a line (Go's `pem.EncodeToMemory`).
fn encode_certificate(der: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b"-----BEGIN CERTIFICATE-----\n");
    let b64 = STANDARD.encode(der);
    for line in b64.as_bytes().chunks(64) {
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out.extend_from_slice(b"-----END CERTIFICATE-----\n");
}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::RandomState;

    use super::*;

    fn block(kind: &str, der: &[u8]) -> String {
        let mut out = Vec::new();
        encode_certificate(der, &mut out);
        String::from_utf8(out).unwrap().replace("CERTIFICATE", kind)
    }

    #[test]
    fn blocks_are_decoded_whatever_their_type_and_text_around_them_is_ignored() {
        let long: Vec<u8> = (0..=255).collect();
        let text = format!(
            "junk\n{}between\n{}-----BEGIN BROKEN-----\n!!!\n-----END BROKEN-----\n{}tail",
            block("CERTIFICATE", b"one"),
            block("TRUSTED CERTIFICATE", &long),
            "-----BEGIN X-----\nProc-Type: 4,ENCRYPTED\n\nAAEC\n-----END X-----\n",
        );
        assert_eq!(decode_blocks(&text), [b"one".to_vec(), long, vec![0, 1, 2]]);
        assert!(decode_blocks("no pem here").is_empty());
        assert!(decode_blocks("-----BEGIN CERTIFICATE-----\nAAEC\n").is_empty());
    }

    #[test]
    fn anchors_are_deduplicated_by_der_reencoded_as_certificates_and_shuffled() {
        let a = block("CERTIFICATE", b"a");
        let b = block("SOMETHING", b"b");
        let order = RandomState::new();
        let out = normalize([format!("{a}{b}{a}").as_str(), a.as_str()], &order);
        let text = String::from_utf8(out.clone()).unwrap();
        assert_eq!(text.matches("-----BEGIN CERTIFICATE-----\n").count(), 2);
        assert!(!text.contains("SOMETHING"));
        let mut got = decode_blocks(&text);
        got.sort();
        assert_eq!(got, [b"a".to_vec(), b"b".to_vec()]);
        // The same order for the same hasher, whatever the input order.
        assert_eq!(normalize([b.as_str(), a.as_str()], &order), out);
        // Another process (another key) may order them differently: over many keys, eight
        // anchors come out in more than one order, always the same set.
        let many: String = (0u8..8).map(|i| block("CERTIFICATE", &[i; 40])).collect();
        let orders: BTreeSet<Vec<u8>> = (0..20)
            .map(|_| normalize([many.as_str()], &RandomState::new()))
            .collect();
        assert!(orders.len() > 1);
        for o in &orders {
            let mut ders = decode_blocks(std::str::from_utf8(o).unwrap());
            ders.sort();
            assert_eq!(ders, (0u8..8).map(|i| vec![i; 40]).collect::<Vec<_>>());
        }
    }

    #[test]
    fn long_anchors_are_wrapped_at_64_characters_and_no_anchor_is_empty_output() {
        let der = vec![7u8; 100];
        let out = String::from_utf8(normalize(
            [block("CERTIFICATE", &der).as_str()],
            &RandomState::new(),
        ))
        .unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 5);
        assert_eq!(
            (lines[1].len(), lines[2].len(), lines[3].len()),
            (64, 64, 8)
        );
        assert!(normalize(["nothing"], &RandomState::new()).is_empty());
    }
}
