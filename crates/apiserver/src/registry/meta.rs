//! Object metadata helpers shared by the registry and its admission steps: reading a
//! `metadata` field, and the random suffix of a generated name.

use serde_json::Value;

/// The string value of `metadata.<field>`, if the object has one.
pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
}

/// Five random characters from the alphabet upstream uses for generated names.
pub(crate) fn generate_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes
        .iter()
        .take(5)
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}
