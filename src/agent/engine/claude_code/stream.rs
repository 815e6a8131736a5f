//! `claude --output-format stream-json`, as types: each line is a `Wire` frame, read by
//! serde, and mapped onto what it means for picogent (`Line`). Frames and blocks of
//! types picogent does not use are skipped; a line that is not a frame is logged,
//! naming it, and skipped. Fields are read leniently, as the CLI's output is not ours:
//! a null or a value of another type is the field's default, and a block that does
//! not parse is skipped (logged) without losing the rest of its message.

use serde::Deserialize;
use serde_json::Value;

use crate::message::{Content, ToolResultMessage, Usage};

/// What one stream-json line means for picogent.
#[derive(Debug, PartialEq)]
pub(super) enum Line {
    Init {
        session_id: String,
    },
    Assistant {
        content: Vec<Content>,
        usage: Usage,
    },
    ToolResults(Vec<ToolResultMessage>),
    Result {
        ok: bool,
        text: String,
        usage: Usage,
        cost: Option<f64>,
    },
    Other,
}

/// One line of the stream.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Wire {
    System {
        #[serde(default, deserialize_with = "crate::util::lenient")]
        subtype: String,
        #[serde(default, deserialize_with = "crate::util::lenient")]
        session_id: String,
    },
    Assistant {
        message: Turn,
    },
    User {
        message: Turn,
    },
    Result {
        #[serde(default, deserialize_with = "crate::util::lenient")]
        subtype: String,
        #[serde(default, deserialize_with = "crate::util::lenient")]
        is_error: bool,
        #[serde(default, deserialize_with = "crate::util::lenient")]
        result: Option<String>,
        #[serde(default, deserialize_with = "crate::util::lenient")]
        errors: Vec<Value>,
        #[serde(default, deserialize_with = "crate::util::lenient")]
        usage: WireUsage,
        #[serde(default, deserialize_with = "crate::util::lenient")]
        total_cost_usd: Option<f64>,
    },
    #[serde(other)]
    Other,
}

/// A message of an assistant or user line. Its blocks are read one by one (see
/// `blocks`); content that is a plain string carries none picogent uses.
#[derive(Debug, Deserialize)]
struct Turn {
    #[serde(default, deserialize_with = "crate::util::lenient")]
    content: Vec<Value>,
    #[serde(default, deserialize_with = "crate::util::lenient")]
    usage: WireUsage,
}

/// The blocks of a message that parse; one that does not is logged and skipped.
fn blocks(content: Vec<Value>) -> impl Iterator<Item = Block> {
    content
        .into_iter()
        .filter_map(|b| match serde_json::from_value::<Block>(b) {
            Ok(block) => Some(block),
            Err(e) => {
                tracing::warn!("a content block from Claude Code was skipped: {e}");
                None
            }
        })
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    Thinking {
        #[serde(default, deserialize_with = "crate::util::lenient")]
        thinking: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default, deserialize_with = "crate::util::lenient")]
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default, deserialize_with = "crate::util::lenient")]
        content: ResultContent,
        #[serde(default, deserialize_with = "crate::util::lenient")]
        is_error: bool,
    },
    #[serde(other)]
    Other,
}

/// A tool result's content: a string, or parts of which the text ones count.
#[derive(Debug, Default, Deserialize)]
#[serde(untagged)]
enum ResultContent {
    Text(String),
    Parts(Vec<Value>),
    #[default]
    None,
}

#[derive(Debug, Default, Deserialize)]
struct Part {
    #[serde(default, deserialize_with = "crate::util::lenient")]
    text: Option<String>,
}

/// The Anthropic usage object Claude Code passes on (the cache counts may be null).
#[derive(Debug, Default, Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "crate::util::lenient")]
    input_tokens: u64,
    #[serde(default, deserialize_with = "crate::util::lenient")]
    output_tokens: u64,
    #[serde(default, deserialize_with = "crate::util::lenient")]
    cache_read_input_tokens: u64,
    #[serde(default, deserialize_with = "crate::util::lenient")]
    cache_creation_input_tokens: u64,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Usage {
        let mut usage = Usage {
            input: u.input_tokens,
            output: u.output_tokens,
            cache_read: u.cache_read_input_tokens,
            cache_write: u.cache_creation_input_tokens,
            ..Default::default()
        };
        usage.total_tokens = usage.input + usage.output + usage.cache_read + usage.cache_write;
        usage
    }
}

/// Parses one line of the stream.
pub(super) fn parse_line(line: &str) -> Line {
    let wire = match serde_json::from_str::<Wire>(line) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(
                "a line from Claude Code is not a stream-json frame ({e}): {}",
                crate::util::one_line(line, 200)
            );
            return Line::Other;
        }
    };
    match wire {
        Wire::System {
            subtype,
            session_id,
        } if subtype == "init" => Line::Init { session_id },
        Wire::Assistant { message } => Line::Assistant {
            content: blocks(message.content).filter_map(content_of).collect(),
            usage: message.usage.into(),
        },
        Wire::User { message } => {
            let results: Vec<ToolResultMessage> =
                blocks(message.content).filter_map(result_of).collect();
            if results.is_empty() {
                Line::Other
            } else {
                Line::ToolResults(results)
            }
        }
        Wire::Result {
            subtype,
            is_error,
            result,
            errors,
            usage,
            total_cost_usd,
        } => Line::Result {
            ok: subtype == "success" && !is_error,
            text: result.unwrap_or_else(|| {
                let said: Vec<&str> = errors.iter().filter_map(Value::as_str).collect();
                if said.is_empty() {
                    format!("Claude Code ended with {subtype:?}")
                } else {
                    said.join("; ")
                }
            }),
            usage: usage.into(),
            cost: total_cost_usd,
        },
        Wire::System { .. } | Wire::Other => Line::Other,
    }
}

