//! Older pi session files (version 1 and 2) brought to version 3 the way pi migrates
//! them: v1 entries get ids and a linear `parentId` chain (a compaction's
//! `firstKeptEntryIndex` becomes `firstKeptEntryId`), v2's `hookMessage` role becomes
//! `custom`. pi rewrites a migrated file; the writer does too, so entries it appends
//! continue the same ids.

use std::collections::HashSet;

use serde_json::Value;

/// The file's complete lines migrated to version 3, or `None` when it is already
/// version 3 (or has no session header, left for the caller to report).
pub(super) fn migrate(bytes: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.split('\n').filter(|l| !l.trim().is_empty());
    let mut header: Value = serde_json::from_str(lines.next()?).ok()?;
    if header["type"] != "session" {
        return None;
    }
    let version = header["version"].as_u64().unwrap_or(1);
    if version >= 3 {
        return None;
    }
    // Lines that are not JSON are kept for the loader to skip with its warning.
    let mut entries: Vec<Result<Value, &str>> = lines
        .map(|l| serde_json::from_str::<Value>(l).map_err(|_| l))
        .collect();
    if version < 2 {
        v1_to_v2(&mut entries);
    }
    for e in entries.iter_mut().flatten() {
        if e["type"] == "message" && e["message"]["role"] == "hookMessage" {
            e["message"]["role"] = "custom".into();
        }
    }
    header["version"] = 3.into();
    let mut out = serde_json::to_vec(&header).ok()?;
    out.push(b'\n');
    for e in &entries {
        match e {
            Ok(v) => out.extend(serde_json::to_vec(v).ok()?),
            Err(raw) => out.extend(raw.as_bytes()),
        }
        out.push(b'\n');
    }
    Some(out)
}

fn v1_to_v2(entries: &mut [Result<Value, &str>]) {
    let mut used = HashSet::new();
    let mut ids: Vec<Option<String>> = Vec::with_capacity(entries.len());
    let mut prev: Option<String> = None;
    for e in entries.iter_mut() {
        let Ok(v) = e else {
            ids.push(None);
            continue;
        };
        let id = loop {
            let id = crate::util::random_hex(8);
            if used.insert(id.clone()) {
                break id;
            }
        };
        v["id"] = id.clone().into();
        v["parentId"] = prev.clone().map_or(Value::Null, Value::String);
        prev = Some(id.clone());
        ids.push(Some(id));
    }
    for e in entries.iter_mut().flatten() {
        if e["type"] != "compaction" {
            continue;
        }
        // The index counts the header as entry 0, as pi's does.
        let target = e["firstKeptEntryIndex"]
            .as_u64()
            .and_then(|i| usize::try_from(i).ok()?.checked_sub(1))
            .and_then(|i| ids.get(i).cloned().flatten());
        if let Some(map) = e.as_object_mut() {
            map.remove("firstKeptEntryIndex");
            if let Some(t) = target {
                map.insert("firstKeptEntryId".into(), t.into());
            }
        }
    }
}
