//! Small helpers the protocol types share with picogent: lenient reading of fields that
//! are not ours, one-line excerpts for errors, the time stamps messages carry.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, as pi's messages carry them.
pub fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `s` on one line (line breaks as spaces), cut to at most `max` characters with an
/// ellipsis: for quoting input in an error.
pub fn one_line(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let mut out: String = flat.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// For `#[serde(deserialize_with)]` on input that is not ours: a field's value, or its
/// default (`None` for an `Option`) when it is null or of another type.
pub fn lenient<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned + Default,
{
    let v = <serde_json::Value as serde::Deserialize>::deserialize(d)?;
    Ok(serde_json::from_value(v).unwrap_or_default())
}
