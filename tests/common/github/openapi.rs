//! GitHub's own description of its REST API (`@octokit/openapi`, a copy of
//! github/rest-api-description), loaded once per process, and the checks the fake GitHub
//! runs on every request before answering it: the path and the method exist, every query
//! parameter is declared (enums and types respected) and the JSON body fits the
//! operation's schema. A request the fake accepts is then one GitHub would accept too.
//!
//! The file read is `api.github.com.json` with its `$ref`s, resolved here on the way:
//! the dereferenced variant next to it is 73 MB (13 MB here), parsed in every test run.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::Value;

pub const SPEC_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/github/node_modules/@octokit/openapi/generated/api.github.com.json"
);

/// The description, read on first use. A missing file fails the test: a fake that
/// checks nothing would let any request through.
pub fn spec() -> &'static Value {
    static SPEC: OnceLock<Value> = OnceLock::new();
    SPEC.get_or_init(|| {
        let bytes = std::fs::read(SPEC_FILE).unwrap_or_else(|e| {
            panic!(
                "GitHub's OpenAPI description is missing ({SPEC_FILE}: {e}); install it with \
                 `bash scripts/test.sh` or `(cd tests/github && npm ci)`"
            )
        });
        serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!("{SPEC_FILE} is not JSON ({e}); reinstall it with `(cd tests/github && npm ci)`")
        })
    })
}

/// Every path template, split into segments (`/repos/{owner}/{repo}` → "", "repos", …).
fn templates() -> &'static [(&'static str, Vec<&'static str>)] {
    static T: OnceLock<Vec<(&'static str, Vec<&'static str>)>> = OnceLock::new();
    T.get_or_init(|| {
        spec()["paths"]
            .as_object()
            .expect("the OpenAPI description has no paths")
            .keys()
            .map(|k| (k.as_str(), k.split('/').collect()))
            .collect()
    })
}

/// What `check` found out about one request.
pub struct Checked {
    /// The path template the request matched, when one did.
    pub template: Option<&'static str>,
    /// The path parameters by name (`owner`, `issue_number`, …).
    pub params: HashMap<String, String>,
    /// The template has an operation for the method.
    pub method_known: bool,
    /// The operation's id (`issues/create-comment`), for messages.
    pub operation: &'static str,
    /// The body is not JSON at all (GitHub answers 400, not 422).
    pub bad_json: bool,
    /// What is wrong, in words; empty when GitHub would take the request.
    pub problems: Vec<String>,
}

fn is_param(segment: &str) -> bool {
    segment.starts_with('{') && segment.ends_with('}')
}

/// Checks one request against the description.
pub fn check(method: &str, path: &str, query: &[(String, String)], body: &[u8]) -> Checked {
    let mut c = Checked {
        template: None,
        params: HashMap::new(),
        method_known: false,
        operation: "",
        bad_json: false,
        problems: Vec::new(),
    };
    let segs: Vec<&str> = path.split('/').collect();
    // Where several templates match, the one with literal segments earliest wins, as
    // GitHub routes `/issues/comments` to the comments, not to an issue "comments".
    let best = templates()
        .iter()
        .filter(|(_, t)| {
            t.len() == segs.len()
                && t.iter()
                    .zip(&segs)
                    .all(|(t, s)| (is_param(t) && !s.is_empty()) || t == s)
        })
        .max_by_key(|(_, t)| t.iter().map(|x| !is_param(x)).collect::<Vec<bool>>());
    let Some((template, tsegs)) = best else {
        c.problems
            .push("no such path in GitHub's REST API".to_string());
        return c;
    };
    c.template = Some(*template);
    for (t, s) in tsegs.iter().zip(&segs) {
        if is_param(t) {
            c.params
                .insert(t[1..t.len() - 1].to_string(), (*s).to_string());
        }
    }
    let item: &'static Value = &spec()["paths"][*template];
    let Some(op) = item
        .get(method.to_ascii_lowercase())
        .filter(|o| o.is_object())
    else {
        let methods: Vec<String> = item
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.as_str() != "parameters")
            .map(|(k, _)| k.to_uppercase())
            .collect();
        c.problems.push(format!(
            "{template} takes no {method} (it takes {})",
            methods.join(", ")
        ));
        return c;
    };
    c.method_known = true;
    c.operation = op["operationId"].as_str().unwrap_or("?");
    let params: Vec<&'static Value> = item["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(op["parameters"].as_array().into_iter().flatten())
        .map(resolve)
        .collect();
    let mut out = Vec::new();
    for p in params.iter().filter(|p| p["in"] == "path") {
        let name = p["name"].as_str().unwrap_or("");
        if let Some(v) = c.params.get(name) {
            check_param(p, name, v, "path parameter", &mut out);
        }
    }
    for (name, value) in query {
        match params
            .iter()
            .find(|p| p["in"] == "query" && p["name"] == name.as_str())
        {
            Some(p) => check_param(p, name, value, "query parameter", &mut out),
            None => out.push(format!("query parameter `{name}` is not one it takes")),
        }
    }
    for p in params
        .iter()
        .filter(|p| p["in"] == "query" && p["required"] == true)
    {
        if !query.iter().any(|(n, _)| p["name"] == n.as_str()) {
            out.push(format!("required query parameter {} is missing", p["name"]));
        }
    }
    let rb = resolve(&op["requestBody"]);
    if body.is_empty() {
        if rb["required"] == true {
            out.push("it sends no body, but the operation requires one".to_string());
        }
    } else if rb.is_null() {
        out.push("it sends a body, but the operation takes none".to_string());
    } else if let Some(media) = rb["content"].get("application/json") {
        match serde_json::from_slice::<Value>(body) {
            Ok(v) => check_value(&media["schema"], &v, "body", &mut out, 0),
            Err(e) => {
                c.bad_json = true;
                out.push(format!("the body is not JSON ({e})"));
            }
        }
    }
    c.problems = out;
    c
}