/// An assistant block as picogent's content.
fn content_of(b: Block) -> Option<Content> {
    match b {
        Block::Text { text } => Some(Content::text(text)),
        Block::Thinking { thinking } => Some(Content::Thinking {
            thinking,
            signature: None,
            redacted: false,
        }),
        Block::ToolUse { id, name, input } => Some(Content::ToolCall {
            id,
            name,
            arguments: input,
        }),
        Block::ToolResult { .. } | Block::Other => None,
    }
}

/// A user block, when it is a tool's result.
fn result_of(b: Block) -> Option<ToolResultMessage> {
    let Block::ToolResult {
        tool_use_id,
        content,
        is_error,
    } = b
    else {
        return None;
    };
    let text = match content {
        ResultContent::Text(s) => s,
        ResultContent::Parts(parts) => parts
            .into_iter()
            .filter_map(|p| serde_json::from_value::<Part>(p).unwrap_or_default().text)
            .collect::<Vec<_>>()
            .join("\n"),
        ResultContent::None => String::new(),
    };
    Some(ToolResultMessage {
        tool_call_id: tool_use_id,
        tool_name: String::new(),
        content: vec![Content::text(text)],
        details: None,
        is_error,
        timestamp: crate::util::now_millis(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stream_json_lines_map_onto_picogent_messages() {
        assert_eq!(
            parse_line(
                r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"abc","tools":["Bash"]}"#
            ),
            Line::Init {
                session_id: "abc".into()
            }
        );
        let a = parse_line(
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}],"usage":{"input_tokens":10,"output_tokens":3}},"session_id":"abc"}"#,
        );
        match a {
            Line::Assistant { content, usage } => {
                assert_eq!(content[0], Content::text("Let me look."));
                assert_eq!(
                    content[1],
                    Content::ToolCall {
                        id: "toolu_1".into(),
                        name: "Bash".into(),
                        arguments: json!({"command": "ls"})
                    }
                );
                assert_eq!((usage.input, usage.output), (10, 3));
            }
            other => panic!("{other:?}"),
        }
        let r = parse_line(
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a.txt\nb.txt","is_error":false}]}}"#,
        );
        match r {
            Line::ToolResults(rs) => assert_eq!(
                (
                    rs[0].tool_call_id.as_str(),
                    crate::message::blocks_text(&rs[0].content).as_str()
                ),
                ("toolu_1", "a.txt\nb.txt")
            ),
            other => panic!("{other:?}"),
        }
        match parse_line(
            r#"{"type":"result","subtype":"success","is_error":false,"result":"Done.","total_cost_usd":0.01,"usage":{"input_tokens":5,"output_tokens":2}}"#,
        ) {
            Line::Result { ok, text, cost, .. } => {
                assert_eq!((ok, text.as_str(), cost), (true, "Done.", Some(0.01)))
            }
            other => panic!("{other:?}"),
        }
        match parse_line(
            r#"{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["boom"]}"#,
        ) {
            Line::Result { ok, text, .. } => assert_eq!((ok, text.as_str()), (false, "boom")),
            other => panic!("{other:?}"),
        }
        assert_eq!(parse_line("not json"), Line::Other);
        // Blocks and frames of types picogent does not use are skipped, not fatal.
        match parse_line(
            r#"{"type":"assistant","message":{"content":[{"type":"server_tool_use","id":"s"},{"type":"text","text":"ok"}]}}"#,
        ) {
            Line::Assistant { content, .. } => assert_eq!(content, vec![Content::text("ok")]),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse_line(r#"{"type":"stream_event","event":{}}"#),
            Line::Other
        );
        // Nulls and odd values are defaults; a block that does not parse is skipped
        // alone.
        match parse_line(
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":5},{"text":"no type"},{"type":"text","text":"kept"}],"usage":{"input_tokens":3,"output_tokens":1,"cache_read_input_tokens":null,"cache_creation_input_tokens":null}}}"#,
        ) {
            Line::Assistant { content, usage } => {
                assert_eq!(content, vec![Content::text("kept")]);
                assert_eq!((usage.input, usage.cache_read), (3, 0));
            }
            other => panic!("{other:?}"),
        }
        match parse_line(
            r#"{"type":"result","subtype":"success","is_error":null,"result":"ok","usage":null,"total_cost_usd":null}"#,
        ) {
            Line::Result { ok, text, .. } => assert_eq!((ok, text.as_str()), (true, "ok")),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse_line(r#"{"type":"user","message":{"content":"just words"}}"#),
            Line::Other
        );
        match parse_line(
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"a"},{"type":"image"},{"type":"text","text":"b"}],"is_error":true}]}}"#,
        ) {
            Line::ToolResults(rs) => assert_eq!(
                (crate::message::blocks_text(&rs[0].content), rs[0].is_error),
                ("a\nb".to_string(), true)
            ),
            other => panic!("{other:?}"),
        }
    }
}
