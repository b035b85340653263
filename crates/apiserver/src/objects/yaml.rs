//! YAML input: request bodies and manifest files are read the same way (YAML 1.1 octals),
//! and a parser's message is cut to its first line.

use serde_json::Value;

/// A YAML request body (apply patches, `kubectl create -f x.yaml` with a YAML content type),
/// read as manifest files are read (YAML 1.1 octals).
pub(crate) fn yaml_from_slice(bytes: &[u8]) -> Result<Value, String> {
    let options = serde_saphyr::options!(legacy_octal_numbers: true);
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    serde_saphyr::from_str_with_options(text, options)
        .map_err(|e| first_line(&e.to_string()).to_string())
}

/// The first line of a parser's message (the rest is a source excerpt, which may hold data).
pub(crate) fn first_line(message: &str) -> &str {
    message.lines().next().unwrap_or(message)
}