/// Follows `$ref`s (`#/components/parameters/…`, `#/components/schemas/…`).
fn resolve(mut v: &'static Value) -> &'static Value {
    while let Some(r) = v.get("$ref").and_then(Value::as_str) {
        v = r
            .strip_prefix('#')
            .and_then(|p| spec().pointer(p))
            .unwrap_or_else(|| panic!("cannot resolve {r} in {SPEC_FILE}"));
    }
    v
}

/// A path or query parameter: its text read as the schema's type, then checked.
fn check_param(p: &'static Value, name: &str, raw: &str, kind: &str, out: &mut Vec<String>) {
    let schema = resolve(&p["schema"]);
    let at = format!("{kind} `{name}`");
    let ty = schema["type"].as_str().unwrap_or("string");
    let value = match ty {
        "integer" => raw.parse::<i64>().ok().map(Value::from),
        "number" => raw.parse::<f64>().ok().map(Value::from),
        "boolean" => raw.parse::<bool>().ok().map(Value::from),
        // Exploded arrays and objects: not something the tracker sends.
        "array" | "object" => return,
        _ => Some(Value::from(raw)),
    };
    match value {
        Some(v) => check_value(schema, &v, &at, out, 0),
        None => out.push(format!("{at} is {raw:?}, not a{} {ty}", an(ty))),
    }
}

fn an(ty: &str) -> &'static str {
    if ty.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "n"
    } else {
        ""
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn has_type(v: &Value, ty: &str) -> bool {
    match ty {
        "number" => v.is_number(),
        other => kind(v) == other,
    }
}

/// Checks `v` against a schema: type (or `nullable`), enum, `date-time` format,
/// required and allowed properties, items; `oneOf`/`anyOf` pass when any branch does
/// (leniently: `oneOf` is not held to exactly one), `allOf` when every branch does.
fn check_value(schema: &'static Value, v: &Value, at: &str, out: &mut Vec<String>, depth: usize) {
    let schema = resolve(schema);
    if depth > 32 {
        return;
    }
    let nullable = schema["nullable"] == true
        || schema["enum"]
            .as_array()
            .is_some_and(|e| e.contains(&Value::Null));
    if v.is_null() && nullable {
        return;
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(branches) = schema[key].as_array() {
            let mut first: Option<Vec<String>> = None;
            let fits = branches.iter().any(|b| {
                let mut p = Vec::new();
                check_value(b, v, at, &mut p, depth + 1);
                if p.is_empty() {
                    return true;
                }
                if first.is_none() {
                    first = Some(p);
                }
                false
            });
            if !fits {
                out.push(format!(
                    "{at} fits none of the {key} alternatives (the first: {})",
                    first.unwrap_or_default().join("; ")
                ));
                return;
            }
        }
    }
    for b in schema["allOf"].as_array().into_iter().flatten() {
        check_value(b, v, at, out, depth + 1);
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() && !types.iter().any(|t| has_type(v, t)) {
        out.push(format!(
            "{at} is a{} {}, not {}",
            an(kind(v)),
            kind(v),
            types.join(" or ")
        ));
        return;
    }
    if let Some(e) = schema["enum"].as_array() {
        if !e.contains(v) {
            let allowed: Vec<String> = e.iter().map(Value::to_string).collect();
            out.push(format!("{at} is {v}, not one of {}", allowed.join(", ")));
        }
    }
    if let (Some(s), Some("date-time")) = (v.as_str(), schema["format"].as_str()) {
        if chrono::DateTime::parse_from_rfc3339(s).is_err() {
            out.push(format!(
                "{at} is {s:?}, not an ISO 8601 time (YYYY-MM-DDTHH:MM:SSZ)"
            ));
        }
    }
    match v {
        Value::Object(map) => {
            for r in schema["required"].as_array().into_iter().flatten() {
                if let Some(r) = r.as_str().filter(|r| !map.contains_key(*r)) {
                    out.push(format!("{at} lacks the required property `{r}`"));
                }
            }
            for (k, x) in map {
                let at = format!("{at}.{k}");
                match schema["properties"].get(k) {
                    Some(p) => check_value(p, x, &at, out, depth + 1),
                    None => match &schema["additionalProperties"] {
                        Value::Bool(false) => {
                            out.push(format!("{at} is not a property the schema allows"));
                        }
                        s @ Value::Object(_) => check_value(s, x, &at, out, depth + 1),
                        _ => {}
                    },
                }
            }
        }
        Value::Array(xs) => {
            if let Some(items) = schema.get("items") {
                for (i, x) in xs.iter().enumerate() {
                    check_value(items, x, &format!("{at}[{i}]"), out, depth + 1);
                }
            }
        }
        _ => {}
    }
}
