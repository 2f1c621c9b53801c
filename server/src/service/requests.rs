//! Reading a request's JSON body: malformed JSON, and a document of the wrong shape with the
//! JSON pointer of the field at fault (SPEC §3's problem details).

use crate::error::AppError;
use serde_json::Value;

/// Parses a request body as JSON; malformed → 400 `malformed-json`.
pub fn parse_json(body: &[u8]) -> Result<Value, AppError> {
    serde_json::from_slice(body).map_err(|e| AppError::MalformedJson(format!("line {}, column {}", e.line(), e.column())))
}

/// Reads the typed request (defaults filled in); a shape error names the field.
pub fn typed_request<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, AppError> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let pointer = json_pointer(e.path());
        AppError::InvalidRequest(vec![crate::error::FieldError::new(pointer, e.inner().to_string())])
    })
}

/// The JSON pointer (RFC 6901) of a place in a request: `/columns/0`, with `~` and `/` in names
/// escaped as `~0` and `~1`.
fn json_pointer(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    path.iter()
        .filter_map(|segment| match segment {
            Segment::Seq { index } => Some(index.to_string()),
            Segment::Map { key } => Some(key.replace('~', "~0").replace('/', "~1")),
            Segment::Enum { .. } | Segment::Unknown => None,
        })
        .map(|token| format!("/{token}"))
        .collect()
}
