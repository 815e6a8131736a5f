//! Guards against two ways models go wrong: calling the same tool with the same
//! arguments over and over, and (small local models especially) writing a tool call as
//! text instead of making one.

use serde_json::Value;

/// Counts identical consecutive tool calls.
#[derive(Default)]
pub(crate) struct RepeatGuard {
    last: Option<(String, String)>,
    count: u32,
}

/// After this many identical calls in a row the model is told so.
pub(crate) const WARN_AT: u32 = 3;
/// On this many the run stops.
pub(crate) const STOP_AT: u32 = 5;

impl RepeatGuard {
    /// Records a call and returns how many times in a row it has now been made.
    pub(crate) fn observe(&mut self, name: &str, args: &Value) -> u32 {
        let key = (name.to_string(), canonical(args));
        if self.last.as_ref() == Some(&key) {
            self.count += 1;
        } else {
            self.last = Some(key);
            self.count = 1;
        }
        self.count
    }
}

/// JSON with object keys sorted, so `{"a":1,"b":2}` equals `{"b":2,"a":1}`.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&map[k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

pub(crate) fn repeat_warning(name: &str, count: u32) -> String {
    format!(
        "\n\n[picogent: you have called {name} with exactly the same arguments {count} times in a row \
and got the same kind of result. Do not repeat it: try a different approach, or answer with \
what you know. The run stops at {STOP_AT} identical calls.]"
    )
}

pub(crate) const TEXT_CALL_NUDGE: &str =
    "You wrote a tool call as plain text, so nothing was run. \
To use a tool, call it through the tool-calling interface (function calling) with JSON arguments. \
If you meant to answer, answer in prose without tool-call markup.";

/// Whether an answer looks like a tool call written as text: `<tool_call>` markup, or a
/// JSON object naming one of the tools with its arguments.
pub(crate) fn looks_like_text_tool_call(text: &str, tools: &[&str]) -> bool {
    let lower = text.to_ascii_lowercase();
    if [
        "<tool_call>",
        "<function_call>",
        "<function=",
        "<|tool_call|>",
        "[tool_calls]",
    ]
    .iter()
    .any(|m| lower.contains(m))
    {
        return true;
    }
    text.match_indices('{').take(32).any(|(i, _)| {
        let mut it = serde_json::Deserializer::from_str(&text[i..]).into_iter::<Value>();
        match it.next() {
            Some(Ok(v)) => names_a_tool(&v, tools),
            _ => false,
        }
    })
}

fn names_a_tool(v: &Value, tools: &[&str]) -> bool {
    let named = |o: &Value| {
        o.get("name")
            .or_else(|| o.get("tool"))
            .and_then(Value::as_str)
            .is_some_and(|n| tools.contains(&n))
    };
    let has_args = |o: &Value| {
        ["arguments", "parameters", "args", "input"]
            .iter()
            .any(|k| o.get(*k).is_some())
    };
    (named(v) && has_args(v)) || v.get("function").is_some_and(named)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TOOLS: &[&str] = &["read", "bash"];

    #[test]
    fn repeats_are_counted_regardless_of_key_order() {
        let mut g = RepeatGuard::default();
        assert_eq!(g.observe("read", &json!({"path": "a", "limit": 1})), 1);
        assert_eq!(g.observe("read", &json!({"limit": 1, "path": "a"})), 2);
        assert_eq!(g.observe("read", &json!({"path": "b"})), 1);
    }

    #[test]
    fn text_tool_calls_are_recognised() {
        assert!(looks_like_text_tool_call(
            "<tool_call>{\"name\":\"read\"}</tool_call>",
            TOOLS
        ));
        assert!(looks_like_text_tool_call(
            "Sure:\n```json\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n```",
            TOOLS
        ));
        assert!(!looks_like_text_tool_call(
            "The config is {\"name\": \"x\"}.",
            TOOLS
        ));
        assert!(!looks_like_text_tool_call(
            "All done: the tests pass.",
            TOOLS
        ));
    }
}
